"""What the trainer does to a policy before training: Hugging Face and PEFT details kept out of
the step.

    disable_dropout(model)              dropout off: the log-probs of two passes agree
    enable_gradient_checkpointing(m)    transformers' activation recomputation
    cast_lm_head_to_fp32(model)         the output layer in float32 under bf16 autocast
    apply_lora(model, peft_config)      LoRA adapters through the `peft` package
    reference_model(policy, ...)        the frozen reference the KL is measured against
    model_eos_ids(model)                the EOS ids a model's config names
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from reference.sample_group import unwrap_model


def disable_dropout(model: nn.Module) -> int:
    """Set every dropout probability to 0; returns how many modules had one.

    Two passes over the same tokens then give the same log-probs: the sampling pass, the
    training pass and the reference's. nn.Dropout modules, and the float `attention_dropout`
    that transformers' attention modules hand to scaled_dot_product_attention.
    """
    changed = 0
    for module in model.modules():
        if isinstance(module, nn.Dropout) and module.p > 0:
            module.p = 0.0
            changed += 1
        rate = getattr(module, "attention_dropout", None)
        if isinstance(rate, float) and rate > 0:
            module.attention_dropout = 0.0
            changed += 1
    return changed


def enable_gradient_checkpointing(model: nn.Module) -> None:
    """Recompute each layer's activations in the backward pass instead of keeping them.

    Only transformers models have it. Non-reentrant checkpointing, as TRL uses: it needs no
    input that requires a gradient, which a LoRA model's frozen embeddings do not give.
    """
    inner = unwrap_model(model)
    kwargs = {"use_reentrant": False}
    if hasattr(inner, "activation_checkpointing_enable"):  # transformers 5's name
        inner.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    elif hasattr(inner, "gradient_checkpointing_enable"):
        inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    else:
        raise ValueError(
            "gradient_checkpointing needs a transformers model (its layers implement it); "
            f"{type(inner).__name__} has neither activation_ nor gradient_checkpointing_enable"
        )


class Float32Linear(nn.Linear):
    """An nn.Linear computed in float32 even under bf16 autocast (same weights, same keys)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(x.device.type, enabled=False):
            bias = None if self.bias is None else self.bias.float()
            return F.linear(x.float(), self.weight.float(), bias)


def cast_lm_head_to_fp32(model: nn.Module) -> None:
    """Compute the output layer in float32: under bf16 autocast the logits of a large vocabulary
    lose the small differences that log-prob ratios are made of. The weights stay where they
    are (a tied embedding stays tied): only the class of the layer changes."""
    inner = unwrap_model(model)
    get_head = getattr(inner, "get_output_embeddings", None)
    head = get_head() if get_head is not None else getattr(inner, "lm_head", None)
    if type(head) is not nn.Linear:
        raise ValueError(
            f"cast_lm_head_to_fp32 needs an nn.Linear output layer, found {type(head).__name__}"
        )
    head.__class__ = Float32Linear


def apply_lora(model: nn.Module, peft_config) -> nn.Module:
    """The model with LoRA adapters (only they train), through `peft`'s get_peft_model."""
    try:
        import peft
    except ModuleNotFoundError as exc:
        raise ModuleNotFoundError(
            "LoRA needs peft: pip install -c constraints.txt -e '.[lora]'"
        ) from exc
    return peft.get_peft_model(model, peft_config)


class AdapterDisabled(nn.Module):
    """A PEFT policy seen with its adapters off: the base model it started from, the reference
    of a LoRA run, with no copy of the weights."""

    def __init__(self, peft_model: nn.Module):
        super().__init__()
        self._peft = [peft_model]  # a list: not a submodule, so not in this module's state

    @property
    def peft_model(self) -> nn.Module:
        return self._peft[0]

    def get_base_model(self) -> nn.Module:  # what the signature checks look at
        return self.peft_model.get_base_model()

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]:
        return self.peft_model.parameters(recurse)

    def forward(self, *args, **kwargs):
        with self.peft_model.disable_adapter():
            return self.peft_model(*args, **kwargs)


def reference_model(policy: nn.Module, dtype: torch.dtype | None = None) -> nn.Module:
    """The frozen starting point: a copy of the policy (in `dtype` if given), or for a PEFT
    model the same model with its adapters disabled."""
    if hasattr(policy, "disable_adapter"):
        return AdapterDisabled(policy)
    ref = copy.deepcopy(policy).eval().requires_grad_(False)
    return ref if dtype is None else ref.to(dtype)


def model_eos_ids(model: nn.Module) -> list[int]:
    """The EOS ids a transformers model's generation config or config names ([] if none)."""
    inner = unwrap_model(model)
    ids: list[int] = []
    for source in (getattr(inner, "generation_config", None), getattr(inner, "config", None)):
        value = getattr(source, "eos_token_id", None)
        ids += value if isinstance(value, list) else [] if value is None else [value]
    return list(dict.fromkeys(int(i) for i in ids))
