"""Run a problem's hidden tests on code the page posts, sandboxed as `grpo-kit grade` runs them.

The browser cannot run PyTorch, so on a page served by `grpo-kit serve` the PyTorch problems
send the learner's code to the server (``grader/serve.py``), which calls `LocalRuns.run`. The
code is written as ``<slug>.py`` into a temporary folder and pytest runs the problem's unchanged
tests with ``--impl sandbox:<folder>`` and the collector: what the batch grader does for one
student. The answer has the shape the browser's worker gives (``grader/webrun.py``), so the page
shows both the same way.

Stop: pytest gets SIGINT and reports the tests done so far (and which one was running); if it
has not ended after a grace period, its process group is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

from grader import feedback
from grader.batch import pytest_command
from grader.collect import capped_log
from grader.problems import KIT_ROOT, Problem
from grader.sandbox.forkserver import STARTUP_GRACE_S
from grader.sandbox.submission import limits_for

STOP_GRACE_S = 5.0


class RunBusy(RuntimeError):
    """A run is already in progress: this server runs one at a time."""


class LocalRuns:
    """The runs of one server: at most one at a time, each stoppable by its id."""

    def __init__(self):
        self._lock = threading.Lock()
        self._current: tuple[str, subprocess.Popen] | None = None
        self._stopping = False

    def run(self, problem: Problem, code: str, run_id: str) -> dict:
        """``{"type": "result", "result": report}``, or ``{"type": "stopped"}`` when a Stop
        left no report. Raises RunBusy while another run is in progress."""
        with tempfile.TemporaryDirectory(prefix="grpo-kit-run-") as tmp:
            folder = Path(tmp) / "submission"
            folder.mkdir()
            (folder / f"{problem.slug}.py").write_text(code, encoding="utf-8")
            collected = Path(tmp) / "collected.json"
            limits, _ = limits_for(problem)
            with self._lock:
                if self._current is not None:
                    raise RunBusy("another run is in progress (in another tab?): wait for it")
                process = subprocess.Popen(
                    pytest_command([problem], [folder], collected),
                    cwd=KIT_ROOT,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
                    start_new_session=True,  # a Stop signals pytest alone, not this server
                )
                self._current, self._stopping = (run_id, process), False
            try:
                log, _ = process.communicate(timeout=STARTUP_GRACE_S + limits.total_s + 60)
            except subprocess.TimeoutExpired:
                _kill(process)
                log, _ = process.communicate()
            finally:
                with self._lock:
                    stopped, self._current = self._stopping, None
            if not collected.is_file():
                if stopped:
                    return {"type": "stopped"}
                tail = (log or "")[-4000:]
                return {"type": "error", "message": f"pytest gave no report:\n{tail}"}
            report = json.loads(collected.read_text(encoding="utf-8"))
        report["interrupted"] = stopped or report.get("exit_code") == 2
        report["log"] = capped_log(log or "") if not report["tests"] else ""
        return {"type": "result", "result": feedback.annotate(report, code, problem.implement)}

    def stop(self, run_id: str) -> bool:
        """Stop the run `run_id`; False if it is not the one running."""
        with self._lock:
            if self._current is None or self._current[0] != run_id:
                return False
            process = self._current[1]
            self._stopping = True
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGINT)  # pytest ends the session and reports
        fallback = threading.Timer(STOP_GRACE_S, _kill, [process])  # it ignored the SIGINT
        fallback.daemon = True
        fallback.start()
        return True


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
