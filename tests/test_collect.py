"""The collector's --outcomes-only protocol gives the verdicts of pytest's own protocol."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from grader.problems import KIT_ROOT

SUITE = """
import sys
import pytest

@pytest.fixture
def broken_setup():
    raise RuntimeError("setup broke")

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown broke")

@pytest.fixture
def skipped_in_setup():
    pytest.skip("no GPU")

def test_passes():
    assert 1 + 1 == 2

def test_fails():
    assert 1 + 1 == 3, "arithmetic"

def test_raises():
    raise ValueError("bad value")

def test_a_huge_message():
    assert False, "x" * 1_000_000

def test_exits():
    sys.exit(3)

def test_setup_error(broken_setup):
    pass

def test_teardown_error_after_a_pass(broken_teardown):
    pass

def test_teardown_error_after_a_failure(broken_teardown):
    assert False, "first"

def test_skip_in_setup(skipped_in_setup):
    pass

def test_skip_in_call():
    pytest.skip("not today")

@pytest.mark.skipif(True, reason="marked")
def test_skip_mark():
    pass

@pytest.mark.xfail(reason="known")
def test_xfail_that_fails():
    assert False

@pytest.mark.xfail(reason="known", strict=True)
def test_xfail_that_passes():
    pass

@pytest.mark.parametrize("x", [1, 2])
def test_parametrized(x):
    assert x == 1
"""


def collect(folder: Path, *extra: str) -> dict:
    report = folder / f"collected-{len(list(folder.glob('collected-*')))}.json"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", str(folder / "test_suite.py"), "-q",
         "-p", "no:cacheprovider", "--rootdir", str(folder), "-p", "grader.collect",
         f"--collect-file={report}", *extra],
        cwd=KIT_ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert report.is_file(), run.stdout + run.stderr
    return json.loads(report.read_text(encoding="utf-8")) | {"returncode": run.returncode}


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("suite")
    (folder / "test_suite.py").write_text(SUITE, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def both(suite) -> tuple[dict, dict]:
    return collect(suite), collect(suite, "--outcomes-only", "-s")


def test_every_verdict_and_message_is_pytests_own(both):
    standard, outcomes_only = both
    keep = ("id", "outcome", "message", "error_type")
    assert [{k: t[k] for k in keep} for t in outcomes_only["tests"]] == [
        {k: t[k] for k in keep} for t in standard["tests"]
    ]
    outcomes = {t["function"] + t["name"].removeprefix(t["function"]): t["outcome"]
                for t in standard["tests"]}  # fmt: skip
    assert outcomes == {
        "test_passes": "passed",
        "test_fails": "failed",
        "test_raises": "failed",
        "test_exits": "failed",
        "test_setup_error": "error",
        "test_teardown_error_after_a_pass": "error",
        "test_teardown_error_after_a_failure": "error",
        "test_skip_in_setup": "skipped",
        "test_skip_in_call": "skipped",
        "test_skip_mark": "skipped",
        "test_xfail_that_fails": "skipped",
        "test_xfail_that_passes": "failed",
        "test_a_huge_message": "failed",
        "test_parametrized[1]": "passed",
        "test_parametrized[2]": "failed",
    }


def test_a_message_is_capped(both):
    # A test may show a returned value in its message, and the student chooses its size.
    for run in both:
        (huge,) = [t["message"] for t in run["tests"] if t["function"] == "test_a_huge_message"]
        assert huge.startswith("x" * 1000) and huge.endswith("more characters not shown]")
        assert len(huge) < 5_000


def test_the_first_failure_explains_the_test(both):
    _, outcomes_only = both
    messages = {t["function"]: t["message"] for t in outcomes_only["tests"]}
    assert messages["test_teardown_error_after_a_failure"].startswith("first")
    assert messages["test_setup_error"] == "RuntimeError: setup broke"
    assert messages["test_skip_in_call"] == "Skipped: not today"


@pytest.mark.parametrize(("selected", "status"), [("test_passes", 0), ("test_fails", 1),
                                                  ("test_setup_error", 1)])  # fmt: skip
def test_a_failed_test_gives_pytests_exit_status(suite, selected, status):
    run = collect(suite, "--outcomes-only", "-k", selected)
    assert (run["returncode"], run["exit_code"]) == (status, status)


RESEEDED = """
import random

import numpy as np
import pytest

import grader.loader

FIRST = (random.Random(0).random(), np.random.RandomState(0).random_sample())
numbers = []


@pytest.mark.parametrize("test", range(3))
def test_starts_from_the_same_random_state(test):
    assert (random.random(), np.random.random()) == FIRST
    random.random(), np.random.random()  # moved: the next test starts over all the same
    numbers.append(grader.loader._test_number)
    assert numbers == list(range(numbers[0], numbers[0] + test + 1)), "one test number each"
"""


@pytest.mark.parametrize("extra", [(), ("--outcomes-only", "-s")], ids=["pytest", "outcomes"])
def test_the_problems_conftest_reseeds_before_every_test(tmp_path, extra):
    (tmp_path / "conftest.py").write_text(
        (KIT_ROOT / "problems" / "conftest.py").read_text(encoding="utf-8"), encoding="utf-8"
    )
    (tmp_path / "test_suite.py").write_text(RESEEDED, encoding="utf-8")
    collected = collect(tmp_path, *extra)
    assert [t["outcome"] for t in collected["tests"]] == ["passed"] * 3, collected["tests"]


@pytest.mark.parametrize("extra", [(), ("--outcomes-only", "-s")], ids=["pytest", "outcomes"])
def test_a_stop_says_which_test_it_ended(tmp_path, extra):
    (tmp_path / "test_suite.py").write_text(
        "def test_before():\n    pass\n\n\ndef test_stopped():\n    raise KeyboardInterrupt\n",
        encoding="utf-8",
    )
    collected = collect(tmp_path, *extra)
    assert collected["interrupted_at"]["test"] == "test_suite.py::test_stopped"
    assert [t["outcome"] for t in collected["tests"]] == ["passed", "notrun"]
