"""Reference solution: the statistics a GRPO trainer logs at every step, under TRL's names
(and one of the kit's own, the reward spread inside groups).

Written against the array API: the browser problem passes numpy arrays, the trainer torch
tensors; either way every value comes back as a Python float, ready for a logger.
"""

from __future__ import annotations

import numpy as np
from array_api_compat import array_namespace, is_array_api_obj

from reference.group_advantages import as_groups

# A group counts as having zero reward std when its sample std is at most this: the default
# absolute tolerance of torch.isclose(std, 0), which TRL uses. Equal floats can leave a
# rounding residue (the std of [0.1, 0.1, 0.1] is about 1.7e-17, not 0).
ZERO_STD_TOL = 1e-8


def group_stats(
    rewards,
    group_size: int,
    mask,
    truncated,
    ratios=None,
    advantages=None,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
) -> dict[str, float]:
    """Reward, length and (given ratios and advantages) clipping statistics of one batch.

    rewards (N,) or (N / G, G) grouped as in group_advantages; mask (N, T) completion mask;
    truncated (N,) completions that never emitted EOS; ratios (N, T) per-token probability
    ratios and advantages (N,) one per completion, both or neither.
    """
    if (ratios is None) != (advantages is None):
        raise ValueError("give ratios and advantages together (the clip ratios need both)")
    arrays = [x if is_array_api_obj(x) else np.asarray(x) for x in (rewards, mask, truncated)]
    if ratios is not None:
        arrays += [x if is_array_api_obj(x) else np.asarray(x) for x in (ratios, advantages)]
    xp = array_namespace(*arrays)
    rewards, mask, truncated = arrays[:3]
    rewards = xp.astype(rewards, xp.float64)
    groups = as_groups(xp, rewards, group_size)
    n = groups.shape[0] * group_size
    if n == 0:
        raise ValueError("rewards is empty: statistics need at least one completion")
    _check_shape("mask", mask, (n, None))
    _check_shape("truncated", truncated, (n,))
    keep = xp.astype(mask, xp.bool)
    tokens = xp.astype(keep, xp.float64)

    # Sample std per group (ddof = 1, as TRL); a group of one has no spread at all.
    std = xp.std(groups, axis=1, correction=1 if group_size > 1 else 0)
    stats = {
        "reward": float(xp.mean(groups)),
        # TRL's reward_std (since TRL 0.27): the sample std of every reward of the batch, which
        # mixes the spread between prompts with the spread inside groups. One reward: 0, not nan.
        "reward_std": float(xp.std(groups, correction=1)) if n > 1 else 0.0,
        # The kit's own: the spread inside groups alone, the only one GRPO learns from.
        "within_group_reward_std": float(xp.mean(std)),
        "frac_reward_zero_std": float(xp.mean(xp.astype(std <= ZERO_STD_TOL, xp.float64))),
        # The mask counts every token up to and including EOS: each row sums to its length.
        "completions/mean_length": float(xp.mean(xp.sum(tokens, axis=1))),
        "completions/clipped_ratio": float(
            xp.mean(xp.astype(xp.astype(truncated, xp.bool), xp.float64))
        ),
    }
    if ratios is None:
        return stats

    ratios, advantages = arrays[3:]
    _check_shape("ratios", ratios, tuple(mask.shape))
    _check_shape("advantages", advantages, (n,))
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    # float64 before comparing: against float32 ratios numpy would round 1 + 0.2 to float32,
    # and np.float32(1.2), which is above 1.2, would not count as clipped.
    ratios = xp.astype(ratios, xp.float64)
    A = advantages[:, None]
    # A token is clipped only where the clip changes the objective: a ratio below the range
    # matters for a negative advantage, a ratio above it for a positive one.
    low = (ratios < 1 - epsilon) & (A < 0)
    high = (ratios > 1 + epsilon_high) & (A > 0)
    n_tokens = max(float(xp.sum(tokens)), 1.0)  # no completion token: report 0, not nan

    def token_mean(flags) -> float:
        return float(xp.sum(xp.where(keep, xp.astype(flags, xp.float64), 0.0))) / n_tokens

    stats["clip_ratio/low_mean"] = token_mean(low)
    stats["clip_ratio/high_mean"] = token_mean(high)
    stats["clip_ratio/region_mean"] = token_mean(low | high)
    return stats


def _check_shape(name: str, array, expected: tuple) -> None:
    """`array` has len(expected) dimensions, each as expected (None: any size)."""
    shape = tuple(array.shape)
    fits = len(shape) == len(expected) and all(
        e is None or s == e for s, e in zip(shape, expected, strict=True)
    )
    if not fits:
        wanted = tuple("T" if e is None else e for e in expected)
        raise ValueError(f"{name} should have shape {wanted}, got {shape}")
