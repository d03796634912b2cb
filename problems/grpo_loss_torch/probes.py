"""Probes for grpo_loss: they run beside the solution, where autograd graphs exist.

Each builds fresh leaf tensors from the case it is given, calls the solution's grpo_loss, calls
backward the way a trainer does, and returns plain data: the losses (detached) and the
gradients that reached each input. The tests judge that data against the statement's formula.
"""

from __future__ import annotations

import contextlib

import torch

from grader.errors import UnexpectedResult
from problems.support.host_transfers import HostTransfers

INPUTS = ("logp", "logp_old", "logp_ref", "advantages", "mask")


def _leaves(case: dict, grad: tuple[str, ...]) -> dict:
    """Fresh copies of the case's tensors; those named in `grad` require grad."""
    leaves = {}
    for name in INPUTS:
        tensor = case[name].detach().clone()
        leaves[name] = tensor.requires_grad_(name in grad)
    return leaves


def _checked(loss) -> torch.Tensor:
    if not isinstance(loss, torch.Tensor):
        raise UnexpectedResult(
            f"grpo_loss should return a torch tensor, got {type(loss).__name__}: return the "
            "tensor itself, not loss.item()"
        )
    return loss


def backward(solution, case: dict, grad=("logp",), same_as_logp=(), default_device=None,
             watch_host=False, **options) -> dict:  # fmt: skip
    """One call and one backward pass, as in a training step.

    `grad` names the inputs that require grad; `same_as_logp` names inputs that receive the
    very tensor passed as `logp` (a caller passing logp itself as logp_old, say);
    `default_device` is torch's default device during the call. Returns the loss, whether it
    is attached to a graph, and each input's gradient (None if none arrived); with
    `watch_host`, also the calls that moved data to the host (problems/support/host_transfers.py).
    """
    leaves = _leaves(case, tuple(grad))
    inputs = {name: leaves["logp"] if name in same_as_logp else leaves[name] for name in INPUTS}
    default = contextlib.nullcontext() if default_device is None else torch.device(default_device)
    host = HostTransfers() if watch_host else contextlib.nullcontext()
    with default, host:
        loss = _checked(solution.grpo_loss(**inputs, **options))
    attached = loss.requires_grad
    if attached and loss.ndim == 0:
        loss.backward()
    return {
        "loss": loss.detach().clone(),
        "requires_grad": attached,
        "grads": {name: leaves[name].grad for name in INPUTS if leaves[name].requires_grad},
        "host_transfers": host.seen if watch_host else None,
    }


def micro_batches(solution, case: dict, rows: list, **options) -> dict:
    """Gradient accumulation: one call and one backward pass per slice of rows (start, stop),
    every slice of the same logp leaf, whose gradient sums over the calls."""
    logp = case["logp"].detach().clone().requires_grad_(True)
    losses = []
    for start, stop in rows:
        part = {name: case[name][start:stop] for name in INPUTS if name != "logp"}
        loss = _checked(solution.grpo_loss(logp[start:stop], **part, **options))
        if not loss.requires_grad:
            raise UnexpectedResult("grpo_loss returned a loss that is cut from the graph of logp")
        loss.backward()
        losses.append(loss.detach().clone())
    return {"losses": losses, "grad": logp.grad}
