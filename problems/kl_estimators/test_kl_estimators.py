"""Hidden tests for kl_k1, kl_k2 and kl_k3. The implementation arrives through the `impl` fixture."""

import decimal
import math

import numpy as np
import pytest

from problems.support.asserts import assert_array, broadcast_variants

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

# Pairs (logp, logp_ref) far outside everyday values, where clamping or computing with
# probabilities instead of log-probs gives another answer. A log ratio of 800 (or 100 in
# float32) overflows r, and then k3 is inf: the formula is not clamped.
EXTREMES = {
    np.float64: [(0.0, -25.0), (-25.0, 0.0), (-60.0, -3.0), (-3.0, -80.0), (-700.0, -0.5),
                 (-800.0, 0.0), (0.0, -800.0), (-800.0, -790.0), (-1e4, -1e4 + 5.0),
                 (-2000.0, 0.0), (0.0, -2000.0), (-1e5, -1.0), (-1.0, -1e5), (-1e200, 0.0),
                 (0.0, -1e200)],
    np.float32: [(0.0, -25.0), (-25.0, 0.0), (-80.0, 0.0), (-100.0, 0.0), (-0.5, -200.0),
                 (-800.0, -790.0), (-120.0, -120.0), (-2000.0, 0.0), (0.0, -2000.0)],
}  # fmt: skip


def formula(name, logp, logp_ref):
    """The statement's estimator, computed in float64 and rounded to the inputs' dtype (where
    a value too large for float32 becomes inf, as it does in float32 arithmetic)."""
    log_r = np.asarray(logp_ref, dtype=np.float64) - np.asarray(logp, dtype=np.float64)
    with np.errstate(over="ignore"):
        value = {"kl_k1": -log_r, "kl_k2": 0.5 * log_r**2, "kl_k3": np.expm1(log_r) - log_r}[name]
        return value.astype(np.result_type(logp, logp_ref))


def assert_estimates(got, expected, dtype, what, rtol=None):
    """An array of exactly `dtype` and `expected`'s shape, with the same infinities."""
    assert isinstance(got, np.ndarray), f"{what} should be a numpy array, got {type(got).__name__}"
    assert got.shape == expected.shape, (
        f"{what} should have shape {expected.shape}, got {got.shape}"
    )
    assert got.dtype == dtype, f"{what} should have dtype {np.dtype(dtype)}, got {got.dtype}"
    infinite = np.isinf(expected)
    assert np.array_equal(got[infinite], expected[infinite]), (
        f"{what}: expected {expected[infinite]} where the ratio overflows, got {got[infinite]}"
    )
    if rtol is None:
        rtol = 1e-5 if dtype == np.float32 else 1e-12
    assert_array(got[~infinite], expected[~infinite], rtol=rtol, atol=0.0, what=what)


def sampled_log_probs(n: int, seed: int = 2024):
    """log pi_theta and log pi_ref of n tokens drawn from pi_theta."""
    tokens = np.random.default_rng(seed).choice(len(P_THETA), size=n, p=P_THETA)
    return np.log(P_THETA)[tokens], np.log(P_REF)[tokens]


def random_log_probs(shape, seed):
    rng = np.random.default_rng(seed)
    return -rng.exponential(2.0, size=shape), -rng.exponential(2.0, size=shape)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("kl_k1", [LOG2, -LOG2]),
        ("kl_k2", [0.5 * LOG2**2, 0.5 * LOG2**2]),
        ("kl_k3", [LOG2 - 0.5, 1 - LOG2]),  # [0.5 - 1 + log 2, 2 - 1 - log 2]
    ],
)
def test_worked_example(impl, name, expected):
    got = getattr(impl, name)(LOGP, LOGP_REF)
    assert_estimates(got, np.array(expected), np.float64, f"{name} of the worked example")


def test_k3_uses_pi_ref_over_pi_theta_not_the_inverse(impl):
    # pi_theta = 0.8, pi_ref = 0.2: r = 1/4 gives 0.636; the inverted ratio 4 would give 1.614.
    got = impl.kl_k3(np.log([0.8]), np.log([0.2]))
    assert_array(got, [0.25 - 1 + math.log(4.0)], what="k3 for pi_theta = 0.8, pi_ref = 0.2")


@pytest.mark.parametrize("name", ESTIMATORS)
def test_equal_policies_give_zero(impl, name):
    # Including log-probs below -745, whose probabilities are 0 in float64: stay in log space.
    logp = np.array([math.log(0.1), math.log(0.5), math.log(0.9), math.log(1e-6), -800.0, -1e4])
    got = getattr(impl, name)(logp, logp.copy())
    assert_estimates(got, np.zeros(6), np.float64, f"{name} of equal policies", rtol=0.0)


def test_k1_is_negative_where_pi_ref_is_larger(impl):
    got = impl.kl_k1(np.log([0.1]), np.log([0.3]))
    assert_array(got, [-math.log(3.0)], what="k1 for pi_theta = 0.1, pi_ref = 0.3")


@pytest.mark.parametrize("name", ["kl_k2", "kl_k3"])
def test_k2_and_k3_are_never_negative(impl, name):
    logp, logp_ref = random_log_probs((50, 40), seed=7)
    got = getattr(impl, name)(logp, logp_ref)
    assert_estimates(got, formula(name, logp, logp_ref), np.float64, name)
    assert np.all(got >= 0), f"{name} went negative: min {got.min():.6g}"


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_k3_is_never_negative_near_r_equal_one(impl, dtype):
    # Most tokens have pi_theta close to pi_ref. There exp(log r) - 1 rounds r first and comes
    # out a little below log r: k3 would be about -5e-17 instead of +5e-19.
    # (float32 keeps fewer digits: its k3 there is only good to about 10%.)
    tiny = np.array([1e-9, 2e-9, 3e-9, 1e-8, 3e-8, 1e-7, 1e-6], dtype=dtype)
    rtol = 1e-3
    if dtype == np.float32:
        tiny, rtol = tiny * 1000, 0.5
    zeros = np.zeros_like(tiny)
    for logp, logp_ref in ((zeros, -tiny), (-tiny, zeros)):
        got = impl.kl_k3(logp, logp_ref)
        assert_estimates(got, formula("kl_k3", logp, logp_ref), dtype, "k3 near r = 1", rtol=rtol)
        assert np.all(got >= 0), f"k3 went negative near r = 1: {got}"


def test_k3_near_r_equal_one_is_the_formula_to_float64_precision(impl):
    # Between |log r| = 1e-7 and 1e-2, k3 is about (log r)^2 / 2, but not exactly: a shortcut
    # below some cut-off (x^2 / 2, or x^2 / 2 + x^3 / 6) is off by x / 3 or x^2 / 12 relative,
    # far more than expm1 leaves. expm1(x) - x keeps about 1e-16 / |x| of relative error (the
    # subtraction cancels the leading digits); the tolerance allows ten times that. The exact
    # values come from 50-digit decimals.
    x = np.array([1e-7, 3e-7, 6e-7, 9e-7, 1e-6, 3e-6, 1e-5, 4e-5, 9e-5, 1e-4, 3e-4, 1e-3, 5e-3])
    x = np.concatenate([x, -x])
    with decimal.localcontext(prec=50):
        exact = [float(d.exp() - 1 - d) for d in map(decimal.Decimal, x.tolist())]
    got = impl.kl_k3(np.zeros_like(x), x)
    assert_array(got, np.array(exact), rtol=1e-8, atol=0.0, what=f"k3 at log r = {x}")
    for log_r, value, truth in zip(x, got, exact, strict=True):
        error = abs(value - truth) / truth
        assert error <= 1e-12 + 1e-15 / abs(log_r), (
            f"k3 at log r = {log_r:g}: expected {truth!r}, got {value!r} (relative error "
            f"{error:.1e}; expm1(log r) - log r is good to about {1e-16 / abs(log_r):.0e})"
        )


@pytest.mark.parametrize("name", ["kl_k1", "kl_k3"])
def test_k1_and_k3_average_exactly_to_the_kl_over_the_distribution(impl, name):
    # Evaluate the estimator on every token of the vocabulary and weight by pi_theta: this is
    # its exact expectation, with no sampling noise.
    values = getattr(impl, name)(np.log(P_THETA), np.log(P_REF))
    assert_estimates(values, formula(name, np.log(P_THETA), np.log(P_REF)), np.float64, name)
    expectation = float(np.sum(P_THETA * values))
    assert math.isclose(expectation, EXACT_KL, rel_tol=1e-9), (
        f"E[{name}] = {expectation:.9f}, but KL(pi_theta || pi_ref) = {EXACT_KL:.9f}"
    )


def test_k2_is_biased_over_the_distribution(impl):
    values = impl.kl_k2(np.log(P_THETA), np.log(P_REF))
    assert_estimates(values, formula("kl_k2", np.log(P_THETA), np.log(P_REF)), np.float64, "k2")
    # E[k2] = E[(log r)^2] / 2 = 0.695250 here, not the KL 0.634897: k2 is biased.
    expectation = float(np.sum(P_THETA * values))
    assert math.isclose(expectation, 0.695250, rel_tol=1e-6), f"E[k2] = {expectation:.6f}"


@pytest.mark.parametrize("name", ["kl_k1", "kl_k3"])
def test_sampled_mean_is_unbiased(impl, name):
    n = 50_000
    values = getattr(impl, name)(*sampled_log_probs(n))
    assert_estimates(values, formula(name, *sampled_log_probs(n)), np.float64, name)
    mean, stderr = float(values.mean()), float(values.std()) / math.sqrt(n)
    assert abs(mean - EXACT_KL) < 4 * stderr + 1e-12, (
        f"mean of {name} over {n} sampled tokens is {mean:.5f} +- {stderr:.5f}, "
        f"but KL(pi_theta || pi_ref) = {EXACT_KL:.5f}"
    )


def test_k3_has_lower_variance_than_k1(impl):
    logp, logp_ref = sampled_log_probs(20_000)
    k1, k3 = impl.kl_k1(logp, logp_ref), impl.kl_k3(logp, logp_ref)
    assert_estimates(k1, formula("kl_k1", logp, logp_ref), np.float64, "k1")
    assert_estimates(k3, formula("kl_k3", logp, logp_ref), np.float64, "k3")
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
def test_works_token_by_token_on_any_shape(impl, name):
    # One estimate per token: a list of tokens, a (B, T) batch, more axes, empty arrays.
    for seed, shape in enumerate([(5,), (4, 6), (2, 3, 4), (1, 1), (0,), (3, 0)]):
        logp, logp_ref = random_log_probs(shape, seed)
        got = getattr(impl, name)(logp, logp_ref)
        assert_estimates(got, formula(name, logp, logp_ref), np.float64, f"{name} of {shape}")


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", ESTIMATORS)
def test_extreme_log_ratios_are_not_clamped(impl, name, dtype):
    logp, logp_ref = np.array(EXTREMES[dtype], dtype=dtype).T
    got = getattr(impl, name)(logp, logp_ref)
    assert_estimates(got, formula(name, logp, logp_ref), dtype, f"{name} at extreme log ratios")


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("name", ESTIMATORS)
def test_keeps_the_dtype(impl, name, dtype):
    # float32 in, float32 out; float64 in, float64 out, to float64 precision: at every size,
    # a single token or a single row of one included.
    for shape in ((3, 5), (1,), (1, 1), (2,)):
        logp, logp_ref = (x.astype(dtype) for x in random_log_probs(shape, seed=11))
        got = getattr(impl, name)(logp, logp_ref)
        what = f"{name} of {np.dtype(dtype)} of shape {shape}"
        assert_estimates(got, formula(name, logp, logp_ref), dtype, what)


# Shapes that differ, several of which numpy would broadcast (some to the same number of
# elements), pairing log-probs of different tokens.
MISMATCHED = [((3,), (1,)), ((2, 3), (3,)), ((2, 3), (3, 2)), ((2, 3), (2, 1)), ((1, 3), (3,)),
              ((3, 1), (1, 3)), ((2, 3), (2, 3, 1)), ((4,), (0,))]  # fmt: skip
# And every shape numpy broadcasts against a list of tokens, a (B, T) batch or a 3-D array: a 1
# in place of any axis ((1, T) against (B, T) has the same number of axes and the same last
# one), an axis missing or one of 1 added.
MISMATCHED += [(shape, variant.shape) for shape in ((4,), (2, 3), (2, 3, 4))
               for variant in broadcast_variants(np.ones(shape))]  # fmt: skip


@pytest.mark.parametrize("name", ESTIMATORS)
def test_shape_mismatch_raises_value_error(impl, name):
    for first, second in MISMATCHED:
        for shapes in ((first, second), (second, first)):
            logp, logp_ref = np.full(shapes[0], -1.0), np.full(shapes[1], -2.0)
            with pytest.raises(ValueError):
                getattr(impl, name)(logp, logp_ref)
                pytest.fail(f"{name} accepted shapes {shapes[0]} and {shapes[1]}")


@pytest.mark.parametrize("name", ESTIMATORS)
def test_does_not_modify_its_inputs(impl, name):
    logp, logp_ref = random_log_probs((3, 4), seed=5)
    # On the error path too: the shape check may not come after an in-place update.
    for args, error in (((logp, logp_ref), None),
                        ((logp.astype(np.float32), logp_ref.astype(np.float32)), None),
                        ((logp, logp_ref[:, :1]), ValueError)):  # fmt: skip
        seen = getattr(impl, name).observe(*args)
        if error is None and seen.error is not None:
            raise seen.error
        if error is not None:
            assert isinstance(seen.error, error), f"expected {error.__name__}, got {seen.error!r}"
        for label, before, after in zip(("logp", "logp_ref"), args, seen.args, strict=True):
            assert np.array_equal(after, before), f"{name} modified {label} in place"
