"""Hidden tests for group_advantages. The implementation arrives through the `impl` fixture."""

import math

import numpy as np
import pytest

from problems.support.asserts import assert_array

SQRT3 = math.sqrt(3.0)
# [1, 0, 1] has mean 2/3 and sample std sqrt(1/3); [0, 0, 0] is a constant group.
EXAMPLE = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0]
EXAMPLE_ADVANTAGES = [1 / SQRT3, -2 / SQRT3, 1 / SQRT3, 0.0, 0.0, 0.0]


def expected_advantages(groups, eps=1e-8, scale_by_std=True):
    """Row by row, with the plain formula; rows must not be constant."""
    groups = np.asarray(groups, dtype=float)
    centered = groups - groups.mean(axis=1, keepdims=True)
    if not scale_by_std:
        return centered
    return centered / (groups.std(axis=1, ddof=1, keepdims=True) + eps)


def assert_exact_zeros(got, shape, what):
    assert_array(got, np.zeros(shape), rtol=0.0, atol=0.0, what=what)


def test_reference_example(impl):
    got = impl.group_advantages(np.array(EXAMPLE), 3)
    assert_array(got, EXAMPLE_ADVANTAGES, rtol=1e-7)


def test_accepts_a_list_and_integer_rewards(impl):
    got = impl.group_advantages([1, 0, 1, 0, 0, 0], 3)
    assert_array(got, EXAMPLE_ADVANTAGES, rtol=1e-7, what="advantages of integer rewards")


def test_defaults_are_eps_1e_8_and_scale_by_std(impl):
    rewards = np.array([0.0, 1e-6, 3.0, 5.0])
    got = impl.group_advantages(rewards, 2)
    expected = expected_advantages(rewards.reshape(2, 2), eps=1e-8).ravel()
    assert_array(got, expected, rtol=1e-9, what="advantages with the default eps")


def test_uses_the_sample_std(impl):
    # ddof=1: the std of [0, 1] is sqrt(1/2), not 1/2, so the advantages are +-0.7071.
    got = impl.group_advantages(np.array([0.0, 1.0]), 2, eps=0.0)
    assert_array(got, [-math.sqrt(0.5), math.sqrt(0.5)], what="advantages of [0, 1]")


def test_eps_is_added_to_the_std(impl):
    # std of [0, 2] is sqrt(2); with eps = 1 the advantages are +-1 / (sqrt(2) + 1).
    got = impl.group_advantages(np.array([0.0, 2.0]), 2, eps=1.0)
    value = 1.0 / (math.sqrt(2.0) + 1.0)
    assert_array(got, [-value, value], what="advantages of [0, 2] with eps = 1")


def test_without_std_scaling_advantages_are_centered_rewards(impl):
    got = impl.group_advantages(np.array(EXAMPLE), 3, scale_by_std=False)
    assert_array(got, [1 / 3, -2 / 3, 1 / 3, 0.0, 0.0, 0.0], what="Dr. GRPO advantages")


def test_scale_by_std_false_keeps_the_reward_scale(impl):
    rewards = np.array([0.0, 10.0, 4.0, 6.0])
    got = impl.group_advantages(rewards, 2, scale_by_std=False)
    assert_array(got, [-5.0, 5.0, -1.0, 1.0])


def test_two_dimensional_rewards_are_one_group_per_row(impl):
    rewards = np.array([[0.2, 0.9, 0.4, 0.5], [3.0, 1.0, 2.0, 6.0], [1.0, 1.0, 1.0, 1.0]])
    got = impl.group_advantages(rewards, 4)
    expected = np.vstack([expected_advantages(rewards[:2]), np.zeros((1, 4))])
    assert_array(got, expected, what="advantages of a (3, 4) array")


def test_consecutive_rewards_form_a_group(impl):
    # Three groups of two: [0, 1], [5, 9], [2, 2]. Grouping by stride would mix prompts.
    rewards = np.array([0.0, 1.0, 5.0, 9.0, 2.0, 2.0])
    got = impl.group_advantages(rewards, 2, eps=0.0)
    s = math.sqrt(0.5)
    assert_array(got, [-s, s, -s, s, 0.0, 0.0], what="advantages of 3 groups of 2")


def test_each_group_has_its_own_mean_and_std(impl):
    # An easy prompt (rewards near 10) and a hard one (near 0) get the same advantages.
    rewards = np.array([9.0, 10.0, 11.0, 0.0, 0.1, 0.2])
    got = impl.group_advantages(rewards, 3, eps=0.0)
    assert_array(got, [-1.0, 0.0, 1.0, -1.0, 0.0, 1.0], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("value, size", [(0.0, 4), (1.0, 2), (0.1, 3), (0.7, 6), (0.2, 7)])
def test_equal_rewards_give_exactly_zero_even_with_eps_0(impl, value, size):
    # The mean of equal floats like 0.1 can be off by one ulp: that must not become +-0.8.
    got = impl.group_advantages(np.full(size, value), size, eps=0.0)
    assert_exact_zeros(got, (size,), f"advantages of {size} rewards all equal to {value}")


def test_equal_rewards_give_zero_without_std_scaling(impl):
    got = impl.group_advantages(np.full(3, 0.1), 3, scale_by_std=False)
    assert_exact_zeros(got, (3,), "Dr. GRPO advantages of a constant group")


def test_groups_of_one_give_zero(impl):
    got = impl.group_advantages(np.array([3.0, -1.0, 0.5]), 1, eps=0.0)
    assert_exact_zeros(got, (3,), "advantages of groups of size 1")


def test_a_constant_group_does_not_disturb_the_others(impl):
    rewards = np.array([[0.5, 0.5, 0.5], [0.0, 1.0, 2.0]])
    got = impl.group_advantages(rewards, 3, eps=0.0)
    assert_array(got, [[0.0, 0.0, 0.0], [-1.0, 0.0, 1.0]], atol=1e-12)


def test_advantages_have_zero_mean_per_group(impl):
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(5, 8))
    got = impl.group_advantages(rewards, 8)
    assert_array(got.mean(axis=1), np.zeros(5), atol=1e-12, what="mean advantage per group")


def test_empty_rewards_give_an_empty_array(impl):
    got = impl.group_advantages(np.zeros(0), 4)
    assert_array(got, np.zeros(0), what="advantages of no rewards")


@pytest.mark.parametrize("group_size", [0, -2])
def test_group_size_below_one_raises_value_error(impl, group_size):
    with pytest.raises(ValueError):
        impl.group_advantages(np.ones(4), group_size)


@pytest.mark.parametrize("length, group_size", [(5, 2), (7, 3), (3, 4)])
def test_length_not_a_multiple_of_group_size_raises_value_error(impl, length, group_size):
    with pytest.raises(ValueError):
        impl.group_advantages(np.arange(length, dtype=float), group_size)


@pytest.mark.parametrize("group_size", [2, 4, 12])
def test_two_dimensional_rewards_need_group_size_columns(impl, group_size):
    with pytest.raises(ValueError):
        impl.group_advantages(np.arange(12, dtype=float).reshape(4, 3), group_size)


def test_three_dimensional_rewards_raise_value_error(impl):
    with pytest.raises(ValueError):
        impl.group_advantages(np.ones((2, 2, 2)), 2)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_non_finite_reward_raises_value_error(impl, bad):
    rewards = np.array([0.0, 1.0, bad, 1.0])
    with pytest.raises(ValueError):
        impl.group_advantages(rewards, 2)


def test_does_not_modify_its_input(impl):
    rewards = np.array(EXAMPLE)
    impl.group_advantages(rewards, 3)
    assert np.array_equal(rewards, EXAMPLE), "rewards were modified in place"
