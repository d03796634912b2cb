"""Probes of sample_group: kit code that runs beside the solution (see grader/loader.py).

A model or a torch.Generator cannot travel between a test and a solution, so the test sends
plain data (a toy model's spec, a seed) and `sample` builds the objects here, calls the
solution, and returns plain data for the test to judge: the samples, how the model was
called, and the state the call left behind.
"""

from __future__ import annotations

import contextlib

import torch

from grader.errors import UnexpectedResult
from problems.support.host_transfers import HostTransfers
from problems.support.toy_models import (
    CachedContextLM,
    build,
    calls_of,
    parameter_state,
    state_changes,
)

FIELDS = ("completion_ids", "completion_mask", "logprobs")


class NoCacheReturnedLM(CachedContextLM):
    """CachedContextLM that takes `past_key_values` and `use_cache` but returns no cache
    (``past_key_values=None``), as a Hugging Face model does under gradient checkpointing: a
    sampler must feed it the whole sequence at every step. Its logits are ContextLM's."""

    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=False):
        return super().forward(input_ids, attention_mask, past_key_values, use_cache=False)


def _build(spec):
    """toy_models.build, and this problem's own NoCacheReturnedLM."""
    if isinstance(spec, dict) and spec.get("kind") == "NoCacheReturnedLM":
        return NoCacheReturnedLM(**{key: value for key, value in spec.items() if key != "kind"})
    return build(spec)


def sample(
    solution,
    model: dict,
    prompt_ids: torch.Tensor,
    num_generations,
    max_new_tokens,
    eos_ids,
    *,
    seed: int | None = 0,
    global_seed: int = 0,
    train: bool = True,
    device: str | None = None,
    default_device: str | None = None,
    autograd: bool = True,
    positional: bool = False,
    frozen: bool = False,
    watch_host: bool = False,
    **settings,
) -> dict:
    """Sample with the toy model `model` (a spec, see problems/support/toy_models.py).

    `seed` seeds the torch.Generator handed to the solution (None: no generator is given;
    `positional`: every argument is given in the statement's order, none by name);
    the global generator is seeded with `global_seed` either way. `train` is the mode the
    model is handed over in, `device` where its weights live, `default_device` torch's default
    device during the call (as a CPU default is, for a model on a GPU), `autograd` whether
    autograd is on when the call starts (as its caller left it), `frozen` whether the model's
    first parameter comes frozen (requires_grad off, as a frozen embedding is) and the others
    with gradients; `watch_host` whether the result's "host_transfers" lists the calls that
    moved data to the host (see problems/support/host_transfers.py). `settings` (temperature,
    top_k, top_p) are passed on as they are.
    """
    net = _build(model).train(train)
    if device is not None:
        net = net.to(device)
    if frozen:  # the others hold the gradients of a caller accumulating them
        next(net.parameters()).requires_grad_(False)
        for parameter in net.parameters():
            if parameter.requires_grad:
                parameter.grad = torch.ones_like(parameter)
    weights = {name: value.detach().clone() for name, value in net.state_dict().items()}
    kept = parameter_state(net)
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    torch.manual_seed(global_seed)
    grad_enabled = torch.is_grad_enabled()
    default = contextlib.nullcontext() if default_device is None else torch.device(default_device)
    host = HostTransfers() if watch_host else contextlib.nullcontext()
    try:
        torch.set_grad_enabled(autograd)
        with default, host:
            if positional:
                out = solution.sample_group(
                    net, prompt_ids, num_generations, max_new_tokens, eos_ids,
                    settings["temperature"], settings["top_k"], settings["top_p"], generator,
                )  # fmt: skip
            else:
                out = solution.sample_group(
                    net, prompt_ids, num_generations, max_new_tokens, eos_ids,
                    generator=generator, **settings,
                )  # fmt: skip
        after = {
            "grad_enabled_after": torch.is_grad_enabled(),
            "inference_mode_after": torch.is_inference_mode_enabled(),
            # Where the call left its random source (the global one when none was given).
            "next_draw": float(torch.rand((), generator=generator)),
        }
    finally:
        torch.set_grad_enabled(grad_enabled)  # whatever the solution did, later tests run as usual
    model_device = next(net.parameters()).device
    result = {name: _field(out, name, model_device) for name in FIELDS}
    return result | after | {
        "calls": calls_of(net),
        "prompt_ids_after": prompt_ids,
        "training_after": net.training,
        "weights_changed": [name for name, value in net.state_dict().items()
                            if not torch.equal(value, weights[name])],
        "parameters_changed": state_changes(kept, parameter_state(net)),
        "backward_error": _backward_error(result["completion_ids"]),
        "host_transfers": host.seen if watch_host else None,
    }  # fmt: skip


def _field(out, name: str, device: torch.device) -> torch.Tensor:
    value = getattr(out, name, None)
    if not isinstance(value, torch.Tensor):
        raise UnexpectedResult(
            f"sample_group should return a SampledGroup whose {name} is a torch tensor, got "
            f"{type(out).__name__} with {name} = {type(value).__name__}"
        )
    if value.device != device:
        raise UnexpectedResult(
            f"{name} is on {value.device}, but the model on {device}: create the outputs on the "
            "model's device (the device of its parameters), not torch's default device"
        )
    return value


def _backward_error(completion_ids: torch.Tensor) -> str | None:
    """Why the sampled ids cannot feed a forward pass that is then differentiated (as the
    trainer's next step does), or None when they can."""
    if completion_ids.dtype != torch.long or completion_ids.numel() == 0:
        return None  # the tests judge the dtype and the shape
    if int(completion_ids.min()) < 0:
        return None  # and the ids
    embedding = torch.nn.Parameter(torch.ones(int(completion_ids.max()) + 1, 2))
    try:
        with torch.enable_grad():  # indexing saves the ids themselves for backward
            embedding[completion_ids].sum().backward()
    except RuntimeError as exc:
        return str(exc)
    return None
