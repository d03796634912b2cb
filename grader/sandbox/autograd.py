"""Gradients through the sandbox boundary, for torch problems whose tests call ``.backward()``.

A call whose tensor arguments require grad runs inside a custom ``torch.autograd.Function``:
its forward asks the child for the value (the child keeps that call's graph), and its
backward sends ``grad_output`` to the child, which answers with the gradients of the inputs
as plain arrays. A tampered child can only send wrong numbers, which the tests then judge;
torch itself checks that each gradient has its input's shape.
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


def needs_bridge(args: tuple, kwargs: dict) -> bool:
    torch = sys.modules.get("torch")
    return bool(torch and torch.is_grad_enabled() and tensors_requiring_grad([list(args), kwargs]))


@functools.cache
def _function_class():
    import torch

    class SandboxCall(torch.autograd.Function):
        @staticmethod
        def forward(ctx, submission, call, *inputs):
            name, args, kwargs = call
            reply = submission.call(name, args, kwargs, keep_graph=True)
            value = submission.value(reply)
            outputs = value if isinstance(value, tuple | list) else (value,)
            flags = reply.get("differentiable") or []
            frozen = [
                out
                for out, flag in zip(outputs, flags, strict=False)
                if isinstance(out, torch.Tensor) and flag is not True
            ]
            if frozen:
                ctx.mark_non_differentiable(*frozen)
            ctx.submission, ctx.call_id = submission, reply["id"]
            ctx.inputs = [(tuple(t.shape), t.dtype) for t in inputs]
            return tuple(value) if isinstance(value, list) else value

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


def bridged_call(submission, name: str, args: tuple, kwargs: dict):
    """Call `name` in the child so that gradients flow back to the tensors in args/kwargs."""
    inputs = tensors_requiring_grad([list(args), kwargs])
    return _function_class().apply(submission, (name, args, kwargs), *inputs)
