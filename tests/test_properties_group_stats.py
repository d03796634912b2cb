"""Properties of the reference group_stats, on random batches (hypothesis)."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from reference.group_advantages import group_advantages
from reference.group_stats import group_stats


@st.composite
def batches(draw):
    """Rewards (some groups constant), a prefix mask, truncation flags, ratios, advantages."""
    group_size = draw(st.integers(1, 6))
    n_groups = draw(st.integers(1, 5))
    width = draw(st.integers(1, 7))
    n = group_size * n_groups
    rewards = draw(
        arrays(np.float64, (n_groups, group_size), elements=st.sampled_from([0.0, 0.5, 1.0]))
    )
    lengths = draw(arrays(np.int64, (n,), elements=st.integers(0, width)))
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
    truncated = lengths == width
    ratios = draw(arrays(np.float64, (n, width), elements=st.floats(0.5, 1.5)))
    advantages = draw(arrays(np.float64, (n,), elements=st.floats(-2.0, 2.0)))
    return rewards.reshape(-1), group_size, mask, truncated, ratios, advantages


@settings(max_examples=150, deadline=None)
@given(batches())
def test_fractions_lie_in_the_unit_interval_and_region_is_low_plus_high(batch):
    rewards, group_size, mask, truncated, ratios, advantages = batch
    got = group_stats(rewards, group_size, mask, truncated, ratios=ratios, advantages=advantages)
    for key in ("frac_reward_zero_std", "completions/clipped_ratio", "clip_ratio/region_mean"):
        assert 0.0 <= got[key] <= 1.0
    # A token cannot be clipped low (A < 0) and high (A > 0) at once.
    both = got["clip_ratio/low_mean"] + got["clip_ratio/high_mean"]
    assert abs(got["clip_ratio/region_mean"] - both) < 1e-12


@settings(max_examples=150, deadline=None)
@given(batches())
def test_zero_std_groups_are_the_groups_without_advantage(batch):
    rewards, group_size, mask, truncated, _, _ = batch
    got = group_stats(rewards, group_size, mask, truncated)
    advantages = group_advantages(rewards, group_size).reshape(-1, group_size)
    no_signal = np.all(advantages == 0.0, axis=1)
    assert got["frac_reward_zero_std"] == np.mean(no_signal)


@settings(max_examples=150, deadline=None)
@given(batches())
def test_the_batch_spread_is_the_spread_inside_plus_between_groups(batch):
    # Law of total variance, in sums of squares: (N - 1) reward_std^2 is the sum over groups of
    # (G - 1) s_g^2 (inside) plus G (mean_g - mean)^2 (between).
    rewards, group_size, mask, truncated, _, _ = batch
    got = group_stats(rewards, group_size, mask, truncated)
    groups = rewards.reshape(-1, group_size)
    inside = np.sum((group_size - 1) * groups.var(axis=1, ddof=min(1, group_size - 1)))
    between = group_size * np.sum((groups.mean(axis=1) - rewards.mean()) ** 2)
    n = len(rewards)
    assert abs((n - 1) * got["reward_std"] ** 2 - (inside + between)) < 1e-9


@settings(max_examples=100, deadline=None)
@given(batches(), st.randoms(use_true_random=False))
def test_shuffling_inside_groups_changes_nothing(batch, random):
    rewards, group_size, mask, truncated, ratios, advantages = batch
    order = np.arange(len(rewards)).reshape(-1, group_size)
    for row in order:
        random.shuffle(row)
    order = order.reshape(-1)
    before = group_stats(rewards, group_size, mask, truncated, ratios=ratios, advantages=advantages)
    after = group_stats(
        rewards[order],
        group_size,
        mask[order],
        truncated[order],
        ratios=ratios[order],
        advantages=advantages[order],
    )
    for key, value in before.items():
        assert abs(after[key] - value) <= 1e-12 * (1 + abs(value)), key


@settings(max_examples=50, deadline=None)
@given(batches())
def test_torch_tensors_give_the_numpy_values(batch):
    rewards, group_size, mask, truncated, ratios, advantages = batch
    expected = group_stats(
        rewards, group_size, mask, truncated, ratios=ratios, advantages=advantages
    )
    tensors = [torch.as_tensor(x) for x in (rewards, mask, truncated, ratios, advantages)]
    got = group_stats(
        tensors[0], group_size, tensors[1], tensors[2], ratios=tensors[3], advantages=tensors[4]
    )
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert type(got[key]) is float
        assert abs(got[key] - value) <= 1e-9 * (1 + abs(value)), key
