"""Problem: sample a group of completions per prompt. Read README.md, then replace the body below."""

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class SampledGroup:
    """G completions of each of B prompts; row i * G + j is completion j of prompt i (given).

    Every field has shape (B * G, max_new_tokens). After a completion's first EOS its ids are
    the pad id (the first EOS id), its mask 0 and its log-probs 0.
    """

    completion_ids: torch.Tensor  # int64
    completion_mask: torch.Tensor  # int64, 1 up to and including the first EOS
    logprobs: torch.Tensor  # float32, log-prob of each token under the sampling distribution


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
) -> SampledGroup:
    """Sample `num_generations` completions of every prompt, all of them in one batch.

    Args:
        model: a causal LM; `model(input_ids, attention_mask=...)` returns logits (N, T, V) or an
            object with `.logits`. If its `forward` takes `past_key_values` and `use_cache`, use
            the KV cache: one call over the prompts, then one new token per step.
        prompt_ids: (B, P) integer token ids, all prompts the same length P >= 1.
        num_generations: G >= 1, completions per prompt.
        max_new_tokens: >= 1, the most tokens a completion may have.
        eos_ids: one end-of-sequence id or a non-empty sequence of them (ints, not bools); the
            first one is the pad id.
        temperature: > 0; the logits are divided by it.
        top_k: keep the k most likely tokens, and any tied with the k-th (0: off).
        top_p: keep the smallest set of most likely tokens whose probability reaches top_p
            (1.0: off); applied after top-k.
        generator: the torch.Generator to draw from (None: torch's global generator).

    Returns:
        A SampledGroup of (B * G, max_new_tokens) tensors on the model's device.

    Raises:
        ValueError: for a prompt_ids that is not a 2-D tensor of integers with a token, an
            eos_ids that is empty or not made of ints, a temperature <= 0, top_k < 0, top_p
            outside (0, 1], num_generations or max_new_tokens below 1, or a generator on
            another kind of device than the model.
    """
    raise NotImplementedError("sample_group is not implemented yet: write its body")
