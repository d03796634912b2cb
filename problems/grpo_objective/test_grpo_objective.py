"""Hidden tests for grpo_objective. The implementation arrives through the `impl` fixture."""

import math

import numpy as np
import pytest

from problems.support import cases
from problems.support.asserts import assert_positional_call_agrees, assert_scalar

EXAMPLE = dict(
    rhos=[1.2, 0.8, 1.1],
    A=[1.0, 1.0, 1.0],
    pi_theta_old=[0.9, 1.1, 1.0],
    pi_theta_ref=[1.0, 0.5, 1.5],
    epsilon=0.2,
    beta=0.01,
)
EXAMPLE_VALUE = 1.032748929359358
CASES = cases.load(__file__)
VALUE_CASES = [c for c in CASES if c.raises is None]
ERROR_CASES = [c for c in CASES if c.raises is not None]


def kl(p, q):
    p, q = np.asarray(p, float), np.asarray(q, float)
    p, q = p / p.sum(), q / q.sum()
    return float(np.sum(p * np.log(p / q + 1e-10)))


def surrogate_term(rho, a, epsilon=0.2):
    """One output's term, written out case by case rather than with min and clip."""
    if a > 0 and rho > 1 + epsilon:
        return (1 + epsilon) * a  # the gain stops at the clip
    if a < 0 and rho < 1 - epsilon:
        return (1 - epsilon) * a  # the loss stops at the clip
    return rho * a  # everywhere else the unclipped term is the smaller one


def objective(rhos, A, pi_old, pi_ref, epsilon=0.2, beta=0.01):
    terms = [surrogate_term(r, a, epsilon) for r, a in zip(rhos, A, strict=True)]
    return sum(terms) / len(terms) - beta * kl(np.multiply(rhos, pi_old), pi_ref)


def test_reference_example(impl):
    assert_scalar(impl.grpo_objective(**EXAMPLE), 1.032749, abs=5e-7)


def test_second_example_clips_a_large_ratio(impl):
    got = impl.grpo_objective([3.0], [2.0], [0.5], [0.5], epsilon=0.2, beta=0.0)
    assert_scalar(got, 1.2 * 2.0, what="objective for rho = 3, A = 2")


def test_defaults_are_epsilon_0_2_and_beta_0_01(impl):
    positional = [EXAMPLE[k] for k in ("rhos", "A", "pi_theta_old", "pi_theta_ref")]
    assert_scalar(impl.grpo_objective(*positional), EXAMPLE_VALUE, rel=1e-12)
    # The ratio 1.3 is clipped by the default epsilon; beta = 0.01 weighs a KL of log 2.
    got = impl.grpo_objective([1.3, 1.0], [1.0, 0.0], [1.0, 1e-9], [1.0, 1.0])
    assert_scalar(got, 1.2 / 2 - 0.01 * kl([1.3, 1e-9], [1.0, 1.0]), rel=1e-12)


def test_matching_policies_give_zero_kl_and_the_mean_advantage(impl):
    pi = [0.2, 0.3, 0.5, 0.4]
    A = [1.5, -0.5, 0.25, -1.0]
    got = impl.grpo_objective([1.0] * 4, A, pi, pi, epsilon=0.2, beta=0.5)
    assert_scalar(got, float(np.mean(A)), abs=1e-8, what="objective with rho = 1 and pi = pi_ref")


@pytest.mark.parametrize("A", [2.0, -1.0], ids=["A>0", "A<0"])
def test_the_clip_counts_only_where_it_lowers_the_objective(impl, A):
    # With A > 0 the gain stops at 1 + epsilon; with A < 0 the loss stops at 1 - epsilon, but a
    # ratio far above the range (5, 20, e^25: no second "dual" clip) costs its full rho * A.
    for rho in [1e-6, 0.1, 0.5, 0.8, 0.95, 1.0, 1.15, 1.2, 1.5, 3.0, 5.0, 20.0, math.exp(25)]:
        got = impl.grpo_objective([rho], [A], [0.5], [0.5], epsilon=0.2, beta=0.0)
        assert_scalar(got, surrogate_term(rho, A), rel=1e-12, what=f"objective for rho = {rho:g}")


def test_the_minimum_is_taken_per_output_then_averaged(impl):
    # Per output: min(3, 1.2) = 1.2 and min(-3, -1.2) = -3, mean -0.9. The minimum of the two
    # group means, min(0, 0), would be 0.
    got = impl.grpo_objective([3.0, 3.0], [1.0, -1.0], [0.5, 0.5], [0.5, 0.5], beta=0.0)
    assert_scalar(got, -0.9, rel=1e-12, what="objective of rho = [3, 3], A = [1, -1]")
    got = impl.grpo_objective([0.5, 1.5], [1.0, -1.0], [0.5, 0.5], [0.5, 0.5], beta=0.0)
    assert_scalar(got, -0.5, rel=1e-12, what="objective of rho = [0.5, 1.5], A = [1, -1]")


def test_outputs_with_zero_advantage_count_in_the_mean(impl):
    # G is every output of the group, including those with A = 0 (their term is 0).
    got = impl.grpo_objective([1.5, 0.7, 1.0, 3.0], [2.0, 0.0, 0.0, 0.0], [1.0] * 4, [1.0] * 4,
                              beta=0.0)  # fmt: skip
    assert_scalar(got, 1.2 * 2.0 / 4, rel=1e-12, what="objective with three zero advantages")


def test_epsilon_sets_the_clip_range(impl):
    got = impl.grpo_objective(
        [2.0, 0.2], [1.0, -1.0], [1.0, 1.0], [1.0, 1.0], epsilon=0.5, beta=0.0
    )
    assert_scalar(got, (1.5 * 1.0 + 0.5 * -1.0) / 2, what="objective with epsilon = 0.5")
    for epsilon in (0.01, 0.3, 0.99):
        rhos, A = [0.005, 0.9, 1.1, 1.5, 2.5], [-1.0, -2.0, 3.0, 0.5, 1.0]
        got = impl.grpo_objective(rhos, A, [1.0] * 5, [1.0] * 5, epsilon=epsilon, beta=0.0)
        expected = np.mean([surrogate_term(r, a, epsilon) for r, a in zip(rhos, A, strict=True)])
        assert_scalar(got, expected, rel=1e-12, what=f"objective with epsilon = {epsilon}")


def test_surrogate_is_a_mean_over_the_group(impl):
    got = impl.grpo_objective([1.0] * 5, [2.0] * 5, [1.0] * 5, [1.0] * 5, beta=0.0)
    assert_scalar(got, 2.0, what="objective of 5 identical outputs")


def test_kl_is_computed_between_normalized_policies(impl):
    rhos, pi_old, pi_ref = [1.5, 0.7, 1.0], [0.2, 0.5, 0.3], [0.6, 0.3, 0.1]
    A = [0.0, 0.0, 0.0]
    expected = -0.2 * kl(np.multiply(rhos, pi_old), pi_ref)
    assert_scalar(impl.grpo_objective(rhos, A, pi_old, pi_ref, beta=0.2), expected, rel=1e-12)
    # Scaling the inputs by a constant describes the same distributions.
    scaled = impl.grpo_objective(
        rhos, A, [10 * p for p in pi_old], [7 * p for p in pi_ref], beta=0.2
    )
    assert_scalar(scaled, expected, rel=1e-12, what="objective with rescaled probabilities")


def test_policies_of_any_scale_are_normalized_before_their_ratio(impl):
    # The constraints allow probabilities at any scale: a ratio of the raw values overflows
    # (1e10 / 1e-300) or underflows (1e-300 / 1e300) before any rescaling could mend it.
    for pi_old, pi_ref in (([1e10, 1.0], [1e-300, 1e-300]), ([1e-300, 3e-300], [1e300, 1e300])):
        got = impl.grpo_objective([1.0, 1.0], [1.0, 0.0], pi_old, pi_ref, beta=1.0)
        assert_scalar(got, objective([1.0, 1.0], [1.0, 0.0], pi_old, pi_ref, beta=1.0),
                      rel=1e-12, what=f"objective with pi_theta_old={pi_old}, "
                                      f"pi_theta_ref={pi_ref}")  # fmt: skip
    # Nearly normalized is not normalized: a sum of 1 + 1e-7 still shifts the KL.
    pi_old, pi_ref = [0.5, 0.5000001], [0.2, 0.8]
    got = impl.grpo_objective([1.0, 1.0], [0.0, 0.0], pi_old, pi_ref, beta=1e6)
    assert_scalar(got, objective([1.0, 1.0], [0.0, 0.0], pi_old, pi_ref, beta=1e6), rel=1e-12,
                  what=f"objective with pi_theta_old={pi_old} (sums to 1.0000001), beta=1e6")  # fmt: skip


def test_kl_direction_is_pi_theta_to_pi_ref(impl):
    rhos, pi_old, pi_ref = [1.0, 1.0, 1.0], [0.7, 0.2, 0.1], [0.1, 0.3, 0.6]
    forward = kl(pi_old, pi_ref)
    assert not math.isclose(forward, kl(pi_ref, pi_old), rel_tol=1e-3)
    got = impl.grpo_objective(rhos, [0.0] * 3, pi_old, pi_ref, beta=1.0)
    assert_scalar(got, -forward, rel=1e-12, what="objective = -KL(pi_theta || pi_ref)")


def test_current_policy_is_ratio_times_old_policy(impl):
    rhos, pi_old, pi_ref = [2.0, 0.5], [0.5, 0.5], [0.3, 0.7]
    expected = -kl([1.0, 0.25], pi_ref)  # pi_theta = [0.8, 0.2]: KL 0.53, not 0.087
    got = impl.grpo_objective(rhos, [0.0, 0.0], pi_old, pi_ref, beta=1.0)
    assert_scalar(got, expected, rel=1e-12, what="objective with pi_theta = rho * pi_old")


def test_the_kl_term_is_exactly_the_formula_with_its_1e_10(impl):
    # Equal policies: each log is log(1 + 1e-10), so the KL is about 1e-10, not 0; a large
    # beta makes that visible.
    pi = [0.25, 0.25, 0.5]
    got = impl.grpo_objective([1.0] * 3, [0.0] * 3, pi, pi, beta=1e6)
    assert_scalar(got, -1e6 * math.log1p(1e-10), rel=1e-6, what="objective with beta = 1e6")


def test_a_probability_that_underflows_to_zero_gives_a_finite_objective(impl):
    # rho * pi_old = 1e-200 * 1e-200 underflows to 0: the 1e-10 inside the log keeps
    # 0 * log(0) out of the sum.
    got = impl.grpo_objective([1e-200, 1.0], [0.0, 1.0], [1e-200, 1.0], [1.0, 1.0], beta=1.0)
    assert_scalar(got, 0.5 - math.log(2.0), rel=1e-9, what="objective with pi_theta = [0, 1]")


def test_larger_beta_lowers_the_objective_when_kl_is_positive(impl):
    args = [EXAMPLE[k] for k in ("rhos", "A", "pi_theta_old", "pi_theta_ref")]
    low = impl.grpo_objective(*args, epsilon=0.2, beta=0.01)
    high = impl.grpo_objective(*args, epsilon=0.2, beta=0.5)
    assert_scalar(low - high, 0.49 * kl([1.08, 0.88, 1.1], [1.0, 0.5, 1.5]), what="low - high")


def test_random_groups_match_the_formula(impl):
    rng = np.random.default_rng(7)
    for G in (1, 2, 7, 200):
        rhos = np.exp(rng.normal(0.0, 0.6, G))  # ratios from about 0.2 to 5
        A = rng.normal(size=G) * (rng.random(G) < 0.8)  # some advantages exactly 0
        pi_old, pi_ref = rng.random(G) + 0.01, rng.random(G) + 0.01
        epsilon, beta = rng.uniform(0.05, 0.5), rng.uniform(0.0, 0.2)
        expected = objective(rhos, A, pi_old, pi_ref, epsilon, beta)
        got = impl.grpo_objective(rhos, A, pi_old, pi_ref, epsilon=epsilon, beta=beta)
        assert_scalar(got, expected, rel=1e-10, abs=1e-12, what=f"objective of a group of {G}")


@pytest.mark.parametrize("case", VALUE_CASES, ids=cases.ids(VALUE_CASES))
def test_table(impl, case):
    assert_scalar(case.run(impl), case.expected, rel=1e-10, abs=1e-12, what=case.about)


def test_float32_inputs_are_computed_in_float64(impl):
    # In float32 the clip bound 1 - 0.2 would already be 0.800000012, and the KL of two close
    # distributions would lose its digits.
    rhos, A = np.float32([0.5, 1.7, 1.1]), np.float32([-1.5, 2.0, 0.3])
    pi_old, pi_ref = np.float32([0.3, 0.3, 0.4]), np.float32([0.31, 0.29, 0.4])
    as64 = [x.astype(np.float64) for x in (rhos, A, pi_old, pi_ref)]
    expected = objective(*as64, beta=1.0)
    got = impl.grpo_objective(rhos, A, pi_old, pi_ref, beta=1.0)
    assert_scalar(got, expected, rel=1e-12, what="objective of float32 inputs")
    # A float32 epsilon too: its value, 0.200000003, with 1 - epsilon taken in float64.
    epsilon = np.float32(0.2)
    got = impl.grpo_objective([0.7], [-1e6], [1.0], [1.0], epsilon=epsilon, beta=np.float32(0))
    assert_scalar(got, -(1.0 - float(epsilon)) * 1e6, rel=1e-12,
                  what="objective with epsilon = np.float32(0.2): rho 0.7 clipped to 1 - epsilon")  # fmt: skip


def test_returns_a_python_float(impl):
    for args in (EXAMPLE, {k: np.asarray(v, np.float32) if isinstance(v, list) else v
                           for k, v in EXAMPLE.items()}):  # fmt: skip
        got = impl.grpo_objective(**args)
        assert type(got) is float, f"expected a Python float, got {type(got).__name__}: {got!r}"


def test_accepts_numpy_arrays_integers_and_numpy_scalars(impl):
    arrays = {
        k: np.asarray(v) if isinstance(v, list) else np.float64(v) for k, v in EXAMPLE.items()
    }
    assert_scalar(impl.grpo_objective(**arrays), EXAMPLE_VALUE, rel=1e-12, what="numpy inputs")
    # Integers: the ratio 2 is clipped to 1.2 and the policies are normalized as floats.
    got = impl.grpo_objective([2, 1], [1, -1], [1, 3], [1, 1], epsilon=0.2, beta=1)
    assert_scalar(got, objective([2, 1], [1, -1], [1, 3], [1, 1], beta=1), rel=1e-12,
                  what="objective of integer inputs")  # fmt: skip
    # Narrow dtypes too: 100 * 100 wraps around in int8, and float16 keeps three digits.
    for dtype in (np.int8, np.int16, np.uint8, np.float16):
        arrays = [np.array(x, dtype=dtype) for x in ([100, 1], [1, 0], [100, 1], [1, 3])]
        got = impl.grpo_objective(*arrays, beta=1)
        assert_scalar(got, objective(*(a.astype(np.float64) for a in arrays), beta=1),
                      rel=1e-12, what=f"objective of {np.dtype(dtype).name} inputs")  # fmt: skip


@pytest.mark.parametrize("case", ERROR_CASES, ids=cases.ids(ERROR_CASES))
def test_mismatched_or_non_1d_inputs_raise_value_error(impl, case):
    with pytest.raises(ValueError):
        case.run(impl)


def test_does_not_modify_its_inputs(impl):
    # Inputs that go through every step: clipped ratios both ways, normalization, float32.
    # No probability vector sums to 1, so normalizing one in place shows.
    for dtype in (np.float64, np.float32):
        arrays = [np.array(x, dtype=dtype) for x in
                  ([0.3, 1.0, 5.0], [-1.0, 0.0, 2.0], [0.2, 0.3, 0.6], [2.0, 1.0, 1.0])]  # fmt: skip
        seen = impl.grpo_objective.observe(*arrays, epsilon=0.2, beta=0.1)
        assert seen.error is None, f"grpo_objective raised {seen.error!r}"
        for name, before, after in zip(["rhos", "A", "pi_theta_old", "pi_theta_ref"], arrays,
                                       seen.args, strict=True):  # fmt: skip
            assert after.dtype == before.dtype and np.array_equal(after, before), (
                f"{name} ({before.dtype}) was modified in place: {before} became {after}"
            )


def test_arguments_in_the_statements_order(impl):
    # Every other test names epsilon and beta; a caller who passes them in order gets a
    # signature of (..., beta, epsilon) wrong: here epsilon 0.1 and beta 0.3 become 0.3 and 0.1.
    arguments = dict(rhos=[1.5, 0.6, 1.1], A=[1.0, -1.0, 0.5], pi_theta_old=[0.9, 1.1, 1.0],
                     pi_theta_ref=[1.0, 0.5, 1.5], epsilon=0.1, beta=0.3)  # fmt: skip
    assert_positional_call_agrees(impl.grpo_objective, arguments, "grpo_objective")
