"""Hidden tests for token_logprobs. The implementation arrives through the `impl` fixture."""

import math

import numpy as np
import pytest

from problems.support.asserts import assert_array

# One sequence of T = 3 tokens, prompt length 1, vocabulary of 3.
# logits[0, 0] predicts token 1: probabilities [1/4, 1/2, 1/4]; the token is 1.
# logits[0, 1] predicts token 2: probabilities [1/4, 1/4, 1/2]; the token is 0.
# logits[0, 2] would predict a fourth token: it is never used.
HAND_LOGITS = np.array([[np.log([1.0, 2.0, 1.0]), np.log([1.0, 1.0, 2.0]), [50.0, -50.0, 0.0]]])
HAND_IDS = np.array([[2, 1, 0]])
HAND_EXPECTED = [[math.log(0.5), math.log(0.25)]]


def loop_logprobs(logits, input_ids, prompt_length, temperature=1.0):
    """An independent, slow version: one position at a time, in float64."""
    B, T, _ = logits.shape
    out = np.zeros((B, T - prompt_length))
    for b in range(B):
        for t in range(prompt_length, T):
            row = logits[b, t - 1].astype(np.float64) / temperature
            top = row.max()
            log_norm = top + math.log(sum(math.exp(x - top) for x in row))
            out[b, t - prompt_length] = row[input_ids[b, t]] - log_norm
    return out


def random_batch(B=3, T=7, V=11, scale=3.0, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, scale, size=(B, T, V)), rng.integers(0, V, size=(B, T))


def test_hand_computed_example(impl):
    got = impl.token_logprobs(HAND_LOGITS, HAND_IDS, prompt_length=1)
    assert_array(got, HAND_EXPECTED, what="log-probs")


def test_logits_at_t_predict_the_token_at_t_plus_1(impl):
    # Only logits[:, P-1 : T-1] matter: the others can change without changing the result.
    logits, ids = random_batch(B=2, T=6, V=5)
    expected = loop_logprobs(logits, ids, 3)
    changed = logits.copy()
    changed[:, :2] += np.random.default_rng(1).normal(0.0, 5.0, size=changed[:, :2].shape)
    changed[:, -1] = 0.0
    assert_array(impl.token_logprobs(changed, ids, 3), expected, what="log-probs")


def test_matches_a_plain_loop(impl):
    logits, ids = random_batch()
    got = impl.token_logprobs(logits, ids, 3, temperature=0.7)
    assert_array(got, loop_logprobs(logits, ids, 3, 0.7), rtol=1e-9, what="log-probs")


@pytest.mark.parametrize("prompt_length", [1, 4, 6])
def test_returns_one_value_per_completion_token(impl, prompt_length):
    logits, ids = random_batch(B=2, T=7, V=5)
    got = impl.token_logprobs(logits, ids, prompt_length)
    assert_array(got, loop_logprobs(logits, ids, prompt_length), what="log-probs")


def test_temperature_divides_the_logits(impl):
    # Logits log [1, 4] at temperature 2 become log [1, 2]: probabilities [1/3, 2/3].
    logits = np.array([[np.log([1.0, 4.0]), [0.0, 0.0]]])
    got = impl.token_logprobs(logits, np.array([[0, 1]]), 1, temperature=2.0)
    assert_array(got, [[math.log(2.0 / 3.0)]], what="log-prob at temperature 2")


def test_low_temperature_sharpens_the_distribution(impl):
    logits = np.array([[np.log([1.0, 2.0]), [0.0, 0.0]]])
    got = impl.token_logprobs(logits, np.array([[0, 1]]), 1, temperature=0.5)
    assert_array(got, [[math.log(4.0 / 5.0)]], what="log-prob at temperature 0.5")


def test_default_temperature_is_one(impl):
    assert_array(impl.token_logprobs(HAND_LOGITS, HAND_IDS, 1), HAND_EXPECTED, what="log-probs")


def test_huge_logits_do_not_overflow(impl):
    logits, ids = random_batch(B=2, T=5, V=6, scale=1e4, seed=3)
    logits[0, 1, 2] = 1e4
    got = impl.token_logprobs(logits, ids, 2)
    assert_array(got, loop_logprobs(logits, ids, 2), rtol=1e-9, what="log-probs of logits ~1e4")


def test_very_unlikely_tokens_keep_a_finite_log_prob(impl):
    # p = e^-2000 underflows to 0 as a probability, but its log is a perfectly good -2000.
    logits = np.array([[[0.0, -2000.0], [0.0, 0.0]]])
    got = impl.token_logprobs(logits, np.array([[0, 1]]), 1)
    assert_array(got, [[-2000.0]], what="log-prob of a token with logit gap 2000")


def test_uniform_logits_give_minus_log_v(impl):
    logits = np.full((2, 4, 8), 3.5)
    ids = np.array([[0, 7, 3, 1], [5, 5, 5, 5]])
    assert_array(
        impl.token_logprobs(logits, ids, 1), np.full((2, 3), -math.log(8)), what="log-probs"
    )


def test_probabilities_over_the_vocabulary_sum_to_one(impl):
    logits, ids = random_batch(B=1, T=3, V=5)
    total = 0.0
    for token in range(5):
        ids[0, 2] = token
        total += math.exp(float(impl.token_logprobs(logits, ids, 2)[0, 0]))
    assert math.isclose(total, 1.0, rel_tol=1e-9), f"probabilities sum to {total}, not 1"


def test_keeps_float32_logits_float32(impl):
    logits, ids = random_batch(B=2, T=5, V=7)
    got = impl.token_logprobs(logits.astype(np.float32), ids, 2)
    assert_array(got, loop_logprobs(logits, ids, 2), rtol=1e-5, atol=1e-5, what="log-probs")
    assert got.dtype == np.float32, f"float32 logits should give float32 log-probs, got {got.dtype}"


def test_accepts_int32_ids(impl):
    logits, ids = random_batch(B=2, T=5, V=7)
    got = impl.token_logprobs(logits, ids.astype(np.int32), 2)
    assert_array(got, loop_logprobs(logits, ids, 2), what="log-probs")


@pytest.mark.parametrize("prompt_length", [0, -1, 5, 6])
def test_prompt_length_outside_1_to_t_minus_1_raises_value_error(impl, prompt_length):
    logits, ids = random_batch(B=2, T=5, V=4)
    with pytest.raises(ValueError):
        impl.token_logprobs(logits, ids, prompt_length)


@pytest.mark.parametrize("temperature", [0.0, -1.0])
def test_non_positive_temperature_raises_value_error(impl, temperature):
    logits, ids = random_batch(B=2, T=5, V=4)
    with pytest.raises(ValueError):
        impl.token_logprobs(logits, ids, 2, temperature=temperature)


@pytest.mark.parametrize(
    "logits_shape, ids_shape",
    [((2, 5, 4), (2, 4)), ((2, 5, 4), (3, 5)), ((2, 5), (2, 5)), ((2, 5, 4), (2, 5, 1))],
    ids=str,
)
def test_mismatched_shapes_raise_value_error(impl, logits_shape, ids_shape):
    logits, ids = np.zeros(logits_shape), np.zeros(ids_shape, dtype=np.int64)
    with pytest.raises(ValueError):
        impl.token_logprobs(logits, ids, 2)


def test_does_not_modify_its_inputs(impl):
    logits, ids = random_batch(B=2, T=5, V=4)
    logits_copy, ids_copy = logits.copy(), ids.copy()
    impl.token_logprobs(logits, ids, 2, temperature=0.5)
    assert np.array_equal(logits, logits_copy), "logits were modified in place"
    assert np.array_equal(ids, ids_copy), "input_ids were modified in place"
