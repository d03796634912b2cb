"""Hidden tests for masked_token_loss. The implementation arrives through the `impl` fixture."""

import math
from functools import partial

import numpy as np
import pytest

from problems.support.asserts import (
    assert_positional_call_agrees,
    assert_scalar,
    broadcast_variants,
    calls_without_value_error,
)

AGGREGATIONS = ["sequence", "token", "constant"]

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


def loop_loss(logp, logp_old, logp_ref, advantages, mask, epsilon=0.2, beta=0.04,
              aggregation="sequence", epsilon_high=None, max_len=None):  # fmt: skip
    """The statement's loss written out token by token in Python floats, padding never read."""
    high = epsilon if epsilon_high is None else epsilon_high
    batch, length = np.shape(logp)
    sums, counts = [0.0] * batch, [0] * batch
    for i in range(batch):
        a = float(advantages[i])
        for t in range(length):
            if mask[i][t] == 0:
                continue
            lp, lo, lr = float(logp[i][t]), float(logp_old[i][t]), float(logp_ref[i][t])
            rho = math.exp(lp - lo)
            surrogate = min(rho * a, min(max(rho, 1 - epsilon), 1 + high) * a)
            log_r = lr - lp
            kl = 0.0 if beta == 0 else math.expm1(log_r) - log_r  # no KL term at beta = 0
            sums[i] += -(surrogate - beta * kl)
            counts[i] += 1
    if aggregation == "sequence":
        return sum(s / max(n, 1) for s, n in zip(sums, counts, strict=True)) / batch
    if aggregation == "token":
        return sum(sums) / max(sum(counts), 1)
    return sum(sums) / (batch * (length if max_len is None else max_len))


def random_case(seed, batch=4, length=6, empty_row=False):
    rng = np.random.default_rng(seed)
    logp = np.log(rng.uniform(0.05, 0.95, (batch, length)))
    logp_old = logp + rng.normal(0.0, 0.3, (batch, length))  # ratios inside and outside the clip
    logp_ref = logp + rng.normal(0.0, 0.5, (batch, length))
    advantages = rng.normal(0.0, 1.0, batch)
    lengths = rng.integers(1, length + 1, batch)
    if empty_row:
        lengths[1] = 0
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype(np.int64)
    return dict(logp=logp, logp_old=logp_old, logp_ref=logp_ref, advantages=advantages, mask=mask)


def with_garbage(case, value):
    """A copy of `case` whose log-probs hold `value` wherever the mask is 0."""
    dirty = dict(case)
    for name in ("logp", "logp_old", "logp_ref"):
        dirty[name] = np.where(np.asarray(case["mask"]) == 0, value, case[name])
    return dirty


@pytest.mark.parametrize(
    "aggregation, expected",
    [("sequence", -1 / 15), ("token", 0.14), ("constant", 0.7 / 6)],
)
def test_worked_example(impl, aggregation, expected):
    got = impl.masked_token_loss(**example(), beta=0.0, aggregation=aggregation)
    assert_scalar(got, expected, what=f"{aggregation!r} loss of the worked example")


def test_returns_a_python_float(impl):
    # float(...): not a numpy float64, not a 0-d array, whatever the aggregation or dtype.
    for aggregation in AGGREGATIONS:
        for dtype in (np.float64, np.float32):
            args = {k: v.astype(dtype) for k, v in example(logp_ref=LOGP_REF).items()}
            for what, mask in (("", args["mask"]), (" without a token", 0 * args["mask"])):
                got = impl.masked_token_loss(**(args | {"mask": mask}), aggregation=aggregation)
                assert type(got) is float, (
                    f"expected a Python float for {dtype.__name__} inputs and {aggregation!r}"
                    f"{what}, got {type(got).__name__}: {got!r}"
                )


def test_defaults_are_epsilon_0_2_beta_0_04_and_sequence(impl):
    got = impl.masked_token_loss(LOGP, LOGP_OLD, LOGP_REF, ADVANTAGES, MASK)
    expected = ((-1.2 + 0.04 * K3_HALF - 1.0) / 2 + (1.0 + 0.8 + 1.1) / 3) / 2
    assert_scalar(got, expected, what="loss with the default arguments")
    explicit = impl.masked_token_loss(LOGP, LOGP_OLD, LOGP_REF, ADVANTAGES, MASK, 0.2, 0.04,
                                      "sequence", None, None)  # fmt: skip
    assert_scalar(explicit, expected, what="loss with the defaults passed by position")


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
    got = impl.masked_token_loss(**one_token(0.3, -1.0, epsilon=0.5))
    assert_scalar(got, 0.5, what="loss for ratio 0.3, A = -1, epsilon 0.5")


def test_epsilon_high_lifts_only_the_upper_bound(impl):
    upper = impl.masked_token_loss(**one_token(1.5, 1.0, epsilon_high=0.28))
    assert_scalar(upper, -1.28, what="loss for ratio 1.5, A = 1, epsilon_high 0.28")
    lower = impl.masked_token_loss(**one_token(0.5, -1.0, epsilon_high=0.28))
    assert_scalar(lower, 0.8, what="loss for ratio 0.5, A = -1, epsilon_high 0.28")
    inside = impl.masked_token_loss(**one_token(1.25, 1.0, epsilon_high=0.28))
    assert_scalar(inside, -1.25, what="loss for ratio 1.25, A = 1, epsilon_high 0.28")
    both = impl.masked_token_loss(**one_token(0.6, -1.0, epsilon=0.3, epsilon_high=0.5))
    assert_scalar(both, 0.7, what="loss for ratio 0.6, A = -1, epsilon 0.3, epsilon_high 0.5")
    flat = impl.masked_token_loss(**one_token(1.5, 1.0, epsilon_high=0.0))  # range [0.8, 1]
    assert_scalar(flat, -1.0, what="loss for ratio 1.5, A = 1, epsilon_high 0")


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


# One token each: (logp, logp_old, logp_ref, advantage, beta). Ratios and log ratios far
# beyond any clamp a library applies, and log-probs whose probabilities are 0 in float64.
EXTREMES = [
    (math.log(5.0) - 1.0, -1.0, -1.0, 1.0, 0.0),  # rho = 5, A > 0: clipped to 1.2
    (math.log(5.0) - 1.0, -1.0, -1.0, -1.0, 0.0),  # rho = 5, A < 0: the full 5
    (math.log(20.0) - 3.0, -3.0, -3.0, -2.0, 0.0),  # rho = 20, A < 0
    (-1.0, -26.0, -1.0, -1.0, 0.0),  # rho = e^25, A < 0: a loss of 7.2e10
    (-26.0, -1.0, -26.0, 1.0, 0.0),  # rho = e^-25, A > 0: a loss of -1.4e-11
    (-30.0, -0.5, -30.0, -1.0, 0.0),  # rho = e^-29.5, A < 0: clipped to 0.8
    (-26.0, -26.0, -1.0, 0.0, 0.04),  # KL with r = e^25
    (-1.0, -1.0, -26.0, 0.0, 0.04),  # KL with r = e^-25
    (-200.0, -200.0, -0.5, 0.0, 1.0),  # KL with r = e^199.5
    (-1.0, -1.0, -800.0, 0.0, 0.04),  # KL with r = e^-799, 0 in float64: r - log r - 1 is inf
    (-0.5, -0.5, -1e4, 1.0, 0.5),  # KL with r = e^-9999.5
    (-800.0, -800.0, -800.0, 1.5, 0.04),  # probabilities e^-800 = 0: rho = r = 1
    (-800.0, -790.0, -805.0, -1.0, 0.04),  # rho = e^-10, r = e^-5
    (-1000.0, -1003.0, -990.0, 0.5, 0.1),  # rho = e^3, r = e^10
    (-800.0, -800.0, 0.0, 1.0, 0.0),  # r = e^800 is inf, but beta = 0: no KL term, not 0 * inf
    (-750.0, -751.0, 5.0, -1.0, 0.0),  # rho = e, A < 0, r = e^755 with beta = 0
]


def test_extreme_ratios_are_not_clamped(impl):
    # Each token alone (a batch of one token has the same loss in every aggregation), then in
    # a padded batch with an empty second completion: its loss / 2, / 1 and / (2 * 2).
    nan = math.nan
    for logp, logp_old, logp_ref, advantage, beta in EXTREMES:
        alone = dict(logp=np.array([[logp]]), logp_old=np.array([[logp_old]]),
                     logp_ref=np.array([[logp_ref]]), advantages=np.array([advantage]),
                     mask=np.array([[1]]), beta=beta)  # fmt: skip
        padded = dict(logp=np.array([[logp, nan], [nan, nan]]),
                      logp_old=np.array([[logp_old, nan], [nan, nan]]),
                      logp_ref=np.array([[logp_ref, nan], [nan, nan]]),
                      advantages=np.array([advantage, 1.0]), mask=np.array([[1, 0], [0, 0]]),
                      beta=beta)  # fmt: skip
        token_loss = loop_loss(**alone)
        what = (f"for logp {logp:g}, logp_old {logp_old:g}, logp_ref {logp_ref:g}, "
                f"A = {advantage:g}, beta = {beta:g}")  # fmt: skip
        calls, checks = [], []
        for aggregation, share in (("sequence", 2), ("token", 1), ("constant", 4)):
            calls += [alone | {"aggregation": aggregation}, padded | {"aggregation": aggregation}]
            checks += [(token_loss, f"{aggregation!r} loss of one token {what}"),
                       (token_loss / share, f"{aggregation!r} loss of a padded batch {what}")]  # fmt: skip
        for got, (expected, what) in zip(impl.masked_token_loss.each(calls), checks, strict=True):
            assert_scalar(got, expected, rel=1e-9, abs=0.0, what=what)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_tokens_with_a_zero_loss_still_count(impl, aggregation):
    # A = 0 and pi_ref = pi_theta give token losses of exactly 0 (groups with equal rewards do
    # that). They are completion tokens all the same: the mask, not the loss, says what counts.
    # Row 0 mixes them with one token that has a KL term, so its own mean divides by 3, not 1.
    logp = np.log([[0.5, 0.4, 0.3], [0.2, 0.6, 0.7], [0.3, 0.3, 0.3]])
    logp_ref = logp.copy()
    logp_ref[0, 0] = np.log(0.25)
    kl = 0.04 * (0.5 - 1 - np.log(0.5))  # beta * k3 of r = 1/2, the only nonzero KL
    args = dict(logp=logp, logp_old=logp.copy(), logp_ref=logp_ref,
                advantages=np.array([0.0, 2.0, 0.0]),
                mask=np.array([[1, 1, 1], [1, 0, 0], [1, 1, 0]]))  # fmt: skip
    expected = {"sequence": (kl / 3 - 2.0) / 3, "token": (kl - 2.0) / 6,
                "constant": (kl - 2.0) / 9}[aggregation]  # fmt: skip
    got = impl.masked_token_loss(**args, aggregation=aggregation)
    assert_scalar(got, expected, what=f"{aggregation!r} loss with zero-loss tokens")


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
    for max_len, denominator in ((4, 8), (3, 6), (np.int64(10), 20), (None, 6)):
        got = impl.masked_token_loss(**example(), beta=0.0, aggregation="constant", max_len=max_len)
        assert_scalar(got, 0.7 / denominator, what=f"'constant' loss with max_len {max_len!r}")


def test_max_len_is_used_only_by_constant(impl):
    # "sequence" and "token" ignore max_len, even one shorter than T.
    for aggregation, expected in (("sequence", -1 / 15), ("token", 0.14)):
        for max_len in (2, 3, 50):
            got = impl.masked_token_loss(**example(), beta=0.0, aggregation=aggregation,
                                         max_len=max_len)  # fmt: skip
            assert_scalar(got, expected, what=f"{aggregation!r} loss with max_len {max_len}")


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_empty_completion(impl, aggregation):
    # The first completion has no token (its row holds garbage): 0 in its 1/B for "sequence",
    # no token for "token", still B * T for "constant".
    logp = np.array([[np.nan, np.inf, -np.inf], [0.0, 0.0, 0.0]])
    args = dict(logp=logp, logp_old=logp, logp_ref=logp, advantages=np.array([5.0, -1.0]),
                mask=np.array([[0, 0, 0], [1, 1, 0]]))  # fmt: skip
    expected = {"sequence": (0.0 + 1.0) / 2, "token": 2.0 / 2, "constant": 2.0 / 6}[aggregation]
    got = impl.masked_token_loss(**args, beta=0.0, aggregation=aggregation)
    assert_scalar(got, expected, what=f"{aggregation!r} loss with an empty completion")


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_fully_masked_batch_gives_zero(impl, aggregation):
    for garbage in (0.0, math.nan, math.inf):
        logp = np.full((2, 3), garbage)
        args = dict(logp=logp, logp_old=logp, logp_ref=logp, advantages=np.array([1.0, -1.0]))
        got = impl.masked_token_loss(**args, mask=np.zeros((2, 3)), aggregation=aggregation)
        assert_scalar(got, 0.0, what=f"{aggregation!r} loss of a batch without tokens")


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_padding_values_do_not_reach_the_loss(impl, aggregation):
    case = random_case(21, empty_row=True)
    expected = loop_loss(**case, aggregation=aggregation)
    calls, whats = [], []
    for garbage in (math.nan, math.inf, -math.inf, 1e6, -1e300):
        calls.append(with_garbage(case, garbage))
        whats.append(f"loss with {garbage} in the padding")
        for name in ("logp", "logp_old", "logp_ref"):  # one array at a time, too
            calls.append({**case, name: with_garbage(case, garbage)[name]})
            whats.append(f"loss with {garbage} in {name}'s padding")
    for got, what in zip(
        impl.masked_token_loss.each(calls, aggregation=aggregation), whats, strict=True
    ):
        assert_scalar(got, expected, rel=1e-9, what=what)


@pytest.mark.parametrize("seed", range(7))
def test_random_batches_match_the_token_by_token_formula(impl, seed):
    # Square batches too: one advantage per row, never per column; and a large one (seed 6).
    batch, length = (24, 50) if seed == 6 else (4, 4 if seed % 3 == 0 else 6)
    case = random_case(seed, batch=batch, length=length, empty_row=seed >= 3)
    settings = dict(epsilon=(0.2, 0.1, 0.3)[seed % 3], beta=(0.1, 0.0, 0.5)[seed % 3],
                    epsilon_high=(None, 0.28, 0.4)[seed % 3])  # fmt: skip
    for aggregation, max_len in (("sequence", None), ("token", None), ("constant", None),
                                 ("constant", length + 3)):  # fmt: skip
        got = impl.masked_token_loss(**case, aggregation=aggregation, max_len=max_len, **settings)
        expected = loop_loss(**case, aggregation=aggregation, max_len=max_len, **settings)
        assert_scalar(got, expected, rel=1e-9, what=f"{aggregation!r} loss, {settings}")


def test_float32_inputs_give_the_loss_to_float32_precision(impl):
    case = {k: v.astype(np.float32) for k, v in random_case(8, empty_row=True).items()}
    case["logp"][0, 0], case["logp_old"][0, 0], case["logp_ref"][0, 0] = -800.0, -790.0, -805.0
    for aggregation in AGGREGATIONS:
        got = impl.masked_token_loss(**case, aggregation=aggregation)
        expected = loop_loss(**case, aggregation=aggregation)
        assert_scalar(got, expected, rel=1e-5, abs=1e-6, what=f"{aggregation!r} loss of float32")


def test_aggregations_agree_when_every_completion_is_full(impl):
    case = random_case(7)
    case["mask"] = np.ones_like(case["mask"])
    losses = {a: impl.masked_token_loss(**case, aggregation=a) for a in ("sequence", "token")}
    losses["constant"] = impl.masked_token_loss(**case, aggregation="constant", max_len=6)
    expected = loop_loss(**case, aggregation="token")  # agreeing is not enough: a constant agrees
    for name, value in losses.items():
        assert_scalar(value, expected, rel=1e-9, what=f"{name!r} loss of full completions")


def test_first_iteration_loss_is_minus_the_mean_advantage(impl):
    # logp_old == logp: every ratio is 1, and with beta = 0 the loss is -mean(A) under
    # "sequence", the mean over all B completions of -A_i, where an empty completion gives 0.
    for empty_row in (False, True):
        case = random_case(3, empty_row=empty_row)
        case["logp_old"] = case["logp"]
        got = impl.masked_token_loss(**case, beta=0.0)
        has_tokens = case["mask"].any(axis=1)
        expected = -float(np.sum(case["advantages"][has_tokens])) / len(has_tokens)
        assert_scalar(got, expected, rel=1e-9, what=f"first-iteration loss, empty row: {empty_row}")


def test_accepts_boolean_integer_and_float_masks(impl):
    expected = loop_loss(**example(logp_ref=LOGP_REF), aggregation="token")
    for mask in (MASK.astype(bool), MASK.astype(np.float64), MASK.astype(np.float32),
                 MASK.astype(np.uint8), MASK.astype(np.int32), MASK.tolist()):  # fmt: skip
        got = impl.masked_token_loss(**example(logp_ref=LOGP_REF, mask=mask), aggregation="token")
        kind = getattr(mask, "dtype", "list")
        assert_scalar(got, expected, rel=1e-9, what=f"loss with a {kind} mask")
    # 2,049 ones of a float16 mask: counted in float16 they would make 2,048.
    zeros, mask = np.zeros((1, 2050)), np.r_[np.ones(2049), 0.0].astype(np.float16)[None]
    for aggregation in ("sequence", "token"):
        got = impl.masked_token_loss(zeros, zeros, zeros, np.ones(1), mask, aggregation=aggregation)
        assert_scalar(got, -1.0, rel=1e-12,
                      what=f"{aggregation!r} loss of 2,049 tokens of loss -1, float16 mask")  # fmt: skip


def test_accepts_lists_integers_and_numpy_scalars(impl):
    case = random_case(4, empty_row=True)
    case["advantages"] = np.array([1, -2, 0, 3])
    settings = dict(epsilon=0.25, beta=0.1, epsilon_high=0.3, max_len=8)
    expected = loop_loss(**case, aggregation="constant", **settings)
    as_lists = {k: v.tolist() for k, v in case.items()}
    scalars = dict(epsilon=np.float64(0.25), beta=np.float32(0.1), epsilon_high=np.float64(0.3),
                   max_len=np.int64(8))  # fmt: skip
    for what, args, kwargs in (("integer advantages", case, settings),
                               ("nested lists", as_lists, settings),
                               ("numpy scalar settings", case, scalars)):  # fmt: skip
        got = impl.masked_token_loss(**args, aggregation="constant", **kwargs)
        assert_scalar(got, expected, rel=1e-6, what=f"loss with {what}")
    # Python floats are float64: in nested lists a ratio of e^100 is finite, and so is the loss.
    extreme = dict(logp=[[-1.0, 0.0]], logp_old=[[-101.0, 0.0]], logp_ref=[[-1.0, 0.0]],
                   advantages=[-1.0], mask=[[1, 0]])  # fmt: skip
    got = impl.masked_token_loss(**extreme, beta=0.0, aggregation="token")
    assert_scalar(got, math.exp(100.0), rel=1e-9, what="loss of nested lists with a ratio of e^100")


def test_mismatched_token_shapes_raise_value_error(impl):
    for name in ("logp_old", "logp_ref", "mask"):
        for bad in (lambda x: x[:, :2], lambda x: x[:1], lambda x: x[:1, :],
                    lambda x: x.T, lambda x: x[..., None]):  # fmt: skip
            args = example()
            args[name] = bad(np.asarray(args[name]))
            with pytest.raises(ValueError):
                impl.masked_token_loss(**args)
                pytest.fail(f"{name} of shape {args[name].shape} with logp (2, 3) was accepted")


def test_advantages_not_of_shape_b_raise_value_error(impl):
    # Shape (1,) or (B, 1) would broadcast silently onto the wrong completions.
    for advantages in (np.array([1.0]), np.array([[1.0], [-1.0]]), np.array([1.0, -1.0, 0.5]),
                       np.array(1.0), np.array([[1.0, -1.0]])):  # fmt: skip
        with pytest.raises(ValueError):
            impl.masked_token_loss(**example(advantages=advantages))
            pytest.fail(f"advantages of shape {advantages.shape} with B = 2 were accepted")


def test_log_probs_that_are_not_2d_raise_value_error(impl):
    flat = np.log([0.2, 0.5])
    for advantages in ([1.0, 1.0], [1.0]):  # [1.0]: as if the 1-D rows were one completion
        with pytest.raises(ValueError):
            impl.masked_token_loss(flat, flat, flat, np.array(advantages), np.array([1, 1]))
            pytest.fail(f"1-D log-probs were accepted, with advantages {advantages}")
    cube = np.full((2, 3, 1), -1.0)
    with pytest.raises(ValueError):
        impl.masked_token_loss(cube, cube, cube, np.array([1.0, 1.0]), np.ones((2, 3, 1)))
        pytest.fail("3-D log-probs were accepted")


def test_a_batch_of_one_of_the_wrong_shape_raises_value_error(impl):
    # B = 1: a squeezed argument (0-D advantages, 1-D log-probs or mask) or one with an axis
    # too many could be reshaped into the batch; it must raise like any other shape.
    one = {k: v[1:] for k, v in example(logp_ref=LOGP_REF).items()}
    for name, value in one.items():
        for bad in (value.squeeze(), value[None]):
            with pytest.raises(ValueError):
                impl.masked_token_loss(**(one | {name: bad}))
                pytest.fail(f"{name} of shape {bad.shape} with B = 1 was accepted")


# Every shape numpy would broadcast against the (B, T) = (2, 3) batch, for each argument in turn:
# a 1 in place of B or T (a mask of shape (B, 1) or (1, T) included), an axis missing or one of
# 1 added, advantages of shape (1,), (B, 1) or (1, B). Each must raise, never pair the tokens
# or completions of one row with another's.
BROADCASTING = {
    f"{name} of shape {variant.shape}": (name, variant)
    for name, value in example(logp_ref=LOGP_REF).items()
    for variant in broadcast_variants(value)
}


def test_shapes_numpy_would_broadcast_raise_value_error(impl):
    missed = calls_without_value_error(
        (f"{what}, {aggregation!r}",
         partial(impl.masked_token_loss, **example(logp_ref=LOGP_REF) | {name: variant},
                 aggregation=aggregation))
        for what, (name, variant) in BROADCASTING.items()
        for aggregation in AGGREGATIONS
    )  # fmt: skip
    assert not missed, "expected a ValueError with B = 2, T = 3 for:\n" + "\n".join(missed)


def test_unknown_aggregation_raises_value_error(impl):
    for aggregation in ("mean", "Token", "dapo", "", "sequence ", None):
        for mask in (MASK, np.zeros((2, 3))):
            with pytest.raises(ValueError):
                impl.masked_token_loss(**example(mask=mask), aggregation=aggregation)
                pytest.fail(f"aggregation {aggregation!r} was accepted")


def test_mask_that_is_not_zero_or_one_raises_value_error(impl):
    # Integer masks too: a -1 in an int mask is as wrong as in a float one.
    for bad, dtype in ((2, np.float64), (-1, np.float64), (0.5, np.float64), (math.nan, np.float64),
                       (-1, np.int64), (2, np.int8), (-1, np.int32), (255, np.uint8)):  # fmt: skip
        mask = MASK.astype(dtype)
        mask[1, 1] = bad
        with pytest.raises(ValueError):
            impl.masked_token_loss(**example(mask=mask))
            pytest.fail(f"a {np.dtype(dtype)} mask holding {bad} was accepted")


def test_max_len_shorter_than_t_raises_value_error(impl):
    for max_len in (2, 1, 0, np.int64(2)):
        with pytest.raises(ValueError):
            impl.masked_token_loss(**example(), aggregation="constant", max_len=max_len)
            pytest.fail(f"max_len {max_len} with T = 3 was accepted")


def test_does_not_modify_its_inputs(impl):
    case = with_garbage(random_case(11, empty_row=True), math.nan)
    calls = [({"aggregation": a}, None) for a in AGGREGATIONS]
    calls += [({"aggregation": "constant", "max_len": 2}, ValueError)]
    for kwargs, error in calls:
        seen = impl.masked_token_loss.observe(**case, **kwargs)
        if error is None and seen.error is not None:
            raise seen.error
        if error is not None:
            assert isinstance(seen.error, error), f"expected {error.__name__}, got {seen.error!r}"
        for name, array in case.items():
            assert np.array_equal(seen.kwargs[name], array, equal_nan=True), (
                f"{name} was modified in place ({kwargs})"
            )


def test_arguments_in_the_statements_order(impl):
    # Each optional argument differs from its neighbours, so any two swapped change the result.
    arguments = {"logp": LOGP, "logp_old": LOGP_OLD, "logp_ref": LOGP_REF,
                 "advantages": ADVANTAGES, "mask": MASK, "epsilon": 0.1, "beta": 0.3,
                 "aggregation": "constant", "epsilon_high": 0.25, "max_len": 4}  # fmt: skip
    assert_positional_call_agrees(impl.masked_token_loss, arguments, "masked_token_loss")
