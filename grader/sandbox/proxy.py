"""The ``sandbox:<path>`` implementation: functions that run a submission in a sandboxed child.

``load_sandboxed`` gives the tests an object whose attributes are the problem's ``implement``
names. Calling one sends the arguments as plain data to the submission's child process
(started on first use, then kept warm for the next calls) and returns the plain data that
comes back. A student's exception comes back as its type and message: a builtin exception is
raised again as the same type, so ``pytest.raises(ValueError)`` works; anything else (a
timeout, a crash, ``SystemExit``, a value that is not plain data) becomes `SubmissionError`.
A child that never starts is the grader's failure, not the student's: `SandboxUnavailable`,
which the batch grader reports as "could not be graded" and does not save.

``<path>`` may be a file, or a folder holding ``<slug>.py`` (so one pytest run can grade many
problems). The batch grader marks a file it rejected with ``<slug>.py.rejected`` beside it,
holding the reason; every call then fails with that reason.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import functools
import itertools
import json
import os
import time
import tomllib
from collections import OrderedDict
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

from grader import kit_types
from grader.loader import Unavailable, implemented_names
from grader.sandbox.autograd import connect, grad_inputs, needs_graph
from grader.sandbox.launch import (
    Limits,
    SandboxFailure,
    SandboxProcess,
    SandboxStartFailure,
    sandbox_mode,
)
from grader.sandbox.objects import CallObjects, param_leaves
from grader.sandbox.protocol import (
    ProtocolError,
    UnsupportedValue,
    decode,
    describe_exception,
    encode,
    mutable_leaves,
)

LIMITS_ENV = "GRPO_KIT_SANDBOX_LIMITS"  # JSON of Limits fields, set by the batch grader
MAX_WARM_CHILDREN = 3  # a student's numpy, torch and capstone children
REJECTED_SUFFIX = ".rejected"


class SubmissionError(Exception):
    """The submission failed in a way that is not an ordinary exception of its own code."""


class SandboxUnavailable(Exception):
    """The sandbox could not be started, so the submission could not be graded at all.

    Raised before any student code runs in that child, so no student can raise it.
    """


# Raised again in the test as the builtin, these would end the loop or generator around the
# call instead of failing the test: `all(map(impl.f, xs))` would be True.
ITERATION_CONTROL = (StopIteration, StopAsyncIteration, GeneratorExit)


def problem_limits(problem_dir: Path, overrides: dict | None = None) -> Limits:
    """The problem's time limit per call, overridden by the batch grader's settings.

    Without `overrides`, they are read from the environment the batch grader set.
    """
    meta = tomllib.loads((Path(problem_dir) / "problem.toml").read_text(encoding="utf-8"))
    per_call = float(meta.get("time_limit_s", Limits.call_s))
    values = {"call_s": per_call, "total_s": 6 * per_call}
    if overrides is None:
        overrides = json.loads(os.environ.get(LIMITS_ENV, "{}"))
    known = {f.name for f in fields(Limits)}
    values |= {k: v for k, v in overrides.items() if k in known and v is not None}
    return Limits(**values)


def _uses_torch(problem_dir: Path) -> bool:
    meta = tomllib.loads((Path(problem_dir) / "problem.toml").read_text(encoding="utf-8"))
    return meta.get("runtime") == "python"


class Child:
    """One student's sandboxed process, shared by all the problems it serves.

    Started on first use; after a crash or a kill the next problem to need it starts a new one
    (the problem that crashed it has already failed for good).
    """

    def __init__(self, root: Path, limits: Limits, torch: bool, reference: tuple[str, ...] = ()):
        self.root, self.limits, self.torch, self.reference = root, limits, torch, reference
        self.callback_ids = itertools.count()  # unique for the child's life: stale stubs fail
        self.process: SandboxProcess | None = None
        self.ready = False
        self.loaded: dict[str, dict[str, str]] = {}  # slug -> status of each implemented name
        self.requests = 0

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
        self.process, self.loaded = None, {}

    def start(self) -> SandboxProcess:
        """Start the process without waiting for it (it imports numpy while tests run)."""
        if self.process is None:
            process = SandboxProcess(self.root, self.limits, self.torch, self.reference)
            self.process, self.ready = process, False
        _WARM.touch(self)
        return self.process

    def ensure_ready(self) -> SandboxProcess:
        """The started, ready process; SandboxStartFailure if it cannot be had."""
        process = self.start()
        if not self.ready:
            try:
                process.wait_ready()
            except SandboxFailure:
                self.close()
                raise
            self.ready = True
        return process

    def exchange(self, message: dict, allowance: float, late: str,
                 callbacks: dict | None = None) -> dict:  # fmt: skip
        """Send a request; answer the child's calls of `callbacks` until its reply comes."""
        self.ensure_ready()
        self.requests += 1
        answer = functools.partial(answer_callback, callbacks or {})
        try:
            reply = self.process.exchange(message | {"id": self.requests}, allowance, late, answer)
        except BaseException:  # a failure, or a test's function that stopped the test mid-call
            self.close()
            raise
        if reply.get("id") != self.requests:
            self.close()
            raise SandboxFailure("answered out of turn (it wrote to the grader's pipe)")
        return reply


class _Warm:
    """The few children kept alive; using another closes the one used least recently."""

    def __init__(self):
        self.children: OrderedDict[int, Child] = OrderedDict()

    def touch(self, child: Child) -> None:
        self.children[id(child)] = child
        self.children.move_to_end(id(child))
        while len(self.children) > MAX_WARM_CHILDREN:
            _, oldest = self.children.popitem(last=False)
            oldest.close()

    def close_all(self) -> None:
        while self.children:
            self.children.popitem()[1].close()


_WARM = _Warm()
atexit.register(_WARM.close_all)
_CHILDREN: dict[tuple[Path, bool, tuple[str, ...]], Child] = {}


class Submission:
    """One problem's file of one student, run in that student's child under a time budget."""

    def __init__(self, problem_dir: Path, path: Path, names: list[str], limits: Limits,
                 child: Child):  # fmt: skip
        self.slug, self.path, self.names, self.limits = problem_dir.name, path, names, limits
        self.child = child
        # Once set, every later call fails fast with it.
        self.failure: tuple[type[Exception], str] | None = None
        self.used_s = 0.0

    def _die(self, reason: str, kind: type[Exception] = SubmissionError):
        self.failure = (kind, reason)
        raise kind(reason)

    def _check(self) -> None:
        if self.failure:
            kind, reason = self.failure
            raise kind(reason)

    def _ready(self) -> SandboxProcess:
        """The child, ready for requests. Its start-up is not on the submission's clock."""
        self._check()
        try:
            return self.child.ensure_ready()
        except SandboxStartFailure as exc:
            self._die(f"could not be graded: {exc}", SandboxUnavailable)

    def _exchange(self, message: dict, callbacks: dict | None = None) -> dict:
        """One request under this problem's clock: per call, and for all calls together."""
        self._ready()
        left = self.limits.total_s - self.used_s
        if self.limits.call_s <= left:
            allowance, late = self.limits.call_s, f"timed out after {self.limits.call_s:g} s"
        else:
            allowance, late = left, f"exceeded its total time limit of {self.limits.total_s:g} s"
        started = time.monotonic()
        try:
            return self.child.exchange(message, allowance, late, callbacks)
        except SandboxFailure as exc:
            self._die(f"{self.slug}.py {exc}")
        finally:
            self.used_s += time.monotonic() - started

    def _names(self) -> dict[str, str]:
        self._check()
        if self.slug not in self.child.loaded:
            path = self._ready().path_inside(self.path)
            try:
                reply = self._exchange({"op": "load", "module": self.slug, "names": self.names,
                                        "path": path})  # fmt: skip
            except SubmissionError as exc:
                self._die(f"{exc} while being imported")
            if "error" in reply:
                self._die(_import_failure(self.slug, reply["error"]))
            self.child.loaded[self.slug] = reply.get("names") or {}
        return self.child.loaded[self.slug]

    def request(self, message: dict) -> dict:
        return self._exchange(message)

    def call(self, name: str, args: tuple, kwargs: dict):
        """Call the student's `name` in the child; its result, connected for gradients."""
        status = self._names().get(name, "missing")
        if status != "ok":
            what = "defines no" if status == "missing" else "has a non-function"
            raise SubmissionError(
                f"{self.slug}.py {what} {name!r}: keep the name from the starter."
            )
        table = CallObjects(lambda: next(self.child.callback_ids))
        try:
            message = {"op": "call", "module": self.slug, "name": name,
                       "args": encode(list(args), table=table),
                       "kwargs": encode(dict(kwargs), table=table)}  # fmt: skip
            message["objects"] = table.encode_table()
        except UnsupportedValue as exc:
            raise SubmissionError(
                f"this test's arguments cannot be sent to the sandbox: {exc}"
            ) from None
        inputs = grad_inputs([list(args), kwargs], param_leaves(table.items))
        message["keep_graph"] = needs_graph(inputs)
        # torch's global generator travels like an argument: the child draws from the test's,
        # and the test's continues from where the child's stopped, as in one process.
        rng = _torch_global_generator() if self.child.torch else None
        if rng is not None:
            message["torch_rng"] = encode(rng.get_state())
        reply = self._exchange(message, table.callbacks)
        if "error" in reply:
            raise _student_exception(reply["error"], self.limits)
        self._apply_mutations(reply.get("mutated") or [], mutable_leaves([list(args), kwargs]))
        try:
            table.apply(reply.get("params") or [], reply.get("objects") or [])
        except Exception as exc:  # noqa: BLE001 - malformed data is the submission's fault
            self._die(f"{self.slug}.py sent back a model or optimizer that is not valid: {exc}")
        if rng is not None:
            self._apply_mutations([[0, reply.get("torch_rng")]], [rng])
        value = self.value(reply)
        return connect(self, reply, value, inputs) if message["keep_graph"] else value

    def _apply_mutations(self, mutated: list, leaves: list) -> None:
        """Mirror the student's in-place changes to arguments onto the test's own objects."""
        for entry in mutated:
            try:
                index, encoded = entry
                _mirror(leaves[index], decode(encoded))
            except Exception as exc:  # noqa: BLE001 - malformed data is the submission's fault
                self._die(f"{self.slug}.py sent back a modified argument that is not valid: {exc}")

    def value(self, reply: dict):
        try:
            return decode(reply.get("value"))
        except Exception as exc:  # noqa: BLE001 - any malformed value is the submission's fault
            self._die(f"{self.slug}.py returned data that cannot be graded: {exc}")


def _torch_global_generator():
    import torch  # a torch problem's tests have imported it already

    return torch.default_generator


def _mirror(target, new) -> None:
    """Give the test's array, tensor, generator or record what its copy ended with."""
    if kit_types.record_name(target) is not None:
        _set_fields(target, new)
        return
    current = target.get_state() if hasattr(target, "get_state") else target
    if type(new) is not type(current) or tuple(new.shape) != tuple(current.shape):
        raise ValueError("an argument changed its type or shape")
    if hasattr(target, "set_state"):  # a torch Generator
        target.set_state(new)
    elif hasattr(target, "detach"):
        if not target.requires_grad:  # in-place on a leaf that requires grad fails locally too
            target.detach().copy_(new)
    else:
        target[...] = new


def _set_fields(record, new) -> None:
    """Set the fields of a kit record that the student reassigned (plain values only)."""
    names = kit_types.record_fields(record)
    if not isinstance(new, dict) or not set(new) <= set(names):
        raise ValueError(f"a {type(record).__name__} has only the fields {names}")
    for name, value in new.items():
        setattr(record, name, value)


def answer_callback(callbacks: dict, frame: dict) -> dict:
    """The reply to the child's call of a test's function: its result or its error.

    The function is the test's own, run here on plain data decoded like any reply; arguments
    that are not plain data are a ProtocolError, which ends the child.
    """
    callback_id = frame.get("callback")
    if not isinstance(callback_id, int) or isinstance(callback_id, bool):
        raise ProtocolError("a callback frame must name a function by its number")
    args, kwargs = decode(frame.get("args")), decode(frame.get("kwargs"))
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ProtocolError("a callback's arguments must be a list and a dict")
    function = callbacks.get(callback_id)
    if function is None:
        return {"error": {"type": "LookupError", "builtin": "LookupError",
                          "message": "that function belongs to an earlier call"}}  # fmt: skip
    try:
        return {"value": encode(function(*args, **{str(k): v for k, v in kwargs.items()}))}
    except Exception as exc:  # noqa: BLE001 - the test's function refused the child's arguments
        return {"error": describe_exception(exc)}


def _import_failure(slug: str, error: dict | None) -> str:
    error = error if isinstance(error, dict) else {}
    kind, message = str(error.get("type", "error")), str(error.get("message", ""))
    if kind == "SyntaxError":
        return f"{slug}.py has a syntax error on line {error.get('line')}: {message}. Fix it."
    if kind in ("SystemExit", "KeyboardInterrupt"):
        return f"{slug}.py raised {kind} while being imported: never exit or stop the program."
    return f"{slug}.py failed to import: {kind}: {message}"


def _student_exception(error: dict, limits: Limits) -> Exception:
    """The exception to raise in the test for an exception raised by the student's code."""
    kind = str(error.get("type", "Exception"))
    message = str(error.get("message", ""))
    builtin = error.get("builtin")
    if kind == "MemoryError" or builtin == "MemoryError":
        return SubmissionError(f"memory limit exceeded ({limits.memory_mb} MiB): {message}")
    if builtin is None:
        return SubmissionError(f"the function raised {kind}: {message} (it must return a value)")
    klass = getattr(builtins, str(builtin), None)
    if isinstance(klass, type) and issubclass(klass, ITERATION_CONTROL):
        return SubmissionError(f"the function raised {kind}: {message} (it must return a value)")
    if isinstance(klass, type) and issubclass(klass, Exception) and klass is not Exception:
        try:
            return klass(message if kind == klass.__name__ else f"{kind}: {message}")
        except TypeError:  # e.g. UnicodeDecodeError needs more arguments
            pass
    return SubmissionError(f"{kind}: {message}")


class SandboxedFunction:
    """Stands in for one student function; each call runs in the submission's child."""

    def __init__(self, submission: Submission, name: str):
        self.submission, self.__name__ = submission, name

    def __call__(self, *args, **kwargs):
        return self.submission.call(self.__name__, args, kwargs)

    def __repr__(self) -> str:
        return f"<sandboxed {self.__name__} from {self.submission.path}>"


def resolve_submission(problem_dir: Path, spec: str) -> tuple[Path, str | None]:
    """The submission file for this problem, and the reason it cannot run (None if it can)."""
    slug = problem_dir.name
    path = Path(spec)
    if path.is_dir():
        path = path / f"{slug}.py"
    rejected = path.with_name(path.name + REJECTED_SUFFIX)
    if rejected.is_file():
        return path, rejected.read_text(encoding="utf-8").strip()
    if not path.is_file():
        return path, f"no {slug}.py was submitted"
    return path, None


def _child(problem_dir: Path, submission_path: str) -> Child:
    """The student's child for this problem: one for all problems that see the same files."""
    torch = _uses_torch(problem_dir)
    reference = kit_types.SANDBOX_REFERENCE.get(problem_dir.name, ())
    root = Path(submission_path).resolve()  # the student's folder, or the one file
    key = (root, torch, reference)
    if key not in _CHILDREN:
        _CHILDREN[key] = Child(root, problem_limits(problem_dir), torch, reference)
    return _CHILDREN[key]


def prestart(problem_dir: Path, submission_path: str) -> None:
    """Start the child for a submission that will be tested next, so its startup overlaps."""
    _, reason = resolve_submission(Path(problem_dir), submission_path)
    if reason is None:
        # A start that fails here is tried again, and reported, when the child is first used.
        with contextlib.suppress(SandboxStartFailure):
            _child(Path(problem_dir), submission_path).start()


def load_sandboxed(problem_dir: Path, submission_path: str) -> SimpleNamespace:
    """The ``sandbox:<path>`` implementation of a problem (see the module docstring)."""
    problem_dir = Path(problem_dir)
    names = implemented_names(problem_dir)
    path, reason = resolve_submission(problem_dir, submission_path)
    if reason:
        return SimpleNamespace(**{name: Unavailable(name, reason) for name in names})
    limits = problem_limits(problem_dir)
    submission = Submission(problem_dir, path, names, limits, _child(problem_dir, submission_path))
    namespace = SimpleNamespace(**{name: SandboxedFunction(submission, name) for name in names})
    namespace.__sandbox__ = sandbox_mode()
    return namespace
