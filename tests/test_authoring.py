"""`grpo-kit new` scaffolds a problem that `grpo-kit validate` rejects rule by rule, and the
README's example problem (docs/example-problem), written into a fresh scaffold, passes them all."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

from grader.cli import main
from grader.problems import KIT_ROOT, load_problem
from grader.validate import MIN_MISTAKES

EXAMPLE = KIT_ROOT / "docs" / "example-problem"
SLUG = "clip_fraction"


def validate(root: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "grader.cli", "validate", SLUG, "--root", str(root), *extra]
    return subprocess.run(command, cwd=KIT_ROOT, capture_output=True, text=True, timeout=900)


def test_a_fresh_scaffold_fails_each_rule_readably(tmp_path, capsys):
    assert main(["new", SLUG, "--root", str(tmp_path), "--probes", "--cases"]) == 0
    assert "Fill in every TODO" in capsys.readouterr().out
    problem = load_problem(tmp_path / "problems" / SLUG)
    assert problem.probes.is_file() and (problem.dir / ".meta" / "cases.py").is_file()
    assert (tmp_path / "reference" / f"{SLUG}.py").is_file()
    run = validate(tmp_path, "--no-mutation")
    assert run.returncode == 1
    out = run.stdout
    for rule in ("FAIL the reference passes every hidden test",
                 f"FAIL the catalogue holds at least {MIN_MISTAKES} mistakes (0)",
                 "FAIL input checks are listed and worth at most 20%",
                 "FAIL the table of cases (cases.json) matches the reference",
                 "FAIL no TODO of the scaffold is left",
                 "ok   the starter fails every test as not implemented",
                 "skip mutation score"):  # fmt: skip
        assert rule in out, out
    assert "NotImplementedError: TODO: write the reference solution" in out
    assert re.search(r"README\.md:\d+: TODO", out)
    assert f"{SLUG}: 5 of 9 checks failed" in out

    assert main(["new", SLUG, "--root", str(tmp_path)]) == 2
    assert "exists already" in capsys.readouterr().err
    assert main(["new", "Bad-Name", "--root", str(tmp_path)]) == 2
    assert "cannot name a problem" in capsys.readouterr().err


def test_the_readme_example_passes_every_rule(tmp_path):
    assert main(["new", SLUG, "--root", str(tmp_path)]) == 0
    shutil.copytree(EXAMPLE, tmp_path, dirs_exist_ok=True)  # the author fills in the scaffold
    mutation = () if importlib.util.find_spec("mutmut") else ("--no-mutation",)
    run = validate(tmp_path, *mutation)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert f"{SLUG}: every check passed" in run.stdout
    if not mutation:
        assert "ok   mutation score of the tests at least 95%: 100.0%" in run.stdout


def test_the_readme_shows_the_example_as_it_is():
    readme = (KIT_ROOT / "README.md").read_text()
    reference = (EXAMPLE / "reference" / f"{SLUG}.py").read_text()
    body = reference.split("\n\n\n", 1)[1].strip()  # the function, as the README shows it
    assert body in readme
    assert "## Writing your own problem" in readme
    for rule in (f"at least {MIN_MISTAKES}", "input_checks", "NotImplementedError", "TODO",
                 "mutation", "cases.json", "probes.py"):  # fmt: skip
        assert rule in readme.split("## Writing your own problem", 1)[1], rule
