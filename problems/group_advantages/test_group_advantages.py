"""Hidden tests for group_advantages. The implementation arrives through the `impl` fixture."""

import math
from functools import partial

import numpy as np
import pytest

from problems.support import cases
from problems.support.asserts import (
    assert_array,
    assert_positional_call_agrees,
    calls_without_value_error,
)

SQRT3 = math.sqrt(3.0)
# [1, 0, 1] has mean 2/3 and sample std sqrt(1/3); [0, 0, 0] is a constant group.
EXAMPLE = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0]
EXAMPLE_ADVANTAGES = [1 / SQRT3, -2 / SQRT3, 1 / SQRT3, 0.0, 0.0, 0.0]
CASES = cases.load(__file__)
VALUE_CASES = [c for c in CASES if c.raises is None]
ERROR_CASES = [c for c in CASES if c.raises is not None]


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
    # [0, 1, 2] has a sample std of exactly 1: eps = 1 halves the advantages.
    got = impl.group_advantages(np.array([0.0, 1.0, 2.0]), 3, eps=1.0)
    assert_array(got, [-0.5, 0.0, 0.5], atol=1e-15, what="advantages of [0, 1, 2] with eps = 1")


def test_without_std_scaling_advantages_are_centered_rewards(impl):
    got = impl.group_advantages(np.array(EXAMPLE), 3, scale_by_std=False)
    assert_array(got, [1 / 3, -2 / 3, 1 / 3, 0.0, 0.0, 0.0], what="Dr. GRPO advantages")
    got = impl.group_advantages(np.array([0.0, 10.0, 4.0, 6.0]), 2, scale_by_std=False)
    assert_array(got, [-5.0, 5.0, -1.0, 1.0], what="Dr. GRPO advantages keep the reward scale")


def test_two_dimensional_rewards_are_one_group_per_row(impl):
    rewards = np.array([[0.2, 0.9, 0.4, 0.5], [3.0, 1.0, 2.0, 6.0], [1.0, 1.0, 1.0, 1.0]])
    got = impl.group_advantages(rewards, 4)
    expected = np.vstack([expected_advantages(rewards[:2]), np.zeros((1, 4))])
    assert_array(got, expected, what="advantages of a (3, 4) array")
    flat = impl.group_advantages(rewards.ravel(), 4)
    assert_array(flat, expected.ravel(), what="the same rewards laid out in 1-D")


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


def test_the_baseline_includes_the_completions_own_reward(impl):
    # The group mean, not the mean of the other completions (RLOO): for [0, 0, 3] the
    # baseline is 1 for every completion, so the advantages are [-1, -1, 2].
    got = impl.group_advantages(np.array([0.0, 0.0, 3.0]), 3, scale_by_std=False)
    assert_array(got, [-1.0, -1.0, 2.0], what="Dr. GRPO advantages of [0, 0, 3]")


def test_equal_rewards_give_exactly_zero_even_with_eps_0(impl):
    # The mean of equal floats like 0.1 can be off by one ulp: that must not become +-0.8.
    # A group with spread comes along, to be scored as usual.
    for value, size in [(0.0, 4), (1.0, 2), (0.1, 3), (0.7, 6), (0.2, 7)]:
        spread = np.linspace(0.0, 1.0, size)
        got = impl.group_advantages(np.concatenate([np.full(size, value), spread]), size, eps=0.0)
        what = f"advantages of {size} rewards all equal to {value}, then {spread}"
        assert_array(got, np.concatenate([np.zeros(size), expected_advantages([spread], 0.0)[0]]),
                     atol=1e-12, what=what)  # fmt: skip
        assert_exact_zeros(got[:size], (size,), what)


def test_equal_rewards_give_exactly_zero_on_every_path(impl):
    rewards = np.array([[0.1, 0.1, 0.1], [0.0, 1.0, 2.0], [0.7, 0.7, 0.7]])
    for kwargs in ({}, {"scale_by_std": False}, {"eps": 0.0}):
        got = impl.group_advantages(rewards, 3, **kwargs)
        for row in (0, 2):
            assert_exact_zeros(got[row], (3,), f"advantages of row {row} with {kwargs}")
        expected = expected_advantages(rewards[1:2], **kwargs)[0]
        assert_array(got[1], expected, what=f"advantages of [0, 1, 2] with {kwargs}")
    got = impl.group_advantages(np.float32([0.1, 0.1, 0.1, 0.3]), 2, eps=0.0)
    assert_exact_zeros(got[:2], (2,), "float32 advantages of [0.1, 0.1]")
    assert_array(got[2:], [-0.70710677, 0.70710677], rtol=1e-6, what="float32 advantages")
    for kwargs in ({}, {"scale_by_std": False}):  # every group constant: still float32
        got = impl.group_advantages(np.float32([1, 1, 0, 0]), 2, **kwargs)
        assert got.dtype == np.float32, f"float32 constant groups ({kwargs}) gave {got.dtype}"
        assert_exact_zeros(got, (4,), f"float32 constant groups ({kwargs})")


def test_different_rewards_are_never_treated_as_equal(impl):
    # However close, two different rewards form a group with spread: +-0.7071 with eps = 0.
    s = math.sqrt(0.5)
    got = impl.group_advantages(np.array([0.0, 1e-9, 5.0, 5.0 + 1e-12]), 2, eps=0.0)
    assert_array(got, [-s, s, -s, s], rtol=1e-3, what="advantages of nearly equal rewards")


def test_a_std_that_underflows_gives_finite_advantages(impl):
    # 1e-200 and 2e-200 differ, but their squared deviations underflow to 0: with eps = 0 the
    # computed std + eps is 0. Return 0 there (the exact +-0.7071 is accepted too), never inf
    # or nan.
    s = math.sqrt(0.5)
    for rewards in ([1e-200, 2e-200], [0.0, 5e-324]):
        got = impl.group_advantages(np.array([*rewards, 0.0, 1.0]), 2, eps=0.0)
        assert_array(got[2:], [-s, s], what="advantages of [0, 1] beside them")
        if not np.all(got[:2] == 0.0):
            assert_array(got[:2], [-s, s], rtol=1e-6, what=f"advantages of {rewards} (or 0, 0)")


def test_groups_of_one_give_zero(impl):
    got = impl.group_advantages(np.array([3.0, -1.0, 0.5]), 1, eps=0.0)
    assert_exact_zeros(got, (3,), "advantages of groups of size 1")
    got = impl.group_advantages(np.array([3.0, -1.0, 0.5]), 3, eps=0.0)
    assert_array(got, expected_advantages([[3.0, -1.0, 0.5]], 0.0)[0], what="the same, G = 3")
    got = impl.group_advantages(np.array([[3.0], [-1.0]]), 1, scale_by_std=False)
    assert_exact_zeros(got, (2, 1), "Dr. GRPO advantages of groups of size 1")


def test_a_constant_group_does_not_disturb_the_others(impl):
    rewards = np.array([[0.5, 0.5, 0.5], [0.0, 1.0, 2.0]])
    got = impl.group_advantages(rewards, 3, eps=0.0)
    assert_array(got, [[0.0, 0.0, 0.0], [-1.0, 0.0, 1.0]], atol=1e-12)


def test_advantages_have_zero_mean_and_unit_sample_std_per_group(impl):
    rng = np.random.default_rng(0)
    rewards = rng.normal(size=(5, 8)) * np.array([[0.01], [1.0], [3.0], [100.0], [1e4]])
    got = impl.group_advantages(rewards, 8, eps=0.0)
    assert_array(got, expected_advantages(rewards, eps=0.0), rtol=1e-9)
    assert_array(got.mean(axis=1), np.zeros(5), atol=1e-12, what="mean advantage per group")
    assert_array(got.std(axis=1, ddof=1), np.ones(5), rtol=1e-9, what="sample std per group")


def test_many_large_groups(impl):
    # What is right for a few small groups is right for 40 groups of 16, laid out flat.
    rewards = np.random.default_rng(1).normal(size=(40, 16)).round(1)
    got = impl.group_advantages(rewards.ravel(), 16)
    assert_array(got, expected_advantages(rewards).ravel(), rtol=1e-9, what="advantages")
    got = impl.group_advantages(rewards, 16, eps=0.5)
    assert_array(got, expected_advantages(rewards, eps=0.5), rtol=1e-9, what="eps=0.5")


def test_empty_rewards_give_an_empty_array(impl):
    assert_array(impl.group_advantages(np.zeros(0), 4), np.zeros(0), what="advantages of []")
    got = impl.group_advantages(np.zeros((0, 3)), 3)
    assert_array(got, np.zeros((0, 3)), what="advantages of a (0, 3) array")
    for dtype in (np.int64, np.bool_):  # no rewards still follow the dtype rule: float64
        got = impl.group_advantages(np.zeros((0,), dtype=dtype), 3)
        assert_array(got, np.zeros(0), what=f"advantages of an empty {dtype.__name__} array")
    for shape in ((0,), (0, 3)):  # and floats keep their dtype
        got = impl.group_advantages(np.zeros(shape, dtype=np.float32), 3)
        assert_array(got, np.zeros(shape, dtype=np.float32), what=f"float32 rewards of {shape}")
        assert got.dtype == np.float32, f"float32 rewards of shape {shape} gave {got.dtype}"


@pytest.mark.parametrize("case", VALUE_CASES, ids=cases.ids(VALUE_CASES))
def test_table(impl, case):
    expected = case.expected
    # float32 rows may be computed in float64 and rounded back: 0.5 is then off its group's
    # mean by float32 rounding, 1e-8, where a float32 mean gives exactly 0.
    rtol, atol = (1e-5, 1e-6) if expected.dtype == np.float32 else (1e-9, 1e-12)
    assert_array(case.run(impl), expected, rtol=rtol, atol=atol, what=case.about)


def test_dtype_is_kept_for_floats_and_float64_otherwise(impl):
    checks = [
        ([1, 0, 1, 0], "a list of ints", np.float64),
        ([1.0, 0.0, 0.5, 0.5], "a list of floats", np.float64),
        (np.array([1, 0, 1, 0], dtype=np.int64), "an int64 array", np.float64),
        (np.array([True, False, True, True]), "a bool array", np.float64),
        (np.float32([1, 0, 1, 0]), "a float32 array", np.float32),
        (np.float16([1, 0, 1, 0]), "a float16 array", np.float16),
    ]
    # The type of eps changes nothing: a numpy float64 eps must not promote float32 rewards.
    settings = [(True, 2, 1e-8), (False, 2, 1e-8), (True, 1, 1e-8), (False, 1, 1e-8),
                (True, 2, np.float64(1e-8)), (True, 2, np.float32(1e-8))]  # fmt: skip
    for rewards, what, dtype in checks:
        for scale_by_std, group_size, eps in settings:
            got = impl.group_advantages(rewards, group_size, eps=eps, scale_by_std=scale_by_std)
            assert isinstance(got, np.ndarray) and got.dtype == dtype, (
                f"advantages of {what} (G = {group_size}, scale_by_std={scale_by_std}, eps "
                f"{eps!r}) should be a {dtype.__name__} "
                f"array, got {type(got).__name__} {getattr(got, 'dtype', '')}"
            )


def test_one_prompt_given_as_a_row_keeps_its_two_dimensions(impl):
    # A 2-D input of one row is no 1-D one: squeezing it returns shape (G,).
    for rewards in ([[1.0, 0.0, 1.0]], [[2.0]]):
        given = np.array(rewards)
        got = impl.group_advantages(given, given.shape[1])
        expected = expected_advantages(given) if given.shape[1] > 1 else np.zeros((1, 1))
        assert_array(
            got, expected, rtol=1e-7, what=f"advantages of {rewards} (shape {given.shape})"
        )


def test_accepts_lists_and_numpy_integer_group_sizes(impl):
    got = impl.group_advantages([1, 0, 1, 0, 0, 0], np.int64(3))
    assert_array(got, EXAMPLE_ADVANTAGES, rtol=1e-7, what="advantages of a list, G = np.int64(3)")
    got = impl.group_advantages([[1, 0, 1], [0, 0, 0]], 3)
    assert_array(got, np.reshape(EXAMPLE_ADVANTAGES, (2, 3)), rtol=1e-7, what="a list of rows")


def test_bad_input_raises_value_error(impl):
    missed = calls_without_value_error(
        (f"{case.name} ({case.about})", partial(case.run, impl)) for case in ERROR_CASES
    )
    assert not missed, "expected a ValueError for:\n" + "\n".join(missed)


def test_does_not_modify_its_input(impl):
    inputs = [
        (np.array(EXAMPLE), {}),
        (np.array(EXAMPLE), {"scale_by_std": False}),
        (np.array([[0.1, 0.1, 0.1], [0.0, 1.0, 4.0]]), {"eps": 0.0}),
        (np.float32([0.5, 0.25, 1.0, 1.0, 1.0, 0.0]), {}),
        (np.float32([0.5, 0.25, 1.0, 1.0, 1.0, 0.0]), {"scale_by_std": False}),
    ]
    for rewards, kwargs in inputs:
        seen = impl.group_advantages.observe(rewards, 3, **kwargs)
        assert seen.error is None, f"group_advantages raised {seen.error!r}"
        after = seen.args[0]
        assert after.dtype == rewards.dtype and np.array_equal(after, rewards), (
            f"rewards {rewards} ({rewards.dtype}, {kwargs}) were modified in place: {after}"
        )


def test_arguments_in_the_statements_order(impl):
    # eps before scale_by_std: swapped, eps 0.5 would read as true and True as an eps of 1.
    arguments = dict(rewards=[1.0, 0.0, 3.0, 1.0, 2.0, 2.5], group_size=3, eps=0.5,
                     scale_by_std=True)  # fmt: skip
    assert_positional_call_agrees(impl.group_advantages, arguments, "group_advantages")
