"""Hidden tests for token_logprobs. The implementation arrives through the `impl` fixture."""

import math

import numpy as np
import pytest

from problems.support.asserts import assert_array, broadcast_variants

# One sequence of T = 3 tokens, prompt length 1, vocabulary of 3.
# logits[0, 0] predicts token 1: probabilities [1/4, 1/2, 1/4]; the token is 1.
# logits[0, 1] predicts token 2: probabilities [1/4, 1/4, 1/2]; the token is 0.
# logits[0, 2] would predict a fourth token: it is never used.
HAND_LOGITS = np.array([[np.log([1.0, 2.0, 1.0]), np.log([1.0, 1.0, 2.0]), [50.0, -50.0, 0.0]]])
HAND_IDS = np.array([[2, 1, 0]])
HAND_EXPECTED = [[math.log(0.5), math.log(0.25)]]


def loop_logprobs(logits, input_ids, prompt_length, temperature=1.0):
    """An independent, slow version: one position at a time, in float64 (with Python floats)."""
    B, T, _ = logits.shape
    out = np.zeros((B, T - prompt_length))
    for b in range(B):
        for t in range(prompt_length, T):
            row = [float(x) / temperature for x in logits[b, t - 1]]
            top = max(row)
            log_norm = top + math.log(sum(math.exp(x - top) for x in row))
            out[b, t - prompt_length] = row[input_ids[b, t]] - log_norm
    return out


def random_batch(B=3, T=7, V=11, scale=3.0, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, scale, size=(B, T, V)).astype(dtype), rng.integers(0, V, size=(B, T))


def assert_logprobs(got, expected, dtype, what="log-probs", rtol=None):
    """A numpy array of exactly `dtype`, of `expected`'s shape and values, finite and <= 0."""
    if rtol is None:
        rtol = 1e-5 if dtype == np.float32 else 1e-10
    assert_array(got, expected, rtol=rtol, atol=rtol, what=what)
    assert got.dtype == dtype, f"{what} should have dtype {np.dtype(dtype)}, got {got.dtype}"
    assert np.all(got <= 0), f"{what} should all be <= 0, got {got}"


def test_hand_computed_example(impl):
    got = impl.token_logprobs(HAND_LOGITS, HAND_IDS, prompt_length=1)
    assert_logprobs(got, HAND_EXPECTED, np.float64)


def test_logits_at_t_predict_the_token_at_t_plus_1(impl):
    # Only logits[:, P-1 : T-1] matter: the others can change without changing the result.
    logits, ids = random_batch(B=2, T=6, V=5)
    expected = loop_logprobs(logits, ids, 3)
    changed = logits.copy()
    changed[:, :2] += np.random.default_rng(1).normal(0.0, 5.0, size=changed[:, :2].shape)
    changed[:, -1] = [1e300, -1e300, 0.0, 7.0, -3.0]
    assert_logprobs(impl.token_logprobs(changed, ids, 3), expected, np.float64)


@pytest.mark.parametrize(
    "B, T, V, prompt_length, temperature",
    [
        (3, 7, 11, 3, 0.7),
        (1, 2, 4, 1, 1.0),
        (2, 5, 1, 2, 1.3),
        (4, 3, 30, 2, 2.5),
        (2, 9, 3, 8, 0.2),
        (12, 40, 50, 9, 0.7),
    ],
    ids=["batch", "shortest", "vocabulary-of-one", "wide", "last-token-only", "large"],
)
def test_matches_a_plain_loop(impl, B, T, V, prompt_length, temperature):
    logits, ids = random_batch(B, T, V, seed=B * T * V)
    ids[:, -1] = V - 1  # the last entry of the vocabulary is a valid id too
    got = impl.token_logprobs(logits, ids, prompt_length, temperature=temperature)
    assert_logprobs(got, loop_logprobs(logits, ids, prompt_length, temperature), np.float64)


@pytest.mark.parametrize("prompt_length", [1, 4, 6])
def test_returns_one_value_per_completion_token(impl, prompt_length):
    logits, ids = random_batch(B=2, T=7, V=5)
    got = impl.token_logprobs(logits, ids, prompt_length)
    assert_logprobs(got, loop_logprobs(logits, ids, prompt_length), np.float64)


def test_temperature_divides_the_logits(impl):
    # Logits log [1, 4] at temperature 2 become log [1, 2]: probabilities [1/3, 2/3].
    logits = np.array([[np.log([1.0, 4.0]), [0.0, 0.0]]])
    got = impl.token_logprobs(logits, np.array([[0, 1]]), 1, temperature=2.0)
    assert_logprobs(got, [[math.log(2.0 / 3.0)]], np.float64, "log-prob at temperature 2")


def test_low_temperature_sharpens_the_distribution(impl):
    logits = np.array([[np.log([1.0, 2.0]), [0.0, 0.0]]])
    got = impl.token_logprobs(logits, np.array([[0, 1]]), 1, temperature=0.5)
    assert_logprobs(got, [[math.log(4.0 / 5.0)]], np.float64, "log-prob at temperature 0.5")


def test_default_temperature_is_one(impl):
    got = impl.token_logprobs(HAND_LOGITS, HAND_IDS, 1)
    assert_logprobs(got, HAND_EXPECTED, np.float64)


@pytest.mark.parametrize(
    "scale, temperature, dtype",
    [(1e4, 1.0, np.float64), (1e4, 0.01, np.float64), (1e300, 1.0, np.float64),
     (1e4, 1.0, np.float32), (1e36, 1.0, np.float32), (1e3, 0.1, np.float32)],
    ids=["1e4", "1e4-cold", "1e300", "1e4-float32", "1e36-float32", "1e3-cold-float32"],
)  # fmt: skip
def test_huge_logits_do_not_overflow(impl, scale, temperature, dtype):
    # exp() of logits / temperature overflows from about 709 (float64) or 88 (float32) on.
    logits, ids = random_batch(B=2, T=5, V=6, scale=scale, seed=3, dtype=dtype)
    logits[0, 1, ids[0, 2]] = dtype(scale)  # one token far ahead of the others
    got = impl.token_logprobs(logits, ids, 2, temperature=temperature)
    expected = loop_logprobs(logits, ids, 2, temperature)
    # Exact to the rounding of the largest scaled logit: (x - m) - log(sum) and x - (m + log(sum))
    # are both right, and differ by that rounding.
    error = float(np.finfo(dtype).eps) * 8 * float(np.max(np.abs(logits))) / temperature
    assert_array(got, expected, rtol=1e-5, atol=error, what=f"log-probs of logits ~{scale:g}")
    assert got.dtype == dtype, f"log-probs should have dtype {np.dtype(dtype)}, got {got.dtype}"
    assert np.all(got <= 0), f"log-probs should all be <= 0, got {got}"


@pytest.mark.parametrize(
    "big, temperature, dtype", [(1e308, 10.0, np.float64), (3e38, 30.0, np.float32)],
    ids=["float64", "float32"],
)  # fmt: skip
def test_logits_near_the_largest_float_with_a_warm_temperature(impl, big, temperature, dtype):
    # logits / temperature is within the bounds, logits - max(logits) is not: divide first.
    logits = np.array([[[big, -big, 0.0], [0.0, big, -big], [1.0, 2.0, 3.0]]], dtype=dtype)
    ids = np.array([[0, 1, 2]])
    got = impl.token_logprobs(logits, ids, 1, temperature=temperature)
    expected = loop_logprobs(logits, ids, 1, temperature)
    assert np.all(np.isfinite(expected)), expected
    assert_logprobs(
        got, expected, dtype, f"log-probs of logits of +-{big:g} at tau = {temperature}"
    )


@pytest.mark.parametrize(
    "gap, dtype",
    [(2000.0, np.float64), (740.0, np.float64), (120.0, np.float32), (102.0, np.float32)],
    ids=["2000", "740-subnormal", "120-float32", "102-subnormal-float32"],
)
def test_very_unlikely_tokens_keep_an_exact_log_prob(impl, gap, dtype):
    # p = e^-gap is 0 in floating point (or a subnormal number with a digit or two left), but
    # its log is a perfectly good -gap: stay in log space.
    logits = np.array([[[0.0, -gap, 1.0], [0.0, 0.0, 0.0]]], dtype=dtype)
    got = impl.token_logprobs(logits, np.array([[0, 1]]), 1)
    expected = -gap - 1.0 - math.log1p(math.exp(-1.0) + math.exp(-1.0 - gap))
    assert_logprobs(got, [[expected]], dtype, f"log-prob of a token with logit gap {gap:g}")


@pytest.mark.parametrize("temperature", [1.0, 0.5], ids=["tau-1", "tau-0.5"])
def test_likely_tokens_keep_a_float64_exact_log_prob(impl, temperature):
    # log p = -log1p(e^-gap + ...) is -4.5e-5 for gap 10 and exactly 0 past gap 40: an eps
    # inside the log (log(s + 1e-12)), or a clamp below 0, shifts it by 1e-12, where float64
    # rounding errs by ~1e-15 (an ulp of the largest logit, 5, over the temperature).
    gaps = [10.0, 20.0, 30.0, 40.0, 800.0]
    logits = np.array([[[5.0, 5.0 - g, 4.0 - g, 3.0 - g, 2.0 - g] for g in gaps] + [[0.0] * 5]])
    ids = np.zeros((1, len(gaps) + 1), dtype=np.int64)
    got = impl.token_logprobs(logits, ids, 1, temperature=temperature)
    expected = [[-math.log1p(sum(math.exp((-g - k) / temperature) for k in range(4)))
                 for g in gaps]]  # fmt: skip
    error = float(np.finfo(np.float64).eps) * 8 * (5.0 / temperature + 1.0)
    assert_array(got, expected, rtol=0.0, atol=error,
                 what=f"log-probs of tokens far ahead of the rest at temperature {temperature}")  # fmt: skip
    assert np.all(got <= 0), f"log-probs should all be <= 0, got {got}"


def test_a_subnormal_temperature_divides_the_logits(impl):
    # 1 / 1e-310 overflows to inf; 1e-5 / 1e-310 = 1e305 is within the statement's bounds.
    logits = np.array([[[1e-5, 0.0], [0.0, 0.0]]])
    got = impl.token_logprobs(logits, np.array([[0, 1]]), 1, temperature=1e-310)
    assert_logprobs(got, np.array([[-1e305]]), np.float64, "log-prob at tau = 1e-310")
    got = impl.token_logprobs(logits, np.array([[0, 0]]), 1, temperature=1e-310)
    assert_logprobs(got, np.array([[0.0]]), np.float64, "log-prob of the likely token")


def test_ids_beyond_32767_pick_their_own_token(impl):
    # A real vocabulary (Qwen2: 151,936 tokens) has ids that int16 cannot hold.
    logits = np.zeros((1, 2, 40000))
    logits[0, 0, 35000:] = 1.0
    for token, logit in ((35000, 1.0), (34999, 0.0), (39999, 1.0)):
        got = impl.token_logprobs(logits, np.array([[0, token]]), 1)
        expected = logit - math.log(35000 + 5000 * math.e)
        assert_logprobs(got, np.array([[expected]]), np.float64, f"log-prob of token {token}")


def test_four_million_positions_within_the_time_limit(impl):
    # Whole arrays at once take about a second; a Python loop over the positions (a few
    # microseconds each) runs past the 10 s a call may take.
    T = 4_000_001
    rng = np.random.default_rng(7)
    logits = rng.normal(0.0, 3.0, size=(1, T, 2)).astype(np.float32)
    ids = rng.integers(0, 2, size=(1, T), dtype=np.uint8)
    got = impl.token_logprobs(logits, ids, 1)
    # With two tokens, log p(chosen) = -log(1 + exp(other - chosen)).
    chosen = np.take_along_axis(logits[0, :-1], ids[0, 1:, None], axis=-1)[:, 0]
    other = logits[0, :-1].sum(axis=-1) - chosen
    expected = -np.logaddexp(0.0, other.astype(np.float64) - chosen)
    assert_logprobs(got, expected[None, :], np.float32)


def test_uniform_logits_give_minus_log_v(impl):
    logits = np.full((2, 4, 8), 3.5)
    ids = np.array([[0, 7, 3, 1], [5, 5, 5, 5]])
    assert_logprobs(impl.token_logprobs(logits, ids, 1), np.full((2, 3), -math.log(8)), np.float64)
    # Beside positions that are not uniform, the uniform ones still give -log V.
    logits[0, 1] = np.arange(8.0)
    logits[1, 2, 5] = 9.0
    expected = np.full((2, 3), -math.log(8))
    expected[0, 1], expected[1, 2] = loop_logprobs(logits, ids, 1)[[0, 1], [1, 2]]
    assert_logprobs(impl.token_logprobs(logits, ids, 1), expected, np.float64)


def test_probabilities_over_the_vocabulary_sum_to_one(impl):
    logits, ids = random_batch(B=1, T=3, V=5)
    total, got = 0.0, []
    for token in range(5):
        ids[0, 2] = token
        got.append(float(impl.token_logprobs(logits, ids, 2)[0, 0]))
        total += math.exp(got[-1])
    assert math.isclose(total, 1.0, rel_tol=1e-9), f"probabilities sum to {total}, not 1"
    # And they are spread as the logits are: log p differs between tokens as their logits do.
    gaps = np.array(got) - got[0]
    assert_array(gaps, logits[0, 1] - logits[0, 1, 0], rtol=1e-9, atol=1e-9,
                 what="log-prob of each token minus that of token 0")  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
def test_keeps_the_logits_dtype(impl, dtype):
    # float32 logits give float32 log-probs; float64 logits keep float64 precision.
    logits, ids = random_batch(B=2, T=5, V=7, dtype=dtype)
    got = impl.token_logprobs(logits, ids, 2, temperature=0.9)
    assert_logprobs(got, loop_logprobs(logits, ids, 2, 0.9), dtype)
    # A numpy scalar temperature must not promote float32 logits (numpy 2 would).
    for temperature in (np.float64(0.9), np.int64(2)):
        expected = loop_logprobs(logits, ids, 2, float(temperature))
        got = impl.token_logprobs(logits, ids, 2, temperature=temperature)
        assert_logprobs(got, expected, dtype, f"log-probs at temperature {temperature!r}")


def test_accepts_integer_ids_and_numpy_scalars(impl):
    logits, ids = random_batch(B=2, T=5, V=7)
    expected = loop_logprobs(logits, ids, 2, 2.0)
    for id_type in (np.int64, np.int32, np.int16, np.uint8):
        got = impl.token_logprobs(logits, ids.astype(id_type), 2, 2.0)
        assert_logprobs(got, expected, np.float64, f"log-probs with {np.dtype(id_type)} ids")
    for prompt_length, temperature in ((np.int64(2), 2), (np.int32(2), np.float64(2.0))):
        got = impl.token_logprobs(logits, ids, prompt_length, temperature=temperature)
        what = f"log-probs with prompt_length {prompt_length!r}, temperature {temperature!r}"
        assert_logprobs(got, expected, np.float64, what)


def test_prompt_length_outside_1_to_t_minus_1_raises_value_error(impl):
    logits, ids = random_batch(B=2, T=5, V=4)
    for prompt_length in (0, -1, 5, 6, np.int64(5)):
        with pytest.raises(ValueError):
            impl.token_logprobs(logits, ids, prompt_length)
            pytest.fail(f"prompt_length {prompt_length} with T = 5 should raise ValueError")


def test_non_positive_temperature_raises_value_error(impl):
    logits, ids = random_batch(B=2, T=5, V=4)
    for temperature in (0.0, -1.0, -0.5, 0, math.nan):
        with pytest.raises(ValueError):
            impl.token_logprobs(logits, ids, 2, temperature=temperature)
            pytest.fail(f"temperature {temperature} should raise ValueError")


def test_mismatched_shapes_raise_value_error(impl):
    shapes = [
        ((2, 5, 4), (2, 4)),  # T differs
        ((2, 5, 4), (3, 5)),  # B differs
        ((2, 5, 4), (1, 5)),  # B differs, and broadcasting would hide it
        ((2, 5), (2, 5)),  # logits without a vocabulary axis
        ((2, 5, 4, 1), (2, 5)),  # one axis too many
        ((2, 5, 4), (2, 5, 1)),  # ids with an extra axis
        ((1, 5, 4), (5,)),  # ids without the batch axis
        ((5, 4), (5,)),  # one sequence without its batch axis
        ((5, 4), (1, 5)),  # logits of one sequence without the batch axis its ids have
        ((1, 5, 4), (1, 1, 5)),  # ids of one sequence with an axis too many
        ((1, 1, 5, 4), (1, 5)),  # logits of one sequence with an axis too many
    ]
    # And every shape numpy broadcasts against ids (2, 5), or against logits (2, 5, 4) on their
    # (B, T) axes (V = 1 is a vocabulary): a 1 in place of B or T, an axis missing or one of 1 added.
    shapes += [((2, 5, 4), ids.shape) for ids in broadcast_variants(np.zeros((2, 5)))]
    shapes += [(logits.shape, (2, 5)) for logits in broadcast_variants(np.zeros((2, 5, 4)))
               if logits.shape[:2] != (2, 5) or logits.ndim != 3]  # fmt: skip
    for logits_shape, ids_shape in shapes:
        logits, ids = np.zeros(logits_shape), np.zeros(ids_shape, dtype=np.int64)
        with pytest.raises(ValueError):
            impl.token_logprobs(logits, ids, 2)
            pytest.fail(f"logits {logits_shape} and input_ids {ids_shape} should raise ValueError")


def test_does_not_modify_its_inputs(impl):
    # Slicing gives a view of the caller's logits: dividing it in place changes their array.
    logits, ids = random_batch(B=2, T=5, V=4)
    calls = [((logits, ids, 2), {"temperature": 0.5}, None),
             ((logits, ids, 1), {"temperature": 1.0}, None),
             ((logits.astype(np.float32), ids, 3), {"temperature": 3.0}, None),
             ((logits, ids, 2), {"temperature": 0.0}, ValueError)]  # fmt: skip
    for args, kwargs, error in calls:
        seen = impl.token_logprobs.observe(*args, **kwargs)
        if error is None and seen.error is not None:
            raise seen.error
        if error is not None:
            assert isinstance(seen.error, error), f"expected {error.__name__}, got {seen.error!r}"
        assert np.array_equal(seen.args[0], args[0]), "logits were modified in place"
        assert np.array_equal(seen.args[1], args[1]), "input_ids were modified in place"
