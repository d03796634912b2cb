"""Plain data across the sandbox boundary: length-prefixed JSON frames and a strict value codec.

Both sides import this module. The trusted side decodes whatever the child sends with
`decode`, which rebuilds only plain values (None, bool, int, float, str, list, tuple, dict,
numpy arrays and scalars of an allowed dtype, torch tensors, and records: the fields of a
dataclass, which come back as a SimpleNamespace, or as their real class when it is one of
``grader/kit_types.py``'s records) within size caps. Anything else is refused:
a student's object can never reach a test, so a lying ``__eq__`` has nothing to lie with.
Arrays travel as base64 of their raw little-endian bytes with dtype and shape.

Towards the child, objects the tests hand over travel too, as data the child rebuilds them
from (see ``child.py``): a torch Generator (device and state), and by reference into the
call's table of objects (``objects.py``) the kit's models, optimizers, LR schedulers and the
test's own functions.
"""

from __future__ import annotations

import base64
import builtins
import dataclasses
import json
import math
import os
import struct
import sys
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np

from grader import kit_types

MAX_FRAME_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 32
MAX_ELEMENTS = 4_000_000  # array elements and container items in one value, all together
MAX_STRING = 1_000_000
MAX_MESSAGE = 4_000  # characters of an exception message kept for the report
DTYPES = frozenset(
    [
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    ]
)
TORCH_ONLY_DTYPES = {"bfloat16": "float32"}  # torch dtype -> numpy dtype it travels as
_HEADER = struct.Struct(">I")


class ProtocolError(Exception):
    """The other side sent something that is not a well-formed, allowed frame or value."""


class UnsupportedValue(TypeError):
    """A value that cannot cross the boundary (a student's own object, a Python generator, ...)."""


# ---------------------------------------------------------------- frames


def pack_frame(message: dict) -> bytes:
    body = json.dumps(message, separators=(",", ":"), allow_nan=True).encode("utf-8")
    if len(body) > MAX_FRAME_BYTES:
        raise UnsupportedValue(f"a value of {len(body)} bytes is larger than the limit")
    return _HEADER.pack(len(body)) + body


def frame_length(header: bytes) -> int:
    (length,) = _HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {length} bytes exceeds the {MAX_FRAME_BYTES} byte limit")
    return length


def parse_frame(body: bytes) -> dict:
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"malformed frame: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("a frame must hold a JSON object")
    return message


def header_size() -> int:
    return _HEADER.size


def write_frame(fd: int, message: dict) -> None:
    data = memoryview(pack_frame(message))
    while data:
        data = data[os.write(fd, data) :]


def read_exactly(fd: int, count: int) -> bytes:
    chunks, left = [], count
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other side closed the pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> dict:
    """Blocking read of one frame (the child's side; the trusted side reads with a deadline)."""
    return parse_frame(read_exactly(fd, frame_length(read_exactly(fd, header_size()))))


# ---------------------------------------------------------------- values


def _array_payload(array: np.ndarray) -> dict:
    if array.dtype.name not in DTYPES:
        raise UnsupportedValue(f"arrays of dtype {array.dtype} cannot be graded")
    little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return {
        "dtype": array.dtype.name,
        "shape": list(array.shape),
        "data": base64.b64encode(little.tobytes()).decode("ascii"),
    }


def encode(value, depth: int = 0, table=None):
    """A JSON-able form of `value`; UnsupportedValue for anything that is not plain data.

    With `table` (the trusted side's ``objects.CallObjects``), models, optimizers, schedulers
    and functions become references to entries of that table.
    """
    if depth > MAX_DEPTH:
        raise UnsupportedValue("the value is nested too deeply")
    # Exact type checks first, then conversions that drop any subclass behaviour.
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        if len(value) > MAX_STRING:
            raise UnsupportedValue("a string is longer than the limit")
        return str(value)
    if isinstance(value, bytes):
        if len(value) > MAX_STRING:
            raise UnsupportedValue("a bytes value is longer than the limit")
        return {"__t": "bytes", "data": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        number = float(value)
        return number if math.isfinite(number) else {"__t": "float", "repr": repr(number)}
    if isinstance(value, np.ndarray):
        return {"__t": "ndarray", **_array_payload(np.asarray(value))}
    if isinstance(value, np.generic):
        return {"__t": "npscalar", **_array_payload(np.asarray(value))}
    if isinstance(value, list | tuple):
        items = [encode(item, depth + 1, table) for item in value]
        return items if isinstance(value, list) else {"__t": "tuple", "items": items}
    if isinstance(value, dict):
        pairs = []
        for key, item in value.items():
            if not isinstance(key, str | int) or isinstance(key, bool):
                raise UnsupportedValue(f"dict keys must be str or int, not {type(key).__name__}")
            pairs.append([encode(key, depth + 1), encode(item, depth + 1, table)])
        return {"__t": "dict", "items": pairs}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [[f.name, encode(getattr(value, f.name), depth + 1, table)]
                  for f in dataclasses.fields(value)]  # fmt: skip
        record = {"__t": "record", "fields": fields}
        name = kit_types.record_name(value)
        return record | {"class": name} if name else record
    torch_payload = _encode_torch(value, depth)
    if torch_payload is not None:
        return torch_payload
    reference = table.ref(value) if table is not None else None
    if reference is not None:
        return reference
    raise UnsupportedValue(
        f"a value of type {type(value).__name__} cannot cross the sandbox: only numbers, "
        "strings, bytes, lists, tuples, dicts, dataclasses, arrays and tensors can (and, as "
        "arguments, the models of grader/kit_types.py, torch optimizers and functions)"
    )


def _encode_torch(value, depth: int):
    torch = _torch_if_loaded()
    if torch is None:
        return None
    if isinstance(value, torch.Tensor):
        return _encode_tensor(value)
    if isinstance(value, torch.Generator):
        state = encode(value.get_state(), depth + 1)
        return {"__t": "generator", "device": str(value.device), "state": state}
    return None


def _encode_tensor(value) -> dict:
    torch = _torch_if_loaded()
    tensor = value.detach().cpu()
    dtype = str(tensor.dtype).removeprefix("torch.")
    travel = TORCH_ONLY_DTYPES.get(dtype)
    array = tensor.to(getattr(torch, travel)).numpy() if travel else tensor.resolve_conj().numpy()
    return {
        "__t": "tensor",
        "torch_dtype": dtype,
        "requires_grad": bool(value.requires_grad),
        **_array_payload(array),
    }


def _torch_if_loaded():
    # Only numpy problems run in the browser; torch is touched only if a torch problem loaded it.
    return sys.modules.get("torch")


class _Budget:
    """Counts elements decoded so far, so a value cannot exhaust memory by sheer size."""

    def __init__(self, limit: int = MAX_ELEMENTS):
        self.left = limit

    def spend(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise ProtocolError("the value holds more elements than the limit")


def _decode_array(payload: dict, budget: _Budget) -> np.ndarray:
    dtype_name, shape, data = payload.get("dtype"), payload.get("shape"), payload.get("data")
    if dtype_name not in DTYPES:
        raise ProtocolError(f"dtype {dtype_name!r} is not allowed")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_DEPTH
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
    ):
        raise ProtocolError(f"bad array shape {shape!r}")
    size = math.prod(shape)
    budget.spend(size)
    dtype = np.dtype(dtype_name).newbyteorder("<")
    if not isinstance(data, str) or len(data) > 4 * MAX_FRAME_BYTES // 3 + 4:
        raise ProtocolError("bad array data")
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        raise ProtocolError("array data is not base64") from None
    if len(raw) != size * dtype.itemsize:
        raise ProtocolError("array data does not match its shape and dtype")
    return np.frombuffer(raw, dtype=dtype).astype(dtype.newbyteorder("="), copy=True).reshape(shape)


Rebuild = Callable[[dict, Callable], object]


def decode(obj, depth: int = 0, budget: _Budget | None = None, rebuild: Rebuild | None = None):
    """Rebuild a value from `encode`'s form, refusing anything else.

    Objects (generators, references to the call's objects) are refused unless `rebuild` is
    given: the child passes one, called with the object's form and a function that decodes
    the values inside it.
    """
    budget = budget or _Budget()
    if depth > MAX_DEPTH:
        raise ProtocolError("the value is nested too deeply")
    if obj is None or isinstance(obj, bool | int | float):
        return obj
    if isinstance(obj, str):
        if len(obj) > MAX_STRING:
            raise ProtocolError("a string is longer than the limit")
        return obj
    if isinstance(obj, list):
        budget.spend(len(obj))
        return [decode(item, depth + 1, budget, rebuild) for item in obj]
    if not isinstance(obj, dict):
        raise ProtocolError(f"unexpected JSON value of type {type(obj).__name__}")
    tag = obj.get("__t")
    if tag == "float":
        if obj.get("repr") not in ("nan", "inf", "-inf"):
            raise ProtocolError("bad float")
        return float(obj["repr"])
    if tag in ("tuple", "dict"):
        items = obj.get("items")
        if not isinstance(items, list):
            raise ProtocolError(f"bad {tag}")
        budget.spend(len(items))
        if tag == "tuple":
            return tuple(decode(item, depth + 1, budget, rebuild) for item in items)
        result = {}
        for pair in items:
            if not isinstance(pair, list) or len(pair) != 2:
                raise ProtocolError("bad dict item")
            key = decode(pair[0], depth + 1, budget, rebuild)
            if not isinstance(key, str | int) or isinstance(key, bool):
                raise ProtocolError("bad dict key")
            result[key] = decode(pair[1], depth + 1, budget, rebuild)
        return result
    if tag == "bytes":
        data = obj.get("data")
        if not isinstance(data, str) or len(data) > 4 * MAX_STRING // 3 + 4:
            raise ProtocolError("bad bytes")
        try:
            return base64.b64decode(data, validate=True)
        except ValueError:
            raise ProtocolError("bytes data is not base64") from None
    if tag == "ndarray":
        return _decode_array(obj, budget)
    if tag == "npscalar":
        array = _decode_array(obj, budget)
        if array.shape != ():
            raise ProtocolError("a numpy scalar must have shape ()")
        return array[()]
    if tag == "tensor":
        return _decode_tensor(obj, budget)
    if tag == "record":
        return _decode_record(obj, lambda inner: decode(inner, depth + 1, budget, rebuild))
    if tag in ("generator", "ref") and rebuild is not None:
        return rebuild(obj, lambda inner: decode(inner, depth + 1, budget, rebuild))
    raise ProtocolError(f"unknown value tag {tag!r}")


def _decode_record(obj: dict, decode_inner: Callable):
    fields = obj.get("fields")
    if not isinstance(fields, list) or len(fields) > 256:
        raise ProtocolError("bad record")
    values = {}
    for pair in fields:
        if not isinstance(pair, list) or len(pair) != 2:
            raise ProtocolError("bad record field")
        name, value = pair
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
            raise ProtocolError(f"bad record field name {name!r}")
        values[name] = decode_inner(value)
    if "class" not in obj:
        return SimpleNamespace(**values)
    return _kit_record(obj["class"], values)


def _kit_record(name, values: dict):
    """A registered record class built from its fields (its own checks run on plain data)."""
    try:
        record_class = kit_types.record_class(name)
    except (LookupError, ImportError, TypeError):
        raise ProtocolError(f"{name!r} is not a record class the sandbox knows") from None
    allowed = {f.name for f in dataclasses.fields(record_class) if f.init}
    if not set(values) <= allowed:
        raise ProtocolError(f"{name} has no fields {sorted(set(values) - allowed)}")
    try:
        return record_class(**values)
    except Exception as exc:  # noqa: BLE001 - the class's own validation refused the values
        raise ProtocolError(f"not a valid {name}: {type(exc).__name__}: {exc}") from None


def _decode_tensor(obj: dict, budget: _Budget):
    import torch

    array = _decode_array(obj, budget)
    dtype_name = obj.get("torch_dtype")
    expected = TORCH_ONLY_DTYPES.get(dtype_name, dtype_name)
    if expected != array.dtype.name or not isinstance(
        getattr(torch, dtype_name, None), torch.dtype
    ):
        raise ProtocolError(f"bad tensor dtype {dtype_name!r}")
    tensor = torch.from_numpy(array).to(getattr(torch, dtype_name))
    if obj.get("requires_grad") is True and tensor.is_floating_point():
        tensor.requires_grad_(True)
    return tensor


def mutable_leaves(value, found: list | None = None) -> list:
    """The numpy arrays, torch tensors and generators in nested lists/tuples/dicts, in order.

    A registered record (``kit_types.RECORDS``) is a leaf itself (a field the student sets
    comes back), followed by the leaves of its fields in field order. Both sides walk the same
    arguments in the same order, so an index names the same array (or generator, or record) on
    each side, for in-place changes and gradients.
    """
    found = [] if found is None else found
    torch = _torch_if_loaded()
    if isinstance(value, np.ndarray) or (
        torch is not None and isinstance(value, torch.Tensor | torch.Generator)
    ):
        found.append(value)
    elif kit_types.record_name(value) is not None:
        found.append(value)
        for name in kit_types.record_fields(value):
            mutable_leaves(getattr(value, name), found)
    elif isinstance(value, list | tuple):
        for item in value:
            mutable_leaves(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            mutable_leaves(item, found)
    return found


# ---------------------------------------------------------------- exceptions


def describe_exception(exc: BaseException) -> dict:
    """Type, nearest builtin Exception type, and message of a student's exception."""
    builtin = "Exception"
    for klass in type(exc).__mro__:
        if getattr(builtins, klass.__name__, None) is klass and issubclass(klass, Exception):
            builtin = klass.__name__
            break
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - a student's __str__ may itself fail
        message = "<unprintable message>"
    return {
        "type": type(exc).__name__[:100],
        "builtin": builtin if isinstance(exc, Exception) else None,
        "message": message[:MAX_MESSAGE],
    }
