"""The course file: every key checked with a message that says what to write, points per
problem shared by its tests, and the late policy."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from grader.course import CourseError, LatePolicy, default_course, load_course
from grader.gradescope import check_results
from grader.problems import get_problem
from grader.reports import assemble
from grader.submissions import Submission

COURSE = """
title = "GRPO, spring"
problems = ["grpo_objective", "group_advantages"]

[points]
grpo_objective = 10

[limits]
time_limit_s = 5
submission_time_limit_s = 30
memory_mb = 512

[late]
due = 2026-03-14T23:59:00+01:00
grace_minutes = 15
penalty_per_day = 0.1
max_days = 3

[gradescope]
visibility = "after_due_date"
"""


def write(tmp_path, text: str):
    path = tmp_path / "course.toml"
    path.write_text(text)
    return path


def test_a_course_file_is_read_whole(tmp_path):
    course = load_course(write(tmp_path, COURSE))
    assert course.title == "GRPO, spring"
    assert course.slugs == ["grpo_objective", "group_advantages"]
    assert course.limits == {"call_s": 5.0, "total_s": 30.0, "memory_mb": 512.0}
    assert course.late.due == datetime(2026, 3, 14, 22, 59, tzinfo=UTC)
    assert course.visibility == "after_due_date"
    again = load_course(write(tmp_path, course.to_toml()))  # what the autograder ships
    assert (again.slugs, again.points, again.limits, again.late) == (
        course.slugs, course.points, course.limits, course.late)  # fmt: skip


def test_points_per_problem_are_shared_by_its_tests(tmp_path):
    course = load_course(write(tmp_path, COURSE))
    problem = get_problem("grpo_objective")
    names = ["test_a", "test_b[1]", "test_b[2]", "test_c"]
    points = course.test_points(problem, names)
    assert sum(points.values()) == pytest.approx(10)
    assert points["test_b[1]"] == pytest.approx(points["test_a"] / 2)
    # A problem without course points keeps problem.toml's.
    other = get_problem("group_advantages")
    assert course.test_points(other, names) == other.test_points(names)
    assert default_course().slugs[0] == "grpo_objective"


def test_input_checks_in_a_results_file_earn_in_proportion_to_the_other_tests(tmp_path):
    course = load_course(write(tmp_path, COURSE)).restricted(["grpo_objective"])
    outcomes = {"test_a": "passed", "test_b": "failed", "test_c": "failed",
                "test_shapes_raise_value_error": "passed"}  # fmt: skip
    record = {"tests": [{"test": name, "outcome": outcome, "output": "", "duration": 0.0}
                        for name, outcome in outcomes.items()]}  # fmt: skip
    results = assemble({"grpo_objective": record}, course, Submission("ada"), "0")
    assert check_results(results) == []
    scores = {t["name"].split(": ", 1)[1]: (t["score"], t["max_score"]) for t in results["tests"]}
    # 10 points over four tests; the input check earns a third: a third of the rest was earned.
    assert scores == {"test_a": (2.5, 2.5), "test_b": (0, 2.5), "test_c": (0, 2.5),
                      "test_shapes_raise_value_error": (0.8333, 2.5)}  # fmt: skip
    check = next(t for t in results["tests"] if t["name"].endswith("raise_value_error"))
    assert check["status"] == "passed" and check["output"].startswith(
        "Passed, for 33% of its points"
    )
    assert results["extra_data"]["problems"]["grpo_objective"]["score"] == 3.3333


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace('"group_advantages"]', '"group_advantage"]'),
         "Did you mean group_advantages"),
        (lambda t: t + "colour = 1\n", "unknown key 'colour'"),
        (lambda t: t.replace("[limits]", "[limit]"), "unknown key 'limit' (did you mean 'limits'?)"),
        (lambda t: t.replace("time_limit_s = 5", "time_limit_s = 0"), "time_limit_s must be"),
        (lambda t: t.replace("memory_mb = 512", "memory_mb = 16"), "memory_mb must be a number from 128"),
        (lambda t: t.replace("grpo_objective = 10", "grpo_objective = -1"), "must be a number"),
        (lambda t: t.replace("grpo_objective = 10", "sample_group = 3"), "not a problem of the course"),
        (lambda t: t.replace("+01:00", ""), "has no time zone: add it"),
        (lambda t: t.replace("due = 2026-03-14T23:59:00+01:00", 'due = "tomorrow"'),
         "must be a date and time, unquoted"),
        (lambda t: t.replace("penalty_per_day = 0.1", "penalty_per_day = 10"), "penalty_per_day must"),
        (lambda t: t.replace('"after_due_date"', '"sometimes"'), "visibility must be one of"),
        (lambda t: t.replace('title = "GRPO, spring"', "title = 3"), "'title' must be a quoted string"),
        (lambda t: t.replace("submission_time_limit_s = 30", "submission_time_limit_s = 1"),
         "at least time_limit_s"),
        (lambda t: t + "[oops\n", "is not valid TOML"),
        (lambda t: t.replace('problems = ["grpo_objective", "group_advantages"]', "problems = []"),
         "'problems' must list problem names"),
    ],
)  # fmt: skip
def test_mistakes_in_the_course_file_say_what_to_write(tmp_path, edit, message):
    with pytest.raises(CourseError) as caught:
        load_course(write(tmp_path, edit(COURSE)))
    assert message in str(caught.value)
    assert str(tmp_path / "course.toml") in str(caught.value)


def test_a_missing_course_file_says_so(tmp_path):
    with pytest.raises(CourseError, match="no course file"):
        load_course(tmp_path / "nope.toml")
    with pytest.raises(CourseError, match="is a folder"):
        load_course(tmp_path)


def test_the_late_policy():
    due = datetime(2026, 3, 14, 23, 59, tzinfo=UTC)
    policy = LatePolicy(due, timedelta(minutes=15), penalty_per_day=0.1, max_days=3)
    assert policy.apply(due + timedelta(minutes=10)) is None  # within the grace period
    assert policy.apply(due - timedelta(days=2)) is None
    assert policy.apply(None) is None  # no time, not marked late: on time
    late = policy.apply(due + timedelta(hours=30))
    assert late.days == pytest.approx(1.25) and late.penalty == pytest.approx(0.2)
    assert policy.apply(due + timedelta(days=3, hours=1)).penalty == 1.0  # past max_days
    assert policy.apply(None, marked_late=True).penalty == pytest.approx(0.1)  # Canvas's LATE
    with pytest.raises(ValueError, match="time zone"):
        policy.apply(datetime(2026, 3, 15))
