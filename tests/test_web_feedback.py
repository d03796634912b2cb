"""What the page shows after a run, built under CPython by the same code the browser's worker
and the local server run: one banner per problem of the whole file (with its line), test
titles, repeated frames collapsed, printed output capped for the whole run, and where a Stop
found the code. The page itself is tested in tests/e2e/."""

import pytest

from grader import feedback
from grader.problems import all_problems
from grader.webrun import run_problem

FIRST = next(p for p in all_problems() if p.runs_in_browser)
NAME = FIRST.implement[0]


@pytest.fixture
def run(browser_kit):
    """Runs the hidden tests on `code` as the browser's worker does."""

    def run_code(code: str) -> dict:
        learner = browser_kit / "problems" / FIRST.slug / f"{FIRST.slug}.py"
        learner.write_text(code, encoding="utf-8")
        return run_problem(str(browser_kit), FIRST.slug, ["starter"], str(learner))

    return run_code


def test_the_starter_gives_one_banner_at_its_raise(run):
    starter = FIRST.stub.read_text(encoding="utf-8")
    report = run(starter)
    (problem,) = report["file_problems"]
    assert problem["kind"] == "not_implemented"
    raise_line = next(i for i, line in enumerate(starter.splitlines(), 1) if "raise Not" in line)
    assert problem["line"] == raise_line
    assert not problem["message"].startswith("NotImplementedError")
    held = set(problem["tests"])
    failed = {t["id"] for t in report["tests"] if t["outcome"] == "failed"}
    assert held <= failed and len(held) >= len(failed) - 2  # tests that expect an error differ


def test_a_syntax_error_is_one_banner_with_its_line_and_column(run):
    report = run(f"import numpy as np\n\ndef {NAME}(x:\n    return 1\n")
    (problem,) = report["file_problems"]
    # Python points at the "(" that is never closed.
    assert (problem["kind"], problem["line"], problem["column"]) == (
        "syntax",
        3,
        len(f"def {NAME}("),
    )
    assert problem["message"].startswith(f"{FIRST.slug}.py has a syntax error on line 3")
    assert len(problem["tests"]) == len(report["tests"])


def test_a_misspelt_function_name_points_at_the_nearest_one(run):
    report = run(f"def {NAME[:-1]}(*args, **kwargs):\n    return 0.0\n")
    (problem,) = report["file_problems"]
    assert problem["kind"] == "submission" and problem["line"] == 1
    assert f"defines no '{NAME}'" in problem["message"]
    assert f"line 1 defines '{NAME[:-1]}': did you mean '{NAME}'?" in problem["message"]


def test_an_error_while_importing_points_at_the_learners_line(run):
    report = run("import numpy as np\n\nx = undefined_name + 1\n")
    (problem,) = report["file_problems"]
    assert problem["line"] == 3
    assert "failed to import: NameError" in problem["message"]


def test_a_failure_of_one_test_is_no_banner(run):
    report = run(f"def {NAME}(*args, **kwargs):\n    return 0.0\n")
    assert report["file_problems"] == []


def test_infinite_recursion_shows_three_frames_and_a_count(run):
    report = run(f"def {NAME}(*args, **kwargs):\n    return {NAME}(*args, **kwargs)\n")
    first = report["tests"][0]
    assert first["message"].startswith("RecursionError")
    assert len(first["traceback"]) == 3
    assert first["traceback"][-1]["repeated"] > 100


def test_printed_output_is_capped_for_the_whole_run_failures_first(run):
    report = run(f"def {NAME}(*args, **kwargs):\n    print('y' * 5000)\n    return 0.0\n")
    printed = [len(t["stdout"]) for t in report["tests"]]
    assert sum(printed) == feedback.TOTAL_OUTPUT_LIMIT
    # What each test printed, kept or cut: 5001 characters per call of the function.
    assert all((len(t["stdout"]) + t["stdout_cut"]) % 5001 == 0 for t in report["tests"])
    ordered = sorted(report["tests"], key=lambda t: t["outcome"] == "passed")
    assert ordered[0]["stdout"]  # a failing test kept its share


def test_a_stop_records_the_test_and_the_line_it_was_on(run):
    # KeyboardInterrupt is what the page's Stop raises in the learner's code.
    report = run(f"def {NAME}(*args, **kwargs):\n    x = 1\n    raise KeyboardInterrupt\n")
    assert report["interrupted"]
    at = report["interrupted_at"]
    assert at["test"] == report["tests"][0]["id"]
    assert at["traceback"][-1]["line"] == 3


def test_titles_come_from_the_docstring_or_the_name():
    assert feedback.test_title({"name": "test_zero_advantage_counts[3-sequence]", "doc": ""}) == (
        "Zero advantage counts (3-sequence)"
    )
    assert feedback.test_title({"name": "test_x", "doc": "the loss is 0 here"}) == (
        "The loss is 0 here"
    )


def test_without_frames_the_raise_is_found_in_the_source():
    # The local server's runs have no frames: the code ran in a sandboxed process.
    source = (
        "def f():\n    return 1\n\ndef g():\n    raise NotImplementedError('g is not written')\n"
    )
    tests = [
        {"id": str(i), "outcome": "failed", "message": "NotImplementedError: g is not written",
         "error_type": feedback.NOT_IMPLEMENTED, "traceback": []}
        for i in range(3)
    ]  # fmt: skip
    (problem,) = feedback.file_problems(tests, source)
    assert problem["line"] == 5
