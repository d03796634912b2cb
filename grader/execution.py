"""Where a solution runs: one request in, one reply of plain data out.

A request calls one of the solution's functions, or one of the problem's probes (kit code in
``problems/<slug>/probes.py`` that runs beside the solution and returns what the tests judge:
a loss and its gradients, sampled ids, how a model was called). Arguments arrive as plain
data and are rebuilt fresh for every request; the reply carries the result, or the
exception, as plain data (`grader.values`, `grader.errors`).

The local runner and the browser call `Session.execute` in-process; the sandboxed child calls
it for every request it reads from its pipe. Both turn the reply into what the test sees with
`read_reply`. Because every place goes through these two functions, a solution gets the same
verdict in each of them by construction.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import linecache
import random
import sys
import warnings
from pathlib import Path
from types import ModuleType, SimpleNamespace

import numpy as np

from grader import values
from grader.errors import (
    SubmissionError,
    UnexpectedResult,
    describe_exception,
    student_exception,
)

SEED = 0


def preimport(torch: bool) -> None:
    """What a solution finds imported before its own import, which is timed: alike in the
    tests' process and in the sandbox's fork server, so it counts the solution's time only."""
    import numpy  # noqa: F401

    for name in ("array_api_compat", "array_api_compat.numpy"):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    if torch:
        importlib.import_module("torch")
        importlib.import_module("torch.optim")
        # An optimizer's first construction imports it (1.3 s), and so does torch.compile.
        importlib.import_module("torch._dynamo")
        with contextlib.suppress(ImportError):
            importlib.import_module("array_api_compat.torch")


def load_source(source: str, module_name: str, filename: str) -> ModuleType:
    """Run `source` as a new module (registered in sys.modules: dataclasses look it up).

    Its lines are registered under `filename` too, where no such file exists (the sandbox):
    inspect.getsource, which TorchScript and tracebacks rely on, reads them there.
    """
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    module = ModuleType(module_name)
    module.__file__ = filename
    sys.modules[module_name] = module
    # Warning filters it sets while imported end with the import, here and in the sandbox.
    # dont_inherit: this module's own `from __future__ import annotations` would otherwise
    # turn the solution's annotations into text, as they are not when Python imports the file.
    with warnings.catch_warnings():
        exec(compile(source, filename, "exec", dont_inherit=True), module.__dict__)
    return module


def load_file(path: Path, module_name: str) -> ModuleType:
    """Import one kit file (a problem's probes) as a fresh module."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def import_failure(exc: BaseException, filename: str) -> str:
    """What to tell the learner when their file raised while being imported."""
    if isinstance(exc, SyntaxError):
        return (
            f"{filename} has a syntax error on line {exc.lineno}: {exc.msg}. Fix it and run again."
        )
    if isinstance(exc, SystemExit | KeyboardInterrupt):
        kind = type(exc).__name__
        return f"{filename} raised {kind} while being imported: never exit or stop the program"
    error = describe_exception(exc)
    return f"{filename} failed to import: {error['type']}: {error['message']}"


class _Missing:
    """Stands in for a name the solution lacks: calling it fails with what to do."""

    def __init__(self, reason: str):
        self.reason = reason

    def __call__(self, *args, **kwargs):
        raise UnexpectedResult(self.reason)


def solution_namespace(module: ModuleType, names: list[str] | tuple[str, ...],
                       filename: str) -> SimpleNamespace:  # fmt: skip
    """The problem's names taken from `module`; a missing or non-function one fails when used."""
    found = {}
    for name in names:
        value = getattr(module, name, None)
        if value is None:
            value = _Missing(f"{filename} defines no {name!r}: keep the name from the starter")
        elif not callable(value):
            value = _Missing(f"{filename} defines {name!r}, but not as a function")
        found[name] = value
    return SimpleNamespace(**found)


def reseed() -> None:
    """The same global random state at the start of every test, whatever ran before it."""
    random.seed(SEED)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(SEED)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(SEED)


class Session:
    """One solution's side: its functions, its problem's probes, the test under way.

    The global random generators are reseeded when a request comes from a new test, so a
    solution that draws from them sees the same numbers in a local run and in the sandbox.
    """

    def __init__(self, solution: SimpleNamespace, probes: ModuleType | None,
                 let_through: tuple[type[BaseException], ...] = ()):  # fmt: skip
        # Everything the solution raises becomes a reply, even pytest's skip() and exit(),
        # except `let_through`: locally, the learner's Ctrl-C and the time limit's alarm.
        self.solution, self.probes, self.let_through = solution, probes, let_through
        self.test = None

    def target(self, request: dict):
        name = request.get("name")
        if request.get("op") == "probe":
            probe = getattr(self.probes, str(name), None)
            if probe is None:
                raise LookupError(f"this problem has no probe {name!r}")
            return lambda *args, **kwargs: probe(self.solution, *args, **kwargs)
        return getattr(self.solution, str(name))

    def execute(self, request: dict) -> tuple[dict, BaseException | None]:
        """The reply to `request`, and the exception the solution raised (None if it returned).

        A request of op "calls" makes several calls of one function, each with its own keyword
        arguments, in one exchange: ``{"replies": [reply, ...]}``, up to the first that raised.
        """
        if request.get("test") != self.test:
            self.test = request.get("test")
            reseed()
        target = self.target(request)
        # Every statement says a solution leaves its inputs as they were: each call is checked,
        # not only the tests written for it. A probe's arguments are its own business.
        checked = request.get("op") != "probe"
        if request.get("op") != "calls":
            return self._call(target, request.get("args", []), request.get("kwargs", {}),
                              request.get("observe"), checked)  # fmt: skip
        replies, raised = [], None
        calls = request.get("calls")
        for kwargs in calls if type(calls) is list else []:
            reply, raised = self._call(target, [], kwargs, checked=True)
            replies.append(reply)
            if "value" not in reply:
                break
        return {"replies": replies}, raised

    def _call(self, target, args_data, kwargs_data, observe: bool = False,
              checked: bool = False):  # fmt: skip
        budget = values.Budget(values.MAX_REQUEST_ELEMENTS)
        args = values.decode(args_data, budget)
        kwargs = values.decode(kwargs_data, budget)
        before = _states(args, kwargs) if checked and not observe else None
        raised = None
        try:
            reply = {"value": values.encode(target(*args, **kwargs))}
        except values.UnsupportedValue as exc:
            reply = {"unsupported": str(exc)}
        except BaseException as exc:
            if isinstance(exc, self.let_through):
                raise
            reply, raised = {"error": describe_exception(exc)}, exc
        if observe:
            # How the arguments look after the call, so a test can tell if they were changed.
            try:
                reply |= {"args": values.encode(args), "kwargs": values.encode(kwargs)}
            except values.UnsupportedValue as exc:
                reply = {"unsupported": f"an argument was replaced by {exc}"}
        elif before is not None:
            changed = _changed_arguments(before, args, kwargs)
            if changed:
                reply = {"modified": changed}
        return reply, raised


# Values no call can change in place: nothing to compare after it.
_IMMUTABLE = (bool, int, float, complex, str, bytes, type(None))


def _state(value):
    """What a call could change of `value` in place, in a form to compare; None if nothing."""
    if type(value) is np.ndarray:  # most arguments: compared as bytes, without encoding
        return value.dtype.str, value.shape, value.tobytes()
    if type(value) in _IMMUTABLE or isinstance(value, np.generic):
        return None
    try:
        return values.encode(value)
    except values.UnsupportedValue as exc:  # an object the call put into a list, say
        return f"replaced by {exc}"


def _states(args: list, kwargs: dict) -> list[tuple[str, object]]:
    named = [(f"argument {i + 1}", arg) for i, arg in enumerate(args)]
    named += [(repr(name), value) for name, value in kwargs.items()]
    return [(where, _state(value)) for where, value in named]


def _changed_arguments(before: list[tuple[str, object]], args: list, kwargs: dict) -> list[str]:
    """The arguments a call changed in place, from their states before it (`_states`)."""
    return [where for (where, old), (_, new) in zip(before, _states(args, kwargs), strict=True)
            if old is not None and old != new]  # fmt: skip


def read_reply(reply, what: str, budget: values.Budget | None = None,
               raised: BaseException | None = None):  # fmt: skip
    """The value a reply carries, or the exception the test sees instead.

    `reply` may come from a hostile process: anything malformed is the submission's fault.
    `raised` (in-process runs only) keeps the learner's own traceback on the exception.
    """
    if type(reply) is not dict:
        raise SubmissionError(f"{what} sent a malformed reply")
    if "error" in reply:
        error = reply["error"] if type(reply["error"]) is dict else {}
        exception = student_exception(error)
        if raised is not None:
            raise exception.with_traceback(raised.__traceback__) from None
        raise exception
    if "unsupported" in reply:
        raise SubmissionError(f"{what} returned {str(reply['unsupported'])[:500]}")
    if "modified" in reply:
        changed = reply["modified"]
        changed = changed[:10] if type(changed) is list else []
        names = ", ".join(name[:100] for name in changed if type(name) is str)
        raise SubmissionError(
            f"{what} changed its input {names or 'arguments'} in place: the statement says "
            "inputs are not modified. Work on a copy (np.array(x, copy=True), t.clone()) or "
            "without in-place operations (x = x - m, not x -= m)."
        )
    return decode_for(reply.get("value"), what, budget)


def decode_for(data, what: str, budget: values.Budget | None = None):
    try:
        return values.decode(data, budget)
    except values.ProtocolError as exc:
        raise SubmissionError(f"{what} returned data that cannot be graded: {exc}") from None
