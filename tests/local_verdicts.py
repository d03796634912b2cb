"""Every implementation of a problem run locally once per session, for the tests that need it.

The reference, the starter and every catalogued mistake run in one pytest process
(``--impl`` repeated); tests/test_curriculum.py and tests/test_grade_parity.py share the result.
"""

from functools import cache

from grader.mistakes import load_catalogue
from grader.problems import get_problem
from grader.runner import TestOutcome, run_tests


def specs(slug: str) -> list[str]:
    problem = get_problem(slug)
    return ["reference", "starter", *(f"mistake:{m.id}" for m in load_catalogue(problem.dir))]


@cache
def outcomes_by_impl(slug: str) -> dict[str, list[TestOutcome]]:
    impls = specs(slug)
    by_impl: dict[str, list[TestOutcome]] = {spec: [] for spec in impls}
    for outcome in run_tests(get_problem(slug), impls):
        by_impl[outcome.impl].append(outcome)
    return by_impl
