"""Hidden tests for group_stats. The implementation arrives through the `impl` fixture."""

import math

import numpy as np
import pytest

from problems.support.asserts import assert_scalar

BASE_KEYS = {
    "reward",
    "reward_std",
    "frac_reward_zero_std",
    "completions/mean_length",
    "completions/clipped_ratio",
}
CLIP_KEYS = {"clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean"}

# Two groups of G = 3. Completion lengths 2, 4, 1, 3, 4, 2; rows 1 and 4 never emitted EOS.
REWARDS = [1.0, 0.0, 0.5, 2.0, 2.0, 2.0]
MASK = np.array(
    [
        [1, 1, 0, 0],
        [1, 1, 1, 1],
        [1, 0, 0, 0],
        [1, 1, 1, 0],
        [1, 1, 1, 1],
        [1, 1, 0, 0],
    ]
)
TRUNCATED = np.array([False, True, False, False, True, False])


def sample_std(values):
    values = np.asarray(values, dtype=float)
    return math.sqrt(np.sum((values - values.mean()) ** 2) / (len(values) - 1))


def stats(impl, rewards=REWARDS, group_size=3, mask=MASK, truncated=TRUNCATED, **kwargs):
    return impl.group_stats(rewards, group_size, mask, truncated, **kwargs)


def test_returns_exactly_the_base_keys_without_ratios(impl):
    got = stats(impl)
    assert isinstance(got, dict), f"expected a dict, got {type(got).__name__}"
    assert set(got) == BASE_KEYS, f"expected the keys {sorted(BASE_KEYS)}, got {sorted(got)}"


def test_values_are_python_floats(impl):
    ratios = np.ones(MASK.shape)
    got = stats(impl, ratios=ratios, advantages=np.zeros(6))
    for key, value in got.items():
        assert type(value) is float, f"{key} should be a Python float, got {type(value).__name__}"


def test_reward_is_the_batch_mean(impl):
    assert_scalar(stats(impl)["reward"], np.mean(REWARDS), what="reward")


def test_reward_std_is_the_mean_of_group_sample_stds(impl):
    expected = (sample_std([1.0, 0.0, 0.5]) + 0.0) / 2  # = 0.25
    assert_scalar(stats(impl)["reward_std"], expected, what="reward_std")


def test_reward_std_is_not_the_batch_std(impl):
    # Each group is constant but the groups differ: no signal inside any group.
    got = stats(
        impl, rewards=[0.0, 0.0, 1.0, 1.0], group_size=2, mask=MASK[:4], truncated=TRUNCATED[:4]
    )
    assert_scalar(got["reward_std"], 0.0, what="reward_std of constant groups")
    assert_scalar(got["frac_reward_zero_std"], 1.0, what="frac_reward_zero_std")


def test_frac_reward_zero_std(impl):
    assert_scalar(stats(impl)["frac_reward_zero_std"], 0.5, what="frac_reward_zero_std")


def test_zero_std_tolerates_rounding(impl):
    # The sample std of [0.1, 0.1, 0.1] computes to about 1.7e-17, not exactly 0.
    rewards = [0.1, 0.1, 0.1, 0.2, 0.3, 0.4]
    got = stats(impl, rewards=rewards)
    assert_scalar(got["frac_reward_zero_std"], 0.5, what="frac_reward_zero_std")


def test_zero_std_threshold_is_1e_8(impl):
    # Sample std of [0, d] is d / sqrt(2).
    rewards = [0.0, 1.4e-8, 0.0, 1.5e-8, 5.0, 5.0]
    got = stats(impl, rewards=rewards, group_size=2, mask=MASK, truncated=TRUNCATED)
    assert_scalar(got["frac_reward_zero_std"], 2 / 3, what="frac_reward_zero_std")


def test_group_of_one_has_zero_std(impl):
    got = stats(impl, group_size=1)
    assert_scalar(got["reward_std"], 0.0, what="reward_std with G = 1")
    assert_scalar(got["frac_reward_zero_std"], 1.0, what="frac_reward_zero_std with G = 1")


def test_group_size_sets_the_groups(impl):
    got = stats(impl, group_size=2)
    expected = np.mean([sample_std([1.0, 0.0]), sample_std([0.5, 2.0]), 0.0])
    assert_scalar(got["reward_std"], expected, what="reward_std with G = 2")
    assert_scalar(got["frac_reward_zero_std"], 1 / 3, what="frac_reward_zero_std with G = 2")


def test_two_dimensional_rewards(impl):
    got = stats(impl, rewards=np.array(REWARDS).reshape(2, 3))
    assert_scalar(got["reward"], np.mean(REWARDS))
    assert_scalar(got["reward_std"], 0.25)


def test_mean_length_counts_mask_ones(impl):
    assert_scalar(stats(impl)["completions/mean_length"], 16 / 6, what="completions/mean_length")


def test_mean_length_accepts_bool_and_float_masks(impl):
    for mask in (MASK.astype(bool), MASK.astype(float)):
        got = stats(impl, mask=mask)["completions/mean_length"]
        assert_scalar(got, 16 / 6, what=f"mean_length with a {mask.dtype} mask")


def test_clipped_ratio_is_the_fraction_truncated(impl):
    assert_scalar(stats(impl)["completions/clipped_ratio"], 2 / 6, what="completions/clipped_ratio")
    got = stats(impl, truncated=TRUNCATED.astype(int))["completions/clipped_ratio"]
    assert_scalar(got, 2 / 6, what="clipped_ratio from 0/1 ints")


def test_accepts_python_lists(impl):
    got = impl.group_stats(REWARDS, 3, MASK.tolist(), TRUNCATED.tolist())
    assert_scalar(got["reward_std"], 0.25)
    assert_scalar(got["completions/mean_length"], 16 / 6)


# ----- clip ratios -----

RATIOS = np.array(
    [
        [0.5, 1.0, 9.0, 9.0],  # A < 0: 0.5 low-clipped; columns 2, 3 are padding
        [1.5, 0.7, 1.0, 1.1],  # A > 0: 1.5 high-clipped, 0.7 not clipped (helps A > 0)
        [1.5, 0.1, 0.1, 0.1],  # A < 0: 1.5 not clipped (hurts, counted in full)
        [0.7, 1.3, 1.0, 0.1],  # A = 0: nothing clipped
        [1.3, 0.7, 1.2, 1.21],  # A > 0: 1.3 and 1.21 high-clipped
        [0.79, 0.8, 0.0, 0.0],  # A < 0: 0.79 low-clipped, 0.8 on the boundary is not
    ]
)
ADVANTAGES = np.array([-1.0, 2.0, -0.5, 0.0, 0.3, -2.0])


def clip_stats(impl, **kwargs):
    return stats(impl, ratios=RATIOS, advantages=ADVANTAGES, **kwargs)


def test_clip_keys_appear_with_ratios_and_advantages(impl):
    got = clip_stats(impl)
    assert set(got) == BASE_KEYS | CLIP_KEYS, f"got the keys {sorted(got)}"


def test_low_clip_ratio(impl):
    # 16 completion tokens; low-clipped: row 0 col 0, row 5 col 0.
    assert_scalar(clip_stats(impl)["clip_ratio/low_mean"], 2 / 16, what="clip_ratio/low_mean")


def test_high_clip_ratio(impl):
    # High-clipped: row 1 col 0, row 4 cols 0 and 3.
    assert_scalar(clip_stats(impl)["clip_ratio/high_mean"], 3 / 16, what="clip_ratio/high_mean")


def test_region_clip_ratio(impl):
    assert_scalar(clip_stats(impl)["clip_ratio/region_mean"], 5 / 16, what="clip_ratio/region_mean")


def test_epsilon_high_widens_the_upper_range(impl):
    got = clip_stats(impl, epsilon_high=0.28)  # DAPO's clip-higher: only 1.3 and 1.5 exceed 1.28
    assert_scalar(got["clip_ratio/high_mean"], 2 / 16, what="high_mean with epsilon_high = 0.28")
    assert_scalar(got["clip_ratio/low_mean"], 2 / 16, what="low_mean with epsilon_high = 0.28")


def test_epsilon_sets_both_bounds(impl):
    got = clip_stats(impl, epsilon=0.4)  # range [0.6, 1.4]
    assert_scalar(got["clip_ratio/low_mean"], 1 / 16, what="low_mean with epsilon = 0.4")
    assert_scalar(got["clip_ratio/high_mean"], 1 / 16, what="high_mean with epsilon = 0.4")


def test_bounds_are_strict(impl):
    ratios = np.array([[0.75, 1.25], [0.75, 1.25]])  # exactly 1 -+ 0.25
    got = impl.group_stats(
        [0.0, 1.0],
        2,
        np.ones((2, 2)),
        [False, False],
        ratios=ratios,
        advantages=np.array([-1.0, 1.0]),
        epsilon=0.25,
    )
    assert_scalar(got["clip_ratio/region_mean"], 0.0, what="region_mean on the boundary")


def test_padding_is_ignored_even_if_not_finite(impl):
    ratios = RATIOS.copy()
    ratios[MASK == 0] = np.nan
    ratios[0, 3] = np.inf
    got = stats(impl, ratios=ratios, advantages=ADVANTAGES)
    assert_scalar(got["clip_ratio/low_mean"], 2 / 16)
    assert_scalar(got["clip_ratio/high_mean"], 3 / 16)


def test_clip_ratio_is_a_token_mean_not_a_sequence_mean(impl):
    mask = np.array([[1, 0, 0, 0], [1, 1, 1, 1]])
    ratios = np.array([[2.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    got = impl.group_stats(
        [0.0, 1.0], 2, mask, [False, True], ratios=ratios, advantages=np.array([1.0, 1.0])
    )
    assert_scalar(got["clip_ratio/high_mean"], 1 / 5, what="one clipped token out of five")


def test_no_completion_token_gives_zero_not_nan(impl):
    got = impl.group_stats(
        [0.0, 1.0],
        2,
        np.zeros((2, 3), dtype=int),
        [False, False],
        ratios=np.full((2, 3), 5.0),
        advantages=np.array([1.0, 1.0]),
    )
    for key in CLIP_KEYS:
        assert_scalar(got[key], 0.0, what=key)
    assert_scalar(got["completions/mean_length"], 0.0)


def test_does_not_modify_its_inputs(impl):
    rewards, mask, truncated = np.array(REWARDS), MASK.copy(), TRUNCATED.copy()
    ratios, advantages = RATIOS.copy(), ADVANTAGES.copy()
    impl.group_stats(rewards, 3, mask, truncated, ratios=ratios, advantages=advantages)
    assert np.array_equal(rewards, REWARDS) and np.array_equal(mask, MASK)
    assert np.array_equal(truncated, TRUNCATED)
    assert np.array_equal(ratios, RATIOS) and np.array_equal(advantages, ADVANTAGES)


# ----- bad input -----


@pytest.mark.parametrize(
    "bad",
    [
        dict(group_size=4),  # 6 rewards do not split into groups of 4
        dict(group_size=0),
        dict(mask=MASK[:5]),
        dict(mask=MASK[:, 0]),
        dict(truncated=TRUNCATED[:5]),
        dict(ratios=RATIOS),  # without advantages
        dict(advantages=ADVANTAGES),  # without ratios
        dict(ratios=RATIOS[:, :3], advantages=ADVANTAGES),
        dict(ratios=RATIOS, advantages=ADVANTAGES[:5]),
        dict(rewards=[1.0, np.nan, 0.0, 1.0, 1.0, 1.0]),
    ],
    ids=[
        "G=4",
        "G=0",
        "mask-rows",
        "mask-1d",
        "truncated-len",
        "ratios-only",
        "advantages-only",
        "ratios-shape",
        "advantages-len",
        "nan-reward",
    ],
)
def test_bad_input_raises_value_error(impl, bad):
    arguments = dict(rewards=REWARDS, group_size=3, mask=MASK, truncated=TRUNCATED)
    arguments.update(bad)
    with pytest.raises(ValueError):
        impl.group_stats(**arguments)
