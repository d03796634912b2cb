"""The sandboxed side: import one submission, then answer calls with plain data.

Started by ``launch.py`` as ``python -I -m grader.sandbox.child CONFIG_JSON`` inside bubblewrap.
Everything this process says is untrusted: the student's code runs here and may rewrite any
of it. That is fine, because the trusted side only accepts validated plain data from it and
judges that data itself. The limits below protect the machine, not the verdict.
"""

from __future__ import annotations

import builtins
import json
import os
import resource
import sys
import types

from grader import kit_types
from grader.sandbox.autograd import grad_inputs
from grader.sandbox.objects import ChildObjects, tensor_bytes
from grader.sandbox.protocol import (
    ProtocolError,
    UnsupportedValue,
    decode,
    describe_exception,
    encode,
    mutable_leaves,
    read_frame,
    write_frame,
)

MAX_KEPT_GRAPHS = 1024  # gradcheck makes ~2 calls per input element before its backward


def _vm_size_bytes() -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 30


def count_processes(uid: int) -> int:
    """How many processes of `uid` this process's /proc shows."""
    count = 0
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                count += 1
        except OSError:
            continue
    return count


def _processes_already_counted(host: dict | None) -> int:
    """How many processes of our uid RLIMIT_NPROC already counts (it counts them all).

    Our /proc shows only our PID namespace. That is the right count when bwrap made a new
    user namespace too (the kernel counts per user namespace); under a setuid bwrap it is
    not, and the count the trusted side took outside (`host`) is the one that matters.
    """
    own = count_processes(os.getuid())
    if host is None:
        return own
    try:
        same_userns = os.stat("/proc/self/ns/user").st_ino == host["userns"]
    except OSError:
        same_userns = True
    return max(own, int(host["processes"])) if same_userns else own


def _drop_privileges(uid: int | None) -> None:
    # Root ignores RLIMIT_NPROC, so a fork bomb is only contained once we are someone else.
    if uid is not None and os.getuid() == 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


def _set_limits(limits: dict, host: dict | None = None) -> None:
    cpu = int(limits["cpu_s"]) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    # Address space counts what the interpreter and libraries already mapped (torch maps a lot),
    # so the student's allowance is added on top of the current size.
    address_space = _vm_size_bytes() + int(limits["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    file_size = int(limits["fsize_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    processes = int(limits["nproc"])
    if os.getuid() != 0:
        processes += _processes_already_counted(host)
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))


def _load_submission(path: str, module_name: str) -> types.ModuleType:
    with open(path, "rb") as file:
        data = file.read()
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{os.path.basename(path)} is not UTF-8 text") from None
    module = types.ModuleType(module_name)
    module.__file__ = path
    sys.modules[module_name] = module  # dataclasses and typing look their module up here
    exec(compile(source, os.path.basename(path), "exec"), module.__dict__)
    return module


def _describe_names(module: types.ModuleType, names: list[str]) -> dict[str, str]:
    found = {}
    for name in names:
        value = getattr(module, name, None)
        found[name] = "missing" if value is None else "ok" if callable(value) else "not callable"
    return found


def _rebuilder(objects: ChildObjects):
    """`decode`'s hook: a torch Generator from its state, or an object of the call's table."""

    def rebuild(obj: dict, decode_inner):
        if obj["__t"] == "ref":
            return objects.resolve(obj, decode_inner)
        if obj.get("device") != "cpu":
            raise ProtocolError(f"a generator on {obj.get('device')!r} cannot be rebuilt here")
        generator = sys.modules["torch"].Generator()
        generator.set_state(decode_inner(obj.get("state")))
        return generator

    return rebuild


def _state(leaf):
    """What an in-place change alters: a generator's state, or the array itself."""
    return leaf.get_state() if hasattr(leaf, "get_state") else leaf


def _fields(record) -> tuple:
    return tuple(getattr(record, name) for name in kit_types.record_fields(record))


def _mutation(leaf, before):
    """The plain form of how `leaf` changed in place (a record: its reassigned fields)."""
    if kit_types.record_name(leaf) is None:
        return None if _fingerprint(leaf) == before else encode(_state(leaf))
    names = kit_types.record_fields(leaf)
    changed = {name: getattr(leaf, name) for name, old in zip(names, before, strict=True)
               if getattr(leaf, name) is not old}  # fmt: skip
    return encode(changed) if changed else None


def _fingerprint(leaf) -> tuple:
    if kit_types.record_name(leaf) is not None:  # the field values themselves, by identity
        return _fields(leaf)
    if hasattr(leaf, "get_state"):  # a torch Generator
        return ("generator", leaf.get_state().numpy().tobytes())
    if hasattr(leaf, "detach"):  # a torch tensor
        return tuple(leaf.shape), str(leaf.dtype), tensor_bytes(leaf)
    return leaf.shape, leaf.dtype.str, leaf.tobytes()


class Server:
    """Answers the trusted side's requests, one at a time, on the protocol pipes.

    One child serves all the problems of one student: each problem's file is imported when
    the trusted side first asks for it (``load``), then called by module and name.
    """

    def __init__(self, proto_in: int, proto_out: int):
        self.proto_in, self.proto_out = proto_in, proto_out
        self.modules: dict[str, types.ModuleType] = {}
        self.graphs: dict[int, tuple[list, list]] = {}

    def callback(self, callback_id: int, args: tuple, kwargs: dict):
        """Call a function of the test: the trusted side runs it on the plain data we send."""
        write_frame(self.proto_out, {"callback": callback_id, "args": encode(list(args)),
                                     "kwargs": encode(dict(kwargs))})  # fmt: skip
        reply = read_frame(self.proto_in)
        if "error" in reply:
            error = reply["error"] if isinstance(reply["error"], dict) else {}
            klass = getattr(builtins, str(error.get("builtin")), None)
            if not (isinstance(klass, type) and issubclass(klass, Exception)):
                klass = RuntimeError
            raise klass(f"{error.get('type')}: {error.get('message')}")
        return decode(reply.get("value"))

    def serve(self) -> None:
        handlers = {
            "load": self.load,
            "call": self.call,
            "backward": self.backward,
        }
        while True:
            try:
                request = read_frame(self.proto_in)
            except EOFError:
                return
            handler = handlers.get(request.get("op"))
            try:
                reply = handler(request) if handler else {"error": {"type": "ProtocolError"}}
            except BaseException as exc:  # noqa: BLE001 - the student's code may raise anything
                reply = {"error": describe_exception(exc)}
                if isinstance(exc, SyntaxError):
                    reply["error"]["line"] = exc.lineno
            reply["id"] = request.get("id")
            try:
                write_frame(self.proto_out, reply)
            except UnsupportedValue as exc:
                write_frame(
                    self.proto_out, {"id": request.get("id"), "error": describe_exception(exc)}
                )

    def load(self, request: dict) -> dict:
        module = _load_submission(request["path"], request["module"])
        self.modules[request["module"]] = module
        return {"names": _describe_names(module, request["names"])}

    def call(self, request: dict) -> dict:
        objects = ChildObjects(request.get("objects", []), self.callback)
        args = decode(request["args"], rebuild=_rebuilder(objects))
        kwargs = decode(request["kwargs"], rebuild=_rebuilder(objects))
        function = getattr(self.modules[request["module"]], request["name"])
        leaves = mutable_leaves([args, kwargs])
        before = [_fingerprint(leaf) for leaf in leaves]
        inputs = grad_inputs([args, kwargs], objects.params)  # as the trusted side lists them
        # torch's global generator continues from the test's, so torch.manual_seed works.
        # Set after rebuilding the arguments: a model's constructor may draw from it.
        if "torch_rng" in request:
            sys.modules["torch"].set_rng_state(decode(request["torch_rng"]))
        result = function(*args, **kwargs)
        # In-place changes to arguments go back too, so tests that forbid them still see them,
        # and so do the models' parameters, optimizers' state and schedulers' counters.
        changes = [[i, _mutation(leaf, before[i])] for i, leaf in enumerate(leaves)]
        params, states = objects.updates()
        reply = {"mutated": [c for c in changes if c[1] is not None], "params": params,
                 "objects": states}  # fmt: skip
        if "torch_rng" in request:
            reply["torch_rng"] = encode(sys.modules["torch"].get_rng_state())
        if not request.get("keep_graph"):
            return reply | {"value": encode(result)}
        return reply | self._keep_graph(request["id"], inputs, result)

    def _keep_graph(self, call_id: int, inputs: list, result) -> dict:
        torch = sys.modules["torch"]
        outputs = list(result) if isinstance(result, tuple | list) else [result]
        if not all(isinstance(out, torch.Tensor) for out in outputs):
            return {"value": encode(result), "differentiable": [False] * len(outputs)}
        differentiable = [bool(out.requires_grad) for out in outputs]
        self.graphs[call_id] = (inputs, outputs)
        while len(self.graphs) > MAX_KEPT_GRAPHS:
            self.graphs.pop(next(iter(self.graphs)))
        return {"value": encode(result), "differentiable": differentiable}

    def backward(self, request: dict) -> dict:
        torch = sys.modules["torch"]
        if request["call"] not in self.graphs:
            raise LookupError(f"the graph of call {request['call']} is no longer kept")
        # Kept, not popped: gradcheck and double-checking tests run backward more than once.
        inputs, outputs = self.graphs[request["call"]]
        grads = decode(request["grads"])
        pairs = [(o, g) for o, g in zip(outputs, grads, strict=True) if g is not None]
        pairs = [(o, g) for o, g in pairs if o.requires_grad]
        if not pairs or not inputs:
            return {"value": [None] * len(inputs)}
        got = torch.autograd.grad(
            [o for o, _ in pairs],
            inputs,
            [g for _, g in pairs],
            allow_unused=True,
            retain_graph=True,
        )
        return {"value": encode(list(got))}


def main() -> None:
    config = json.loads(sys.argv[1])
    # Keep the protocol on private descriptors; the student's prints go to stderr, which the
    # trusted side drains into a capped buffer.
    proto_in, proto_out = os.dup(0), os.dup(1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)
    if config["torch"]:
        import torch

        torch.set_num_threads(1)
    _drop_privileges(config["uid"])
    _set_limits(config["limits"], config.get("host"))
    write_frame(proto_out, {"ready": True})
    Server(proto_in, proto_out).serve()


if __name__ == "__main__":
    main()
