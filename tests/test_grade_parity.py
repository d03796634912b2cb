"""Sandboxed grading gives the verdicts a local run gives, test by test.

The reference and every catalogued mistake of the problems below are graded as students by
`grpo-kit grade`, and run locally with ``pytest --impl``: each test must pass or fail alike.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grader.batch import split_report
from grader.mistakes import load_catalogue
from grader.problems import KIT_ROOT, get_problem
from grader.submissions import standalone_source

CORE = (
    "grpo_objective",
    "group_advantages",
    "masked_token_loss",
    "grpo_loss_torch",
    "sample_group",
)


def _implementations(slug: str) -> dict[str, str]:
    """spec -> the source a student handing that implementation in would submit."""
    problem = get_problem(slug)
    found = {"reference": standalone_source(problem.reference.read_text(encoding="utf-8"))}
    for mistake in load_catalogue(problem.dir):
        found[f"mistake:{mistake.id}"] = standalone_source(mistake.source)
    return found


def _passed(tests: list[dict]) -> set[str]:
    return {t["nodeid"].split("::", 1)[1] for t in tests if t["outcome"] == "passed"}


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    root = tmp_path_factory.mktemp("parity")
    slugs = [s for s in CORE if (KIT_ROOT / "problems" / s / "problem.toml").exists()]
    local = {}
    for slug in slugs:
        specs = _implementations(slug)
        report = root / f"{slug}.json"
        command = [sys.executable, "-m", "pytest", str(get_problem(slug).dir), "-q",
                   "-p", "no:cacheprovider", "--json-report", f"--json-report-file={report}",
                   *(f"--impl={spec}" for spec in specs)]  # fmt: skip
        subprocess.run(command, cwd=KIT_ROOT, capture_output=True, timeout=600)
        split = split_report(json.loads(report.read_text()), list(specs))
        for spec, source in specs.items():
            student = f"{slug}__{spec.replace(':', '_')}"
            local[student] = (slug, _passed(split[spec].get(slug, [])))
            folder = root / slug / student
            folder.mkdir(parents=True)
            (folder / f"{slug}.py").write_text(source, encoding="utf-8")
        # One batch per problem, so that no test runs for a problem nobody submitted.
        command = [sys.executable, "-m", "grader.cli", "grade", str(root / slug),
                   "--out", str(root / "out"), "--problems", slug]  # fmt: skip
        run = subprocess.run(command, cwd=KIT_ROOT, capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stderr[-3000:]
    return local, root / "out"


def test_every_implementation_gets_the_local_verdicts(verdicts):
    local, out = verdicts
    assert local, "no problem to compare"
    differences = []
    for student, (slug, passed_locally) in sorted(local.items()):
        results = json.loads((out / student / "results.json").read_text())
        passed = {t["name"].split(": ", 1)[1] for t in results["tests"]
                  if t["status"] == "passed" and t["name"].startswith(f"{slug}: ")}  # fmt: skip
        if passed != passed_locally:
            differences.append(f"{student}: sandbox only {sorted(passed - passed_locally)}, "
                               f"local only {sorted(passed_locally - passed)}")  # fmt: skip
    assert not differences, "\n".join(differences)


def test_the_reference_passes_everything(verdicts):
    local, out = verdicts
    for student in (s for s in local if s.endswith("__reference")):
        results = json.loads((out / student / "results.json").read_text())
        slug = local[student][0]
        mine = [t for t in results["tests"] if t["name"].startswith(f"{slug}: ")]
        assert mine and all(t["status"] == "passed" for t in mine), student
