"""Reference solution: the GRPO loss over the tokens of a batch of completions.

Three public pieces, which the torch problem and the trainer import:

    per_token_loss    the clipped surrogate and the k3 KL penalty, token by token, shape (B, T)
    aggregate_loss    how those token losses are averaged: "sequence", "token" or "constant"
    loss_denominator  what each aggregation divides by, shared by a batch's micro-batches

Written against the array API: numpy arrays give a Python float, torch tensors a 0-d tensor
that can be differentiated.
"""

from __future__ import annotations

import numpy as np
from array_api_compat import array_namespace, is_array_api_obj

from reference.kl_estimators import kl_k3

AGGREGATIONS = ("sequence", "token", "constant")


def per_token_loss(
    logp,
    logp_old,
    logp_ref,
    advantages,
    mask=None,
    epsilon: float = 0.2,
    beta: float = 0.04,
    epsilon_high: float | None = None,
):
    """-(min(rho * A, clip(rho, 1 - epsilon, 1 + epsilon_high) * A) - beta * k3), shape (B, T).

    Positions where `mask` is 0 are exactly 0, whatever `logp`, `logp_old` and `logp_ref` hold
    there (padding may be garbage, even inf or nan).
    """
    logp, logp_old, logp_ref, advantages = _as_arrays(logp, logp_old, logp_ref, advantages)
    xp = array_namespace(logp, logp_old, logp_ref, advantages)
    _check_shapes(logp, logp_old, logp_ref, advantages)
    if mask is not None:
        keep = _keep(mask, logp.shape)
        # Replace padding before any arithmetic: masking the result alone would still let an
        # inf there turn into nan, and into nan gradients through the unselected branch.
        logp, logp_old, logp_ref = (xp.where(keep, x, 0.0) for x in (logp, logp_old, logp_ref))
    epsilon_high = epsilon if epsilon_high is None else epsilon_high

    A = advantages[:, None]  # one advantage per completion, shared by all its tokens
    ratio = xp.exp(logp - logp_old)
    # The minimum keeps the pessimistic term: clipping removes incentive, never a penalty.
    surrogate = xp.minimum(ratio * A, xp.clip(ratio, 1 - epsilon, 1 + epsilon_high) * A)
    loss = -surrogate
    if beta != 0:
        # Left out at beta = 0, not weighted by 0: a k3 that overflows to inf would give 0 * inf.
        loss = loss + beta * kl_k3(logp, logp_ref)
    return loss if mask is None else xp.where(keep, loss, 0.0)


def aggregate_loss(per_token, mask, aggregation: str = "sequence", max_len=None, normalizer=None):
    """Average the (B, T) token losses over the completion tokens, as a 0-d array.

    "sequence": mean over completions of each completion's token mean (original GRPO).
    "token":    sum over all tokens / number of completion tokens in the batch (DAPO).
    "constant": sum over all tokens / (B * max_len), max_len defaulting to T (Dr. GRPO).
    `normalizer` replaces the batch's own denominator (B, the token count, B * max_len) so
    that the losses of micro-batches sum to the loss of the whole batch.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    (per_token,) = _as_arrays(per_token)
    xp = array_namespace(per_token)
    if per_token.ndim != 2:
        raise ValueError(f"per-token losses must have shape (B, T), got {tuple(per_token.shape)}")
    keep = _keep(mask, per_token.shape)
    kept = xp.where(keep, per_token, 0.0)
    length = per_token.shape[1]

    if aggregation == "constant" and max_len is not None and max_len < length:
        raise ValueError(f"max_len ({max_len}) cannot be shorter than the T={length} tokens")
    if normalizer is not None and not normalizer > 0:
        raise ValueError(f"normalizer must be positive, got {normalizer}")

    if aggregation == "sequence":
        # An empty completion counts as a 0 loss, not as 0/0.
        counts = xp.sum(xp.astype(keep, per_token.dtype), axis=1)
        total = xp.sum(xp.sum(kept, axis=1) / xp.clip(counts, min=1.0))
    else:
        total = xp.sum(kept)
    if normalizer is None:
        normalizer = loss_denominator(keep, aggregation, max_len)
        if aggregation == "token":
            normalizer = xp.clip(normalizer, min=1)  # no sync with the device
    return total / normalizer


def loss_denominator(mask, aggregation: str, max_len: int | None = None):
    """What `aggregation` divides the batch's summed token losses by, before any clamping.

    "sequence": B (each completion's token mean is summed first); "token": the number of
    completion tokens; "constant": B * max_len, max_len defaulting to T. A trainer that splits
    a batch into micro-batches (or processes) passes the whole batch's value as `normalizer`.
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}, got {aggregation!r}")
    (mask,) = _as_arrays(mask)
    xp = array_namespace(mask)
    batch, length = mask.shape
    if aggregation == "sequence":
        return batch
    if aggregation == "token":
        return xp.sum(xp.astype(mask != 0, xp.int64))  # a 0-d array: stays on the device
    return batch * (length if max_len is None else max_len)


def masked_token_loss(
    logp,
    logp_old,
    logp_ref,
    advantages,
    mask,
    epsilon: float = 0.2,
    beta: float = 0.04,
    aggregation: str = "sequence",
    epsilon_high: float | None = None,
    max_len: int | None = None,
):
    """The GRPO loss to minimize: a float for numpy inputs, a 0-d tensor for torch inputs."""
    per_token = per_token_loss(
        logp, logp_old, logp_ref, advantages, mask, epsilon, beta, epsilon_high
    )
    loss = aggregate_loss(per_token, mask, aggregation, max_len=max_len)
    return float(loss) if isinstance(loss, np.ndarray | np.generic) else loss


def _as_arrays(*values):
    """Arrays stay as they are (numpy or torch); lists and scalars become float64 numpy arrays."""
    return tuple(v if is_array_api_obj(v) else np.asarray(v, dtype=np.float64) for v in values)


def _check_shapes(logp, logp_old, logp_ref, advantages) -> None:
    # Broadcasting would silently pair the wrong tokens or completions: insist on exact shapes.
    if logp.ndim != 2:
        raise ValueError(f"logp must have shape (B, T), got {tuple(logp.shape)}")
    for name, x in (("logp_old", logp_old), ("logp_ref", logp_ref)):
        if tuple(x.shape) != tuple(logp.shape):
            raise ValueError(
                f"{name} must have the shape of logp {tuple(logp.shape)}, got {tuple(x.shape)}"
            )
    if tuple(advantages.shape) != (logp.shape[0],):
        raise ValueError(
            f"advantages must have shape (B,) = ({logp.shape[0]},), one per completion, "
            f"got {tuple(advantages.shape)}"
        )


def _keep(mask, shape):
    """The mask as booleans, after checking it is a (B, T) array of 0s and 1s."""
    (mask,) = _as_arrays(mask)
    xp = array_namespace(mask)
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"mask must have shape {tuple(shape)}, got {tuple(mask.shape)}")
    keep = mask == 1
    if not bool(xp.all(keep | (mask == 0))):
        raise ValueError("mask must hold only 0 and 1 (1 = a completion token to train on)")
    return keep
