"""The one pytest plugin that records each test's verdict, wherever the tests run.

The browser's worker (``grader/webrun.py``) adds a `Collector` to an in-process ``pytest.main``;
the local checker (``grader/runner.py``) and the batch grader (``grader/batch.py``) start pytest
with ``-p grader.collect --collect-file PATH`` and read PATH when it ends. Per test it keeps
what a learner or an instructor needs: the outcome, a one-line message, the type of the
exception that failed it (so a grader failure is recognised by its type, never by the wording
of a message), the frames of the learner's own file, and what the code printed.

Standard library and pytest only, so that it also runs in Pyodide.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

# What one test's printed output may send on: a print in a long loop can produce megabytes.
OUTPUT_LIMIT = 20_000
# And its message: a test that shows a returned value can show megabytes of it, the student's
# choice (40 MB of bytes is 160 MB of repr), and every record and rerun would carry them.
MESSAGE_LIMIT = 4_000
# A frame seen this many times in a row is shown once more with a count, as CPython does:
# infinite recursion would otherwise list a thousand identical frames.
REPEATS_SHOWN = 3


def capped(text: str, limit: int = OUTPUT_LIMIT) -> tuple[str, int]:
    """The first `limit` characters of `text` and how many were cut."""
    return text[:limit], max(0, len(text) - limit)


def capped_log(text: str, limit: int = OUTPUT_LIMIT) -> str:
    """`text` capped, saying how much was cut: pytest's own output (for errors no test
    explains), or a test's message."""
    kept, cut = capped(text, limit)
    return kept + (f"\n[{cut:,} more characters not shown]" if cut else "")


def _short_message(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, AssertionError):
        text = text or "assertion failed"
    else:
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return capped_log(text, MESSAGE_LIMIT)


def _exception_only(excinfo: pytest.ExceptionInfo) -> str:
    return excinfo.exconly()


def _type_name(exc: BaseException) -> str:
    kind = type(exc)
    return f"{kind.__module__}.{kind.__qualname__}"


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
    return collapse_repeats(frames)


def collapse_repeats(frames: list[dict]) -> list[dict]:
    """Runs of one same frame cut to REPEATS_SHOWN, the last one counting the rest
    (``repeated``: how many more times the previous line ran)."""
    kept: list[dict] = []
    run = 0
    for frame in frames:
        same = bool(kept) and (kept[-1]["line"], kept[-1]["function"]) == (
            frame["line"],
            frame["function"],
        )
        run = run + 1 if same else 1
        if run <= REPEATS_SHOWN:
            kept.append(dict(frame))
        else:
            kept[-1]["repeated"] = run - REPEATS_SHOWN
    return kept


def _frames_of(exc: BaseException, learner_file: str, source_lines: list[str]) -> list[dict]:
    """The learner's frames of `exc`, or of the exception it was raised from: a file that
    failed to import fails each test with the import's exception as its cause."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        frames = learner_frames(exc.__traceback__, learner_file, source_lines)
        if frames:
            return frames
        exc = exc.__cause__
    return []


def _summary_line(text: str | None) -> str:
    """The first paragraph of a docstring, on one line."""
    paragraph = (text or "").strip().split("\n\n", 1)[0]
    return " ".join(paragraph.split())


class Collector:
    """A pytest plugin that keeps, per test, what the learner needs to see."""

    def __init__(self, learner_file: str | None = None, on_test_start=None):
        self.learner_file = os.path.abspath(learner_file) if learner_file else None
        self.learner_lines = (
            Path(learner_file).read_text(encoding="utf-8", errors="replace").splitlines()
            if learner_file
            else []
        )
        self.tests: dict[str, dict] = {}
        self.errors: list[str] = []
        # `on_test_start(nodeid)` is told as each test starts (the page shows which one runs).
        self.on_test_start = on_test_start
        self.running: str | None = None
        # Where a Ctrl-C (the page's Stop) found the code: {"test", "traceback"}.
        self.interrupted_at: dict | None = None

    def pytest_configure(self, config):
        # pytest formats a report for every failure even with no terminal to show it; the
        # collector's report replaces it, so keep pytest's as cheap as can be.
        config.option.tbstyle = "no"

    def pytest_collection_modifyitems(self, items):
        for item in items:  # every collected test, in order, even if a Stop ends the run early
            # Even with no traceback to show, pytest filters and formats one for each failure
            # (about half a millisecond); the collector keeps its own message instead.
            item.repr_failure = _exception_only
            callspec = getattr(item, "callspec", None)
            self.tests[item.nodeid] = {
                "id": item.nodeid,
                "name": item.name,
                "function": item.originalname,
                "impl": callspec.params.get("impl") if callspec else None,
                "doc": _summary_line(getattr(getattr(item, "obj", None), "__doc__", None)),
                "outcome": "notrun",
                "message": "",
                "error_type": None,
                "traceback": [],
                "stdout": "",
                "stdout_cut": 0,  # characters of output left out (OUTPUT_LIMIT)
                "duration": 0.0,
            }

    def record_failure(self, nodeid: str, exc: BaseException) -> None:
        """Keep why test `nodeid` failed: `exc`, unless an earlier failure already explains it."""
        entry = self.tests[nodeid]
        # The first failure explains the test; a later teardown error would only add noise.
        if not entry["message"]:
            entry["message"] = _short_message(exc)
            entry["error_type"] = _type_name(exc)
            if self.learner_file:
                entry["traceback"] = _frames_of(exc, self.learner_file, self.learner_lines)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        if call.excinfo is not None and report.failed:
            self.record_failure(item.nodeid, call.excinfo.value)
        return report

    def pytest_runtest_logstart(self, nodeid):
        self.running = nodeid
        if self.on_test_start is not None:
            self.on_test_start(nodeid)

    def pytest_runtest_logfinish(self, nodeid):
        self.running = None

    def pytest_keyboard_interrupt(self, excinfo):
        frames = []
        if self.learner_file:
            frames = learner_frames(excinfo.tb, self.learner_file, self.learner_lines)
        self.interrupted_at = {"test": self.running, "traceback": frames}

    def pytest_runtest_logreport(self, report):
        entry = self.tests[report.nodeid]
        entry["duration"] += report.duration
        if report.failed:
            entry["outcome"] = "failed" if report.when == "call" else "error"
        elif report.skipped:
            entry["outcome"] = "skipped"
            entry["message"] = (
                capped_log(str(report.longrepr[-1]), MESSAGE_LIMIT) if report.longrepr else ""
            )
        elif report.when == "call":
            entry["outcome"] = "passed"
        if report.when == "teardown":
            # By teardown the report holds what was printed in every phase of the test.
            entry["stdout"], entry["stdout_cut"] = capped(report.capstdout + report.capstderr)

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors.append(f"{report.nodeid}: {report.longreprtext}")


class OutcomesOnly:
    """Runs each test's setup, call and teardown hooks and records the outcome in the
    collector, without pytest's report of each phase (``--outcomes-only``: the batch grader's
    and the site's runs on the server, which share its pytest command).

    Making, logging and printing those reports cost about 0.3 ms a test, a sixth of grading a
    class. Every plugin's setup, call and teardown hooks still run (fixtures, skip marks,
    unraisable exceptions), so verdicts are those of pytest's own protocol, which still runs
    any test marked xfail. What a test prints is not kept: a sandboxed solution's output
    reaches the grader through its own pipe.
    """

    def __init__(self, collector: Collector):
        self.collector = collector

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        if item.get_closest_marker("xfail") is not None:
            return None
        ihook, session = item.ihook, item.session
        self.collector.pytest_runtest_logstart(item.nodeid)  # a Stop says which test it ended
        started = time.perf_counter()
        outcome = self._phase(item, ihook.pytest_runtest_setup, "error")
        if outcome is None:
            outcome = self._phase(item, ihook.pytest_runtest_call, "failed") or "passed"
        if session.shouldfail or session.shouldstop:  # as pytest does: tear everything down
            nextitem = None
        if self._phase(item, ihook.pytest_runtest_teardown, "error", nextitem=nextitem) == "error":
            outcome = "error"
        item._request, item.funcargs = False, None  # let the fixtures' values go
        entry = self.collector.tests[item.nodeid]
        entry["outcome"], entry["duration"] = outcome, time.perf_counter() - started
        if outcome in ("failed", "error"):
            session.testsfailed += 1  # pytest's exit status: 1 when a test failed
        self.collector.pytest_runtest_logfinish(item.nodeid)
        return True

    def _phase(self, item, hook, failure: str, **kwargs) -> str | None:
        """None if the phase went through, else the test's outcome."""
        try:
            hook(item=item, **kwargs)
        except (pytest.exit.Exception, KeyboardInterrupt):
            raise
        except pytest.skip.Exception as exc:
            entry = self.collector.tests[item.nodeid]
            entry["message"] = entry["message"] or f"Skipped: {exc.msg}"
            return "skipped"
        except BaseException as exc:  # noqa: BLE001 - as pytest: a test may raise anything
            self.collector.record_failure(item.nodeid, exc)
            return failure
        return None


# ---------------------------------------------------------------- as a -p plugin


def pytest_addoption(parser):
    parser.addoption("--collect-file", metavar="PATH",
                     help="write each test's verdict to PATH as JSON")  # fmt: skip
    parser.addoption("--outcomes-only", action="store_true",
                     help="with --collect-file: keep each test's verdict, not its report")  # fmt: skip


def pytest_configure(config):
    if config.getoption("--collect-file"):
        config._grpo_collector = Collector()
        config.pluginmanager.register(config._grpo_collector, "grpo-collector")
        if config.getoption("--outcomes-only"):
            config.pluginmanager.register(OutcomesOnly(config._grpo_collector), "grpo-outcomes")


def pytest_sessionfinish(session, exitstatus):
    collector = getattr(session.config, "_grpo_collector", None)
    if collector is not None:
        collector.exit_code = int(exitstatus)


def pytest_unconfigure(config):
    collector = getattr(config, "_grpo_collector", None)
    if collector is not None:
        path = Path(config.getoption("--collect-file"))
        body = {"exit_code": getattr(collector, "exit_code", None),
                "tests": list(collector.tests.values()), "errors": collector.errors,
                "interrupted_at": collector.interrupted_at}  # fmt: skip
        path.write_text(json.dumps(body), encoding="utf-8")
