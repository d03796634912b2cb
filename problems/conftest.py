"""Hands every problem's tests the implementation under test; see grader/loader.py.

pytest problems/                          your solutions (the files you edit)
pytest problems/ --impl reference         the reference solutions
pytest problems/<slug> --impl FILE.py     any file
"""

import os
import sys
from pathlib import Path

import pytest

from grader.execution import reseed
from grader.loader import load_implementation, next_test


def pytest_addoption(parser):
    parser.addoption(
        "--impl",
        action="append",
        default=[],
        metavar="IMPL",
        help="implementation to test: starter (default), reference, mistake:<id> or a file path; "
        "repeat to test several in one run",
    )


def pytest_configure(config):
    # torch.compile runs the code eagerly, here as in the grading sandbox: the same verdict
    # with or without a C++ compiler (read when torch._dynamo is imported; see below).
    os.environ["TORCH_COMPILE_DISABLE"] = "1"
    # Sandboxed students (the batch grader): their fork servers start now, importing numpy
    # and torch while this process collects the tests.
    if any(spec.startswith("sandbox:") for spec in config.getoption("--impl")):
        from grader.sandbox.submission import warm_up

        warm_up([Path(arg) for arg in config.args])


def pytest_generate_tests(metafunc):
    # Several --impl values run every test once per implementation, with the spec as the test id.
    specs = metafunc.config.getoption("--impl")
    if "impl" in metafunc.fixturenames and len(specs) > 1:
        metafunc.parametrize("impl", specs, ids=specs, indirect=True, scope="module")


@pytest.fixture(scope="module")
def impl(request):
    specs = request.config.getoption("--impl")
    spec = getattr(request, "param", specs[0] if specs else "starter")
    implementation = load_implementation(request.path.parent, spec)
    yield implementation
    implementation.close()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    """Every test starts from the same global random state, here and where the solution runs.

    A hook, not an autouse fixture: a fixture costs about 0.1 ms a test, a twentieth of
    grading a class. It runs after the fixtures, right before the test's body.
    """
    next_test()
    reseed()
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:  # imported before the switch above was read
        dynamo.config.disable = True
