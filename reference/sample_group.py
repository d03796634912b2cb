"""Reference solution, and the trainer's generation step: sample a group of completions per prompt.

All B * G completions are sampled together, one token per step for every row at once. When the
model follows the Hugging Face KV-cache convention, each prompt goes through the model once,
for all G of its completions, and every later step feeds only the newest token; otherwise each
step re-reads the whole sequence.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from reference.completion_mask import completion_mask, eos_id_list


@dataclass
class SampledGroup:
    """G completions of each of B prompts; row i * G + j is completion j of prompt i.

    Every field has shape (B * G, max_new_tokens). After a completion's first EOS its ids are
    the pad id (the first EOS id), its mask 0 and its log-probs 0.
    """

    completion_ids: torch.Tensor  # int64
    completion_mask: torch.Tensor  # int64, 1 up to and including the first EOS
    logprobs: torch.Tensor  # float32, log-prob of each token under the sampling distribution


def sampling_logits(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """The logits of the distribution actually sampled from; removed tokens get -inf.

    Order as in Hugging Face generate: temperature, then top-k, then top-p on what top-k left.
    """
    logits = logits / temperature  # on logits, not probabilities: that is what sharpens
    if 0 < top_k < logits.shape[-1]:
        kth_largest = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth_largest, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs
        # The smallest nucleus whose mass reaches top_p: a token stays while the mass of the
        # more likely tokens is still below top_p, so the token that crosses p is kept.
        drop_sorted = mass_before >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _check_arguments(prompt_ids, num_generations, max_new_tokens, temperature, top_k, top_p):
    if not isinstance(prompt_ids, torch.Tensor) or prompt_ids.ndim != 2 or not prompt_ids.numel():
        raise ValueError(
            "prompt_ids must be a 2-D tensor of token ids (batch, prompt_length) with at least "
            f"one token, got {getattr(prompt_ids, 'shape', type(prompt_ids).__name__)}"
        )
    if prompt_ids.is_floating_point() or prompt_ids.is_complex() or prompt_ids.dtype == torch.bool:
        raise ValueError(f"prompt_ids must hold integer token ids, got dtype {prompt_ids.dtype}")
    if num_generations < 1 or max_new_tokens < 1:
        raise ValueError(
            f"num_generations and max_new_tokens must be at least 1, got {num_generations} "
            f"and {max_new_tokens}"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (use top_k=1 for greedy), got {temperature}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 turns it off), got {top_k}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] (1 turns it off), got {top_p}")


def unwrap_model(model):
    """The model itself, behind DistributedDataParallel, torch.compile and PEFT (LoRA): their
    forward takes *args, **kwargs and hides the model's own arguments."""
    model = getattr(model, "module", model)
    model = getattr(model, "_orig_mod", model)
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _forward_parameters(model) -> set[str]:
    try:
        return set(inspect.signature(unwrap_model(model).forward).parameters)
    except (AttributeError, TypeError, ValueError):
        return set()


def accepts_kv_cache(model) -> bool:
    """Whether `model.forward` takes the Hugging Face `past_key_values` / `use_cache` arguments."""
    return {"past_key_values", "use_cache"} <= _forward_parameters(model)


def position_ids(model, attention_mask: torch.Tensor) -> torch.Tensor | None:
    """(B, S) positions that count real tokens only, for a model whose forward takes them.

    Hugging Face models (Llama, GPT-2, ...) number the tokens 0, 1, 2, ... whatever the mask
    says, so a left-padded prompt would start at the position of its first pad and read
    differently from the same prompt alone. None for a model without a `position_ids`
    argument: it must derive positions from the mask itself, as reference.gpt.GPT does.
    """
    if "position_ids" not in _forward_parameters(model):
        return None
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def select_cache_rows(past, rows: torch.Tensor):
    """The KV cache of the batch rows `rows` (an index tensor, repeats allowed).

    `past` is what the model returned as `past_key_values`: tensors with the batch first,
    nested in tuples (one (keys, values) pair per layer, as reference.gpt returns), or a
    transformers Cache, which selects in place.
    """
    if isinstance(past, torch.Tensor):
        return past[rows]
    if isinstance(past, tuple | list):
        return type(past)(select_cache_rows(part, rows) for part in past)
    past.batch_select_indices(rows)
    return past


def _check_prompt_mask(prompt_mask: torch.Tensor, prompt_ids: torch.Tensor) -> None:
    if not isinstance(prompt_mask, torch.Tensor) or prompt_mask.shape != prompt_ids.shape:
        raise ValueError(
            f"prompt_mask must be a tensor shaped like prompt_ids {tuple(prompt_ids.shape)}, "
            f"got {getattr(prompt_mask, 'shape', type(prompt_mask).__name__)}"
        )
    mask = prompt_mask.long()
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("prompt_mask must hold only 0 (padding) and 1 (real token)")
    # Left padding: the padding comes first, so every prompt ends on a real token, the one
    # its first completion token follows.
    if bool((mask[:, 1:] < mask[:, :-1]).any()) or not bool(mask[:, -1].all()):
        raise ValueError(
            "prompt_mask must describe left padding (zeros first, then ones, every row ending "
            "in 1): pad prompts on the left, e.g. tokenizer.padding_side = 'left'"
        )


def _device_of(model, fallback: torch.device) -> torch.device:
    parameter = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    return fallback if parameter is None else parameter.device


def sample_group(
    model,
    prompt_ids: torch.Tensor,
    num_generations: int,
    max_new_tokens: int,
    eos_ids: int | Sequence[int],
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    prompt_mask: torch.Tensor | None = None,
) -> SampledGroup:
    """Sample `num_generations` completions of every prompt.

    Prompts of different lengths come left-padded, with `prompt_mask` (B, P) marking their real
    tokens with 1; without it every token of `prompt_ids` is real.
    """
    _check_arguments(prompt_ids, num_generations, max_new_tokens, temperature, top_k, top_p)
    if prompt_mask is not None:
        _check_prompt_mask(prompt_mask, prompt_ids)
    eos = eos_id_list(eos_ids)
    pad_id = eos[0]
    device = _device_of(model, prompt_ids.device)
    if generator is not None and generator.device.type != device.type:
        raise ValueError(
            f"the generator is on {generator.device} but the model on {device}: "
            f"create it with torch.Generator(device={str(device)!r})"
        )
    use_cache = accepts_kv_cache(model)

    # Group by group: the G copies of prompt i are rows i*G .. i*G + G - 1.
    prompts = prompt_ids.to(device=device, dtype=torch.long).repeat_interleave(num_generations, 0)
    rows, prompt_length = prompts.shape
    # One buffer for prompt + completion, so no step copies the growing sequence.
    sequences = torch.full((rows, prompt_length + max_new_tokens), pad_id, device=device)
    sequences[:, :prompt_length] = prompts
    attention_mask = torch.ones_like(sequences)  # generated tokens are always real
    positions = None
    if prompt_mask is not None:
        attention_mask[:, :prompt_length] = prompt_mask.to(device).repeat_interleave(
            num_generations, dim=0
        )
        positions = position_ids(model, attention_mask)  # (rows, P + max_new_tokens) or None
    logprobs = torch.zeros(rows, max_new_tokens, device=device)
    eos_tensor = torch.tensor(eos, device=device)
    finished = torch.zeros(rows, dtype=torch.bool, device=device)

    prompt_of_row = torch.arange(rows, device=device) // num_generations  # (rows,)
    past = None
    for step in range(max_new_tokens):
        end = prompt_length + step
        # With a cache only the newest token is new; a model that returned none rereads it all.
        inputs = sequences[:, end - 1 : end] if past is not None else sequences[:, :end]
        fed = slice(None)  # the rows the model reads
        if use_cache and step == 0:  # the G copies of a prompt share its keys and values:
            fed = slice(None, None, num_generations)  # read each prompt once, rows 0, G, 2G, ...
        extra = {"past_key_values": past, "use_cache": True} if use_cache else {}
        if positions is not None:  # the positions of the tokens fed, as the mask counts them
            extra["position_ids"] = positions[fed, end - inputs.shape[1] : end]
        # no_grad, not inference_mode: the ids feed a later forward pass that needs autograd.
        with torch.no_grad():
            output = model(inputs[fed], attention_mask=attention_mask[fed, :end], **extra)
        if use_cache:
            past = output.past_key_values
        logits = output if isinstance(output, torch.Tensor) else output.logits
        # A view of a parameter made under no_grad still asks for a gradient: the filters and
        # the log-softmax below would build a graph on it.
        logits = logits.detach()
        if use_cache and step == 0:  # one row per prompt -> its G copies
            logits = logits[prompt_of_row, -1:]  # (rows, 1, V)
            past = None if past is None else select_cache_rows(past, prompt_of_row)
        # Sample in float32 whatever the model's dtype: bf16 log-probs are too coarse.
        step_logprobs = torch.log_softmax(
            sampling_logits(logits[:, -1, :].float(), temperature, top_k, top_p), dim=-1
        )
        tokens = torch.multinomial(step_logprobs.exp(), 1, generator=generator).squeeze(-1)
        tokens = tokens.masked_fill(finished, pad_id)  # a finished completion only pads
        sequences[:, end] = tokens
        logprobs[:, step] = step_logprobs.gather(-1, tokens[:, None]).squeeze(-1)
        finished |= torch.isin(tokens, eos_tensor)
        if bool(finished.all()):  # every completion has ended: skip the remaining steps
            break

    completion_ids = sequences[:, prompt_length:]
    mask = completion_mask(completion_ids, eos)  # int64, on the same device
    # where, not multiply: a pad token the filters removed has log-prob -inf, and -inf * 0 = nan.
    logprobs = torch.where(mask.bool(), logprobs, torch.zeros_like(logprobs))
    return SampledGroup(completion_ids.contiguous(), mask, logprobs)
