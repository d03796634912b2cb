"""Objects a call hands over by reference: kit models, optimizers, LR schedulers, callbacks.

A test may hand a student's function a model to train, its optimizer and scheduler, and
functions of its own (a reward function, a schedule's lambda). None of them is plain data,
so each call carries a table of them (``"objects"`` in the call frame) and the arguments
name its entries (``{"__t": "ref", "index": i}``):

    module     a model of ``grader/kit_types.py``: class name, arguments, weights
    optimizer  SGD, Adam or AdamW: hyperparameters, its parameters as indices into the
               call's parameter leaves (the parameters of the table's models, in order), state
    scheduler  LambdaLR: its optimizer's entry, its lambdas' entries, its counters
    callback   a plain function of the test: the child gets a stub that asks the trusted
               side to call it with plain data (see ``launch.SandboxProcess.exchange``).
               The child may call it any number of times with any plain arguments, as the
               student's code could locally: a function handed over must keep no state that
               outlives its test (another student's test would see it).

The child rebuilds the table (``ChildObjects``); after the call it reports what changed
(``ChildObjects.updates``): parameters that moved, optimizers' state, schedulers' counters.
The trusted side (``CallObjects.apply``) validates each against the test's own object
(types, shapes, known keys) and copies it in, keeping every object's identity.
"""

from __future__ import annotations

import math
import sys
import types
from collections.abc import Callable

from grader import kit_types
from grader.sandbox.protocol import ProtocolError, UnsupportedValue, decode, encode

OPTIMIZERS = {
    "SGD": frozenset({"momentum_buffer"}),
    "Adam": frozenset({"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}),
    "AdamW": frozenset({"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}),
}  # class -> keys its per-parameter state may hold
SCHEDULERS = ("LambdaLR",)
SCHEDULER_COUNTERS = ("last_epoch", "_step_count", "_is_initial")  # what step() changes
MAX_OBJECTS = 64


def _torch():
    return sys.modules.get("torch")


def object_kind(value) -> str | None:
    """Which table entry `value` needs, or None for values that are not such objects."""
    if isinstance(value, types.FunctionType):
        return "callback"
    torch = _torch()
    if torch is None:
        return None
    if isinstance(value, torch.nn.Module):
        return "module"
    if isinstance(value, torch.optim.Optimizer):
        return "optimizer"
    if isinstance(value, torch.optim.lr_scheduler.LRScheduler):
        return "scheduler"
    return None


def param_leaves(objects: list) -> list:
    """The distinct parameters of the table's models, in table order (the same on both sides)."""
    torch, found, seen = _torch(), [], set()
    for obj in objects:
        if torch is not None and isinstance(obj, torch.nn.Module):
            for param in obj.parameters():
                if id(param) not in seen:
                    seen.add(id(param))
                    found.append(param)
    return found


# ---------------------------------------------------------------- the trusted side


class CallObjects:
    """The table of one call, built while its arguments are encoded (``encode(..., table=)``)."""

    def __init__(self, callback_ids: Callable[[], int]):
        self.items: list = []
        self.index: dict[int, int] = {}  # id(object) -> its entry
        self.callbacks: dict[int, Callable] = {}  # callback id -> the test's function
        self._callback_ids = callback_ids

    def ref(self, value) -> dict | None:
        """A reference to `value`'s entry (added if new); None if it needs none."""
        kind = object_kind(value)
        if kind is None:
            return None
        if kind == "module" and kit_types.model_name(value) is None:
            raise UnsupportedValue(
                f"the model class {type(value).__name__} is not one the sandbox rebuilds"
            )
        if id(value) not in self.index:
            if len(self.items) >= MAX_OBJECTS:
                raise UnsupportedValue("too many models, optimizers and functions in one call")
            self.index[id(value)] = len(self.items)
            self.items.append(value)
        return {"__t": "ref", "index": self.index[id(value)]}

    def encode_table(self) -> list:
        """Every entry's plain form. Optimizers last: they name parameters of all the models."""
        entries: dict[int, dict] = {}
        i = 0
        while i < len(self.items):  # entries may add entries (a wrapped model, a lambda)
            if object_kind(self.items[i]) != "optimizer":
                entries[i] = self._entry(self.items[i])
            i += 1
        params = {id(p): n for n, p in enumerate(param_leaves(self.items))}
        for i, item in enumerate(self.items):
            if i not in entries:
                entries[i] = _optimizer_entry(item, params)
        return [entries[i] for i in range(len(self.items))]

    def _entry(self, value) -> dict:
        kind = object_kind(value)
        if kind == "callback":
            callback_id = self._callback_ids()
            self.callbacks[callback_id] = value
            return {"kind": "callback", "id": callback_id}
        if kind == "module":
            return {
                "kind": "module",
                "class": kit_types.model_name(value),
                "kwargs": encode(kit_types.describe_model(value), table=self),
                "state": encode(dict(value.state_dict())),
                "requires_grad": [bool(p.requires_grad) for p in value.parameters()],
                "training": bool(value.training),
            }
        return self._scheduler_entry(value)

    def _scheduler_entry(self, scheduler) -> dict:
        name = type(scheduler).__name__
        if name not in SCHEDULERS or type(scheduler) is not getattr(
            _torch().optim.lr_scheduler, name
        ):
            raise UnsupportedValue(f"the scheduler {name} cannot cross the sandbox (LambdaLR can)")
        counters = _counters(scheduler)
        return {
            "kind": "scheduler",
            "class": name,
            "optimizer": self.ref(scheduler.optimizer)["index"],
            "lambdas": [encode(f, table=self) for f in scheduler.lr_lambdas],
            "state": encode(
                counters
                | {"base_lrs": list(scheduler.base_lrs), "_last_lr": list(scheduler._last_lr)}
            ),
        }

    # ------------------------------------------------------------ after the call

    def apply(self, params_changed: list, updates: list) -> None:
        """Copy the child's changes into the test's objects; ValueError if any is not valid."""
        params = param_leaves(self.items)
        for index, encoded in params_changed:
            _copy_param(_at(params, index), decode(encoded))
        for index, update in updates:
            target = _at(self.items, index)
            kind = object_kind(target)
            if kind == "optimizer":
                _apply_optimizer(target, decode(update), params)
            elif kind == "scheduler":
                _apply_scheduler(target, decode(update))
            else:
                raise ValueError(f"entry {index} cannot change")


def _at(items: list, index):
    """items[index] for an index the child sent: a plain int in range, never negative."""
    if type(index) is not int or not 0 <= index < len(items):
        raise ValueError(f"no entry {index!r}")
    return items[index]


def _optimizer_entry(optimizer, params: dict[int, int]) -> dict:
    name = type(optimizer).__name__
    if name not in OPTIMIZERS or type(optimizer) is not getattr(_torch().optim, name):
        raise UnsupportedValue(
            f"the optimizer {name} cannot cross the sandbox (SGD, Adam and AdamW can)"
        )
    groups = []
    for group in optimizer.param_groups:
        if any(id(p) not in params for p in group["params"]):
            raise UnsupportedValue(
                "an optimizer's parameters must be those of a model passed along"
            )
        options = {k: v for k, v in group.items() if k != "params"}
        groups.append({"params": [params[id(p)] for p in group["params"]],
                       "options": encode(options)})  # fmt: skip
    state = [
        [params[id(p)], encode(dict(s))] for p, s in optimizer.state.items() if id(p) in params
    ]
    return {"kind": "optimizer", "class": name, "groups": groups, "state": state}


def _copy_param(param, new) -> None:
    torch = _torch()
    if not isinstance(new, torch.Tensor) or new.shape != param.shape or new.dtype != param.dtype:
        raise ValueError("a parameter changed its type, shape or dtype")
    with torch.no_grad():
        param.copy_(new)


def _apply_optimizer(optimizer, update, params: list) -> None:
    """The child's optimizer state and learning rates, checked, into the test's optimizer."""
    allowed = OPTIMIZERS[type(optimizer).__name__]
    own = {id(p) for group in optimizer.param_groups for p in group["params"]}
    if not isinstance(update, dict) or set(update) != {"state", "groups"}:
        raise ValueError("malformed optimizer update")
    state = {}
    for index, values in update["state"]:
        param = _at(params, index)
        if id(param) not in own or not isinstance(values, dict) or not set(values) <= allowed:
            raise ValueError("optimizer state for a parameter it does not hold, or unknown keys")
        for key, value in values.items():
            if not _valid_state(key, value, param):
                raise ValueError(f"optimizer state {key!r} has the wrong type or shape")
        state[param] = values
    _apply_groups(optimizer.param_groups, update["groups"])
    optimizer.state.clear()
    optimizer.state.update(state)


def _valid_state(key: str, value, param) -> bool:
    """A float tensor shaped like the parameter (a 0-d one for "step"); SGD's may be None."""
    if value is None:
        return key == "momentum_buffer"
    shape = () if key == "step" else tuple(param.shape)
    torch = _torch()
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.shape == shape


def _same_kind(old, new) -> bool:
    """A hyperparameter the child may change: a number for a number, a flag for a flag."""
    if isinstance(old, bool) or isinstance(new, bool):
        return type(old) is type(new)
    if isinstance(old, int | float) and isinstance(new, int | float):
        return math.isfinite(new)
    if isinstance(old, tuple) and isinstance(new, tuple) and len(old) == len(new):
        return all(_same_kind(a, b) for a, b in zip(old, new, strict=True))
    return False


def _apply_groups(groups: list[dict], new_groups) -> None:
    if not isinstance(new_groups, list) or len(new_groups) != len(groups):
        raise ValueError("the optimizer's parameter groups changed")
    for group, new in zip(groups, new_groups, strict=True):
        if not isinstance(new, dict):
            raise ValueError("malformed parameter group")
        for key, value in new.items():
            if key != "params" and key in group and _same_kind(group[key], value):
                group[key] = value


def _counters(scheduler) -> dict:
    return {key: getattr(scheduler, key) for key in SCHEDULER_COUNTERS if hasattr(scheduler, key)}


def _apply_scheduler(scheduler, update) -> None:
    if not isinstance(update, dict):
        raise ValueError("malformed scheduler update")
    for key, value in _counters(scheduler).items():
        new = update.get(key)
        if type(new) is not type(value):
            raise ValueError(f"scheduler {key} must be {type(value).__name__}")
        setattr(scheduler, key, new)
    last_lr = update.get("_last_lr")
    if (
        not isinstance(last_lr, list)
        or len(last_lr) != len(scheduler.base_lrs)
        or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in last_lr)
    ):
        raise ValueError("scheduler _last_lr must be one number per parameter group")
    scheduler._last_lr = [float(x) for x in last_lr]


# ---------------------------------------------------------------- the child's side


class ChildObjects:
    """The table rebuilt in the child. `callback(id, args, kwargs)` asks the trusted side."""

    def __init__(self, entries: list, callback: Callable):
        if not isinstance(entries, list) or len(entries) > MAX_OBJECTS:
            raise ProtocolError("bad object table")
        self.entries, self.callback = entries, callback
        self.items: list = [None] * len(entries)
        self.building: set[int] = set()
        kinds = [e.get("kind") if isinstance(e, dict) else None for e in entries]
        # Models first (on demand, for wrapped ones), then what refers to their parameters.
        for kind in ("module", "callback", "optimizer", "scheduler"):
            if kind == "optimizer":
                self.params = param_leaves(self.items)
            for i, entry_kind in enumerate(kinds):
                if entry_kind == kind:
                    self.get(i)
        if any(item is None for item in self.items):
            raise ProtocolError("an object of the table has an unknown kind")
        self.before = [tensor_bytes(p) for p in self.params]

    def get(self, index, kind: str | None = None):
        if not isinstance(index, int) or not 0 <= index < len(self.items):
            raise ProtocolError("a reference to no object")
        entry = self.entries[index]
        if kind is not None and entry.get("kind") != kind:
            raise ProtocolError(f"object {index} is not a {kind}")
        if self.items[index] is None:
            if index in self.building:
                raise ProtocolError("objects refer to each other in a cycle")
            self.building.add(index)
            build = {"module": self._module, "callback": self._callback,
                     "optimizer": self._optimizer, "scheduler": self._scheduler}  # fmt: skip
            self.items[index] = build[entry["kind"]](entry)
        return self.items[index]

    def resolve(self, obj: dict, decode_inner: Callable):
        """`decode`'s hook for a reference in the arguments."""
        return self.get(obj.get("index"))

    def _module(self, entry: dict):
        kwargs = decode(entry["kwargs"], rebuild=lambda o, _: self.get(o.get("index"), "module"))
        model = kit_types.build_model(entry["class"], kwargs)
        model.load_state_dict(decode(entry["state"]))
        for param, flag in zip(model.parameters(), entry["requires_grad"], strict=True):
            param.requires_grad_(bool(flag))
        return model.train(bool(entry["training"]))

    def _callback(self, entry: dict):
        callback_id = entry["id"]
        ask = self.callback

        def stub(*args, **kwargs):
            return ask(callback_id, args, kwargs)

        return stub

    def _optimizer(self, entry: dict):
        torch = _torch()
        if entry["class"] not in OPTIMIZERS:
            raise ProtocolError(f"cannot rebuild an optimizer {entry['class']!r}")
        groups = [decode(g["options"]) | {"params": [self.params[i] for i in g["params"]]}
                  for g in entry["groups"]]  # fmt: skip
        optimizer = getattr(torch.optim, entry["class"])(groups)
        for index, values in entry["state"]:
            optimizer.state[self.params[index]] = decode(values)
        return optimizer

    def _scheduler(self, entry: dict):
        torch = _torch()
        if entry["class"] not in SCHEDULERS:
            raise ProtocolError(f"cannot rebuild a scheduler {entry['class']!r}")
        optimizer = self.get(entry["optimizer"], "optimizer")
        lrs = [group["lr"] for group in optimizer.param_groups]
        # Built with stand-in lambdas (its first step calls them), then given the test's state.
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
        for group, lr in zip(optimizer.param_groups, lrs, strict=True):
            group["lr"] = lr
        for key, value in decode(entry["state"]).items():
            setattr(scheduler, key, value)
        scheduler.lr_lambdas = [self.get(ref["index"], "callback") for ref in entry["lambdas"]]
        return scheduler

    def updates(self) -> tuple[list, list]:
        """(parameters that changed, optimizer and scheduler states), in plain form."""
        params = [[i, encode(p.detach())] for i, p in enumerate(self.params)
                  if tensor_bytes(p) != self.before[i]]  # fmt: skip
        states = []
        for i, item in enumerate(self.items):
            kind = object_kind(item)
            if kind == "optimizer":
                states.append([i, encode(_optimizer_update(item, self.params))])
            elif kind == "scheduler":
                counters = _counters(item)
                states.append([i, encode(counters | {"_last_lr": list(item._last_lr)})])
        return params, states


def tensor_bytes(tensor) -> bytes:
    """A tensor's raw bytes, whatever its dtype (numpy lacks bfloat16): what a change changes."""
    torch = _torch()
    return tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def _optimizer_update(optimizer, params: list) -> dict:
    index = {id(p): i for i, p in enumerate(params)}
    state = [[index[id(p)], dict(s)] for p, s in optimizer.state.items() if id(p) in index]
    groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    return {"state": state, "groups": groups}
