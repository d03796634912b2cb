"""The two ways a test of a submission can fail besides its own assertions, and how a student's
exception is described as plain data and raised again in the test.

`SubmissionError` is the submission's fault (a timeout, a crash, a value that is not plain
data, an exception that must not escape). `GraderError` is the grader's: the sandbox could not
start, so the submission could not be graded at all. Reports tell them apart by type.

A student's exception crosses as its type name, the nearest builtin `Exception` type it
derives from, and its message; the test sees that builtin raised again, so
``pytest.raises(ValueError)`` behaves the same in a local run and in the sandbox. Standard
library only: this runs in Pyodide too.
"""

from __future__ import annotations

import builtins

MAX_MESSAGE = 4_000  # characters of an exception message kept for the report

# Raised again in the test, these would end the loop or generator around the call instead of
# failing the test: `all(map(impl.f, xs))` would be True.
ITERATION_CONTROL = (StopIteration, StopAsyncIteration, GeneratorExit)


class SubmissionError(Exception):
    """The submission failed in a way that is not an ordinary exception of its own code."""


class TimeLimitError(SubmissionError):
    """The submission ran past a time limit. Limits are wall-clock time, so a machine busy with
    other work can cause one: the batch grader grades such a student again, alone."""


class UnexpectedResult(Exception):
    """Raised by a probe that finds a solution's result unusable (a float where a tensor was
    due, say); the test fails with the probe's message as it is."""


class GraderError(Exception):
    """The grader could not run the submission at all (the sandbox did not start).

    Never raised by student code, and never the student's fault: a report holding one is not
    a grade, and the batch grader tries that student again on the next run.
    """


def timeout_message(filename: str, seconds: float) -> str:
    """The one wording of a per-call timeout, locally and in the sandbox."""
    return f"{filename} timed out after {seconds:g} s: look for an endless loop"


def describe_exception(exc: BaseException) -> dict:
    """Type, nearest builtin Exception type (None for other BaseExceptions), and message."""
    builtin = None
    if isinstance(exc, Exception):
        builtin = next(
            klass.__name__
            for klass in type(exc).__mro__
            if getattr(builtins, klass.__name__, None) is klass and issubclass(klass, Exception)
        )
    try:
        # KeyError's str() quotes its key: raised again from that text it would quote twice.
        quoted = isinstance(exc, KeyError) and len(exc.args) == 1
        message = str(exc.args[0]) if quoted else str(exc)
    except Exception:  # noqa: BLE001 - a student's __str__ may itself fail
        message = "<unprintable message>"
    return {"type": type(exc).__name__[:100], "builtin": builtin, "message": message[:MAX_MESSAGE]}


def student_exception(error: dict) -> Exception:
    """The exception a test sees for a student's exception described by `describe_exception`.

    `error` may come from a hostile child: only its strings are used, and only builtin
    exception types (never iteration control, never `Exception` itself) are raised as such.
    """
    kind = str(error.get("type", "Exception"))[:100]
    message = str(error.get("message", ""))[:MAX_MESSAGE]
    builtin = error.get("builtin")
    if kind == UnexpectedResult.__name__:
        return SubmissionError(message)
    if builtin in ("SystemExit", None) and kind in ("SystemExit", "KeyboardInterrupt"):
        return SubmissionError(f"raised {kind}: never exit or stop the program")
    if kind == "MemoryError" or builtin == "MemoryError":
        return SubmissionError(f"ran out of memory: {message}")
    klass = getattr(builtins, str(builtin), None) if isinstance(builtin, str) else None
    usable = (
        isinstance(klass, type)
        and issubclass(klass, Exception)
        and klass is not Exception
        and not issubclass(klass, ITERATION_CONTROL)
    )
    if usable:
        try:
            return klass(message if kind == klass.__name__ else f"{kind}: {message}")
        except TypeError:  # e.g. UnicodeDecodeError needs more arguments
            pass
    return SubmissionError(f"the function raised {kind}: {message} (it must return a value)")


def type_name(kind: type) -> str:
    """How reports name an exception type: its module and qualified name."""
    return f"{kind.__module__}.{kind.__qualname__}"
