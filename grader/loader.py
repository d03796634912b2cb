"""The one seam between a problem's tests and the code under test.

Tests never import a solution. They receive an ``impl`` fixture (``problems/conftest.py``), an
`Implementation` with the functions the problem asks for and the problem's probes::

    impl.grpo_objective(rhos, A, p_old, p_ref)          plain values in, a plain value out
    impl.grpo_objective.observe(rhos, A, p_old, p_ref)  the same, and the arguments as the
                                                        call left them (did it change them?)
    impl.masked_token_loss.each([kwargs, ...])          many calls in one request (a loop's)
    impl.probe.loss_and_grads(case)                     a probe: kit code in
                                                        problems/<slug>/probes.py, given the
                                                        solution's functions, returns plain data

Every argument and every result is copied as plain data (``grader/values.py``) and every
request is served by ``grader/execution.py``, wherever the solution runs, so the tests give the
same verdicts in each place. ``--impl`` picks the implementation:

    starter           the learner's file, problems/<slug>/<slug>.py (the default)
    reference         the reference solution, reference/<slug>.py
    mistake:<id>      a wrong solution from the problem's catalogue (.meta/mistakes.toml)
    sandbox:<path>    a file run in a sandboxed child process (batch grading)
    <path>            any Python file

All but ``sandbox:`` run in this process, with the grader's time limit per call. Standard
library and numpy only, so that the same tests run unchanged in CPython and in Pyodide.
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from grader import values
from grader.errors import SubmissionError, TimeLimitError, timeout_message
from grader.execution import (
    Session,
    decode_for,
    import_failure,
    load_file,
    load_source,
    preimport,
    read_reply,
    solution_namespace,
)
from grader.problems import Problem, load_problem
from grader.sources import check_source

# Schemes whose loaders live elsewhere, imported only when used.
SCHEMES = {
    "mistake": "grader.mistakes:load_mistake",
    "sandbox": "grader.sandbox.submission:sandboxed_runner",
}
TOTAL_TIME_FACTOR = 6  # all calls of one solution together: this many times the per-call limit
MAX_TOTAL_ELEMENTS = 64 * values.MAX_ELEMENTS  # all the values one solution sends back
_test_number = 0


class ImplementationSpecError(Exception):
    """The --impl value names nothing that exists (a missing file, an unknown mistake)."""


def next_test() -> None:
    """Called as each test starts: a solution's side reseeds its generators on a new test."""
    global _test_number
    _test_number += 1


@dataclass(frozen=True)
class Limits:
    """Wall-clock seconds one solution may use: per call, and for all its calls together."""

    call_s: float
    total_s: float

    @classmethod
    def of(cls, problem: Problem) -> Limits:
        return cls(problem.time_limit_s, TOTAL_TIME_FACTOR * problem.time_limit_s)


@dataclass
class Observation:
    """One call, observed: its result (or the exception it raised) and its arguments after."""

    value: object
    error: Exception | None
    args: list
    kwargs: dict


class Runner:
    """Turns the tests' calls into requests and the replies into values, under time limits.

    Subclasses say how a request reaches the solution (`exchange`): in this process, or
    through a sandboxed child's pipe.
    """

    def __init__(self, filename: str, limits: Limits):
        self.filename, self.limits = filename, limits
        self.used_s = 0.0
        self.budget = values.Budget(MAX_TOTAL_ELEMENTS)

    def exchange(
        self, request: dict, allowance: float, late: str
    ) -> tuple[dict, BaseException | None]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the runner holds (a sandboxed child)."""

    def _send(self, op: str, name: str, args: tuple, kwargs: dict, observe: bool = False):
        request = {"op": op, "name": name, "args": values.encode(list(args)),
                   "kwargs": values.encode(dict(kwargs)), "observe": observe}  # fmt: skip
        return self._exchange(request)

    def _exchange(self, request: dict, calls: int = 1):
        """Send `request` (`calls` calls: each has the time limit of one) within the limits."""
        request["test"] = _test_number
        left = self.limits.total_s - self.used_s
        if calls * self.limits.call_s <= left:
            allowance = calls * self.limits.call_s
            late = timeout_message(self.filename, allowance)
            if calls > 1:
                late += f" (its {calls} calls together, {self.limits.call_s:g} s each)"
        else:
            allowance = max(0.0, left)
            late = f"{self.filename} exceeded its total time limit of {self.limits.total_s:g} s"
        started = time.monotonic()
        try:
            return self.exchange(request, allowance, late)
        finally:
            self.used_s += time.monotonic() - started

    def call(self, name: str, args: tuple, kwargs: dict):
        reply, raised = self._send("call", name, args, kwargs)
        return read_reply(reply, name, self._call_budget(), raised)

    def observe(self, name: str, args: tuple, kwargs: dict) -> Observation:
        reply, raised = self._send("call", name, args, kwargs, observe=True)
        budget = self._call_budget()
        try:
            value, error = read_reply(reply, name, budget, raised), None
        except SubmissionError:
            raise
        except Exception as exc:  # noqa: BLE001 - the solution's own exception, as the test sees it
            value, error = None, exc
        after = decode_for([reply.get("args"), reply.get("kwargs")], name, budget)
        args_after, kwargs_after = after
        if type(args_after) is not list or type(kwargs_after) is not dict:
            raise SubmissionError(f"{self.filename} sent a malformed reply")
        return Observation(value, error, args_after, kwargs_after)

    def each(self, name: str, calls: list[dict]) -> Iterator:
        """The values of `calls` (see `Function.each`), all made in one request now; the
        first exception raised is raised where its value would come."""
        if not calls:
            return iter(())
        request = {"op": "calls", "name": name,
                   "calls": [values.encode(dict(kwargs)) for kwargs in calls]}  # fmt: skip
        reply, raised = self._exchange(request, len(calls))
        if type(reply) is dict and ("error" in reply or "unsupported" in reply):
            replies = [reply]  # the request as a whole failed: the solution has no such name
        else:
            replies = reply.get("replies") if type(reply) is dict else None
        if (
            type(replies) is not list
            or not 0 < len(replies) <= len(calls)
            or not all(type(one) is dict for one in replies)
            or any("value" not in one for one in replies[:-1])  # it goes on after an exception
            or (len(replies) < len(calls) and "value" in replies[-1])  # it stops with no reason
        ):
            raise SubmissionError(f"{self.filename} sent a malformed reply")
        return self._values(name, replies, raised)

    def _values(self, name: str, replies: list[dict], raised: BaseException | None) -> Iterator:
        for one in replies:
            yield read_reply(one, name, self._call_budget(), raised if one is replies[-1] else None)

    def probe(self, name: str, args: tuple, kwargs: dict):
        reply, raised = self._send("probe", name, args, kwargs)
        return read_reply(reply, name, self._call_budget(), raised)

    def _call_budget(self) -> values.Budget:
        return values.Budget(values.MAX_ELEMENTS, parent=self.budget)


class _Timeout(BaseException):
    """Raised in the solution's code by the alarm; not an Exception, so `except Exception`
    in a solution cannot swallow it."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Interrupt the code run inside after `seconds`, where signals allow (not in a browser:
    the page's Stop button does it there)."""
    usable = (
        hasattr(signal, "setitimer")
        and sys.platform != "emscripten"
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def on_alarm(signum, frame):
        raise _Timeout

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1e-3))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class LocalRunner(Runner):
    """A solution run in this process: the learner's file, the reference or a mistake."""

    def __init__(self, problem: Problem, module: ModuleType | None, filename: str,
                 reason: str | None = None, cause: BaseException | None = None):  # fmt: skip
        super().__init__(filename, Limits.of(problem))
        # `cause`: what the file raised while being imported; chained to each failure, so the
        # learner's line that raised it can be shown.
        self.reason, self.cause = reason, cause
        solution = solution_namespace(module, problem.implement, filename) if module else None
        self.session = Session(solution, load_probes(problem), (KeyboardInterrupt, _Timeout))

    def exchange(self, request: dict, allowance: float, late: str):
        if self.reason is not None:
            raise SubmissionError(self.reason) from self.cause
        started = time.monotonic()
        try:
            with time_limit(allowance):
                reply = self.session.execute(request)
        except _Timeout:
            raise TimeLimitError(late) from None
        if time.monotonic() - started > allowance + 0.5:  # the solution caught the alarm
            raise TimeLimitError(late)
        return reply


def load_probes(problem: Problem) -> ModuleType | None:
    """The problem's probes module, run from its file (kit code, never the solution's)."""
    return load_file(problem.probes, f"probes_{problem.slug}") if problem.probes.is_file() else None


class Implementation:
    """What a test's `impl` is: the problem's functions and its probes (see the docstring)."""

    def __init__(self, names: tuple[str, ...], runner: Runner):
        self._runner = runner
        for name in names:
            setattr(self, name, Function(runner, name))
        self.probe = Probes(runner)

    def close(self) -> None:
        self._runner.close()


class Function:
    """One function of the solution: call it, or `observe` a call."""

    def __init__(self, runner: Runner, name: str):
        self._runner, self.__name__ = runner, name

    def __call__(self, *args, **kwargs):
        return self._runner.call(self.__name__, args, kwargs)

    def observe(self, *args, **kwargs) -> Observation:
        return self._runner.observe(self.__name__, args, kwargs)

    def each(self, calls: list[dict], **shared) -> Iterator:
        """Many calls in one request: ``each([{"x": 1}, {"x": 2}], y=0)`` is
        ``iter([f(x=1, y=0), f(x=2, y=0)])``, with the time limit of that many calls. A call that
        raises ends it there, and its exception is raised when its value would be reached, so
        a test checks the values before it first, as it would have with calls one by one."""
        return self._runner.each(self.__name__, [shared | call for call in calls])

    def __repr__(self) -> str:
        return f"<{self.__name__} of {self._runner.filename}>"


class Probes:
    """``impl.probe.<name>(...)`` runs ``probes.<name>(solution, ...)`` beside the solution."""

    def __init__(self, runner: Runner):
        self._runner = runner

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self._runner.probe(name, args, kwargs)


def _local(problem: Problem, spec: str) -> LocalRunner:
    filename = f"{problem.slug}.py"
    if spec == "reference":
        kit_root = str(problem.dir.parent.parent)
        if kit_root not in sys.path:
            sys.path.insert(0, kit_root)
        module = importlib.import_module(f"reference.{problem.slug}")
        return LocalRunner(problem, module, f"reference/{filename}")
    path = problem.stub if spec == "starter" else Path(spec)
    if not path.is_file():
        raise ImplementationSpecError(f"no such file: {path}")
    data = path.read_bytes()
    reason = check_source(problem.slug, data, problem.builds_on)
    if reason is not None:
        return LocalRunner(problem, None, filename, reason)
    # Importing is the solution's time, as in the sandbox: within one call's limit.
    preimport(torch=problem.runtime == "python")
    seconds = Limits.of(problem).call_s
    try:
        with time_limit(seconds):
            module = load_source(data.decode("utf-8"), f"solution_{problem.slug}", str(path))
    except _Timeout:
        reason = f"{filename} timed out while being imported (after {seconds:g} s)"
        return LocalRunner(problem, None, filename, reason)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a solution may raise anything
        return LocalRunner(problem, None, filename, import_failure(exc, filename), exc)
    return LocalRunner(problem, module, filename)


def load_implementation(problem_dir: Path, spec: str = "starter") -> Implementation:
    """The implementation `spec` of the problem in `problem_dir` (see the module docstring).

    Never raises for a broken implementation: its calls fail with the reason instead.
    """
    problem = load_problem(Path(problem_dir), whole=False)
    scheme, _, rest = spec.partition(":")
    if rest and scheme in SCHEMES:
        module_name, _, function_name = SCHEMES[scheme].partition(":")
        runner = getattr(importlib.import_module(module_name), function_name)(problem, rest)
    else:
        runner = _local(problem, spec)
    return Implementation(problem.implement, runner)
