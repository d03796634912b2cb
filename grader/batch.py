"""Grade many students at once: slices, chunks, trusted pytest runs, resume.

Students are split into chunks. Each chunk is graded by ONE trusted pytest process running the
problems' unchanged hidden tests with one ``--impl sandbox:<folder>`` per student, so pytest
starts once per chunk instead of once per student and problem. Every student's code runs in a
sandboxed process of its own (see ``grader/sandbox``); each collected test names the
implementation it ran, which is how the run's results are split back into one per student.

The pytest runs are the grader's children in process groups of their own: Ctrl-C reaches the
grader alone, which then ends them all (`PytestRuns`), and they die with it if it is killed.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from grader.errors import GraderError, SubmissionError, TimeLimitError, type_name
from grader.problems import KIT_ROOT, Problem
from grader.reports import StudentResult
from grader.runner import test_name
from grader.sandbox.bwrap import die_with_parent
from grader.sandbox.forkserver import STARTUP_GRACE_S
from grader.sandbox.submission import LIMITS_ENV, limits_for
from grader.submissions import Submission, stage

MAX_CHUNK = 50
MAX_MESSAGE = 2000  # characters of a failed test's message kept in results.json
# pytest options that make a run cheaper without changing any verdict. The benchmark gives them
# to its baseline as well, so that the ratio it reports measures the batching alone.
PYTEST_SPEEDUPS = (
    "-q",
    "-p", "no:cacheprovider",
    # The hidden tests need neither hypothesis's pytest plugin (~1 s to import), anyio's, nor
    # captured log records.
    "-p", "no:hypothesispytest", "-p", "no:anyio", "-p", "no:logging",
    # pytest's failure summary pairs each failure with every report (quadratic in the batch);
    # the collector keeps the message students see.
    "-rN",
)  # fmt: skip


GRADER_ERROR = type_name(GraderError)
TIME_LIMIT_ERROR = type_name(TimeLimitError)
SUBMISSION_ERRORS = (type_name(SubmissionError), TIME_LIMIT_ERROR)


@dataclass(frozen=True)
class BatchOptions:
    problems: list[Problem]
    workers: int = max(1, os.cpu_count() or 1)
    chunk_size: int | None = None  # students per pytest run; None picks one from the class size
    limits: dict = field(default_factory=dict)  # Limits fields that override each problem's own


def parse_shard(text: str) -> tuple[int, int]:
    """'K/N' -> (K, N), 1 <= K <= N."""
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise ValueError(f"--shard must look like K/N (e.g. 2/4), not {text!r}") from None
    if not 1 <= k <= n:
        raise ValueError(f"--shard {text}: K must be between 1 and N")
    return k, n


def shard(items: list[Submission], k: int, n: int) -> list[Submission]:
    """The K-th of N slices, by position in the sorted class list (stable across machines)."""
    ordered = sorted(items, key=lambda s: s.student)
    return ordered[k - 1 :: n]


def chunks(items: list, options: BatchOptions) -> list[list]:
    # Two chunks per worker: each run starts pytest and collects the tests once (a tenth of a
    # 25-student run), and a worker done early still finds a chunk to take.
    size = options.chunk_size or max(1, min(MAX_CHUNK, -(-len(items) // (2 * options.workers))))
    return [items[i : i + size] for i in range(0, len(items), size)]


def _run_timeout(count: int, options: BatchOptions) -> float:
    per_student = sum(limits_for(p, options.limits)[0].total_s + 1 for p in options.problems)
    return 120.0 + STARTUP_GRACE_S + count * per_student


def pytest_command(problems: list[Problem], folders: list[Path], collected: Path) -> list[str]:
    """One trusted pytest run of `problems`' hidden tests, each student's folder sandboxed,
    the outcomes collected into `collected`."""
    command = [sys.executable, "-m", "pytest", *(str(p.dir) for p in problems)]
    command += ["--rootdir", str(KIT_ROOT), *PYTEST_SPEEDUPS, "--no-header"]
    # Only verdicts are kept (a sandboxed solution prints into its own pipe): no capture, no
    # report per phase of each test.
    command += ["-p", "grader.collect", f"--collect-file={collected}", "--outcomes-only", "-s"]
    return command + [f"--impl=sandbox:{folder}" for folder in folders]


def split_collected(collected: dict, specs: list[str]) -> dict[str, dict[str, list[dict]]]:
    """spec -> slug -> the collected tests of that student and problem.

    With one student pytest adds no parameter, so every test is that student's.
    """
    split: dict[str, dict[str, list[dict]]] = {spec: {} for spec in specs}
    for test in collected.get("tests", []):
        owner = test.get("impl") if len(specs) > 1 else specs[0]
        if owner in split:
            slug = Path(test["id"].split("::", 1)[0]).parent.name
            split[owner].setdefault(slug, []).append(test)
    return split


def _student_report(problem: Problem, tests: list[dict], names: list[str], sandbox: str) -> dict:
    """The record of one student's problem: each test under its own name (no implementation
    parameter), with the message the student reads."""
    summary: dict[str, int] = {}
    for test in tests:
        summary[test["outcome"]] = summary.get(test["outcome"], 0) + 1
    keep = ("name", "outcome", "message", "error_type", "duration", "stdout", "stdout_cut")
    return {"problem": problem.slug, "sandbox": sandbox, "summary": summary | {"total": len(tests)},
            "duration": sum(t["duration"] for t in tests),
            "tests": [{k: t[k] for k in keep} | {"test": name, "output": _student_message(t)}
                      for t, name in zip(tests, names, strict=True)]}  # fmt: skip


def results_from_collected(
    collected: dict, students: list[Submission], specs: list[str], options: BatchOptions,
    sandbox: str,
) -> list[StudentResult | str]:  # fmt: skip
    """A StudentResult per student, or for a student whose sandbox would not start, the text
    "<student>: could not be graded: <reason>" (the grader's failure: not to be saved)."""
    split = split_collected(collected, specs)
    results: list[StudentResult | str] = []
    for submission, spec in zip(students, specs, strict=True):
        result = StudentResult(submission.student)
        errors = [t["message"] for tests in split[spec].values() for t in tests
                  if t["error_type"] == GRADER_ERROR]  # fmt: skip
        if errors:
            reason = errors[0].split(": ", 1)[-1]
            results.append(f"{submission.student}: could not be graded: {reason}")
            continue
        for problem in options.problems:
            tests = split[spec].get(problem.slug, [])
            if not tests:
                raise RuntimeError(f"no test of {problem.slug} ran for {submission.student}")
            names = [test_name(t, specs) for t in tests]
            result.reports[problem.slug] = _student_report(problem, tests, names, sandbox)
        results.append(result)
    return results


def _student_message(test: dict) -> str:
    """What a student reads for a failed test: the assertion, or what went wrong."""
    if test["outcome"] == "passed":
        return ""
    message = str(test["message"])
    if test["error_type"] in SUBMISSION_ERRORS:  # the message says it all
        message = message.removeprefix("SubmissionError: ").removeprefix("TimeLimitError: ")
    return message[:MAX_MESSAGE]


class Stopped(Exception):
    """The batch is being stopped (Ctrl-C): this chunk's results are to be dropped."""


def _usable_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


class PytestRuns:
    """The trusted pytest runs under way, so that a stop can end them all at once.

    With no more workers than cores, each worker's runs (and the sandboxes they start, which
    inherit it) keep to a core of their own. A test and the student's process take turns
    hundreds of times per student; on one core a turn is a switch, across cores a wake-up of
    the other core that costs about three times as much.
    """

    def __init__(self, workers: int = 1):
        self._lock = threading.Lock()
        self._running: set[subprocess.Popen] = set()
        self.stopping = False
        cpus = _usable_cpus()
        self._cpus = cpus if 1 < workers <= len(cpus) else []
        self._slots = itertools.count()
        self._worker = threading.local()

    def _preexec(self) -> Callable[[], None] | None:
        die = die_with_parent()
        if not self._cpus:
            return die
        if not hasattr(self._worker, "cpu"):  # each pool thread is a worker, for its life
            self._worker.cpu = self._cpus[next(self._slots) % len(self._cpus)]
        cpu = self._worker.cpu

        def preexec() -> None:
            os.sched_setaffinity(0, {cpu})
            if die is not None:
                die()

        return preexec

    def run(self, command: list[str], env: dict, timeout: float) -> tuple[int, str]:
        """Run pytest; its exit status and output. Stopped if the batch stops meanwhile."""
        with self._lock:
            if self.stopping:
                raise Stopped
            process = subprocess.Popen(
                command, cwd=KIT_ROOT, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                process_group=0,  # out of the terminal's Ctrl-C: the grader decides
                preexec_fn=self._preexec(),  # gone if the grader is killed; on its core
            )  # fmt: skip
            self._running.add(process)
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            process.communicate()
            raise
        finally:
            with self._lock:
                self._running.discard(process)
        if self.stopping:
            raise Stopped
        return process.returncode, output.decode(errors="replace")

    def stop(self) -> None:
        """Start no more runs, and kill those under way."""
        with self._lock:
            self.stopping = True
            for process in self._running:
                _kill_group(process)


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def grade_chunk(students: list[Submission], options: BatchOptions, sandbox: str,
                runs: PytestRuns) -> list:  # fmt: skip
    """Grade `students` in one trusted pytest run; if that run fails, grade them one by one.

    Returns StudentResults, and for a student who cannot be graded at all, the error text.
    """
    with tempfile.TemporaryDirectory(prefix="grpo-kit-grade-") as work:
        work = Path(work)
        folders = [stage(s, work / f"s{i}") for i, s in enumerate(students)]
        specs = [f"sandbox:{folder}" for folder in folders]
        collected_path = work / "collected.json"
        env = dict(os.environ, **{LIMITS_ENV: json.dumps(options.limits)})
        command = pytest_command(options.problems, folders, collected_path)
        try:
            code, output = runs.run(command, env, _run_timeout(len(students), options))
            collected = json.loads(collected_path.read_text(encoding="utf-8"))
            if code not in (0, 1) or collected.get("errors"):  # 1 = some tests failed
                raise RuntimeError(output[-2000:])
            return results_from_collected(collected, students, specs, options, sandbox)
        except (subprocess.TimeoutExpired, OSError, ValueError, RuntimeError, KeyError) as exc:
            if len(students) > 1:
                return [r for s in students for r in grade_chunk([s], options, sandbox, runs)]
            return [f"{students[0].student}: could not be graded: the trusted pytest run failed "
                    f"({type(exc).__name__}: {exc})"]  # fmt: skip


def timed_out(result: StudentResult | str) -> bool:
    """Whether a test of this student's failed on a time limit."""
    return isinstance(result, StudentResult) and any(
        test["error_type"] == TIME_LIMIT_ERROR
        for report in result.reports.values()
        for test in report["tests"]
    )


def grade_all(
    students: list[Submission], options: BatchOptions, sandbox: str,
    on_done: Callable[[list], None],
) -> None:  # fmt: skip
    """Grade every student, `options.workers` pytest runs at a time; `on_done` per chunk.

    Time limits are wall-clock time, and a student's processes can take CPU from another's
    (widening their CPU affinity, say). With several workers, students who ran out of time
    are therefore graded again once the rest are done, one pytest run at a time (a run grades
    its students one after another), and that grade counts.

    On KeyboardInterrupt the chunks not started are cancelled and the pytest runs under way
    killed (their students are graded by the next run); chunks already finished are handed to
    `on_done` first, then the KeyboardInterrupt goes on.
    """
    runs = PytestRuns(options.workers)
    pool = ThreadPoolExecutor(max_workers=options.workers)
    futures = [
        pool.submit(grade_chunk, c, options, sandbox, runs) for c in chunks(students, options)
    ]
    by_name = {s.student: s for s in students}
    again: list[Submission] = []
    handed: set = set()

    beside = options.workers > 1 and len(futures) > 1  # could a run have had another beside it?

    def hand(results: list) -> None:
        kept = []
        for result in results:
            if beside and timed_out(result):
                again.append(by_name[result.student])
            else:
                kept.append(result)
        on_done(kept)

    try:
        for future in as_completed(futures):
            handed.add(future)
            hand(future.result())
        if again:
            who = "1 student" if len(again) == 1 else f"{len(again)} students"
            print(f"\ngrading {who} again, alone: out of time while others were graded beside",
                  file=sys.stderr)  # fmt: skip
        for chunk in chunks(again, options):  # one pytest run at a time: nothing else runs
            results = grade_chunk(chunk, options, sandbox, runs)
            for result in results:
                if isinstance(result, StudentResult):
                    for report in result.reports.values():  # said in the student's results
                        report["graded_alone"] = True
            on_done(results)
    except BaseException as exc:
        runs.stop()
        pool.shutdown(wait=True, cancel_futures=True)
        for future in futures if isinstance(exc, KeyboardInterrupt) else []:
            # Finished while we were stopping: keep them.
            if future not in handed and not future.cancelled() and future.exception() is None:
                handed.add(future)
                hand(future.result())
        raise
    finally:
        pool.shutdown(wait=True)
