"""A test instrument: the calls of a solution that move data to the host or pin the CPU.

The tests run on a CPU-only machine, where a tensor sent through numpy or `.cpu()` comes back
on the right device by chance: the inputs are on the CPU too. On a GPU the same code leaves a
CPU tensor beside CUDA ones, and the next operation that mixes them raises. A probe runs the
solution under `HostTransfers` and returns what it saw, for the test to judge.

A host sync is allowed (`.item()`, `.tolist()`, `int(tensor)`): it reads a value, and what
it returns is a Python number, not a tensor on the wrong device. So is a device taken from a
tensor (`device=x.device`): only the string "cpu" pins the CPU.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

# Calls that hand a tensor's data to the host, or build a tensor from host memory.
TO_HOST = {
    torch.Tensor.cpu: "Tensor.cpu()",
    torch.Tensor.numpy: "Tensor.numpy()",
    torch.Tensor.__array__: "numpy.asarray(tensor)",
}  # torch.from_numpy takes no tensor and is not seen: its array came from one of these


def _names_the_cpu(device) -> bool:
    """A device spelled out as the CPU in the code ("cpu", "cpu:0"), not one read off a tensor
    (which is a torch.device, and may be the model's)."""
    return isinstance(device, str) and device.split(":")[0].strip() == "cpu"


class HostTransfers(TorchFunctionMode):
    """Records, in `seen`, each call that moves data to the host or pins the CPU."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = TO_HOST.get(func)
        if name is None:
            devices = [kwargs.get("device")]
            if func is torch.Tensor.to:  # x.to("cpu"), x.to("cpu", torch.float32)
                devices += list(args[1:2])
            if any(_names_the_cpu(device) for device in devices):
                name = f"{getattr(func, '__name__', func)}(device='cpu')"
        if name is not None and name not in self.seen:
            self.seen.append(name)
        return func(*args, **kwargs)


def advice(whose: str) -> str:
    """What a test says when `seen` is not empty; `whose`: "the model's", "the inputs'"."""
    return (
        f"keep tensors on {whose} device: on a GPU, what goes through numpy or .cpu() comes back "
        f"on the CPU, beside tensors on the GPU. Compute with torch on {whose} device "
        "(device=x.device, or *_like); do not go through numpy, .cpu() or device='cpu' "
        "(.item() and .tolist() are fine)"
    )
