"""Hidden tests for masked_token_loss. The implementation arrives through the `impl` fixture."""

import math

import numpy as np
import pytest

from problems.support.asserts import assert_scalar

# The worked example: ratios [1.5, 1.0, pad] and [1.0, 0.5, 1.1], advantages +1 and -1.
LOGP_OLD = np.log([[0.2, 0.5, 0.3], [0.4, 0.6, 0.5]])
LOGP = np.log([[0.3, 0.5, 0.3], [0.4, 0.3, 0.55]])
LOGP_REF = np.log([[0.15, 0.5, 0.3], [0.4, 0.3, 0.55]])  # r = 0.5 on the first token only
ADVANTAGES = np.array([1.0, -1.0])
MASK = np.array([[1, 1, 0], [1, 1, 1]])
# Per-token losses with beta = 0: [[-1.2, -1.0, pad], [1.0, 0.8, 1.1]].
K3_HALF = 0.5 - math.log(0.5) - 1.0


def example(**overrides):
    args = dict(logp=LOGP, logp_old=LOGP_OLD, logp_ref=LOGP, advantages=ADVANTAGES, mask=MASK)
    return {**args, **overrides}


def one_token(ratio, advantage, **kwargs):
    """Arguments for a batch of one completion of one token with the given ratio."""
    logp = np.array([[math.log(0.5 * ratio)]])
    return dict(
        logp=logp,
        logp_old=np.log([[0.5]]),
        logp_ref=logp.copy(),
        advantages=np.array([advantage]),
        mask=np.array([[1]]),
        beta=0.0,
        **kwargs,
    )


def loop_loss(logp, logp_old, logp_ref, advantages, mask, epsilon, beta, aggregation,
              epsilon_high=None, max_len=None):  # fmt: skip
    """The loss written out token by token, to check random cases against."""
    high = epsilon if epsilon_high is None else epsilon_high
    batch, length = logp.shape
    sums, counts = [0.0] * batch, [0] * batch
    for i in range(batch):
        for t in range(length):
            if mask[i, t] == 0:
                continue
            rho = math.exp(logp[i, t] - logp_old[i, t])
            clipped = min(max(rho, 1 - epsilon), 1 + high)
            surrogate = min(rho * advantages[i], clipped * advantages[i])
            r = math.exp(logp_ref[i, t] - logp[i, t])
            kl = r - math.log(r) - 1
            sums[i] += -(surrogate - beta * kl)
            counts[i] += 1
    if aggregation == "sequence":
        return sum(s / max(n, 1) for s, n in zip(sums, counts, strict=True)) / batch
    if aggregation == "token":
        return sum(sums) / max(sum(counts), 1)
    return sum(sums) / (batch * (max_len or length))


def random_case(seed, batch=4, length=6):
    rng = np.random.default_rng(seed)
    logp = np.log(rng.uniform(0.05, 0.95, (batch, length)))
    logp_old = logp + rng.normal(0.0, 0.3, (batch, length))  # ratios inside and outside the clip
    logp_ref = logp + rng.normal(0.0, 0.5, (batch, length))
    advantages = rng.normal(0.0, 1.0, batch)
    lengths = rng.integers(1, length + 1, batch)
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)
    return dict(logp=logp, logp_old=logp_old, logp_ref=logp_ref, advantages=advantages, mask=mask)


@pytest.mark.parametrize(
    "aggregation, expected",
    [("sequence", -1 / 15), ("token", 0.14), ("constant", 0.7 / 6)],
)
def test_worked_example(impl, aggregation, expected):
    got = impl.masked_token_loss(**example(), beta=0.0, aggregation=aggregation)
    assert_scalar(got, expected, what=f"{aggregation!r} loss of the worked example")


def test_returns_a_python_float(impl):
    got = impl.masked_token_loss(**example())
    assert isinstance(got, float), f"expected a float, got {type(got).__name__}"


def test_defaults_are_epsilon_0_2_beta_0_04_and_sequence(impl):
    got = impl.masked_token_loss(LOGP, LOGP_OLD, LOGP_REF, ADVANTAGES, MASK)
    expected = ((-1.2 + 0.04 * K3_HALF - 1.0) / 2 + (1.0 + 0.8 + 1.1) / 3) / 2
    assert_scalar(got, expected, what="loss with the default arguments")


@pytest.mark.parametrize(
    "ratio, advantage, expected",
    [
        (1.5, 2.0, -1.2 * 2.0),  # a good token pushed up too far: clipped, no more gain
        (0.5, -1.0, 0.8),  # a bad token pushed down too far: clipped
        (1.5, -1.0, 1.5),  # a bad token made more likely: full penalty (the minimum)
        (0.5, 1.0, -0.5),  # a good token made less likely: full penalty
        (1.1, 1.0, -1.1),  # inside the clip range
    ],
    ids=["high-positive", "low-negative", "high-negative", "low-positive", "inside"],
)
def test_clipped_surrogate_per_token(impl, ratio, advantage, expected):
    got = impl.masked_token_loss(**one_token(ratio, advantage))
    assert_scalar(got, expected, what=f"loss of one token with ratio {ratio} and A = {advantage}")


def test_epsilon_sets_the_clip_range(impl):
    got = impl.masked_token_loss(**one_token(2.0, 1.0, epsilon=0.5))
    assert_scalar(got, -1.5, what="loss for ratio 2, A = 1, epsilon 0.5")


def test_epsilon_high_raises_only_the_upper_bound(impl):
    upper = impl.masked_token_loss(**one_token(1.5, 1.0, epsilon_high=0.28))
    assert_scalar(upper, -1.28, what="loss for ratio 1.5, A = 1, epsilon_high 0.28")
    lower = impl.masked_token_loss(**one_token(0.5, -1.0, epsilon_high=0.28))
    assert_scalar(lower, 0.8, what="loss for ratio 0.5, A = -1, epsilon_high 0.28")


def test_epsilon_high_in_the_worked_example(impl):
    got = impl.masked_token_loss(**example(), beta=0.0, epsilon_high=0.28)
    assert_scalar(got, ((-1.28 - 1.0) / 2 + 2.9 / 3) / 2)


def test_kl_penalty_is_k3_of_pi_theta_to_pi_ref(impl):
    # A = 0 and ratio 1 leave only beta * k3 with r = pi_ref / pi_theta = 0.5.
    args = dict(logp=np.log([[0.4]]), logp_old=np.log([[0.4]]), logp_ref=np.log([[0.2]]))
    got = impl.masked_token_loss(**args, advantages=np.zeros(1), mask=np.ones((1, 1)), beta=0.5)
    assert_scalar(got, 0.5 * K3_HALF, what="loss = beta * k3 with r = 0.5")


def test_kl_uses_the_current_log_probs(impl):
    # Only the KL term is left (A = 0); it must not change when only logp_old changes.
    args = dict(logp=np.log([[0.4]]), logp_ref=np.log([[0.2]]), advantages=np.zeros(1))
    got = impl.masked_token_loss(**args, logp_old=np.log([[0.1]]), mask=np.ones((1, 1)), beta=1.0)
    assert_scalar(got, K3_HALF, what="KL penalty when logp_old differs from logp")


def test_kl_in_the_worked_example(impl):
    got = impl.masked_token_loss(**example(logp_ref=LOGP_REF), beta=0.04, aggregation="token")
    assert_scalar(got, (-2.2 + 2.9 + 0.04 * K3_HALF) / 5)


def test_sequence_averages_each_completion_over_its_own_tokens(impl):
    # One completion of 1 token (loss -1) and one of 4 tokens (loss 1 each), T = 4.
    logp = np.zeros((2, 4))
    mask = np.array([[1, 0, 0, 0], [1, 1, 1, 1]])
    args = dict(logp=logp, logp_old=logp, logp_ref=logp, advantages=np.array([1.0, -1.0]))
    seq = impl.masked_token_loss(**args, mask=mask, beta=0.0, aggregation="sequence")
    assert_scalar(seq, 0.0, what="'sequence' loss: (-1/1 + 4/4) / 2")
    tok = impl.masked_token_loss(**args, mask=mask, beta=0.0, aggregation="token")
    assert_scalar(tok, 3 / 5, what="'token' loss: (-1 + 4) / 5")
    const = impl.masked_token_loss(**args, mask=mask, beta=0.0, aggregation="constant")
    assert_scalar(const, 3 / 8, what="'constant' loss: (-1 + 4) / (2 * 4)")


def test_constant_aggregation_divides_by_max_len(impl):
    got = impl.masked_token_loss(**example(), beta=0.0, aggregation="constant", max_len=4)
    assert_scalar(got, 0.7 / 8, what="'constant' loss with max_len 4")


def test_empty_completion_counts_as_zero_in_sequence(impl):
    logp = np.zeros((2, 3))
    mask = np.array([[0, 0, 0], [1, 1, 0]])
    args = dict(logp=logp, logp_old=logp, logp_ref=logp, advantages=np.array([5.0, -1.0]))
    got = impl.masked_token_loss(**args, mask=mask, beta=0.0, aggregation="sequence")
    assert_scalar(got, (0.0 + 1.0) / 2, what="'sequence' loss with an empty completion")


@pytest.mark.parametrize("aggregation", ["sequence", "token", "constant"])
def test_fully_masked_batch_gives_zero(impl, aggregation):
    logp = np.zeros((2, 3))
    args = dict(logp=logp, logp_old=logp, logp_ref=logp, advantages=np.array([1.0, -1.0]))
    got = impl.masked_token_loss(**args, mask=np.zeros((2, 3)), aggregation=aggregation)
    assert_scalar(got, 0.0, what=f"{aggregation!r} loss of a batch without tokens")


@pytest.mark.parametrize("garbage", [math.nan, math.inf, -math.inf, 1e6], ids=str)
@pytest.mark.parametrize("aggregation", ["sequence", "token", "constant"])
def test_padding_values_do_not_reach_the_loss(impl, garbage, aggregation):
    dirty = {}
    for name, clean in (("logp", LOGP), ("logp_old", LOGP_OLD), ("logp_ref", LOGP_REF)):
        dirty[name] = clean.copy()
        dirty[name][0, 2] = garbage  # the padding position of the first completion
    clean = impl.masked_token_loss(**example(logp_ref=LOGP_REF), aggregation=aggregation)
    got = impl.masked_token_loss(**example(**dirty), aggregation=aggregation)
    assert_scalar(got, clean, what=f"loss with {garbage} in the padding")


def test_mask_may_be_boolean_or_float(impl):
    expected = impl.masked_token_loss(**example(logp_ref=LOGP_REF), aggregation="token")
    for mask in (MASK.astype(bool), MASK.astype(np.float64)):
        got = impl.masked_token_loss(**example(logp_ref=LOGP_REF, mask=mask), aggregation="token")
        assert_scalar(got, expected, what=f"loss with a {mask.dtype} mask")


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("aggregation", ["sequence", "token", "constant"])
def test_random_batches_match_the_token_by_token_formula(impl, seed, aggregation):
    case = random_case(seed)
    settings = dict(epsilon=0.2, beta=0.1, epsilon_high=0.28 if seed % 2 else None)
    got = impl.masked_token_loss(**case, aggregation=aggregation, **settings)
    assert_scalar(got, loop_loss(**case, aggregation=aggregation, **settings), rel=1e-9)


def test_aggregations_agree_when_every_completion_is_full(impl):
    case = random_case(7)
    case["mask"] = np.ones_like(case["mask"])
    losses = {a: impl.masked_token_loss(**case, aggregation=a) for a in ("sequence", "token")}
    losses["constant"] = impl.masked_token_loss(**case, aggregation="constant", max_len=6)
    for name, value in losses.items():
        assert_scalar(value, losses["token"], rel=1e-9, what=f"{name!r} loss of full completions")


def test_first_iteration_loss_is_minus_the_mean_advantage(impl):
    # logp_old == logp: every ratio is 1, and with beta = 0 the loss is -mean(A) under "sequence".
    case = random_case(3)
    case["logp_old"] = case["logp"]
    got = impl.masked_token_loss(**case, beta=0.0)
    assert_scalar(got, -float(np.mean(case["advantages"])), rel=1e-9)


@pytest.mark.parametrize("name", ["logp_old", "logp_ref", "mask"])
def test_mismatched_token_shapes_raise_value_error(impl, name):
    args = example()
    args[name] = args[name][:, :2]
    with pytest.raises(ValueError):
        impl.masked_token_loss(**args)


@pytest.mark.parametrize(
    "advantages",
    [np.array([1.0]), np.array([[1.0], [-1.0]]), np.array([1.0, -1.0, 0.5])],
    ids=["one", "column", "three"],
)
def test_advantages_must_have_shape_b(impl, advantages):
    # Shape (1,) or (B, 1) would broadcast silently onto the wrong completions.
    with pytest.raises(ValueError):
        impl.masked_token_loss(**example(advantages=advantages))


def test_one_dimensional_log_probs_raise_value_error(impl):
    flat = np.log([0.2, 0.5])
    with pytest.raises(ValueError):
        impl.masked_token_loss(flat, flat, flat, np.array([1.0, 1.0]), np.array([1, 1]))


@pytest.mark.parametrize("aggregation", ["mean", "Token", "dapo", ""])
def test_unknown_aggregation_raises_value_error(impl, aggregation):
    with pytest.raises(ValueError):
        impl.masked_token_loss(**example(), aggregation=aggregation)


@pytest.mark.parametrize("bad", [2, -1, 0.5], ids=str)
def test_mask_that_is_not_zero_or_one_raises_value_error(impl, bad):
    mask = MASK.astype(np.float64)
    mask[1, 1] = bad
    with pytest.raises(ValueError):
        impl.masked_token_loss(**example(mask=mask))


def test_max_len_shorter_than_t_raises_value_error(impl):
    with pytest.raises(ValueError):
        impl.masked_token_loss(**example(), aggregation="constant", max_len=2)


def test_does_not_modify_its_inputs(impl):
    case = random_case(11)
    case["logp"][0, -1] = math.nan
    case["mask"][0, -1] = 0
    copies = {k: v.copy() for k, v in case.items()}
    impl.masked_token_loss(**case, aggregation="token")
    for name, array in case.items():
        assert np.array_equal(array, copies[name], equal_nan=True), f"{name} was modified in place"
