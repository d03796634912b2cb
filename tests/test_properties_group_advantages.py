"""Properties of the reference group_advantages, on random rewards (hypothesis)."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from reference.group_advantages import group_advantages

REWARD = st.floats(-100.0, 100.0, allow_nan=False, width=64)


@st.composite
def grouped_rewards(draw) -> tuple[np.ndarray, int]:
    """(n_groups, G) rewards; some groups are made constant on purpose."""
    group_size = draw(st.integers(1, 8))
    n_groups = draw(st.integers(1, 6))
    rewards = draw(arrays(np.float64, (n_groups, group_size), elements=REWARD))
    constant_rows = draw(st.lists(st.booleans(), min_size=n_groups, max_size=n_groups))
    rewards[constant_rows] = rewards[constant_rows, :1]
    return rewards, group_size


def spread(rewards: np.ndarray) -> np.ndarray:
    return rewards.max(axis=1) - rewards.min(axis=1)


@settings(max_examples=200, deadline=None)
@given(grouped_rewards(), st.booleans())
def test_advantages_have_zero_mean_per_group(case, scale_by_std):
    rewards, group_size = case
    advantages = group_advantages(rewards, group_size, scale_by_std=scale_by_std)
    assert advantages.shape == rewards.shape
    assert np.all(np.isfinite(advantages))
    # Only rounding is allowed: the mean's error (relative to the largest reward), amplified by
    # the division when there is one.
    divisor = 1.0
    if scale_by_std:
        divisor = rewards.std(axis=1, ddof=1 if group_size > 1 else 0) + 1e-8
    bound = 1e-12 * (1.0 + np.abs(rewards).max(axis=1)) / divisor
    assert np.all(np.abs(advantages.mean(axis=1)) <= bound)


@settings(max_examples=200, deadline=None)
@given(grouped_rewards(), st.booleans())
def test_constant_groups_get_exactly_zero(case, scale_by_std):
    rewards, group_size = case
    advantages = group_advantages(rewards, group_size, eps=0.0, scale_by_std=scale_by_std)
    assert np.all(np.isfinite(advantages)), "eps = 0 must not give inf or NaN"
    constant = spread(rewards) == 0
    assert np.all(advantages[constant] == 0.0)


@settings(max_examples=200, deadline=None)
@given(
    grouped_rewards(),
    st.floats(-50.0, 50.0, allow_nan=False),
    st.floats(0.01, 100.0, allow_nan=False),
)
def test_normalized_advantages_ignore_shifting_and_scaling_a_group(case, shift, scale):
    rewards, group_size = case
    # Groups whose spread is near float rounding are not scale invariant, by design.
    rewards = rewards[(spread(rewards) > 1e-3) | (spread(rewards) == 0)]
    moved = rewards * scale + shift
    before = group_advantages(rewards, group_size, eps=0.0)
    after = group_advantages(moved, group_size, eps=0.0)
    np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-6)


@settings(max_examples=200, deadline=None)
@given(grouped_rewards(), st.floats(-50.0, 50.0, allow_nan=False))
def test_centered_advantages_ignore_shifting_a_group(case, shift):
    rewards, group_size = case
    before = group_advantages(rewards, group_size, scale_by_std=False)
    after = group_advantages(rewards + shift, group_size, scale_by_std=False)
    np.testing.assert_allclose(
        after, before, atol=1e-9 * (1.0 + np.abs(rewards).max() + abs(shift))
    )


@settings(max_examples=100, deadline=None)
@given(grouped_rewards())
def test_flat_and_two_dimensional_layouts_agree(case):
    rewards, group_size = case
    flat = group_advantages(rewards.ravel(), group_size)
    np.testing.assert_array_equal(
        flat.reshape(rewards.shape), group_advantages(rewards, group_size)
    )


@settings(max_examples=50, deadline=None)
@given(grouped_rewards(), st.booleans())
def test_torch_tensors_give_the_numpy_values(case, scale_by_std):
    rewards, group_size = case
    expected = group_advantages(rewards, group_size, scale_by_std=scale_by_std)
    got = group_advantages(torch.from_numpy(rewards), group_size, scale_by_std=scale_by_std)
    assert isinstance(got, torch.Tensor)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)
