"""Proof that every problem's hidden tests mean something, and that its points are fair.

For every problem: the reference passes every test, the starter fails every test with a
"not implemented" message, and each catalogued wrong solution fails at least one test.
All implementations of a problem run in one pytest process (``--impl`` repeated). Tests of
input handling (errors raised, types, not modifying inputs) are listed as such in the
metadata, are worth at most a fifth of the problem's points, and give nothing to a file that
raises ValueError on every call.
"""

import pytest
from local_verdicts import RAISING, outcomes_by_impl

from grader.mistakes import load_catalogue
from grader.problems import all_problems
from grader.validate import MIN_MISTAKES, input_check_problems  # `grpo-kit validate`'s rules

PROBLEMS = all_problems()
MISTAKES = [(p, m) for p in PROBLEMS for m in load_catalogue(p.dir)]


def describe(outcomes) -> str:
    return "\n".join(f"  {o.outcome:7} {o.name}: {o.message[:300]}" for o in outcomes)


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.slug)
def test_reference_passes_every_test(problem):
    outcomes = outcomes_by_impl(problem.slug)["reference"]
    assert outcomes, f"{problem.slug}: no test ran"
    failing = [o for o in outcomes if o.outcome != "passed"]
    assert not failing, f"the reference fails:\n{describe(failing)}"


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.slug)
def test_starter_fails_every_test_as_not_implemented(problem):
    outcomes = outcomes_by_impl(problem.slug)["starter"]
    assert len(outcomes) == len(outcomes_by_impl(problem.slug)["reference"])
    wrong = [o for o in outcomes if o.outcome != "failed" or "NotImplementedError" not in o.message]
    assert not wrong, f"the starter should fail every test as not implemented:\n{describe(wrong)}"


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.slug)
def test_raising_value_error_on_every_call_earns_nothing(problem):
    outcomes = outcomes_by_impl(problem.slug)[RAISING]
    points = problem.test_points([o.name for o in outcomes])
    earned = problem.earned(points, {o.name for o in outcomes if o.outcome == "passed"})
    assert not any(earned.values()), "points for raising ValueError: " + ", ".join(
        name for name, value in earned.items() if value
    )


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.slug)
def test_catalogue_has_at_least_ten_mistakes(problem):
    assert len(load_catalogue(problem.dir)) >= MIN_MISTAKES


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.slug)
def test_input_checks_are_listed_and_worth_at_most_a_fifth(problem):
    assert not input_check_problems(problem)


@pytest.mark.parametrize(
    "problem, mistake", MISTAKES, ids=[f"{p.slug}:{m.id}" for p, m in MISTAKES]
)
def test_mistake_fails_at_least_one_test(problem, mistake):
    outcomes = outcomes_by_impl(problem.slug)[f"mistake:{mistake.id}"]
    assert outcomes, "no test ran"
    errors = [o for o in outcomes if o.outcome == "error"]
    assert not errors, f"tests errored instead of failing:\n{describe(errors)}"
    assert any(o.outcome == "failed" for o in outcomes), (
        f"every hidden test passes for the mistake {mistake.id!r} ({mistake.description})"
    )
