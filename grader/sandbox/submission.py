"""The ``sandbox:<path>`` implementation: a submission's functions run in a sandboxed process.

`sandboxed_runner` is what ``--impl sandbox:<path>`` loads (``grader/loader.py``): a `Runner`
whose requests go to a process forked for this student and problem (``forkserver.py``), started
at the first request and ended when the problem's tests are done. Only plain data crosses, in
both directions: the tests' arguments go as data, and the replies are decoded with limits by
the same code as in a local run (``grader/execution.py``). Whatever goes wrong is the
submission's fault (SubmissionError: a timeout, a crash, malformed or too much data), unless
the sandbox itself did not start (GraderError: not a grade; the batch grader tries again).

``<path>`` is a file, or a folder holding ``<slug>.py`` (so one pytest run grades many
problems). The batch grader marks a file it rejected with ``<slug>.py.rejected`` beside it,
holding the reason: every test of that problem then fails with it.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import signal
import time
from pathlib import Path

from grader.errors import SubmissionError, TimeLimitError
from grader.loader import Limits, Runner
from grader.problems import REFERENCE_DIR, Problem, ProblemSpecError, all_problems, load_problem
from grader.sandbox import frames
from grader.sandbox.forkserver import SERVERS, ForkServer, Key, StudentProcess
from grader.sandbox.limits import SandboxLimits
from grader.sources import check_source, reference_modules
from grader.submissions import REJECTED_SUFFIX

LIMITS_ENV = "GRPO_KIT_SANDBOX_LIMITS"  # JSON of call_s, total_s, memory_mb: the batch's options
MAX_BYTES = 512 * 1024 * 1024  # all the replies of one submission together
OUTPUT_TAIL = 2000


def _reference_imports(path: Path) -> frozenset[str]:
    """The reference modules a file imports (``from reference.x import ...``)."""
    return reference_modules(ast.parse(path.read_text(encoding="utf-8")))


def visible_reference(problem: Problem) -> tuple[str, ...]:
    """What the problem builds on, what its probes import, and what those import in turn."""
    wanted = set(problem.builds_on)
    if problem.probes.is_file():
        wanted |= _reference_imports(problem.probes)
    seen: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name not in seen:
            seen.add(name)
            wanted |= _reference_imports(REFERENCE_DIR / f"{name}.py") - seen
    if problem.slug in seen:
        raise ProblemSpecError(f"{problem.slug}: its sandbox would show its own reference solution")
    return tuple(sorted(seen))


def exposed_solutions(problems: list[Problem]) -> dict[str, list[str]]:
    """slug -> the other problems of `problems` whose reference solution its sandbox shows.

    A capstone's sandbox shows the reference modules it builds on, source and all: a
    submission can read them and print them into its own feedback. Graded beside those
    problems (one course, one Gradescope assignment) it hands their solutions out, which
    `grpo-kit release` refuses for the same pair of problems.
    """
    slugs = {p.slug for p in problems}
    found = {}
    for problem in problems:
        shown = sorted((set(visible_reference(problem)) & slugs) - {problem.slug})
        if shown:
            found[problem.slug] = shown
    return found


def exposure_message(exposed: dict[str, list[str]], slugs: list[str]) -> str:
    """What is exposed, and the two runs that keep the problems apart."""
    pairs = "; ".join(f"{user} shows {', '.join(shown)}" for user, shown in exposed.items())
    others = [slug for slug in slugs if slug not in exposed]
    return (
        f"the sandboxes of some problems show the reference solutions of others graded with "
        f"them ({pairs}): a submission can read those solutions and print them into its "
        f"feedback. Grade them apart: now --problems {' '.join(others)}, and once those are "
        f"closed --problems {' '.join(exposed)}"
    )


def key_for(problem: Problem) -> Key:
    """Problems with the same runtime and no reference to show share a fork server."""
    return _key_for(problem.dir)


@functools.cache
def _key_for(problem_dir: Path) -> Key:
    problem = load_problem(problem_dir)
    torch = problem.runtime == "python"
    reference = visible_reference(problem)
    if reference:
        return Key(torch, (str(problem.probes),) if problem.probes.is_file() else (), reference)
    peers = [p for p in all_problems(problem.dir.parent) if p.runtime == problem.runtime]
    probes = tuple(str(p.probes) for p in peers if p.probes.is_file() and not visible_reference(p))
    return Key(torch, probes)


def warm_up(problem_dirs: list[Path]) -> None:
    """Start the fork servers of these problems' sandboxes now (see `Servers.warm`)."""
    for problem_dir in problem_dirs:
        if (problem_dir / "problem.toml").is_file():
            SERVERS.warm(_key_for(problem_dir.resolve()))


def limits_for(problem: Problem, options: dict | None = None) -> tuple[Limits, SandboxLimits]:
    """The problem's limits, changed by the batch grader's `options` (by default, those it
    passed to this process in the environment)."""
    if options is None:
        options = json.loads(os.environ.get(LIMITS_ENV, "{}"))
    call_s = options.get("call_s") or problem.time_limit_s
    total_s = options.get("total_s") or Limits.of(problem).total_s * call_s / problem.time_limit_s
    memory_mb = options.get("memory_mb") or SandboxLimits.memory_mb
    return Limits(float(call_s), float(total_s)), SandboxLimits(memory_mb=int(memory_mb))


def _ending(ending: dict, filename: str, limits: SandboxLimits) -> str:
    if ending.get("killed"):  # still running when its pipe closed: it closed the pipe itself
        return f"{filename} stopped answering (it closed its pipe to the grader)"
    if ending.get("out_of_memory"):
        return (f"{filename} ran out of memory: its processes together held more than its "
                f"{limits.memory_mb} MiB, files in memory included")  # fmt: skip
    number = ending.get("signal")
    if number == signal.SIGXCPU:
        return f"{filename} crashed: CPU time limit exceeded"
    if number == signal.SIGKILL:
        return f"{filename} crashed: killed by SIGKILL (memory limit of {limits.memory_mb} MiB?)"
    if number is not None:
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"{filename} crashed: killed by {name}"
    code = ending.get("exited")
    return f"{filename} exited with status {code} (never call sys.exit, os._exit or quit)"


class SandboxRunner(Runner):
    """One student's file of one problem, run in a sandboxed process of its own."""

    def __init__(self, problem: Problem, source: str | None, reason: str | None):
        limits, self.sandbox_limits = limits_for(problem)
        super().__init__(f"{problem.slug}.py", limits)
        self.problem, self.source, self.reason = problem, source, reason
        self.server: ForkServer | None = None
        self.process: StudentProcess | None = None

    def _fail(self, reason: str, kind: type[SubmissionError] = SubmissionError) -> SubmissionError:
        """End the process; every later request fails with `reason` and what it printed."""
        printed = self.process.reader.printed().strip() if self.process else ""
        if printed:
            reason += f"\n--- its output ---\n{printed[-OUTPUT_TAIL:]}"
        self.reason = reason
        self.close()
        return kind(reason)

    def _talk(self, message: dict, allowance: float, late: str) -> dict:
        # Its time is charged by Runner._send, around the whole exchange (import included).
        try:
            reply = self.process.exchange(message, time.monotonic() + max(0.0, allowance))
        except frames.Late:
            raise self._fail(late, TimeLimitError) from None
        except frames.Closed:  # it died (give it a moment to be gone), or closed its pipe
            ending = self.process.end(wait_s=1.0)
            raise self._fail(_ending(ending, self.filename, self.sandbox_limits)) from None
        except (frames.FrameError, ValueError) as exc:
            raise self._fail(f"{self.filename} sent malformed data ({exc})") from None
        if self.process.reader.bytes_read > MAX_BYTES:
            raise self._fail(f"{self.filename} sent more than {MAX_BYTES >> 20} MiB of results")
        return reply

    def _start(self) -> None:
        """A fresh process with the submission imported (importing is the student's time)."""
        started = time.monotonic()
        self.server = SERVERS.acquire(key_for(self.problem))  # GraderError if it cannot start
        self.process = self.server.fork(self.sandbox_limits)
        # Runner._send charges the whole exchange: starting a sandbox (importing torch, maybe)
        # is the grader's time, not the student's.
        self.used_s -= time.monotonic() - started
        probes = self.problem.probes
        load = {"op": "load", "slug": self.problem.slug, "filename": self.filename,
                "source": self.source, "names": list(self.problem.implement),
                "probes": str(probes) if probes.is_file() else None}  # fmt: skip
        allowance = min(self.limits.call_s, self.limits.total_s - self.used_s)
        late = f"{self.filename} timed out while being imported (after {allowance:g} s)"
        reply = self._talk(load, allowance, late)
        if reply.get("loaded") is not True:
            raise self._fail(str(reply.get("failed") or "it did not load")[:2000])

    def exchange(self, request: dict, allowance: float, late: str):
        if self.reason is not None:
            raise SubmissionError(self.reason)
        if self.process is None:
            self._start()
        return self._talk(request, allowance, late), None

    def close(self) -> None:
        if self.process is not None:
            self.process.end()
            self.process = None
        if self.server is not None:
            SERVERS.release(self.server)
            self.server = None


def sandboxed_runner(problem: Problem, spec: str) -> SandboxRunner:
    """The runner for ``--impl sandbox:<spec>`` (see the module docstring)."""
    path = Path(spec)
    if path.is_dir():
        path = path / f"{problem.slug}.py"
    rejected = path.with_name(path.name + REJECTED_SUFFIX)
    if rejected.is_file():
        return SandboxRunner(problem, None, rejected.read_text(encoding="utf-8").strip())
    if not path.is_file():
        return SandboxRunner(problem, None, f"no {problem.slug}.py was submitted")
    data = path.read_bytes()
    reason = check_source(problem.slug, data, problem.builds_on)
    return SandboxRunner(problem, None if reason else data.decode("utf-8"), reason)
