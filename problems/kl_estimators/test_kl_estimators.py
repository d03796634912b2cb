"""Hidden tests for kl_k1, kl_k2 and kl_k3. The implementation arrives through the `impl` fixture."""

import math

import numpy as np
import pytest

from problems.support.asserts import assert_array

ESTIMATORS = ["kl_k1", "kl_k2", "kl_k3"]
LOG2 = math.log(2.0)

# Two tokens: pi_theta = [0.5, 0.2], pi_ref = [0.25, 0.4], so r = [0.5, 2.0].
LOGP = np.log([0.5, 0.2])
LOGP_REF = np.log([0.25, 0.4])

# A small categorical distribution (the "vocabulary" has three tokens) and a reference
# policy that disagrees with it; their exact KL is known in closed form.
P_THETA = np.array([0.7, 0.2, 0.1])
P_REF = np.array([0.2, 0.3, 0.5])
EXACT_KL = float(np.sum(P_THETA * np.log(P_THETA / P_REF)))


def assert_float_array(got, shape, what):
    """Type, shape and dtype before any value check, with a message the learner can act on."""
    assert isinstance(got, np.ndarray), f"{what} should be a numpy array, got {type(got).__name__}"
    assert got.shape == shape, f"{what} should have shape {shape}, got {got.shape}"
    assert got.dtype.kind == "f", f"{what} should be a float array, got {got.dtype}"


def sampled_log_probs(n: int, seed: int = 2024):
    """log pi_theta and log pi_ref of n tokens drawn from pi_theta."""
    tokens = np.random.default_rng(seed).choice(len(P_THETA), size=n, p=P_THETA)
    return np.log(P_THETA)[tokens], np.log(P_REF)[tokens]


def test_k1_is_log_pi_theta_minus_log_pi_ref(impl):
    assert_array(impl.kl_k1(LOGP, LOGP_REF), [LOG2, -LOG2], what="k1")


def test_k2_is_half_the_squared_log_ratio(impl):
    assert_array(impl.kl_k2(LOGP, LOGP_REF), [0.5 * LOG2**2, 0.5 * LOG2**2], what="k2")


def test_k3_is_r_minus_one_minus_log_r(impl):
    # r = 0.5 on the first token and 2 on the second: k3 = [0.5 - 1 + log 2, 2 - 1 - log 2].
    assert_array(impl.kl_k3(LOGP, LOGP_REF), [LOG2 - 0.5, 1 - LOG2], what="k3")


def test_k3_uses_pi_ref_over_pi_theta_not_the_inverse(impl):
    # pi_theta = 0.8, pi_ref = 0.2: r = 1/4 gives 0.636; the inverted ratio 4 would give 1.614.
    got = impl.kl_k3(np.log([0.8]), np.log([0.2]))
    assert_array(got, [0.25 - 1 + math.log(4.0)], what="k3 for pi_theta = 0.8, pi_ref = 0.2")


@pytest.mark.parametrize("name", ESTIMATORS)
def test_equal_policies_give_zero(impl, name):
    logp = np.log([0.1, 0.5, 0.9, 1e-6])
    assert_array(getattr(impl, name)(logp, logp.copy()), np.zeros(4), atol=1e-12, what=name)


def test_k1_is_negative_where_pi_ref_is_larger(impl):
    got = impl.kl_k1(np.log([0.1]), np.log([0.3]))
    assert_array(got, [-math.log(3.0)], what="k1 for pi_theta = 0.1, pi_ref = 0.3")


@pytest.mark.parametrize("name", ["kl_k2", "kl_k3"])
def test_k2_and_k3_are_never_negative(impl, name):
    rng = np.random.default_rng(7)
    logp = -rng.exponential(3.0, size=(50, 40))
    logp_ref = -rng.exponential(3.0, size=(50, 40))
    got = getattr(impl, name)(logp, logp_ref)
    assert_float_array(got, (50, 40), name)
    assert np.all(got >= 0), f"{name} went negative: min {got.min():.6g}"


@pytest.mark.parametrize("name", ["kl_k1", "kl_k3"])
def test_k1_and_k3_average_exactly_to_the_kl_over_the_distribution(impl, name):
    # Evaluate the estimator on every token of the vocabulary and weight by pi_theta: this is
    # its exact expectation, with no sampling noise.
    values = getattr(impl, name)(np.log(P_THETA), np.log(P_REF))
    assert_float_array(values, (3,), name)
    expectation = float(np.sum(P_THETA * values))
    assert math.isclose(expectation, EXACT_KL, rel_tol=1e-9), (
        f"E[{name}] = {expectation:.9f}, but KL(pi_theta || pi_ref) = {EXACT_KL:.9f}"
    )


def test_k2_is_biased_over_the_distribution(impl):
    values = impl.kl_k2(np.log(P_THETA), np.log(P_REF))
    assert_float_array(values, (3,), "k2")
    # E[k2] = E[(log r)^2] / 2 = 0.695250 here, not the KL 0.634897: k2 is biased.
    expectation = float(np.sum(P_THETA * values))
    assert math.isclose(expectation, 0.695250, rel_tol=1e-6), f"E[k2] = {expectation:.6f}"


@pytest.mark.parametrize("name", ["kl_k1", "kl_k3"])
def test_sampled_mean_is_unbiased(impl, name):
    n = 50_000
    values = getattr(impl, name)(*sampled_log_probs(n))
    assert_float_array(values, (n,), name)
    mean, stderr = float(values.mean()), float(values.std()) / math.sqrt(n)
    assert abs(mean - EXACT_KL) < 4 * stderr + 1e-12, (
        f"mean of {name} over {n} sampled tokens is {mean:.5f} +- {stderr:.5f}, "
        f"but KL(pi_theta || pi_ref) = {EXACT_KL:.5f}"
    )


def test_k3_has_lower_variance_than_k1(impl):
    logp, logp_ref = sampled_log_probs(20_000)
    k1, k3 = impl.kl_k1(logp, logp_ref), impl.kl_k3(logp, logp_ref)
    assert_float_array(k1, (20_000,), "k1")
    assert_float_array(k3, (20_000,), "k3")
    assert float(np.var(k3)) < float(np.var(k1)), "k3 should have a lower variance than k1"


def test_k2_is_close_to_the_kl_for_nearby_policies(impl):
    # Second order in log r, k2 and the KL agree: within 5% when the policies differ by a few percent.
    p_ref = np.array([0.72, 0.19, 0.09])
    exact = float(np.sum(P_THETA * np.log(P_THETA / p_ref)))
    expectation = float(np.sum(P_THETA * impl.kl_k2(np.log(P_THETA), np.log(p_ref))))
    assert math.isclose(expectation, exact, rel_tol=0.05), (
        f"E[k2] = {expectation:.6g}, KL = {exact:.6g}"
    )


@pytest.mark.parametrize("name", ESTIMATORS)
def test_keeps_the_shape_of_a_batch_of_sequences(impl, name):
    rng = np.random.default_rng(3)
    logp, logp_ref = -rng.exponential(size=(4, 6)), -rng.exponential(size=(4, 6))
    log_r = logp_ref - logp
    expected = {"kl_k1": -log_r, "kl_k2": 0.5 * log_r**2, "kl_k3": np.exp(log_r) - 1 - log_r}
    assert_array(getattr(impl, name)(logp, logp_ref), expected[name], what=name)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_keeps_float32(impl, name):
    logp = np.log(np.array([0.5, 0.2], dtype=np.float32))
    logp_ref = np.log(np.array([0.25, 0.4], dtype=np.float32))
    got = getattr(impl, name)(logp, logp_ref)
    assert_float_array(got, (2,), name)
    assert got.dtype == np.float32, f"{name} should keep float32 inputs float32, got {got.dtype}"


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("shapes", [((3,), (1,)), ((2, 3), (3,)), ((2, 3), (3, 2))], ids=str)
def test_shape_mismatch_raises_value_error(impl, name, shapes):
    logp, logp_ref = np.full(shapes[0], -1.0), np.full(shapes[1], -2.0)
    with pytest.raises(ValueError):
        getattr(impl, name)(logp, logp_ref)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_does_not_modify_its_inputs(impl, name):
    logp, logp_ref = LOGP.copy(), LOGP_REF.copy()
    getattr(impl, name)(logp, logp_ref)
    assert np.array_equal(logp, LOGP) and np.array_equal(logp_ref, LOGP_REF), "inputs modified"
