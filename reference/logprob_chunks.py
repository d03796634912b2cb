"""The log-prob pass without a second copy of the logits: token_logprobs a few rows at a time.

token_logprobs (the curriculum's) turns (N, L, V) logits into (N, L) log-probs through float32
temporaries as large as the logits, and autograd keeps some of them for the backward pass.
With a vocabulary of 150K tokens they dominate the memory of a training step. Here each chunk
of rows goes through token_logprobs under activation checkpointing: the backward pass saves
only the logits themselves and recomputes a chunk's float32 log-softmax when it needs it.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from reference.token_logprobs import token_logprobs

CHUNK_ELEMENTS = 2**25  # float32 temporaries of at most 128 MiB each


def _chunk_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    # A zero row stands in for the logits at the last token, which token_logprobs drops anyway;
    # the float32 copy is written into the window directly (one copy of the logits, not two).
    n, L, V = logits.shape
    window = logits.new_zeros((n, L + 1, V), dtype=torch.float32)
    window[:, :L] = logits
    return token_logprobs(window, ids, 1, temperature)  # (n, L)


def chunked_token_logprobs(
    logits: torch.Tensor,  # (N, L, V) the logits that predict the L completion tokens
    ids: torch.Tensor,  # (N, L + 1) the last prompt token, then the completion
    temperature: float = 1.0,
    chunk_elements: int = CHUNK_ELEMENTS,
) -> torch.Tensor:
    """(N, L) float32 log-probs of ids[:, 1:], the same as token_logprobs on the whole batch."""
    N, L, V = logits.shape
    rows = max(1, chunk_elements // max(1, L * V))
    parts = []
    # split, not slicing: the backward pass of one split joins the chunks' gradients once,
    # where each slice's would write a whole (N, L, V) gradient of zeros and add it up.
    for chunk, chunk_ids in zip(torch.split(logits, rows), torch.split(ids, rows), strict=True):
        if torch.is_grad_enabled() and logits.requires_grad:
            parts.append(checkpoint(_chunk_logprobs, chunk, chunk_ids, temperature,
                                    use_reentrant=False))  # fmt: skip
        else:
            parts.append(_chunk_logprobs(chunk, chunk_ids, temperature))
    return torch.cat(parts)
