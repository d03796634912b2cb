"""Reference solution: the GRPO loss on torch tensors, differentiable, micro-batch ready.

The formula is the one of reference/masked_token_loss.py, reused as is (it is array-API
generic); this module adds what training needs: torch in, a 0-d tensor out, gradients that
flow only through the current log-probs, and a shared normalizer for micro-batches.
"""

from __future__ import annotations

import functools

import torch

from reference.masked_token_loss import aggregate_loss, per_token_loss


def grpo_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    logp_ref: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon: float = 0.2,
    beta: float = 0.04,
    aggregation: str = "sequence",
    epsilon_high: float | None = None,
    max_len: int | None = None,
    normalizer: float | None = None,
) -> torch.Tensor:
    """The GRPO loss to minimize, as a 0-d tensor whose gradient flows into `logp` only.

    `normalizer` replaces the batch's own denominator (B for "sequence", the token count for
    "token", B * max_len for "constant") with the whole batch's, so that the losses of its
    micro-batches add up to the loss of the whole batch, gradients included.
    """
    named = dict(logp=logp, logp_old=logp_old, logp_ref=logp_ref, advantages=advantages, mask=mask)
    for name, value in named.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"{name} must be a torch tensor, got {type(value).__name__}: "
                "convert it with torch.as_tensor"
            )
    # The sampling policy, the reference and the advantages are constants of this step. With one
    # update per batch logp_old is logp itself: without the detach the ratio would be exp(0) = 1
    # with a zero gradient, and the policy would never learn.
    per_token = per_token_loss(
        logp, logp_old.detach(), logp_ref.detach(), advantages.detach(), mask,
        epsilon=epsilon, beta=beta, epsilon_high=epsilon_high,
    )  # fmt: skip
    loss = aggregate_loss(per_token, mask, aggregation, max_len=max_len, normalizer=normalizer)
    # The loss has the dtype plain arithmetic on logp, logp_old, logp_ref and advantages gives:
    # logp_ref counts even at beta = 0, where the token losses never meet it. A 0-d tensor
    # normalizer (a float64 mask's sum, say) would promote the loss like any operand: it plays
    # no part.
    dtype = functools.reduce(
        torch.promote_types, (logp_old.dtype, logp_ref.dtype, advantages.dtype), logp.dtype
    )
    return loss if loss.dtype == dtype else loss.to(dtype)
