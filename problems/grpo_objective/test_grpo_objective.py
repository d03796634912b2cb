"""Hidden tests for grpo_objective. The implementation arrives through the `impl` fixture."""

import math

import numpy as np
import pytest

from problems.support.asserts import assert_scalar

EXAMPLE = dict(
    rhos=[1.2, 0.8, 1.1],
    A=[1.0, 1.0, 1.0],
    pi_theta_old=[0.9, 1.1, 1.0],
    pi_theta_ref=[1.0, 0.5, 1.5],
    epsilon=0.2,
    beta=0.01,
)


def kl(p, q):
    p, q = np.asarray(p, float), np.asarray(q, float)
    p, q = p / p.sum(), q / q.sum()
    return float(np.sum(p * np.log(p / q + 1e-10)))


def test_reference_example(impl):
    assert_scalar(impl.grpo_objective(**EXAMPLE), 1.032749, abs=5e-7)


def test_returns_a_python_float(impl):
    got = impl.grpo_objective(**EXAMPLE)
    assert isinstance(got, float), f"expected a float, got {type(got).__name__}"


def test_accepts_numpy_arrays(impl):
    arrays = {k: np.asarray(v) if isinstance(v, list) else v for k, v in EXAMPLE.items()}
    assert_scalar(impl.grpo_objective(**arrays), 1.032749, abs=5e-7)


def test_defaults_are_epsilon_0_2_and_beta_0_01(impl):
    positional = [EXAMPLE[k] for k in ("rhos", "A", "pi_theta_old", "pi_theta_ref")]
    assert_scalar(impl.grpo_objective(*positional), 1.032749, abs=5e-7)


def test_matching_policies_give_zero_kl_and_the_mean_advantage(impl):
    pi = [0.2, 0.3, 0.5, 0.4]
    A = [1.5, -0.5, 0.25, -1.0]
    got = impl.grpo_objective([1.0] * 4, A, pi, pi, epsilon=0.2, beta=0.5)
    assert_scalar(got, float(np.mean(A)), abs=1e-8, what="objective with rho = 1 and pi = pi_ref")


def test_large_ratio_with_positive_advantage_is_clipped(impl):
    got = impl.grpo_objective([3.0], [2.0], [0.5], [0.5], epsilon=0.2, beta=0.0)
    assert_scalar(got, 1.2 * 2.0, what="objective for rho = 3, A = 2")


def test_small_ratio_with_negative_advantage_is_clipped(impl):
    got = impl.grpo_objective([0.1], [-1.0], [0.5], [0.5], epsilon=0.2, beta=0.0)
    assert_scalar(got, -0.8, what="objective for rho = 0.1, A = -1")


def test_large_ratio_with_negative_advantage_is_not_clipped(impl):
    # The minimum keeps the full penalty when a bad output became much more likely.
    got = impl.grpo_objective([3.0], [-1.0], [0.5], [0.5], epsilon=0.2, beta=0.0)
    assert_scalar(got, -3.0, what="objective for rho = 3, A = -1")


def test_small_ratio_with_positive_advantage_is_not_clipped(impl):
    got = impl.grpo_objective([0.5], [1.0], [0.5], [0.5], epsilon=0.2, beta=0.0)
    assert_scalar(got, 0.5, what="objective for rho = 0.5, A = 1")


def test_epsilon_sets_the_clip_range(impl):
    got = impl.grpo_objective(
        [2.0, 0.2], [1.0, -1.0], [1.0, 1.0], [1.0, 1.0], epsilon=0.5, beta=0.0
    )
    assert_scalar(got, (1.5 * 1.0 + 0.5 * -1.0) / 2, what="objective with epsilon = 0.5")


def test_surrogate_is_a_mean_over_the_group(impl):
    got = impl.grpo_objective([1.0] * 5, [2.0] * 5, [1.0] * 5, [1.0] * 5, beta=0.0)
    assert_scalar(got, 2.0, what="objective of 5 identical outputs")


def test_kl_is_computed_between_normalized_policies(impl):
    rhos, pi_old, pi_ref = [1.5, 0.7, 1.0], [0.2, 0.5, 0.3], [0.6, 0.3, 0.1]
    A = [0.0, 0.0, 0.0]
    expected = -0.2 * kl(np.multiply(rhos, pi_old), pi_ref)
    assert_scalar(impl.grpo_objective(rhos, A, pi_old, pi_ref, beta=0.2), expected)
    # Scaling the inputs by a constant describes the same distributions.
    scaled = impl.grpo_objective(
        rhos, A, [10 * p for p in pi_old], [7 * p for p in pi_ref], beta=0.2
    )
    assert_scalar(scaled, expected, what="objective with rescaled probabilities")


def test_kl_direction_is_pi_theta_to_pi_ref(impl):
    rhos, pi_old, pi_ref = [1.0, 1.0, 1.0], [0.7, 0.2, 0.1], [0.1, 0.3, 0.6]
    forward = kl(pi_old, pi_ref)
    assert not math.isclose(forward, kl(pi_ref, pi_old), rel_tol=1e-3)
    got = impl.grpo_objective(rhos, [0.0] * 3, pi_old, pi_ref, beta=1.0)
    assert_scalar(got, -forward, what="objective = -KL(pi_theta || pi_ref)")


def test_current_policy_is_ratio_times_old_policy(impl):
    rhos, pi_old, pi_ref = [2.0, 0.5], [0.5, 0.5], [0.8, 0.2]
    expected = -kl([1.0, 0.25], pi_ref)
    assert_scalar(impl.grpo_objective(rhos, [0.0, 0.0], pi_old, pi_ref, beta=1.0), expected)


def test_larger_beta_lowers_the_objective_when_kl_is_positive(impl):
    args = [EXAMPLE[k] for k in ("rhos", "A", "pi_theta_old", "pi_theta_ref")]
    low = impl.grpo_objective(*args, epsilon=0.2, beta=0.01)
    high = impl.grpo_objective(*args, epsilon=0.2, beta=0.5)
    assert_scalar(low - high, 0.49 * kl([1.08, 0.88, 1.1], [1.0, 0.5, 1.5]), what="low - high")


@pytest.mark.parametrize(
    "lengths",
    # Length-1 inputs would silently broadcast in numpy: they must be rejected too.
    [
        (3, 2, 3, 3),
        (3, 3, 2, 3),
        (3, 3, 3, 4),
        (2, 3, 3, 3),
        (1, 3, 3, 3),
        (3, 1, 3, 3),
        (3, 3, 3, 1),
    ],
    ids=str,
)
def test_length_mismatch_raises_value_error(impl, lengths):
    rhos, A, pi_old, pi_ref = ([1.0] * n for n in lengths)
    with pytest.raises(ValueError):
        impl.grpo_objective(rhos, A, pi_old, pi_ref)


def test_does_not_modify_its_inputs(impl):
    arrays = {k: np.array(v, dtype=float) for k, v in EXAMPLE.items() if isinstance(v, list)}
    copies = {k: v.copy() for k, v in arrays.items()}
    impl.grpo_objective(**arrays)
    for name, array in arrays.items():
        assert np.array_equal(array, copies[name]), f"{name} was modified in place"
