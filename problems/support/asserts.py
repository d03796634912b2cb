"""Assertions the hidden tests use: type and shape first, then values within a tolerance.

Checking the type first matters: a returned object with a lying ``__eq__``, a Python list,
or an array that merely broadcasts against the expected one must fail, with a message
that tells the learner what was expected.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Callable, Iterable

import numpy as np


class _Shown(reprlib.Repr):
    """A returned value as a message shows it: its beginning, never megabytes of it."""

    def repr_bytes(self, value: bytes, level: int) -> str:
        cut = len(value) > self.maxstring
        return repr(value[: self.maxstring]) + (f"... ({len(value):,} bytes)" if cut else "")


_SHOWN = _Shown()
_SHOWN.maxstring = _SHOWN.maxother = 200


def assert_scalar(got, expected: float, *, rel: float = 1e-6, abs: float = 1e-9, what="result"):
    """`got` is a real number (Python or numpy float, not bool) close to `expected`."""
    if isinstance(got, bool | np.bool_) or not isinstance(got, numbers.Real):
        raise AssertionError(
            f"{what} should be a float, got {type(got).__name__}: {_SHOWN.repr(got)}"
        )
    got = float(got)
    if not math.isfinite(got):
        raise AssertionError(f"{what} should be finite, got {got}")
    if not math.isclose(got, expected, rel_tol=rel, abs_tol=abs):
        raise AssertionError(f"{what}: expected {expected:.8g}, got {got:.8g}")


def assert_array(
    got,
    expected,
    *,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    kind: str = "f",
    what: str = "result",
):
    """`got` is a numpy array of `expected`'s shape, dtype kind (f, i, b...) and values."""
    expected = np.asarray(expected)
    if not isinstance(got, np.ndarray):
        raise AssertionError(f"{what} should be a numpy array, got {type(got).__name__}")
    if got.shape != expected.shape:
        raise AssertionError(f"{what} should have shape {expected.shape}, got {got.shape}")
    if got.dtype.kind not in kind:
        raise AssertionError(f"{what} should have a dtype of kind {kind!r}, got {got.dtype}")
    if got.dtype.kind == "f" and not np.all(np.isfinite(got)):
        raise AssertionError(f"{what} should be finite everywhere, got {got}")
    if not np.allclose(got, expected, rtol=rtol, atol=atol):
        where = np.argwhere(~np.isclose(got, expected, rtol=rtol, atol=atol))[0]
        index = tuple(int(i) for i in where)
        raise AssertionError(
            f"{what}{list(index)}: expected {expected[index]!r}, got {got[index]!r}\n"
            f"expected {np.array2string(expected, precision=6)}\n"
            f"got      {np.array2string(got, precision=6)}"
        )


def assert_tensor(got, expected, *, rtol: float = 1e-5, atol: float = 1e-7, what: str = "result"):
    """`got` is a torch tensor of `expected`'s shape and floating dtype, close in value."""
    import torch  # only the torch problems need it; the browser problems never get here

    if not isinstance(got, torch.Tensor):
        raise AssertionError(f"{what} should be a torch tensor, got {type(got).__name__}")
    expected = torch.as_tensor(expected)
    if tuple(got.shape) != tuple(expected.shape):
        raise AssertionError(
            f"{what} should have shape {tuple(expected.shape)}, got {tuple(got.shape)}"
        )
    if got.is_floating_point() != expected.is_floating_point():
        raise AssertionError(f"{what} should have a dtype like {expected.dtype}, got {got.dtype}")
    to_numpy = lambda t: t.detach().cpu().double().numpy()  # noqa: E731
    assert_array(to_numpy(got), to_numpy(expected), rtol=rtol, atol=atol, what=what)


def broadcast_variants(x) -> list[np.ndarray]:
    """Arrays cut from `x` whose shapes differ from x's, yet which numpy broadcasts against it.

    A 1 in place of each axis longer than 1 (and of all such axes at once), the leading axes
    dropped one by one down to 0-D, a leading axis of 1 added, and a trailing one where it
    broadcasts (a column (N, 1) against (N,)). The values are x's own, so an implementation that
    lets numpy broadcast returns a plausible number instead of raising; `x` should have no empty
    axis and some axis longer than 1.
    """
    x = np.asarray(x)
    cuts = [(slice(None),) * axis + (slice(0, 1),) for axis in range(x.ndim) if x.shape[axis] > 1]
    if len(cuts) > 1:
        cuts.append((slice(0, 1),) * x.ndim)
    cuts += [(0,) * axes for axes in range(1, x.ndim + 1)] + [(None,), (..., None)]
    found: dict[tuple, np.ndarray] = {}
    for cut in cuts:
        variant = np.array(x[cut])  # a copy, 0-D included (x[0, 0] alone is a numpy scalar)
        try:
            np.broadcast_shapes(variant.shape, x.shape)
        except ValueError:
            continue
        found.setdefault(variant.shape, variant)
    found.pop(x.shape, None)
    return list(found.values())


def calls_without_value_error(calls: Iterable[tuple[str, Callable[[], object]]]) -> list[str]:
    """Run each `(what, call)`; for those that did not raise ValueError, say what they did.

    Bad-input tables check every row and report all misses at once: a learner sees each input
    their checks let through, not only the first.
    """
    missed = []
    for what, call in calls:
        try:
            got = call()
        except ValueError:
            continue
        except Exception as exc:  # noqa: BLE001 - any other outcome is a miss, reported
            missed.append(f"{what}: raised {type(exc).__name__}: {exc}")
        else:
            missed.append(f"{what}: returned {_SHOWN.repr(got)}")
    return missed


def _same(a, b) -> bool:
    """Equal bit for bit: the same type, and for arrays and tensors the same dtype and shape."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if type(a).__module__.startswith("torch"):  # a tensor, with no import of torch here
        both_nan = (a != a) & (b != b)
        return a.dtype == b.dtype and a.shape == b.shape and bool(((a == b) | both_nan).all())
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def assert_positional_call_agrees(function: Callable, arguments: dict, what: str) -> None:
    """`function` given `arguments` in the statement's order returns what it returns given
    them by name: a signature with its parameters in another order passes every call by name
    and computes something else for a caller who passes them in order."""
    by_name = function(**arguments)
    in_order = function(*arguments.values())
    assert _same(in_order, by_name), (
        f"{what} called with its arguments in the statement's order ({', '.join(arguments)}) "
        f"returned {_SHOWN.repr(in_order)}, and {_SHOWN.repr(by_name)} with the same arguments "
        "given by name: keep the statement's order of parameters"
    )
