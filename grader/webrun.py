"""Run one problem's hidden tests in this interpreter and report each test as plain data.

The browser's Web Worker (web/src/worker.js) and the parity runner (tests/parity/) call
`run_problem` inside Pyodide, after writing the kit's files into Pyodide's file system laid out
as in the repository. It runs the real pytest on the same test files as a local run, through
the same ``--impl`` seam, and turns each test into a dict the page can show: outcome, the
assertion message, the frames of the learner's own file, and what the learner's code printed;
``grader/feedback.py`` then adds what the page shows first (titles, problems of the file).

Standard library and pytest only, so it also runs (and is tested) under CPython.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

import pytest

from grader import feedback
from grader.collect import Collector, capped_log
from grader.problems import load_problem

# pytest options that the Emscripten file system needs (capture through sys, not file
# descriptors) and that keep repeated in-process runs fast and independent. The terminal
# report is off: the collector reports instead, and formatting every failure's traceback
# for a terminal nobody reads was most of the time of a failing run. The plugins turned off
# only report or hook into tools (a debugger, JUnit XML, a pastebin) and change no verdict;
# registering them took a third of a repeated run, and unraisableexception's two garbage
# collections at the end another sixth.
PYTEST_ARGS = (
    "-p", "no:cacheprovider", "-p", "no:terminal", "--capture=sys",
    *("-p", "no:unraisableexception", "-p", "no:threadexception", "-p", "no:faulthandler"),
    *("-p", "no:junitxml", "-p", "no:pastebin", "-p", "no:doctest", "-p", "no:stepwise"),
    *("-p", "no:setuponly", "-p", "no:setupplan", "-p", "no:legacypath", "-p", "no:debugging"),
)  # fmt: skip


def _forget_test_modules(root: Path) -> None:
    # Each run imports the problem's conftest, tests and reference afresh, as a new pytest
    # process would: the same interpreter runs many times in the browser and in parity runs.
    # By name too: `problems.conftest` imported from another copy of the kit (a test run of
    # the kit itself) would make pytest refuse this root's conftest of the same name.
    owned = (str(root / "problems"), str(root / "reference"))
    for name, module in list(sys.modules.items()):
        own = (getattr(module, "__file__", None) or "").startswith(owned)
        if own or name.split(".")[0] in ("problems", "reference"):
            del sys.modules[name]


@contextlib.contextmanager
def _kit_on_path(root: Path):
    """`import grader` from `root` (as the editable install does) and no plugin autoloading."""
    saved_path, saved_env = list(sys.path), os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    sys.path.insert(0, str(root))
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # no entry-point scan: faster, repeatable
    try:
        yield
    finally:
        sys.path[:] = saved_path
        if saved_env is None:
            del os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"]
        else:
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = saved_env


def run_problem(root: str, slug: str, impls: list[str], learner_file: str | None = None,
                progress=None) -> dict:  # fmt: skip
    """Run ``problems/<slug>`` under `root` with each of `impls` and return per-test results.

    Returns ``{"exit_code", "interrupted", "interrupted_at", "tests": [...], "errors": [...],
    "log", "file_problems"}``; ``log`` is pytest's own terminal output (capped), kept for errors
    that no test explains; ``interrupted_at`` says which test (and learner's line) a Ctrl-C
    stopped. `progress(nodeid)` is called as each test starts.
    """
    root_path = Path(root).resolve()
    _forget_test_modules(root_path)
    collector = Collector(learner_file, on_test_start=progress)
    args = [str(root_path / "problems" / slug), "--rootdir", str(root_path)]
    args += ["--confcutdir", str(root_path), *PYTEST_ARGS]
    for spec in impls:
        args += ["--impl", spec]
    log = io.StringIO()
    with _kit_on_path(root_path), contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        exit_code = pytest.main(args, plugins=[collector])
    report = {
        "exit_code": int(exit_code),
        "interrupted": exit_code == pytest.ExitCode.INTERRUPTED,
        "interrupted_at": collector.interrupted_at,
        "tests": list(collector.tests.values()),
        "errors": collector.errors,
        "log": capped_log(log.getvalue()),
    }
    source = None
    if learner_file:
        source = Path(learner_file).read_text(encoding="utf-8", errors="replace")
    names = load_problem(root_path / "problems" / slug, whole=False).implement
    return feedback.annotate(report, source, names)
