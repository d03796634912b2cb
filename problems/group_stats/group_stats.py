"""Problem: the statistics a GRPO trainer logs. Read README.md, then replace the body below."""

import numpy as np  # noqa: F401 - you will need it


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
    """Return the per-step statistics of one batch, under TRL's metric names.

    Args:
        rewards: (N,) rewards laid out group by group, or (N / G, G).
        group_size: G, the completions per prompt.
        mask: (N, T) completion mask, 1 up to and including each completion's first EOS.
        truncated: (N,) True (or 1) for completions that never emitted EOS.
        ratios: optional (N, T) per-token probability ratios pi_theta / pi_theta_old.
        advantages: optional (N,) advantages, one per completion; give it with `ratios`.
        epsilon: the lower clipping range, ratios below 1 - epsilon are clipped.
        epsilon_high: the upper clipping range (None: epsilon).

    Returns:
        A dict of Python floats with the keys "reward", "reward_std" (the std of the whole
        batch), "within_group_reward_std", "frac_reward_zero_std", "completions/mean_length",
        "completions/clipped_ratio", plus "clip_ratio/low_mean", "clip_ratio/high_mean" and
        "clip_ratio/region_mean" when ratios and advantages are given.

    Raises:
        ValueError: for shapes that do not fit together, a group_size that is not a positive
            integer dividing the number of rewards, empty or non-finite rewards, or ratios
            without advantages (or the reverse).
    """
    raise NotImplementedError("group_stats is not implemented yet: write its body")
