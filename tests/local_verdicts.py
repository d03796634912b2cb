"""Every implementation of a problem run locally once per session, for the tests that need it.

The reference, the starter, every catalogued mistake and a file that raises ValueError on every
call run in two pytest processes side by side (``--impl`` repeated, half the implementations
each); tests/test_curriculum.py and tests/test_grade_parity.py share the result.
"""

import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

from grader.mistakes import load_catalogue
from grader.problems import Problem, get_problem
from grader.runner import TestOutcome, run_tests

RAISING = "raising"


def raising_source(problem: Problem) -> str:
    """A solution that raises ValueError on every call: it passes the tests of rejecting bad
    input, and must earn nothing for them."""
    return "".join(f"def {name}(*args, **kwargs):\n    raise ValueError('always')\n\n\n"
                   for name in problem.implement)  # fmt: skip


_FOLDER = tempfile.TemporaryDirectory(prefix="grpo-kit-raising-")  # removed at exit


@cache
def _raising_file(slug: str) -> str:
    path = Path(_FOLDER.name) / f"{slug}.py"
    path.write_text(raising_source(get_problem(slug)), encoding="utf-8")
    return str(path)


def specs(slug: str) -> list[str]:
    problem = get_problem(slug)
    return ["reference", "starter", *(f"mistake:{m.id}" for m in load_catalogue(problem.dir))]


def run_side_by_side(problem: Problem, impls: list[str]) -> list[TestOutcome]:
    """run_tests over `impls`, split between two pytest processes at once: the tests run one
    thread each, and a problem's whole catalogue (the capstone's forty implementations) is most
    of the suite's time."""
    halves = [impls[0::2], impls[1::2]]
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = list(pool.map(lambda half: run_tests(problem, half), [h for h in halves if h]))
    return [outcome for outcomes in runs for outcome in outcomes]


@cache
def outcomes_by_impl(slug: str) -> dict[str, list[TestOutcome]]:
    """spec (or RAISING) -> the outcome of every test."""
    names = {spec: spec for spec in specs(slug)} | {_raising_file(slug): RAISING}
    by_impl: dict[str, list[TestOutcome]] = {name: [] for name in names.values()}
    for outcome in run_side_by_side(get_problem(slug), list(names)):
        by_impl[names[outcome.impl]].append(outcome)
    return by_impl
