"""Reference solution: group-relative advantages, the baseline that replaces a critic in GRPO.

Written against the array API so that the same function serves numpy arrays (the browser
problem) and torch tensors (the trainer).
"""

from __future__ import annotations

import numbers

import numpy as np
from array_api_compat import array_namespace, is_array_api_obj


def group_advantages(rewards, group_size: int, eps: float = 1e-8, scale_by_std: bool = True):
    """Advantages (r - group mean) / (group sample std + eps), or r - group mean (Dr. GRPO).

    `rewards` is 1-D, laid out group by group, or 2-D of shape (n_prompts, group_size); the
    result has the same shape. A group whose rewards are all equal gets exactly 0.
    """
    if not is_array_api_obj(rewards):
        rewards = np.asarray(rewards)
    xp = array_namespace(rewards)
    # Floating rewards keep their dtype (float32 stays float32); integers and bools, which
    # have no fractions to hold an advantage, become float64.
    if not xp.isdtype(rewards.dtype, "real floating"):
        rewards = xp.astype(rewards, xp.float64)
    groups = as_groups(xp, rewards, group_size)
    # A Python float: a numpy scalar eps (np.float64(1e-8)) would promote float32 rewards, and
    # np.float32 would round float64 ones.
    eps = float(eps)

    mean = xp.mean(groups, axis=1, keepdims=True)
    # Equal rewards carry no signal. Test equality directly: the mean of equal floats can be
    # off by one ulp, and dividing that rounding error by a tiny std would give +-1, not 0.
    constant = xp.max(groups, axis=1, keepdims=True) == xp.min(groups, axis=1, keepdims=True)
    centered = xp.where(constant, 0.0, groups - mean)
    if scale_by_std:
        # Sample std (ddof=1), as in TRL. A constant group (any group of one among them) never
        # divides by it: a safe denominator keeps NaN out of values and gradients alike.
        # (A group of one takes correction 0 only to spare numpy's degrees-of-freedom warning.)
        std = xp.std(groups, axis=1, correction=1 if group_size > 1 else 0, keepdims=True)
        # Rewards so close that their std underflows to 0 count as equal too (matters if eps=0).
        constant = constant | (std + eps == 0)
        centered = xp.where(constant, 0.0, centered) / xp.where(constant, 1.0, std + eps)
    return xp.reshape(centered, rewards.shape)


def as_groups(xp, rewards, group_size: int):
    """Check the layout and return the rewards as an (n_groups, group_size) array."""
    if isinstance(group_size, bool) or not isinstance(group_size, numbers.Integral):
        raise ValueError(f"group_size must be a positive integer, got {group_size!r}")
    if group_size < 1:
        raise ValueError(f"group_size must be at least 1, got {group_size}")
    if rewards.ndim == 1:
        if rewards.shape[0] % group_size != 0:
            raise ValueError(
                f"{rewards.shape[0]} rewards cannot be split into groups of {group_size}: "
                "pass all the completions of every prompt"
            )
    elif rewards.ndim == 2:
        if rewards.shape[1] != group_size:
            raise ValueError(
                f"2-D rewards must have shape (n_prompts, group_size={group_size}), "
                f"got {tuple(rewards.shape)}"
            )
    else:
        raise ValueError(f"rewards must be 1-D or 2-D, got {rewards.ndim} dimensions")
    if not bool(xp.all(xp.isfinite(rewards))):
        raise ValueError("every reward must be finite: fix the reward function that gave NaN/inf")
    return xp.reshape(rewards, (-1, group_size))
