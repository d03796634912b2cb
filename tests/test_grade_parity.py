"""One verdict everywhere: every test of every problem, for the reference, the starter, every
catalogued mistake and a file raising ValueError on every call, passes or fails alike in a local
run, through `grpo-kit check`'s path and in `grpo-kit grade`'s sandbox, and `grade` gives the
points the same rule gives locally. (Pyodide against CPython: tests/test_web_parity.py.)

Each implementation is handed in as a student would: a file of its own, the reference
solutions it used inlined (the capstone keeps the imports its problem allows).
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from local_verdicts import RAISING, outcomes_by_impl, raising_source, run_side_by_side

from grader.mistakes import load_catalogue
from grader.problems import KIT_ROOT, Problem, all_problems
from grader.submissions import standalone_source

PROBLEMS = all_problems()


def implementations(problem: Problem) -> dict[str, str]:
    """spec -> the source a student handing that implementation in would submit."""
    source = problem.reference.read_text(encoding="utf-8")
    found = {"reference": standalone_source(source, problem.builds_on),
             "starter": problem.stub.read_text(encoding="utf-8")}  # fmt: skip
    for mistake in load_catalogue(problem.dir):
        found[f"mistake:{mistake.id}"] = standalone_source(mistake.source, problem.builds_on)
    return found | {RAISING: raising_source(problem)}


def _verdicts(outcomes, names: dict[str, str]) -> dict[str, dict[str, str]]:
    """spec -> test -> outcome, from outcomes whose impl is a key of `names`."""
    found: dict[str, dict[str, str]] = {}
    for outcome in outcomes:
        found.setdefault(names[outcome.impl], {})[outcome.name] = outcome.outcome
    return found


@cache
def verdicts(slug: str, root: Path) -> dict[str, dict]:
    """place -> spec -> test -> outcome, for one problem; and "score" -> spec -> grade's score."""
    problem = next(p for p in PROBLEMS if p.slug == slug)
    sources = implementations(problem)
    files = {}
    for spec, source in sources.items():
        student = spec.replace(":", "_")
        path = root / slug / student / f"{slug}.py"
        path.parent.mkdir(parents=True)
        path.write_text(source, encoding="utf-8")
        files[spec] = path
    checked = run_side_by_side(problem, [str(p) for p in files.values()])
    # Two workers: grade's own way of using both cores, with its rule for time limits beside.
    command = [sys.executable, "-m", "grader.cli", "grade", str(root / slug), "--out",
               str(root / "out" / slug), "--problems", slug, "--workers", "2"]  # fmt: skip
    run = subprocess.run(command, cwd=KIT_ROOT, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    graded, scores = {}, {}
    for spec in sources:
        results = json.loads((root / "out" / slug / spec.replace(":", "_") / "results.json")
                             .read_text(encoding="utf-8"))  # fmt: skip
        graded[spec] = {t["name"].split(": ", 1)[1]: t["status"] for t in results["tests"]}
        scores[spec] = results["score"]
    return {
        "local": {
            spec: {o.name: o.outcome for o in outcomes}
            for spec, outcomes in outcomes_by_impl(slug).items()
        },  # fmt: skip
        "check": _verdicts(checked, {str(path): spec for spec, path in files.items()}),
        "grade": graded,
        "score": scores,
    }


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("parity")


def _passed(tests: dict[str, str]) -> set[str]:
    return {name for name, outcome in tests.items() if outcome == "passed"}


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.slug)
def test_every_implementation_gets_the_same_verdicts_everywhere(problem, root):
    found = verdicts(problem.slug, root)
    local = found["local"]
    assert local["reference"] and set(local["reference"].values()) == {"passed"}
    assert "passed" not in local["starter"].values()
    differences = []
    for place in ("check", "grade"):
        for spec, tests in local.items():
            other = found[place][spec]
            if set(other) != set(tests):
                differences.append(
                    f"{place} {spec}: ran other tests {sorted(set(other) ^ set(tests))}"
                )
            elif _passed(other) != _passed(tests):
                differences.append(
                    f"{place} {spec}: passes only there {sorted(_passed(other) - _passed(tests))}, "
                    f"fails only there {sorted(_passed(tests) - _passed(other))}"
                )
    for spec, tests in local.items():  # the points too, from the same rule
        score = sum(problem.earned(problem.test_points(list(tests)), _passed(tests)).values())
        if found["score"][spec] != pytest.approx(score, abs=1e-3):
            differences.append(f"grade {spec}: scores {found['score'][spec]}, locally {score:g}")
    assert not differences, "\n".join(differences)
    assert found["score"][RAISING] == 0, "raising ValueError on every call earned points"


def test_compiled_code_runs_eagerly_and_gets_the_same_verdicts_everywhere(tmp_path):
    """A solution with one torch.compile'd helper scored 63/63 in check and 0 in grade, whose
    sandbox has no room for the C++ compiler: both places now run compiled code eagerly."""
    problem = next(p for p in PROBLEMS if p.slug == "grpo_loss_torch")
    source = standalone_source(problem.reference.read_text(encoding="utf-8"), problem.builds_on)
    path = tmp_path / "class" / "student" / f"{problem.slug}.py"
    path.parent.mkdir(parents=True)
    path.write_text(f"{source}\n\ngrpo_loss = torch.compile(grpo_loss)\n", encoding="utf-8")
    checked = run_side_by_side(problem, [str(path)])
    assert checked and {o.outcome for o in checked} == {"passed"}
    command = [sys.executable, "-m", "grader.cli", "grade", str(path.parent.parent), "--out",
               str(tmp_path / "out"), "--problems", problem.slug]  # fmt: skip
    run = subprocess.run(command, cwd=KIT_ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "student" / "results.json").read_text("utf-8"))
    assert {t["status"] for t in results["tests"]} == {"passed"}, results["tests"]
