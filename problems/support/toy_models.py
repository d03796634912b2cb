"""Tiny language models for the torch problems' probes and tests.

A test describes a model as plain data, a spec such as ``{"kind": "CounterLM", "vocab": 10}``.
A probe builds it with `build` beside the solution and hands it to the solution's function;
the test builds the same model from the same spec and computes what it expects from the
model's exact logits (`logits`, which records nothing).

The models are made of seeded tensors, so their logits are known exactly, and every call of
`forward` is recorded (`calls_of(model)`: what the model read, which attention mask, whether a
KV cache came along, whether autograd or inference mode was on, the model's training flag) so
that a probe can return how the model was used, to explain a failure. The record is kept in
this module, out of the model's reach, but the solution's process could still reach it by
means the class report lists, so a verdict never rests on it alone: a ``strict`` model answers
a call the statement forbids with other logits (`_judged`), and the samples show it.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import torch
from torch._C import TensorBase

from problems.support.records import Records

VOCAB = 8

# How a call ran, read from torch's C functions taken when the kit imports this module (before
# any solution runs) and from the logits autograd produced: a solution can replace
# `torch.is_grad_enabled` and `torch.Tensor`'s attributes, not these.
_grad_enabled = torch._C.is_grad_enabled
_inference_mode = torch._C.is_inference_mode_enabled
_requires_grad = TensorBase.requires_grad.__get__
_is_inference = TensorBase.is_inference


def _fresh_generator() -> torch.Generator:
    """A generator no seed given to the solution's process predicts (the global one is the
    solution's to seed)."""
    return torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little"))


def seeded(*shape: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def parameter_state(model: torch.nn.Module, grads: bool = True) -> dict[str, str]:
    """What a caller keeps on each parameter besides its values, as text: its dtype, device,
    requires_grad and (with `grads`) the sum of its gradient. A probe compares it before and
    after a call that must not change the model."""
    return {
        name: f"{value.dtype}, requires_grad={value.requires_grad}, on {value.device}"
        + (f", grad {'none' if value.grad is None else float(value.grad.sum())}" if grads else "")
        for name, value in model.named_parameters()
    }


def state_changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """`parameter_state`'s differences, one line per parameter."""
    return [f"{name}: {state} -> {after.get(name)}"
            for name, state in before.items() if after.get(name) != state]  # fmt: skip


# Each toy model's strictness and record of calls (see records.py). The model reaches them
# only through this module's functions, not through a method of its own, which anyone holding
# the model could call. (In the sandbox, this module imported by name is a fresh copy with
# records of its own.)
RECORDS = Records()


def _records(model: torch.nn.Module) -> dict:
    if model not in RECORDS:  # copy.deepcopy(model), pickled and loaded: none is the model
        raise RuntimeError("this is a copy of the toy model handed over: call that one")
    return RECORDS[model]


def calls_of(model: torch.nn.Module) -> list[dict]:
    """How `model` was called: one dict per call of its `forward` (see `_record`)."""
    return _records(model)["calls"]


def _judged(model: torch.nn.Module, logits: torch.Tensor, reread: bool = False) -> torch.Tensor:
    """The logits a call gets: a `strict` model answers a call the statement forbids (with
    autograd or inference mode on, or rereading a sequence its KV cache holds) with the negated
    logits. `calls` only says how the model was called, and a solution controls what its own
    process reports; it does not control what it then sampled."""
    forbidden = (
        reread or _grad_enabled() or _inference_mode() or _requires_grad(logits)
        or _is_inference(logits)
    )  # fmt: skip
    return -logits if _records(model)["strict"] and forbidden else logits


def _record(model: torch.nn.Module, input_ids, attention_mask=None, past_length: int = 0,
            cached: bool = False) -> None:  # fmt: skip
    """Note one call of `forward`: plain data only, copied, so later steps cannot change it."""
    _records(model)["calls"].append(
        {
            "input_ids": input_ids.detach().clone(),
            "attention_mask": None if attention_mask is None else attention_mask.detach().clone(),
            "cached": cached,
            "past_length": past_length,
            "grad_enabled": _grad_enabled(),
            "inference_mode": _inference_mode(),
            "training": model.training,
        }
    )


class ToyLM(torch.nn.Module):
    """Base of the toy models: records its calls and, when strict, judges them."""

    def __init__(self, **init_kwargs):
        if self in RECORDS:  # type(model).__init__(model) would reset a model's records
            raise RuntimeError("a toy model is built once: do not run its constructor again")
        super().__init__()
        RECORDS[self] = {"strict": bool(init_kwargs.get("strict", False)), "calls": []}


class ContextLM(ToyLM):
    """Logits that depend on the whole context: the current token, its position and the mean
    of every token so far (the prompt's included). No KV cache.

    Feeding only the newest token, or rows of another prompt, gives other logits, so samples
    and log-probs show whether the model read the right sequence. With ``output="object"`` the
    logits come in an object's ``.logits``, as Hugging Face models return them.
    """

    def __init__(
        self,
        seed: int = 0,
        vocab: int = VOCAB,
        max_len: int = 64,
        output: str = "tensor",
        strict: bool = False,
    ):
        super().__init__(seed=seed, vocab=vocab, max_len=max_len, output=output, strict=strict)
        self._weights(seed, vocab, max_len)
        self.output = output

    def _weights(self, seed: int, vocab: int, max_len: int) -> None:
        self.token = torch.nn.Parameter(seeded(vocab, vocab, seed=seed, scale=1.5))
        self.position = torch.nn.Parameter(seeded(max_len, vocab, seed=seed + 1, scale=1.5))
        self.context = torch.nn.Parameter(seeded(vocab, vocab, seed=seed + 2, scale=1.5))

    def logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(N, T, V) logits of a whole sequence: what the model predicts after each token."""
        length = input_ids.shape[1]
        counts = torch.arange(1, length + 1, device=input_ids.device)[:, None]
        mean_context = self.context[input_ids].cumsum(1) / counts
        return self.token[input_ids] + self.position[:length] + mean_context

    def forward(self, input_ids, attention_mask=None):
        _record(self, input_ids, attention_mask)
        logits = _judged(self, self.logits(input_ids))
        return SimpleNamespace(logits=logits) if self.output == "object" else logits


class ToyCache:
    """A KV cache object in the manner of transformers' ``Cache``: it keeps the tokens read so
    far, keyed (enough to recompute this toy's keys and values), and selects rows in place."""

    def __init__(self, tokens: torch.Tensor):
        self.tokens = tokens  # (B, L) float64: each token plus its position's key

    def get_seq_length(self) -> int:
        return self.tokens.shape[1]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.tokens = self.tokens[indices]

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.tokens = self.tokens.repeat_interleave(repeats, dim=0)


def _keyed(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """A cache's content: each token plus its position's key (a function here, not a method,
    which anyone holding the model could call to build a cache)."""
    key = _records(model)["cache_key"].to(tokens.device)
    return tokens.double() + key[: tokens.shape[1]]


def _unkeyed(model: torch.nn.Module, kept: torch.Tensor) -> torch.Tensor:
    """The tokens of a cache `model` returned; ValueError for any other."""
    if not isinstance(kept, torch.Tensor) or kept.dtype != torch.float64 or kept.ndim != 2:
        raise ValueError("past_key_values must be a cache this model returned")
    tokens = (kept - _records(model)["cache_key"].to(kept.device)[: kept.shape[1]]).round()
    if not torch.equal(_keyed(model, tokens), kept):
        raise ValueError("past_key_values must be a cache this model returned, not one "
                         "built from token ids")  # fmt: skip
    return tokens.long()


class CachedContextLM(ContextLM):
    """ContextLM behind a Hugging Face style KV cache: `forward` takes `past_key_values` and
    `use_cache` and returns ``.logits`` for the new tokens only and ``.past_key_values``.

    The cache is a tuple holding the past tokens (``cache="tuple"``, as older models return
    nested tuples of tensors, batch first) or a `ToyCache` (``cache="object"``). The logits are
    those of the whole sequence, cache and new tokens together, so a stale or mismatched cache
    gives other logits. The tokens in a cache carry a key known to the model alone, as a real
    model's keys and values come from its weights: a cache built from token ids by hand is
    refused, so only a cache the model returned spares it rereading the sequence.
    """

    def __init__(self, seed: int = 0, vocab: int = VOCAB, max_len: int = 64, cache: str = "tuple",
                 strict: bool = False):  # fmt: skip
        ToyLM.__init__(self, seed=seed, vocab=vocab, max_len=max_len, cache=cache, strict=strict)
        self._weights(seed, vocab, max_len)
        self.output, self.cache = "object", cache
        # Drawn afresh for each model, never from its spec: a key that follows from the seed
        # could be recomputed from this file and a model's weights.
        _records(self)["cache_key"] = torch.rand(max_len, dtype=torch.float64,
                                                 generator=_fresh_generator())  # fmt: skip

    def forward(self, input_ids, attention_mask=None, past_key_values=None, use_cache=False):
        if past_key_values is None:
            past = input_ids[:, :0]
        elif isinstance(past_key_values, ToyCache):
            past = _unkeyed(self, past_key_values.tokens)
        else:
            past = _unkeyed(self, past_key_values[0])
        _record(self, input_ids, attention_mask, past.shape[1], past_key_values is not None)
        sequence = torch.cat([past, input_ids], dim=1)
        # Only the first call reads the prompts; a later one adds one token to each row, so
        # one that feeds more (with no cache, or an empty one) rereads what the cache holds.
        reread = len(calls_of(self)) > 1 and (past_key_values is None or input_ids.shape[1] > 1)
        logits = _judged(self, self.logits(sequence)[:, past.shape[1] :], reread)
        cache = None
        if use_cache and self.cache == "object":
            cache = past_key_values if isinstance(past_key_values, ToyCache) else ToyCache(past)
            cache.tokens = _keyed(self, sequence)  # in place, as transformers' DynamicCache is
        elif use_cache:
            cache = (_keyed(self, sequence),)
        return SimpleNamespace(logits=logits, past_key_values=cache)


class PastOnlyLM(CachedContextLM):
    """CachedContextLM whose `forward` takes `past_key_values` but not `use_cache`: that is not
    the Hugging Face cache convention, so a sampler treats it as a model without a KV cache and
    reads the whole sequence at every step (it returns no cache either)."""

    def forward(self, input_ids, attention_mask=None, past_key_values=None):
        return super().forward(input_ids, attention_mask, past_key_values)


class ConstantLM(ToyLM):
    """The same next-token distribution `probs` after every context, in `dtype`."""

    def __init__(self, probs: list[float], dtype: str = "float32"):
        super().__init__(probs=list(probs), dtype=dtype)
        table = torch.log(torch.tensor(probs, dtype=torch.float64)).to(getattr(torch, dtype))
        self.table = torch.nn.Parameter(table)

    def logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.table.expand(*input_ids.shape, -1)

    def forward(self, input_ids, attention_mask=None):
        _record(self, input_ids, attention_mask)
        return self.logits(input_ids)


class CounterLM(ToyLM):
    """Emits (last token + 1) mod vocab almost surely: a script whose EOS steps are known.

    Its logits are `margin` for the next token and 0 for every other one (all tied).
    """

    def __init__(self, vocab: int = 10, margin: float = 40.0):
        super().__init__(vocab=vocab, margin=margin)
        self.table = torch.nn.Parameter(margin * torch.roll(torch.eye(vocab), 1, dims=1))

    def logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.table[input_ids]

    def forward(self, input_ids, attention_mask=None):
        _record(self, input_ids, attention_mask)
        return self.logits(input_ids)


class NoEos(ToyLM):
    """Wraps a causal LM (logits in `.logits`) so that `eos_id` is never sampled.

    The capstone's tests use it to get completions that are all truncated.
    """

    def __init__(self, model: torch.nn.Module, eos_id: int):
        super().__init__(model=model, eos_id=eos_id)
        self.model, self.eos_id = model, eos_id

    def forward(self, input_ids, attention_mask=None):
        _record(self, input_ids, attention_mask)
        logits = self.model(input_ids, attention_mask=attention_mask).logits.clone()
        logits[..., self.eos_id] = float("-inf")
        return logits


MODELS = {
    model.__name__: model
    for model in (ContextLM, CachedContextLM, PastOnlyLM, ConstantLM, CounterLM, NoEos)
}


def build(spec: dict | torch.nn.Module) -> torch.nn.Module:
    """The model a spec describes: ``{"kind": name, **keyword arguments}``; a nested spec (the
    model NoEos wraps) is built too, and a model that is already built is returned as it is."""
    if isinstance(spec, torch.nn.Module):
        return spec
    kwargs = {key: value for key, value in spec.items() if key != "kind"}
    if spec["kind"] not in MODELS:
        raise ValueError(f"no toy model {spec['kind']!r}: one of {sorted(MODELS)}")
    if isinstance(kwargs.get("model"), dict):
        kwargs["model"] = build(kwargs["model"])
    return MODELS[spec["kind"]](**kwargs)
