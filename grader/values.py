"""Plain values and their JSON form: what crosses between a test and the code it tests.

A test never hands its own objects to a solution and never receives the solution's objects:
every argument and every result goes through `encode` and `decode`, locally, in the browser
and across the sandbox alike. So a solution works on fresh copies (it cannot change a test's
inputs or expected values), and a result is rebuilt here from data, so a returned object with
a lying ``__eq__`` or a subclass with odd behaviour has nothing left to lie with.

Plain values are None, bool, int, float, str, bytes, list, tuple, dict (str or int keys),
fractions.Fraction and decimal.Decimal (exact types), numpy arrays and scalars of the dtypes
in `DTYPES`, torch tensors (bfloat16 too) and dataclass instances, which come back as a
`types.SimpleNamespace` of their fields. `decode`
checks everything it rebuilds against limits: nesting depth, elements per value, the size of
every array dimension, string lengths; `Budget` can carry an element count across calls.

numpy is needed; torch is touched only when a value holds a tensor (so this runs in Pyodide).
"""

from __future__ import annotations

import base64
import dataclasses
import decimal
import fractions
import math
import sys
from types import SimpleNamespace

import numpy as np

MAX_DEPTH = 32
MAX_ELEMENTS = 4_000_000  # array elements and container items in one value, all together
# What a solution's process decodes of a call's arguments, which the kit's tests send: only that
# process's own memory is at stake, and a test may need millions of positions to time a loop.
MAX_REQUEST_ELEMENTS = 16_000_000
MAX_NDIM = 8
MAX_STRING = 1_000_000
MAX_DECIMAL = 1_000  # characters of a Decimal's text
# Ints cross as JSON numbers, which Python reads and writes only up to 4,300 digits: a larger
# one is refused here, the same way in a local run as in the sandbox. (2**14_000 has 4,215.)
MAX_INT_BITS = 14_000
MAX_FIELDS = 256
# Int dict keys stay within int64: Python hashes an int modulo 2**61 - 1, so larger keys can be
# chosen to collide, and a dict of N colliding keys takes N**2 steps to build.
KEY_BOUND = 2**63
DTYPES = frozenset(
    ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
     "float16", "float32", "float64"]
)  # fmt: skip
# torch dtypes numpy lacks travel as the raw bits of a numpy dtype of the same size.
TORCH_BITS = {"bfloat16": "uint16"}
# dtype -> its name, and name -> the little-endian dtype: looked up for every array.
_NAMES = {np.dtype(name): name for name in DTYPES}
_LITTLE = {name: np.dtype(name).newbyteorder("<") for name in DTYPES}


class UnsupportedValue(TypeError):
    """A value that is not plain data (a solution's own object, a generator, a model...)."""


class ProtocolError(ValueError):
    """Data that is not the JSON form of a plain value within the limits."""


# ---------------------------------------------------------------- encoding


def _int(value: int) -> int:
    if value.bit_length() > MAX_INT_BITS:
        raise UnsupportedValue(f"an int of more than {MAX_INT_BITS} bits (about 4,200 digits)")
    return value


def encode(value, depth: int = 0):
    """The JSON-able form of `value`; UnsupportedValue for anything that is not plain data.

    Exact types first (a numpy float64 is also a Python float), then conversions that drop
    the behaviour of any subclass.
    """
    if depth > MAX_DEPTH:
        raise UnsupportedValue("the value is nested too deeply")
    kind = type(value)
    if value is None or kind is bool:
        return value
    if kind is int:
        return _int(value)
    if kind is float:
        return value if math.isfinite(value) else {"__t": "float", "repr": repr(value)}
    if kind is list:
        return [encode(item, depth + 1) for item in value]
    if kind is fractions.Fraction:
        return {"__t": "fraction", "num": _int(value.numerator), "den": _int(value.denominator)}
    if kind is decimal.Decimal:
        return {"__t": "decimal", "repr": str(value)}
    if isinstance(value, np.ndarray):
        return {"__t": "ndarray", **_array_payload(value)}
    if isinstance(value, str):  # before np.generic: an np.str_ is both
        if len(value) > MAX_STRING:
            raise UnsupportedValue("a string is longer than the limit")
        text = str.__str__(value)
        # np.str_ keeps its type, as a learner's code may get one from a numpy array.
        return {"__t": "npstr", "text": text} if kind is np.str_ else text
    if isinstance(value, np.generic):
        return {"__t": "npscalar", **_array_payload(np.asarray(value))}
    if isinstance(value, bytes):
        if len(value) > MAX_STRING:
            raise UnsupportedValue("a bytes value is longer than the limit")
        return {"__t": "bytes", "data": base64.b64encode(bytes.__bytes__(value)).decode("ascii")}
    if isinstance(value, int):
        return _int(int.__int__(value))
    if isinstance(value, float):
        number = float.__float__(value)
        return number if math.isfinite(number) else {"__t": "float", "repr": repr(number)}
    if isinstance(value, list | tuple):
        kind = list if isinstance(value, list) else tuple
        items = [encode(item, depth + 1) for item in kind.__iter__(value)]
        return items if kind is list else {"__t": "tuple", "items": items}
    if isinstance(value, dict):
        pairs = []
        for key, item in dict.items(value):
            if not isinstance(key, str | int) or isinstance(key, bool):
                raise UnsupportedValue(f"dict keys must be str or int, not {type(key).__name__}")
            if isinstance(key, int) and not -KEY_BOUND <= key < KEY_BOUND:
                raise UnsupportedValue("an int dict key must fit in 64 bits")
            pairs.append([encode(key, depth + 1), encode(item, depth + 1)])
        return {"__t": "dict", "items": pairs}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [[f.name, encode(getattr(value, f.name), depth + 1)]
                  for f in dataclasses.fields(value)]  # fmt: skip
        return {"__t": "record", "fields": fields}
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return _tensor_payload(torch, value)
    raise UnsupportedValue(
        f"a value of type {type(value).__name__}, which is not plain data: use numbers, "
        "strings, lists, tuples, dicts, dataclasses, numpy arrays or torch tensors"
    )


def _array_payload(array: np.ndarray) -> dict:
    name = _NAMES.get(array.dtype.newbyteorder("="))
    if name is None:
        raise UnsupportedValue(f"arrays of dtype {array.dtype} cannot be graded")
    little = np.ascontiguousarray(array, dtype=_LITTLE[name])
    return {
        "dtype": name,
        "shape": list(array.shape),
        "data": base64.b64encode(little.tobytes()).decode("ascii"),
    }


def _tensor_payload(torch, value) -> dict:
    tensor = value.detach().to("cpu").resolve_conj().resolve_neg().contiguous()
    dtype = str(tensor.dtype).removeprefix("torch.")
    bits = TORCH_BITS.get(dtype)
    if bits is not None:
        array = tensor.view(getattr(torch, bits)).numpy()
    else:
        try:
            array = tensor.numpy()
        except TypeError:
            raise UnsupportedValue(f"tensors of dtype {tensor.dtype} cannot be graded") from None
    payload = _array_payload(array)
    return {"__t": "tensor", "torch_dtype": dtype, "requires_grad": bool(value.requires_grad),
            **payload}  # fmt: skip


# ---------------------------------------------------------------- decoding


class Budget:
    """Elements that may still be decoded, shared by the values it is passed to.

    With a `parent` (a budget for all the values one solution sends, say), spending charges
    both, so one value is capped, and so are all of them together.
    """

    def __init__(self, limit: int = MAX_ELEMENTS, parent: Budget | None = None):
        self.limit, self.left, self.parent = limit, limit, parent

    def spend(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise ProtocolError("the value holds more elements than the limit")
        if self.parent is not None:
            self.parent.spend(count)


def decode(obj, budget: Budget | None = None, depth: int = 0):
    """Rebuild a value from `encode`'s form; ProtocolError for anything else."""
    budget = Budget() if budget is None else budget
    if depth > MAX_DEPTH:
        raise ProtocolError("the value is nested too deeply")
    if obj is None or type(obj) in (bool, float):
        return obj
    if type(obj) is int:
        if obj.bit_length() > MAX_INT_BITS:
            raise ProtocolError("an int is larger than the limit")
        return obj
    if type(obj) is str:
        if len(obj) > MAX_STRING:
            raise ProtocolError("a string is longer than the limit")
        return obj
    if type(obj) is list:
        budget.spend(len(obj))
        return [decode(item, budget, depth + 1) for item in obj]
    if type(obj) is not dict:
        raise ProtocolError(f"unexpected JSON value of type {type(obj).__name__}")
    tag = obj.get("__t")
    if tag == "float":
        if obj.get("repr") not in ("nan", "inf", "-inf"):
            raise ProtocolError("bad float")
        return float(obj["repr"])
    if tag == "tuple":
        return tuple(_items(obj, budget, depth))
    if tag == "dict":
        result = {}
        for pair in _items(obj, budget, depth, raw=True):
            if type(pair) is not list or len(pair) != 2:
                raise ProtocolError("bad dict item")
            key = decode(pair[0], budget, depth + 1)
            if type(key) is not str and not (type(key) is int and -KEY_BOUND <= key < KEY_BOUND):
                raise ProtocolError("bad dict key")
            result[key] = decode(pair[1], budget, depth + 1)
        return result
    if tag == "bytes":
        return _b64(obj.get("data"), 4 * MAX_STRING // 3 + 4)
    if tag == "fraction":
        num, den = obj.get("num"), obj.get("den")
        if (type(num) is not int or type(den) is not int or den <= 0
                or max(num.bit_length(), den.bit_length()) > MAX_INT_BITS):  # fmt: skip
            raise ProtocolError("bad fraction")
        return fractions.Fraction(num, den)
    if tag == "decimal":
        text = obj.get("repr")
        if type(text) is not str or len(text) > MAX_DECIMAL:
            raise ProtocolError("bad decimal")
        try:
            return decimal.Decimal(text)
        except decimal.InvalidOperation:
            raise ProtocolError("bad decimal") from None
    if tag == "ndarray":
        return _decode_array(obj, budget)
    if tag == "npscalar":
        array = _decode_array(obj, budget)
        if array.shape != ():
            raise ProtocolError("a numpy scalar must have shape ()")
        return array[()]
    if tag == "npstr":
        text = obj.get("text")
        if type(text) is not str or len(text) > MAX_STRING:
            raise ProtocolError("bad numpy string")
        return np.str_(text)
    if tag == "tensor":
        return _decode_tensor(obj, budget)
    if tag == "record":
        return _decode_record(obj, budget, depth)
    raise ProtocolError(f"unknown value tag {tag!r}")


def _items(obj: dict, budget: Budget, depth: int, raw: bool = False) -> list:
    items = obj.get("items")
    if type(items) is not list:
        raise ProtocolError(f"bad {obj.get('__t')}")
    budget.spend(len(items))
    return items if raw else [decode(item, budget, depth + 1) for item in items]


def _b64(data, limit: int) -> bytes:
    if type(data) is not str or len(data) > limit:
        raise ProtocolError("bad binary data")
    try:
        return base64.b64decode(data, validate=True)
    except ValueError:
        raise ProtocolError("binary data is not base64") from None


def _decode_array(payload: dict, budget: Budget) -> np.ndarray:
    dtype_name, shape = payload.get("dtype"), payload.get("shape")
    if type(dtype_name) is not str or dtype_name not in DTYPES:  # a list is not even hashable
        raise ProtocolError(f"dtype {str(dtype_name)[:40]!r} is not allowed")
    # Every dimension is bounded, not just the product: an empty (2**28, 0) array holds no
    # element, but a test's reduction over its first axis would allocate 2**28 of them.
    if (
        type(shape) is not list
        or len(shape) > MAX_NDIM
        or not all(type(n) is int and 0 <= n <= budget.limit for n in shape)
    ):
        raise ProtocolError(f"bad array shape {str(shape)[:100]}")
    size = math.prod(shape)
    budget.spend(max(size, 1))
    dtype = _LITTLE[dtype_name]
    raw = _b64(payload.get("data"), 4 * budget.limit * 8 // 3 + 4)
    if len(raw) != size * dtype.itemsize:
        raise ProtocolError("array data does not match its shape and dtype")
    array = np.frombuffer(raw, dtype=dtype)
    native = (
        array.astype(dtype.newbyteorder("="), copy=True)
        if sys.byteorder != "little"
        else array.copy()
    )
    return native.reshape(shape)


def _decode_tensor(obj: dict, budget: Budget):
    import torch  # only values holding tensors need it

    array = _decode_array(obj, budget)
    dtype_name = obj.get("torch_dtype")
    dtype = getattr(torch, dtype_name, None) if type(dtype_name) is str else None
    if (
        not isinstance(dtype, torch.dtype)
        or TORCH_BITS.get(dtype_name, dtype_name) != array.dtype.name
    ):
        raise ProtocolError(f"bad tensor dtype {str(dtype_name)[:40]!r}")
    tensor = torch.from_numpy(array)
    if dtype_name in TORCH_BITS:
        tensor = tensor.view(dtype)
    if obj.get("requires_grad") is True and tensor.is_floating_point():
        tensor.requires_grad_(True)
    return tensor


def _decode_record(obj: dict, budget: Budget, depth: int) -> SimpleNamespace:
    fields = obj.get("fields")
    if type(fields) is not list or len(fields) > MAX_FIELDS:
        raise ProtocolError("bad record")
    values = {}
    for pair in fields:
        if type(pair) is not list or len(pair) != 2:
            raise ProtocolError("bad record field")
        name, value = pair
        if type(name) is not str or not name.isidentifier() or name.startswith("_"):
            raise ProtocolError(f"bad record field name {str(name)[:40]!r}")
        values[name] = decode(value, budget, depth + 1)
    return SimpleNamespace(**values)


def copy(value, budget: Budget | None = None):
    """A fresh copy of `value` made of plain data only, as the other side would rebuild it."""
    return decode(encode(value), budget)
