"""Hidden tests for group_stats. The implementation arrives through the `impl` fixture."""

import math
from functools import partial

import numpy as np

from problems.support.asserts import (
    assert_positional_call_agrees,
    assert_scalar,
    broadcast_variants,
    calls_without_value_error,
)

BASE_KEYS = {
    "reward",
    "reward_std",
    "within_group_reward_std",
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
BATCH_STD = math.sqrt(3.875 / 5)  # sample std of the six rewards around their mean 1.25


def sample_std(values):
    values = np.asarray(values, dtype=float).ravel()
    if len(values) == 1:
        return 0.0
    return math.sqrt(np.sum((values - values.mean()) ** 2) / (len(values) - 1))


def stats(impl, rewards=REWARDS, group_size=3, mask=MASK, truncated=TRUNCATED, **kwargs):
    return impl.group_stats(rewards, group_size, mask, truncated, **kwargs)


def expected_stats(rewards, G, mask, truncated, ratios=None, advantages=None, eps=0.2, high=None):
    """Every statistic, written out with loops over groups, rows and tokens."""
    rewards = [float(r) for r in np.asarray(rewards, dtype=np.float64).ravel()]
    groups = [rewards[k : k + G] for k in range(0, len(rewards), G)]
    stds = [sample_std(g) for g in groups]
    lengths = [sum(1 for m in row if m) for row in np.asarray(mask).tolist()]
    got = {
        "reward": sum(rewards) / len(rewards),
        "reward_std": sample_std(rewards),
        "within_group_reward_std": sum(stds) / len(stds),
        "frac_reward_zero_std": sum(s <= 1e-8 for s in stds) / len(stds),
        "completions/mean_length": sum(lengths) / len(lengths),
        "completions/clipped_ratio": sum(bool(t) for t in truncated) / len(truncated),
    }
    if ratios is not None:
        high = eps if high is None else high
        counts = {"low": 0, "high": 0}
        for row, ratio_row, a in zip(np.asarray(mask).tolist(), ratios, advantages, strict=True):
            for m, r in zip(row, ratio_row, strict=True):
                counts["low"] += bool(m) and r < 1 - eps and a < 0
                counts["high"] += bool(m) and r > 1 + high and a > 0
        tokens = max(sum(lengths), 1)
        got["clip_ratio/low_mean"] = counts["low"] / tokens
        got["clip_ratio/high_mean"] = counts["high"] / tokens
        got["clip_ratio/region_mean"] = (counts["low"] + counts["high"]) / tokens
    return got


def assert_stats(got, expected, what, rel=1e-9):
    assert isinstance(got, dict), f"{what}: expected a dict, got {type(got).__name__}"
    assert set(got) == set(expected), (
        f"{what}: expected the keys {sorted(expected)}, got {sorted(got)}"
    )
    for key, value in expected.items():
        assert_scalar(got[key], value, rel=rel, abs=1e-12, what=f"{what}: {key}")


def test_worked_example(impl):
    expected = {
        "reward": 1.25,
        "reward_std": BATCH_STD,
        "within_group_reward_std": 0.25,
        "frac_reward_zero_std": 0.5,
        "completions/mean_length": 16 / 6,
        "completions/clipped_ratio": 2 / 6,
    }
    assert_stats(stats(impl), expected, "the worked example")


def test_reward_is_the_batch_mean(impl):
    assert_scalar(stats(impl)["reward"], np.mean(REWARDS), what="reward")


def test_reward_std_is_the_sample_std_of_the_whole_batch(impl):
    # TRL's reward_std: one std over all N rewards, with N - 1 in the denominator.
    assert_scalar(stats(impl)["reward_std"], BATCH_STD, rel=1e-12, what="reward_std")
    # Constant groups that differ from each other: the batch still has a spread.
    got = stats(impl, rewards=[0.0, 0.0, 1.0, 1.0], group_size=2, mask=MASK[:4],
                truncated=TRUNCATED[:4])  # fmt: skip
    assert_scalar(got["reward_std"], math.sqrt(1 / 3), rel=1e-12, what="reward_std of [0, 0, 1, 1]")


def test_reward_std_of_a_single_reward_is_zero(impl):
    got = impl.group_stats([0.7], 1, [[1, 1, 0]], [False])
    assert_scalar(got["reward_std"], 0.0, what="reward_std of one reward")
    assert_scalar(got["within_group_reward_std"], 0.0, what="within_group_reward_std of one")
    # Two rewards already have a sample std: |0 - 1| / sqrt(2).
    got = impl.group_stats([0.0, 1.0], 1, [[1, 1, 0], [1, 0, 0]], [False, False])
    assert_scalar(got["reward_std"], math.sqrt(0.5), rel=1e-12, what="reward_std of [0, 1]")
    got = impl.group_stats([0.0, 1.0], 2, [[1, 1, 0], [1, 0, 0]], [False, False])
    assert_scalar(got["reward_std"], math.sqrt(0.5), rel=1e-12, what="reward_std of one group")
    # One group as a (1, G) row holds G rewards, not one.
    got = impl.group_stats([[1.0, 0.0, 0.5]], 3, np.ones((3, 2)), [False] * 3)
    assert_scalar(got["reward_std"], 0.5, rel=1e-12, what="reward_std of rewards [[1, 0, 0.5]]")


def test_stds_of_rewards_far_from_zero(impl):
    # Rewards of 1e9 + {0, 1, 2}: E[x^2] - E[x]^2 cancels to 0 there; the spread is still 1.
    got = impl.group_stats(np.array([1e9, 1e9 + 1, 1e9 + 2]), 3, np.ones((3, 1)), np.zeros(3))
    assert_scalar(got["reward_std"], 1.0, rel=1e-9, what="reward_std of 1e9 + [0, 1, 2]")
    assert_scalar(got["within_group_reward_std"], 1.0, rel=1e-9, what="its within-group std")
    assert_scalar(got["frac_reward_zero_std"], 0.0, what="frac_reward_zero_std of 1e9 + [0, 1, 2]")
    # The zero-std threshold is absolute at any magnitude: a spread of 1 is a spread.
    got = impl.group_stats(np.array([1e9, 1e9 + 1]), 2, np.ones((2, 1)), np.zeros(2))
    assert_scalar(got["frac_reward_zero_std"], 0.0, what="frac_reward_zero_std of [1e9, 1e9 + 1]")
    rewards = np.array([0.1, 0.7, 0.5, 0.3])
    got = impl.group_stats(rewards, 2, np.ones((4, 2)), np.zeros(4, dtype=bool))
    assert_scalar(got["within_group_reward_std"], (0.6 + 0.2) / 2 / math.sqrt(2), rel=1e-12,
                  what="within_group_reward_std of [0.1, 0.7], [0.5, 0.3]")  # fmt: skip


def test_within_group_reward_std_is_the_mean_of_group_sample_stds(impl):
    expected = (sample_std([1.0, 0.0, 0.5]) + 0.0) / 2  # = 0.25
    assert_scalar(stats(impl)["within_group_reward_std"], expected, what="within_group_reward_std")


def test_within_group_reward_std_ignores_the_spread_between_groups(impl):
    # Each group is constant but the groups differ: no signal inside any group.
    got = stats(
        impl, rewards=[0.0, 0.0, 1.0, 1.0], group_size=2, mask=MASK[:4], truncated=TRUNCATED[:4]
    )
    assert_scalar(got["within_group_reward_std"], 0.0, what="within_group_reward_std")
    assert_scalar(got["frac_reward_zero_std"], 1.0, what="frac_reward_zero_std")


def test_frac_reward_zero_std(impl):
    assert_scalar(stats(impl)["frac_reward_zero_std"], 0.5, what="frac_reward_zero_std")


def test_zero_std_tolerates_rounding(impl):
    # The sample std of [0.1, 0.1, 0.1] computes to about 1.7e-17, not exactly 0.
    rewards = [0.1, 0.1, 0.1, 0.2, 0.3, 0.4]
    got = stats(impl, rewards=rewards)
    assert_scalar(got["frac_reward_zero_std"], 0.5, what="frac_reward_zero_std")


def test_zero_std_threshold_is_1e_8(impl):
    # Sample std of [0, d] is d / sqrt(2): 1.4e-8 / sqrt(2) <= 1e-8 < 1.5e-8 / sqrt(2).
    rewards = [0.0, 1.4e-8, 0.0, 1.5e-8, 5.0, 5.0]
    got = stats(impl, rewards=rewards, group_size=2, mask=MASK, truncated=TRUNCATED)
    assert_scalar(got["frac_reward_zero_std"], 2 / 3, what="frac_reward_zero_std")
    # "At most": [0, d, 2d] with d = 1e-8 has a sample std of exactly d, which counts as zero.
    got = stats(impl, rewards=[0.0, 1e-8, 2e-8, 0.0, 1.0, 2.0])
    assert_scalar(got["frac_reward_zero_std"], 0.5, what="frac_reward_zero_std, std = 1e-8")
    # The threshold is absolute: [100, 100.0001] has a std of 7e-5, though np.isclose calls
    # its rewards equal (rtol = 1e-5).
    got = stats(impl, rewards=[100.0, 100.0001, 3.0, 3.0], group_size=2, mask=MASK[:4],
                truncated=TRUNCATED[:4])  # fmt: skip
    assert_scalar(got["frac_reward_zero_std"], 0.5, what="frac_reward_zero_std of [100, 100.0001]")


def test_group_of_one_has_zero_std(impl):
    got = stats(impl, group_size=1)
    assert_scalar(got["within_group_reward_std"], 0.0, what="within_group_reward_std with G = 1")
    assert_scalar(got["frac_reward_zero_std"], 1.0, what="frac_reward_zero_std with G = 1")
    assert_scalar(got["reward_std"], BATCH_STD, rel=1e-12, what="reward_std with G = 1")


def test_group_size_sets_the_groups(impl):
    got = stats(impl, group_size=2)
    expected = np.mean([sample_std([1.0, 0.0]), sample_std([0.5, 2.0]), 0.0])
    assert_scalar(got["within_group_reward_std"], expected, what="within_group_reward_std, G = 2")
    assert_scalar(got["frac_reward_zero_std"], 1 / 3, what="frac_reward_zero_std with G = 2")
    got = stats(impl, group_size=6)
    assert_scalar(got["within_group_reward_std"], BATCH_STD, rel=1e-12, what="one group of 6")


def test_two_dimensional_rewards(impl):
    got = stats(impl, rewards=np.array(REWARDS).reshape(2, 3))
    assert_scalar(got["reward"], np.mean(REWARDS), what="reward of (2, 3) rewards")
    assert_scalar(got["reward_std"], BATCH_STD, rel=1e-12, what="reward_std of (2, 3) rewards")
    assert_scalar(got["within_group_reward_std"], 0.25, what="within_group_reward_std, (2, 3)")


def test_mean_length_counts_mask_ones(impl):
    assert_scalar(stats(impl)["completions/mean_length"], 16 / 6, what="completions/mean_length")


def test_mean_length_accepts_bool_and_float_masks(impl):
    for mask in (MASK.astype(bool), MASK.astype(float), MASK.astype(np.float32)):
        got = stats(impl, mask=mask)["completions/mean_length"]
        assert_scalar(got, 16 / 6, what=f"mean_length with a {mask.dtype} mask")


def test_tokens_are_counted_exactly_with_a_float16_mask(impl):
    # float16 holds whole numbers exactly only up to 2048: a count kept in the mask's own
    # dtype turns 2049 tokens into 2048 and 7551 into 7552.
    width, lengths = 3001, np.array([3001, 2049, 2500, 1])
    exact = (np.arange(width)[None, :] < lengths[:, None]).astype(np.float64)
    ratios = np.where(np.arange(width) % 3 == 0, 2.0, 1.0)[None, :].repeat(4, axis=0)
    advantages = np.array([1.0, 1.0, -1.0, 1.0])
    got = stats(impl, rewards=[1.0, 0.0, 0.5, 1.0], group_size=2, mask=exact.astype(np.float16),
                truncated=[False] * 4, ratios=ratios, advantages=advantages)  # fmt: skip
    assert_scalar(got["completions/mean_length"], lengths.mean(),
                  what="mean_length with a float16 mask of rows of up to 3001 tokens")  # fmt: skip
    high = (exact * (ratios > 1.2) * (advantages[:, None] > 0)).sum() / exact.sum()
    assert_scalar(got["clip_ratio/high_mean"], high,
                  what="clip_ratio/high_mean with a float16 mask of 7551 tokens")  # fmt: skip


def test_clipped_ratio_is_the_fraction_truncated(impl):
    assert_scalar(stats(impl)["completions/clipped_ratio"], 2 / 6, what="completions/clipped_ratio")
    got = stats(impl, truncated=TRUNCATED.astype(int))["completions/clipped_ratio"]
    assert_scalar(got, 2 / 6, what="clipped_ratio from 0/1 ints")
    # Row 1 fills every column but ends with its EOS: a full mask is not a truncation.
    got = stats(impl, truncated=[False, False, False, False, True, False])
    assert_scalar(got["completions/clipped_ratio"], 1 / 6,
                  what="clipped_ratio when a completion's EOS is its last column")  # fmt: skip


def test_random_batches_match_the_formulas(impl):
    rng = np.random.default_rng(11)
    # Large ones too: a spread computed otherwise past some size is still wrong.
    for G, n_groups, width in [
        (1, 3, 2),
        (2, 5, 4),
        (4, 3, 6),
        (8, 2, 1),
        (16, 24, 40),
        (5, 40, 12),
    ]:
        n = G * n_groups
        rewards = rng.choice([0.0, 0.25, 1.0], size=n) + (rng.random(n) < 0.3) * rng.random(n)
        lengths = rng.integers(0, width + 1, size=n)
        mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
        truncated = lengths == width
        ratios = np.exp(rng.normal(0.0, 0.3, size=(n, width)))
        advantages = rng.normal(size=n) * (rng.random(n) < 0.8)
        epsilon, high = rng.uniform(0.1, 0.3), rng.choice([None, 0.28])
        expected = expected_stats(rewards, G, mask, truncated, ratios, advantages, epsilon, high)
        got = impl.group_stats(rewards, G, mask, truncated, ratios=ratios, advantages=advantages,
                               epsilon=epsilon, epsilon_high=high)  # fmt: skip
        assert_stats(got, expected, f"a random batch of {n_groups} groups of {G}")


def test_float32_integer_and_bool_rewards(impl):
    # Computed in float64: float32 values are exact in float64, their float32 mean is not.
    rewards32 = np.float32([0.1, 0.7, 0.3, 0.9, 0.2, 0.6])
    expected = expected_stats(rewards32, 3, MASK, TRUNCATED)
    assert_stats(stats(impl, rewards=rewards32), expected, "float32 rewards", rel=1e-12)
    for rewards in ([1, 0, 1, 2, 2, 2], np.array([True, False, True, True, True, True])):
        expected = expected_stats(np.asarray(rewards, dtype=float), 3, MASK, TRUNCATED)
        assert_stats(stats(impl, rewards=rewards), expected, f"rewards {rewards!r}")


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
    assert_scalar(got["reward_std"], BATCH_STD, rel=1e-12, what="reward_std beside the clip keys")


def test_low_clip_ratio(impl):
    # 16 completion tokens; low-clipped: row 0 col 0, row 5 col 0.
    assert_scalar(clip_stats(impl)["clip_ratio/low_mean"], 2 / 16, what="clip_ratio/low_mean")
    # The sign of the advantage, in float64: -1e-50 is negative (0 in float32).
    got = impl.group_stats([0.0, 1.0], 2, [[1], [1]], [False, False], ratios=[[0.5], [1.0]],
                           advantages=[-1e-50, 0.0])  # fmt: skip
    assert_scalar(got["clip_ratio/low_mean"], 0.5, what="clip_ratio/low_mean, A = -1e-50")
    assert_scalar(got["clip_ratio/region_mean"], 0.5, what="clip_ratio/region_mean, A = -1e-50")


def test_high_clip_ratio(impl):
    # High-clipped: row 1 col 0, row 4 cols 0 and 3.
    assert_scalar(clip_stats(impl)["clip_ratio/high_mean"], 3 / 16, what="clip_ratio/high_mean")


def test_region_clip_ratio(impl):
    assert_scalar(clip_stats(impl)["clip_ratio/region_mean"], 5 / 16, what="clip_ratio/region_mean")


def test_epsilon_high_widens_the_upper_range(impl):
    got = clip_stats(impl, epsilon_high=0.28)  # DAPO's clip-higher: only 1.3 and 1.5 exceed 1.28
    assert_scalar(got["clip_ratio/high_mean"], 2 / 16, what="high_mean with epsilon_high = 0.28")
    assert_scalar(got["clip_ratio/low_mean"], 2 / 16, what="low_mean with epsilon_high = 0.28")
    got = clip_stats(impl, epsilon=0.25, epsilon_high=0.1)  # range [0.75, 1.1]
    assert_scalar(got["clip_ratio/high_mean"], 4 / 16, what="high_mean with epsilon_high = 0.1")
    assert_scalar(got["clip_ratio/low_mean"], 1 / 16, what="low_mean with epsilon = 0.25")
    got = clip_stats(impl, epsilon_high=0.0)  # range [0.8, 1]: 1.1, 1.3, 1.5, 1.2, 1.21 exceed 1
    assert_scalar(got["clip_ratio/high_mean"], 5 / 16, what="high_mean with epsilon_high = 0")


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
    # Just past the bounds, both count.
    got = impl.group_stats([0.0, 1.0], 2, np.ones((2, 2)), [False, False],
                           ratios=np.array([[0.7499, 1.25], [0.75, 1.2501]]),
                           advantages=np.array([-1.0, 1.0]), epsilon=0.25)  # fmt: skip
    assert_scalar(got["clip_ratio/low_mean"], 0.25, what="low_mean just below the boundary")
    assert_scalar(got["clip_ratio/high_mean"], 0.25, what="high_mean just above the boundary")


def test_float32_ratios_are_compared_in_float64(impl):
    # np.float32(1.2) is 1.2000000477 and np.float32(0.8) is 0.8000000119: outside and inside
    # the range in float64, where float32 bounds would call both the boundary itself.
    ratios = np.array([[1.2, 0.8], [1.2, 0.8]], dtype=np.float32)
    got = impl.group_stats([0.0, 1.0], 2, np.ones((2, 2)), [False, False], ratios=ratios,
                           advantages=np.array([1.0, -1.0]), epsilon=0.2)  # fmt: skip
    assert_scalar(got["clip_ratio/high_mean"], 0.25, what="high_mean of float32 ratios 1.2")
    assert_scalar(got["clip_ratio/low_mean"], 0.0, what="low_mean of float32 ratios 0.8")


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
    # T = 0: completions of no position at all (the statement bounds T from above only).
    got = impl.group_stats([1.0, 2.0], 2, np.zeros((2, 0)), [False, False],
                           ratios=np.zeros((2, 0)), advantages=[1.0, -1.0])  # fmt: skip
    for key in (*CLIP_KEYS, "completions/mean_length"):
        assert_scalar(got[key], 0.0, what=f"{key} of completions with T = 0")


def test_a_single_completion_token(impl):
    # M = 1: the fractions are 0 or 1, not 1/2 as a guard like max(M, 2) would make them.
    got = impl.group_stats([0.0, 1.0], 2, [[1, 0], [0, 0]], [False, False],
                           ratios=[[0.5, 1.0], [1.0, 1.0]], advantages=[-1.0, 1.0])  # fmt: skip
    assert_scalar(got["clip_ratio/low_mean"], 1.0, what="low_mean of one low-clipped token")
    assert_scalar(got["clip_ratio/region_mean"], 1.0, what="region_mean of one clipped token")
    assert_scalar(got["clip_ratio/high_mean"], 0.0, what="high_mean of one low-clipped token")


# ----- input handling -----


def test_returns_exactly_the_base_keys_without_ratios(impl):
    got = stats(impl)
    assert isinstance(got, dict), f"expected a dict, got {type(got).__name__}"
    assert set(got) == BASE_KEYS, f"expected the keys {sorted(BASE_KEYS)}, got {sorted(got)}"


def test_values_are_python_floats(impl):
    cases = {str(rewards): dict(rewards=rewards) for rewards in
             (REWARDS, np.float32(REWARDS), [1, 0, 1, 2, 2, 2])}  # fmt: skip
    # The paths with nothing to count or average: no completion token, T = 0, one reward.
    cases["no completion token"] = dict(mask=np.zeros_like(MASK))
    cases["T = 0"] = dict(mask=np.zeros((6, 0)), ratios=np.zeros((6, 0)))
    cases["one reward"] = dict(rewards=[0.5], group_size=1, mask=MASK[:1], truncated=[False],
                               ratios=RATIOS[:1], advantages=ADVANTAGES[:1])  # fmt: skip
    for what, case in cases.items():
        arguments = dict(ratios=np.ones(MASK.shape), advantages=np.zeros(6)) | case
        for key, value in stats(impl, **arguments).items():
            assert type(value) is float, (
                f"{key} should be a Python float, got {type(value).__name__} ({what})"
            )


def test_accepts_python_lists_and_numpy_integers(impl):
    got = impl.group_stats(REWARDS, np.int64(3), MASK.tolist(), TRUNCATED.tolist(),
                           ratios=RATIOS.tolist(), advantages=ADVANTAGES.tolist())  # fmt: skip
    assert_scalar(got["within_group_reward_std"], 0.25)
    assert_scalar(got["reward_std"], BATCH_STD, rel=1e-12)
    assert_scalar(got["completions/mean_length"], 16 / 6)
    assert_scalar(got["clip_ratio/region_mean"], 5 / 16)


def test_does_not_modify_its_inputs(impl):
    calls = [
        (np.array(REWARDS), MASK, TRUNCATED, {}),
        (np.array(REWARDS), MASK, TRUNCATED, {"ratios": RATIOS, "advantages": ADVANTAGES}),
        (np.float32(REWARDS).reshape(2, 3), MASK.astype(np.float32), TRUNCATED.astype(int),
         {"ratios": RATIOS.astype(np.float32), "advantages": ADVANTAGES.astype(np.float32)}),
    ]  # fmt: skip
    names = ["rewards", "group_size", "mask", "truncated"]
    for rewards, mask, truncated, kwargs in calls:
        seen = impl.group_stats.observe(rewards, 3, mask, truncated, **kwargs)
        assert seen.error is None, f"group_stats raised {seen.error!r}"
        before = [rewards, 3, mask, truncated]
        for name, old, new in [*zip(names, before, seen.args, strict=True),
                               *((k, kwargs[k], seen.kwargs[k]) for k in kwargs)]:  # fmt: skip
            same = np.asarray(old).dtype == np.asarray(new).dtype and np.array_equal(old, new)
            assert same, f"{name} was modified in place: {old!r} became {new!r}"


BAD_INPUTS = {
    "6 rewards in groups of 4": dict(group_size=4),
    "2 rewards in a group of 3": dict(rewards=[0.0, 1.0], mask=MASK[:2], truncated=TRUNCATED[:2]),
    "group_size 0": dict(group_size=0),
    "group_size -3": dict(group_size=-3),
    "group_size 3.0": dict(group_size=3.0),
    "group_size True": dict(group_size=True),
    "2-D rewards without G columns": dict(rewards=np.array(REWARDS).reshape(3, 2)),
    "3-D rewards": dict(rewards=np.array(REWARDS).reshape(1, 2, 3)),
    "rewards of shape (6, 1) in groups of 3": dict(rewards=np.array(REWARDS)[:, None]),
    "rewards of shape (1, 6) in groups of 3": dict(rewards=np.array(REWARDS)[None]),
    "0-D rewards": dict(rewards=np.float64(1.0), group_size=1, mask=MASK[:1], truncated=[True]),
    "NaN reward": dict(rewards=[1.0, np.nan, 0.0, 1.0, 1.0, 1.0]),
    "infinite reward": dict(rewards=[1.0, 0.0, 0.0, 1.0, -np.inf, 1.0]),
    "empty rewards": dict(rewards=[], mask=np.zeros((0, 4)), truncated=[]),
    "empty 2-D rewards": dict(rewards=np.zeros((0, 3)), mask=np.zeros((0, 4)), truncated=[]),
    "mask with 5 rows": dict(mask=MASK[:5]),
    "1-D mask": dict(mask=MASK[:, 0]),
    "3-D mask": dict(mask=MASK[:, :, None]),
    "truncated of length 5": dict(truncated=TRUNCATED[:5]),
    "truncated of shape (6, 1)": dict(truncated=TRUNCATED[:, None]),
    "ratios without advantages": dict(ratios=RATIOS),
    "advantages without ratios": dict(advantages=ADVANTAGES),
    "ratios of shape (6, 3)": dict(ratios=RATIOS[:, :3], advantages=ADVANTAGES),
    "ratios of shape (1, 4)": dict(ratios=RATIOS[:1], advantages=ADVANTAGES),
    "ratios of shape (6, 1)": dict(ratios=RATIOS[:, :1], advantages=ADVANTAGES),
    "advantages of length 5": dict(ratios=RATIOS, advantages=ADVANTAGES[:5]),
    "advantages of shape (6, 1)": dict(ratios=RATIOS, advantages=ADVANTAGES[:, None]),
    "advantages per token, (6, 4)": dict(ratios=RATIOS, advantages=np.ones_like(RATIOS)),
}


# A batch of one completion: each shaped argument squeezed (a 0-D advantage, a 1-D mask) or
# given an axis too many must raise too, never be reshaped into the batch it could be.
ONE = dict(rewards=[1.0], group_size=1, mask=np.array([[1, 1, 0]]), truncated=np.array([False]),
           ratios=np.array([[1.5, 1.0, 1.0]]), advantages=np.array([2.0]))  # fmt: skip
BAD_INPUTS_OF_ONE = {
    f"a batch of one with {name} of shape {changed.shape}": ONE | {name: changed}
    for name in ("mask", "truncated", "ratios", "advantages")
    for changed in (ONE[name].squeeze(), ONE[name][None])
}

# The whole batch (N = 6, T = 4) with one argument of a shape numpy broadcasts against its own: a
# 1 in place of N or T, an axis missing or one of 1 added (a mask of shape (N, 1) is a valid mask
# of one column, not among them). Each must raise, never spread one completion's value over all.
CLIP = dict(ratios=RATIOS, advantages=ADVANTAGES)
BAD_INPUTS_BROADCASTING = {
    f"{name} of shape {changed.shape} with N = 6, T = 4": (CLIP if name in CLIP else {})
    | {name: changed}
    for name, value in (dict(mask=MASK, truncated=TRUNCATED) | CLIP).items()
    for changed in broadcast_variants(value)
    if not (name == "mask" and changed.ndim == 2 and len(changed) == len(MASK))
}


def test_bad_input_raises_value_error(impl):
    base = dict(rewards=REWARDS, group_size=3, mask=MASK, truncated=TRUNCATED)
    tables = [*((w, base | bad) for w, bad in BAD_INPUTS.items()),
              *((w, base | bad) for w, bad in BAD_INPUTS_BROADCASTING.items()),
              *BAD_INPUTS_OF_ONE.items()]  # fmt: skip
    missed = calls_without_value_error(
        (what, partial(impl.group_stats, **arguments)) for what, arguments in tables
    )
    assert not missed, "expected a ValueError for:\n" + "\n".join(missed)


def test_arguments_in_the_statements_order(impl):
    arguments = dict(rewards=REWARDS, group_size=3, mask=MASK, truncated=TRUNCATED, ratios=RATIOS,
                     advantages=ADVANTAGES, epsilon=0.1, epsilon_high=0.3)  # fmt: skip
    assert_positional_call_agrees(impl.group_stats, arguments, "group_stats")
