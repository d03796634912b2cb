"""Gradients through the sandbox boundary, for torch problems whose tests call ``.backward()``.

A call whose inputs require grad (tensor arguments, or the parameters of a model passed
along) asks the child to keep that call's graph. When the call returns differentiable
tensors, they are handed out by a custom ``torch.autograd.Function`` whose backward sends
``grad_output`` to the child, which answers with the gradients of the inputs as plain arrays;
torch then accumulates them into the test's tensors and parameters. A tampered child can only
send wrong numbers, which the tests then judge; torch itself checks that each gradient has
its input's shape.
"""

from __future__ import annotations

import functools
import sys

from grader.sandbox.protocol import encode, mutable_leaves


def tensors_requiring_grad(value) -> list:
    """Tensors requiring grad in (args, kwargs), in the order the child lists them too."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    leaves = mutable_leaves(value)
    return [t for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad]


def grad_inputs(value, params: list) -> list:
    """What gradients flow to: tensors requiring grad in (args, kwargs), then parameters."""
    return tensors_requiring_grad(value) + [p for p in params if p.requires_grad]


def needs_graph(inputs: list) -> bool:
    torch = sys.modules.get("torch")
    return bool(torch and torch.is_grad_enabled() and inputs)


@functools.cache
def _function_class():
    import torch

    class SandboxCall(torch.autograd.Function):
        @staticmethod
        def forward(ctx, submission, call, *inputs):
            call_id, outputs, flags = call
            frozen = [out for out, flag in zip(outputs, flags, strict=False) if flag is not True]
            if frozen:
                ctx.mark_non_differentiable(*frozen)
            ctx.submission, ctx.call_id = submission, call_id
            ctx.inputs = [(tuple(t.shape), t.dtype) for t in inputs]
            return tuple(outputs)

        @staticmethod
        def backward(ctx, *grad_outputs):
            from grader.sandbox.proxy import SubmissionError

            grads = [None if g is None else g.detach() for g in grad_outputs]
            reply = ctx.submission.request(
                {"op": "backward", "call": ctx.call_id, "grads": encode(grads)}
            )
            if "error" in reply:
                raise SubmissionError(
                    f"computing gradients failed: {reply['error'].get('message')}"
                )
            got = ctx.submission.value(reply)
            if not isinstance(got, list) or len(got) != len(ctx.inputs):
                raise SubmissionError("the sandbox returned the wrong number of gradients")
            for grad in got:
                if grad is not None and not isinstance(grad, torch.Tensor):
                    raise SubmissionError("the sandbox returned a gradient that is not a tensor")
            return (None, None, *got)

    return SandboxCall


def connect(submission, reply: dict, value, inputs: list):
    """`value` (the call's result) with its tensors connected to `inputs` through the child.

    Results that are not all tensors, or that nothing is differentiable in, come back as they
    are: the child keeps no graph for them.
    """
    torch = sys.modules["torch"]
    outputs = list(value) if isinstance(value, tuple | list) else [value]
    flags = reply.get("differentiable") or []
    if not outputs or not all(isinstance(o, torch.Tensor) for o in outputs) or True not in flags:
        return value
    connected = _function_class().apply(submission, (reply["id"], outputs, flags), *inputs)
    if not isinstance(value, tuple | list):
        return connected[0]
    return list(connected) if isinstance(value, list) else connected
