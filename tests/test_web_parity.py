"""Parity: every browser problem gives the same per-test verdicts in Pyodide as in CPython.

For each problem that runs in the browser, the reference, the starter and every catalogued
mistake run through the hidden tests twice: with CPython pytest (``grader.runner``, as a
local run does) and in Pyodide under Node (``tests/parity/run_in_pyodide.mjs``, through
``grader.webrun``, as the page's worker does; one Pyodide boot for all problems).
"""

import json
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

from grader import assets, site
from grader.mistakes import load_catalogue
from grader.problems import KIT_ROOT, all_problems
from grader.runner import parse_collected, run_tests

BROWSER_PROBLEMS = [p for p in all_problems() if p.runs_in_browser]
RUNNER = Path(__file__).parent / "parity" / "run_in_pyodide.mjs"


def impls_of(problem) -> list[str]:
    return ["reference", "starter", *(f"mistake:{m.id}" for m in load_catalogue(problem.dir))]


def parity_files(problems) -> dict[str, str]:
    """The browser's files, plus what only parity needs: references and mistake catalogues."""
    files = {}
    for problem in problems:
        files.update(site.kit_files(problem))
        if problem.mistakes_file.is_file():
            files[problem.mistakes_file.relative_to(KIT_ROOT).as_posix()] = (
                problem.mistakes_file.read_text(encoding="utf-8")
            )
    extras = [KIT_ROOT / "grader" / "mistakes.py", *sorted((KIT_ROOT / "reference").glob("*.py"))]
    for path in extras:
        files[path.relative_to(KIT_ROOT).as_posix()] = path.read_text(encoding="utf-8")
    return files


@pytest.fixture(scope="module")
def pyodide_reports(tmp_path_factory) -> dict[str, dict]:
    if shutil.which("node") is None:
        pytest.fail("Node.js is needed for the parity tests (and to build the site): install it")
    cache_dir = assets.ensure_assets()
    tmp = tmp_path_factory.mktemp("parity")
    job = {
        "files": parity_files(BROWSER_PROBLEMS),
        "runs": [{"slug": p.slug, "impls": impls_of(p)} for p in BROWSER_PROBLEMS],
    }
    (tmp / "job.json").write_text(json.dumps(job), encoding="utf-8")
    completed = subprocess.run(
        ["node", str(RUNNER), str(cache_dir), str(tmp / "job.json"), str(tmp / "results.json")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, f"the Pyodide runner failed:\n{completed.stderr[-4000:]}"
    return json.loads((tmp / "results.json").read_text(encoding="utf-8"))


def verdicts(outcomes) -> dict[tuple[str, str], str]:
    return {(o.impl, o.name): o.outcome for o in outcomes}


@cache
def cpython_verdicts(slug: str) -> dict[tuple[str, str], str]:
    problem = next(p for p in BROWSER_PROBLEMS if p.slug == slug)
    return verdicts(run_tests(problem, impls_of(problem)))


@pytest.mark.parametrize("problem", BROWSER_PROBLEMS, ids=lambda p: p.slug)
def test_pyodide_verdicts_match_cpython(problem, pyodide_reports):
    report = pyodide_reports[problem.slug]
    assert not report["errors"], f"collection failed in Pyodide:\n{report['log'][-3000:]}"
    # Both sides collect with grader.collect, so one function reads them.
    in_pyodide = verdicts(parse_collected(report, impls_of(problem)))
    in_cpython = cpython_verdicts(problem.slug)
    assert in_cpython, f"{problem.slug}: no test ran in CPython"
    assert set(in_pyodide) == set(in_cpython), "the two runs collected different tests"
    differences = {
        key: (in_cpython[key], in_pyodide[key])
        for key in in_cpython
        if in_cpython[key] != in_pyodide[key]
    }
    assert not differences, "verdicts differ (CPython, Pyodide):\n" + "\n".join(
        f"  {impl} {name}: {pair}" for (impl, name), pair in sorted(differences.items())
    )


def test_starter_fails_and_reference_passes_in_pyodide(pyodide_reports):
    # Guards the comparison above from passing on two equally broken runs.
    for problem in BROWSER_PROBLEMS:
        tests = pyodide_reports[problem.slug]["tests"]
        by_impl = {
            impl: [t["outcome"] for t in tests if t["impl"] == impl]
            for impl in ("reference", "starter")
        }
        assert by_impl["reference"] and set(by_impl["reference"]) == {"passed"}, problem.slug
        assert "passed" not in by_impl["starter"], problem.slug
