"""Run one problem's hidden tests in this interpreter and report each test as plain data.

The browser's Web Worker (web/src/worker.js) and the parity runner (tests/parity/) call
`run_problem` inside Pyodide, after writing the kit's files into Pyodide's file system laid out
as in the repository. It runs the real pytest on the same test files as a local run, through
the same ``--impl`` seam, and turns each test into a dict the page can show: outcome, the
assertion message, the frames of the learner's own file, and what the learner's code printed.

Standard library and pytest only, so it also runs (and is tested) under CPython.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

import pytest

# pytest options that the Emscripten file system needs (capture through sys, not file
# descriptors) and that keep repeated in-process runs fast and independent. The terminal
# report is off: the collector reports instead, and formatting every failure's traceback
# for a terminal nobody reads was most of the time of a failing run.
PYTEST_ARGS = ("-p", "no:cacheprovider", "-p", "no:terminal", "--capture=sys")

# What one test's printed output (and pytest's log) may send to the page: a print in a long
# loop can produce megabytes, which would only freeze the page that has to show them.
OUTPUT_LIMIT = 20_000


def capped(text: str, limit: int = OUTPUT_LIMIT) -> tuple[str, int]:
    """The first `limit` characters of `text` and how many were cut."""
    return text[:limit], max(0, len(text) - limit)


def _short_message(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, AssertionError):
        return text or "assertion failed"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def learner_frames(tb, learner_file: str, source_lines: list[str]) -> list[dict]:
    """The traceback frames that are in the learner's file, with the editor's line numbers.

    `source_lines` is the file as this run loaded it: linecache could hold an earlier edit
    saved under the same name.
    """
    frames = []
    while tb is not None:
        code = tb.tb_frame.f_code
        if os.path.abspath(code.co_filename) == learner_file:
            number = tb.tb_lineno
            line = source_lines[number - 1].strip() if 0 < number <= len(source_lines) else ""
            frames.append({"line": number, "function": code.co_name, "code": line})
        tb = tb.tb_next
    return frames


class Collector:
    """A pytest plugin that keeps, per test, what the learner needs to see."""

    def __init__(self, learner_file: str | None):
        self.learner_file = os.path.abspath(learner_file) if learner_file else None
        self.learner_lines = (
            Path(learner_file).read_text(encoding="utf-8", errors="replace").splitlines()
            if learner_file
            else []
        )
        self.tests: dict[str, dict] = {}
        self.errors: list[str] = []

    def pytest_configure(self, config):
        # pytest formats a report for every failure even with no terminal to show it; the
        # learner sees the collector's report instead, so keep pytest's as cheap as can be.
        config.option.tbstyle = "no"

    def pytest_collection_modifyitems(self, items):
        for item in items:  # every collected test, in order, even if a Stop ends the run early
            callspec = getattr(item, "callspec", None)
            self.tests[item.nodeid] = {
                "id": item.nodeid,
                "name": item.name,
                "function": item.originalname,
                "impl": callspec.params.get("impl") if callspec else None,
                "outcome": "notrun",
                "message": "",
                "traceback": [],
                "stdout": "",
                "stdout_cut": 0,  # characters of output left out (OUTPUT_LIMIT)
                "duration": 0.0,
            }

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if call.excinfo is not None and report.failed:
            entry = self.tests[item.nodeid]
            # The first failure explains the test; a later teardown error would only add noise.
            if not entry["message"]:
                entry["message"] = _short_message(call.excinfo.value)
                if self.learner_file:
                    entry["traceback"] = learner_frames(
                        call.excinfo.tb, self.learner_file, self.learner_lines
                    )
        return report

    def pytest_runtest_logreport(self, report):
        entry = self.tests[report.nodeid]
        entry["duration"] += report.duration
        if report.failed:
            entry["outcome"] = "failed" if report.when == "call" else "error"
        elif report.skipped:
            entry["outcome"] = "skipped"
            entry["message"] = str(report.longrepr[-1]) if report.longrepr else ""
        elif report.when == "call":
            entry["outcome"] = "passed"
        if report.when == "teardown":
            # By teardown the report holds what was printed in every phase of the test.
            entry["stdout"], entry["stdout_cut"] = capped(report.capstdout + report.capstderr)

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors.append(f"{report.nodeid}: {report.longreprtext}")


def _forget_test_modules(root: Path) -> None:
    # Each run imports the problem's conftest, tests and reference afresh, as a new pytest
    # process would: the same interpreter runs many times in the browser and in parity runs.
    owned = (str(root / "problems"), str(root / "reference"))
    for name, module in list(sys.modules.items()):
        if (getattr(module, "__file__", None) or "").startswith(owned):
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


def run_problem(root: str, slug: str, impls: list[str], learner_file: str | None = None) -> dict:
    """Run ``problems/<slug>`` under `root` with each of `impls` and return per-test results.

    Returns ``{"exit_code", "interrupted", "tests": [...], "errors": [...], "log"}``; ``log`` is
    pytest's own terminal output (capped), kept for errors that no test explains.
    """
    root_path = Path(root).resolve()
    _forget_test_modules(root_path)
    collector = Collector(learner_file)
    args = [str(root_path / "problems" / slug), "--rootdir", str(root_path)]
    args += ["--confcutdir", str(root_path), *PYTEST_ARGS]
    for spec in impls:
        args += ["--impl", spec]
    log = io.StringIO()
    with _kit_on_path(root_path), contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        exit_code = pytest.main(args, plugins=[collector])
    return {
        "exit_code": int(exit_code),
        "interrupted": exit_code == pytest.ExitCode.INTERRUPTED,
        "tests": list(collector.tests.values()),
        "errors": collector.errors,
        "log": _capped_log(log.getvalue()),
    }


def _capped_log(text: str) -> str:
    kept, cut = capped(text)
    return kept + (f"\n[{cut:,} more characters not shown]" if cut else "")
