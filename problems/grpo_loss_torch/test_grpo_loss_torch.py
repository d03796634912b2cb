"""Hidden tests for grpo_loss. The implementation arrives through the `impl` fixture.

Values are checked by calling grpo_loss directly. Gradients exist only where the solution
runs, so the probes in probes.py call backward there and send the gradients back; the tests
compare them with the derivative of the statement's formula, written out below.
"""

import itertools
import math

import numpy as np
import pytest
import torch

from problems.support.asserts import assert_positional_call_agrees, assert_tensor
from problems.support.host_transfers import advice

AGGREGATIONS = ["sequence", "token", "constant"]
F64 = torch.float64
FLOATS = ("logp", "logp_old", "logp_ref", "advantages")


def random_case(seed: int, batch: int = 4, length: int = 5, empty_row: bool = False,
                dtype=F64) -> dict:  # fmt: skip
    """Ratios spread inside and outside the clip range; completions are prefixes of rows."""
    g = torch.Generator().manual_seed(seed)
    logp = torch.log(torch.rand(batch, length, generator=g, dtype=F64) * 0.9 + 0.05)
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    if empty_row:
        lengths[1] = 0
    case = dict(
        logp=logp,
        logp_old=logp + 0.3 * torch.randn(batch, length, generator=g, dtype=F64),
        logp_ref=logp + 0.5 * torch.randn(batch, length, generator=g, dtype=F64),
        advantages=torch.randn(batch, generator=g, dtype=F64),
        mask=(torch.arange(length)[None, :] < lengths[:, None]).long(),
    )
    return {k: v.to(dtype) if k in FLOATS else v for k, v in case.items()}


def with_garbage(case: dict, value) -> dict:
    """`value` in the padding of logp, logp_old and logp_ref, or one value for each of them."""
    padding = case["mask"] == 0
    garbage = dict(
        zip(FLOATS[:3], value if isinstance(value, tuple) else (value,) * 3, strict=True)
    )
    return {k: v.masked_fill(padding, garbage[k]) if k in garbage else v for k, v in case.items()}


def token_terms(case, epsilon=0.2, beta=0.04, epsilon_high=None):
    """Per token, in float64: the loss l and its derivative dl/dlogp (0 on padding).

    l = -(min(rho A, clip(rho) A) - beta k3). The minimum follows rho A (derivative rho A)
    unless the clipped term is the smaller one, and then rho is outside the range (derivative
    0); d k3 / d logp = 1 - r.
    """
    keep = case["mask"] == 1
    lp, lo, lr = (torch.where(keep, case[k].double(), 0.0) for k in FLOATS[:3])
    a = case["advantages"].double()[:, None]
    high = epsilon if epsilon_high is None else epsilon_high
    rho, log_r = torch.exp(lp - lo), lr - lp
    r = torch.exp(log_r)
    clipped = torch.clamp(rho, 1 - epsilon, 1 + high)
    loss = -torch.minimum(rho * a, clipped * a)
    unclipped_wins = rho * a <= clipped * a
    slope = -torch.where(unclipped_wins, rho * a, 0.0)
    if beta != 0:  # no KL term at beta = 0: an r that overflows must not give 0 * inf
        loss, slope = loss + beta * (torch.expm1(log_r) - log_r), slope + beta * (1 - r)
    return torch.where(keep, loss, 0.0), torch.where(keep, slope, 0.0)


def weights(mask, aggregation, max_len=None, normalizer=None):
    """d loss / d (token loss): each token's weight in the aggregation."""
    m = (mask == 1).double()
    counts = m.sum(dim=1, keepdim=True).clamp(min=1)
    batch, length = m.shape
    if aggregation == "sequence":
        return m / counts / (normalizer or batch)
    if aggregation == "token":
        return m / (normalizer or max(float(m.sum()), 1.0))
    return m / (normalizer or batch * (max_len or length))


def expected(case, aggregation="sequence", max_len=None, normalizer=None, **settings):
    """The loss and its gradient with respect to logp, both in float64."""
    loss, slope = token_terms(case, **settings)
    w = weights(case["mask"], aggregation, max_len, normalizer)
    return (loss * w).sum(), slope * w


def assert_gradient(got, expected_grad, rtol=1e-9, atol=1e-12, what="gradient of logp"):
    assert got is not None, "no gradient reached logp: the loss is cut from its graph"
    assert torch.isfinite(got).all(), f"{what} is not finite: {got}"
    assert_tensor(got.double(), expected_grad, rtol=rtol, atol=atol, what=what)


def backward(impl, case, **options):
    """The probe's record of one call and backward pass, checked to be a usable 0-d loss."""
    record = impl.probe.backward(case, **options)
    loss = record["loss"]
    assert loss.ndim == 0, f"the loss should be a 0-d tensor, got shape {tuple(loss.shape)}"
    assert record["requires_grad"], "the loss is cut from the graph of logp: no gradient can flow"
    return record


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_value_matches_the_formula(impl, seed, aggregation):
    # Seed 2 is a large batch: what is right for a few rows is right for many.
    case = random_case(
        seed, empty_row=seed == 1, **(dict(batch=24, length=50) if seed == 2 else {})
    )
    settings = dict(beta=0.1, epsilon_high=0.28) if seed != 1 else dict(epsilon=0.3, beta=0.5)
    got = impl.grpo_loss(**case, aggregation=aggregation, **settings)
    loss, _ = expected(case, aggregation, **settings)
    assert_tensor(got, loss, rtol=1e-10, atol=1e-12, what=f"{aggregation!r} loss")


def test_defaults_are_epsilon_0_2_beta_0_04_and_sequence(impl):
    case = random_case(2)
    loss, grad = expected(case)
    assert_tensor(impl.grpo_loss(**case), loss, rtol=1e-10, what="loss with the defaults")
    assert_gradient(backward(impl, case)["grads"]["logp"], grad)


def test_max_len_is_used_by_constant_only(impl):
    case = random_case(3)
    for aggregation, max_len in (("constant", 8), ("constant", 5), ("sequence", 2), ("token", 9)):
        got = impl.grpo_loss(**case, aggregation=aggregation, max_len=max_len)
        loss, _ = expected(case, aggregation, max_len if aggregation == "constant" else None)
        assert_tensor(got, loss, rtol=1e-10, what=f"{aggregation!r} loss with max_len {max_len}")


def test_creates_its_tensors_on_the_inputs_device_not_the_default_one(impl):
    # As for inputs on a GPU while torch's default device is the CPU: here the inputs are on the
    # CPU and torch's default device is "meta" during the call, a device that holds no data.
    case = random_case(5, empty_row=True)
    for aggregation, beta, extra in itertools.product(
        AGGREGATIONS, (0.0, 0.04), ({}, {"normalizer": 7.0}, {"max_len": 6})
    ):
        what = f"{aggregation!r}, beta={beta}, {extra or 'no options'}"
        try:
            record = backward(impl, case, default_device="meta", watch_host=True,
                              aggregation=aggregation, beta=beta, **extra)  # fmt: skip
        except (RuntimeError, NotImplementedError, IndexError) as exc:
            raise AssertionError(
                f"{what}: with torch's default device set to 'meta' during the call, grpo_loss "
                f"raised {type(exc).__name__}: {exc}. Create every tensor on the inputs' device: "
                "device=logp.device, or *_like"
            ) from exc
        # A trip through the host gives back a CPU tensor: right here by chance (the inputs are
        # on the CPU), beside the inputs on a GPU.
        assert not record["host_transfers"], (
            f"{what}: grpo_loss called {', '.join(record['host_transfers'])}: "
            + advice("the inputs'")
        )
        loss, grad = expected(case, aggregation, extra.get("max_len") if aggregation ==
                              "constant" else None, extra.get("normalizer"), beta=beta)  # fmt: skip
        assert_tensor(record["loss"], loss, rtol=1e-10, what=f"loss ({what})")
        assert_gradient(record["grads"]["logp"], grad, what=f"gradient of logp ({what})")


def test_returns_a_0d_tensor_attached_to_the_graph(impl):
    record = backward(impl, random_case(4))
    assert isinstance(record["loss"], torch.Tensor)
    assert record["grads"]["logp"] is not None, "backward() sent no gradient to logp"


def test_loss_dtype_is_the_promoted_dtype_of_the_inputs(impl):
    # torch's promotion of logp, logp_old, logp_ref and advantages; the mask plays no part.
    f32, f64, bf16 = torch.float32, torch.float64, torch.bfloat16
    combinations = [  # (logp, logp_old, logp_ref, advantages, mask) -> loss
        ((f32, f32, f32, f32, torch.int64), f32),
        ((f64, f64, f64, f64, torch.float32), f64),
        ((f32, f32, f32, f64, torch.bool), f64),
        ((f32, f64, f32, f32, torch.int64), f64),
        ((f32, f32, f64, f32, torch.int64), f64),
        ((f64, f32, f32, f32, torch.float64), f64),
        ((f32, f32, f32, f32, torch.float64), f32),
        ((bf16, bf16, bf16, bf16, torch.int64), bf16),
        ((bf16, f32, f32, f32, torch.bool), f32),
    ]
    case = random_case(5)
    for dtypes, result in combinations:
        typed = {k: case[k].to(d) for k, d in zip((*FLOATS, "mask"), dtypes, strict=True)}
        # A normalizer plays no part either, even a 0-d tensor: the mask's own sum, say.
        normalizers = (None, np.float64(5.0), typed["mask"].sum(), torch.tensor(5.0, dtype=f64))
        for aggregation, normalizer in itertools.product(AGGREGATIONS, normalizers):
            got = impl.grpo_loss(**typed, aggregation=aggregation, normalizer=normalizer)
            assert got.dtype == result, (
                f"inputs of dtypes {[str(d) for d in dtypes]} should give a {result} loss "
                f"({aggregation!r}, normalizer {normalizer!r}), got {got.dtype}"
            )
        # logp_ref counts at beta = 0 too, though no KL term uses it.
        got = impl.grpo_loss(**typed, beta=0.0)
        assert got.dtype == result, (
            f"inputs of dtypes {[str(d) for d in dtypes]} should give a {result} loss at "
            f"beta = 0 too (logp_ref still counts), got {got.dtype}"
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_low_precision_losses_and_gradients(impl, dtype):
    # Compared with float64 arithmetic on the same (rounded) inputs.
    case = random_case(6, empty_row=True, dtype=dtype)
    rtol = 1e-5 if dtype == torch.float32 else 3e-2
    for aggregation in AGGREGATIONS:
        record = backward(impl, case, aggregation=aggregation, beta=0.1)
        loss, grad = expected(case, aggregation, beta=0.1)
        assert record["loss"].dtype == dtype, f"expected a {dtype} loss, got {record['loss'].dtype}"
        assert_tensor(record["loss"].double(), loss, rtol=rtol, atol=rtol, what="loss")
        assert record["grads"]["logp"].dtype == dtype
        assert_gradient(record["grads"]["logp"], grad, rtol=rtol, atol=rtol)
    # Tokens are counted exactly: 257 ones summed in bfloat16 would round to 256. The float32
    # advantages make every token's loss -1 in float32, so each aggregation gives exactly -1.
    zeros = torch.zeros(1, 257, dtype=dtype)
    for aggregation in AGGREGATIONS:
        got = impl.grpo_loss(zeros.clone().requires_grad_(), zeros, zeros, torch.ones(1),
                             torch.ones(1, 257, dtype=torch.int64), aggregation=aggregation)  # fmt: skip
        assert_tensor(got.double(), -1.0, rtol=1e-6, what=f"{aggregation!r} loss of 257 tokens")


def test_bfloat16_log_probs_with_float32_inputs_give_a_float32_accurate_loss(impl):
    # The usual mixed case: the policy's log-probs in bfloat16, the stored ones in float32.
    # torch promotes each operation to float32; rounding logp_old or logp_ref (or the
    # advantages) to bfloat16 first moves the loss by about 1e-3 of itself.
    case = random_case(7, batch=6, length=8, empty_row=True, dtype=torch.float32)
    case["logp"] = case["logp"].to(torch.bfloat16)
    for aggregation in AGGREGATIONS:
        record = backward(impl, case, aggregation=aggregation, beta=0.1)
        loss, grad = expected(case, aggregation, beta=0.1)
        assert_tensor(record["loss"].double(), loss, rtol=1e-5, atol=1e-6,
                      what=f"{aggregation!r} loss of bfloat16 logp with float32 inputs")  # fmt: skip
        assert_gradient(record["grads"]["logp"], grad, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("mask_dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_tokens_are_counted_exactly_with_a_low_precision_mask(impl, mask_dtype):
    # The mask's dtype plays no part: summed in bfloat16 or float16, the first row's 2049 ones
    # round to 2048 and the batch's 4097 to 4096. Float32 log-probs and advantages make every
    # token's loss -1: "sequence" and "token" give exactly -1, "constant" -4097 / (B * T).
    zeros = torch.zeros(2, 2049)
    mask = torch.ones(2, 2049, dtype=mask_dtype)
    mask[1, 0] = 0
    for aggregation in AGGREGATIONS:
        got = impl.grpo_loss(zeros, zeros, zeros, torch.ones(2), mask, aggregation=aggregation)
        loss = {"sequence": -1.0, "token": -1.0, "constant": -4097 / 4098}[aggregation]
        assert_tensor(
            got.double(),
            loss,
            rtol=1e-6,
            what=f"{aggregation!r} loss of rows of 2049 and 2048 tokens, with a {mask_dtype} "
            "mask: count the tokens as integers (mask == 1), not by summing the mask itself",
        )


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_gradient_is_the_derivative_of_the_formula(impl, aggregation):
    # Ratios on both sides of the clip range, with either sign of the advantage.
    case = random_case(7, batch=6, empty_row=True)
    # epsilon_high = 0 is a clip range like any other (not "unset"): no ratio may exceed 1.
    for settings in (dict(beta=0.1, epsilon_high=0.28), dict(epsilon=0.3, epsilon_high=0.0)):
        record = backward(impl, case, aggregation=aggregation, **settings)
        loss, grad = expected(case, aggregation, **settings)
        assert_tensor(record["loss"], loss, rtol=1e-10, atol=1e-12, what=f"loss with {settings}")
        assert_gradient(record["grads"]["logp"], grad, what=f"gradient with {settings}")


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_first_iteration_gradient_is_the_policy_gradient(impl, aggregation):
    # logp_old = logp.detach(): every ratio is 1, and d loss / d logp = -A * token weight.
    case = random_case(8, empty_row=True)
    case["logp_old"] = case["logp"].clone()
    record = backward(impl, case, beta=0.0, aggregation=aggregation)
    policy_gradient = -case["advantages"][:, None] * weights(case["mask"], aggregation)
    assert_gradient(record["grads"]["logp"], policy_gradient, what="gradient at ratio 1")


def test_first_iteration_loss_is_minus_the_mean_advantage(impl):
    # "sequence", beta = 0, ratio 1: -(1/B) * the sum of A_i over the completions with tokens.
    for empty_row in (False, True):
        case = random_case(9, empty_row=empty_row)
        case["advantages"] = case["advantages"] - case["advantages"].mean()
        case["logp_old"] = case["logp"].clone()
        has_tokens = case["mask"].any(dim=1)
        minus_mean = -case["advantages"][has_tokens].sum() / len(has_tokens)
        record = backward(impl, case, beta=0.0)
        assert_tensor(record["loss"], minus_mean, atol=1e-12, what="loss at ratio 1")
        assert record["grads"]["logp"].abs().max() > 0.01, "the gradient at ratio 1 is not zero"


def test_first_iteration_gradient_includes_the_kl_term(impl):
    # d k3 / d logp = 1 - exp(logp_ref - logp), weighted by beta.
    case = random_case(10)
    case["logp_old"] = case["logp"].clone()
    record = backward(impl, case, beta=0.5, aggregation="token")
    a, lp, lr = case["advantages"][:, None], case["logp"], case["logp_ref"]
    per_token = -a + 0.5 * (1 - torch.exp(lr - lp))
    assert_gradient(record["grads"]["logp"], per_token * weights(case["mask"], "token"))


def test_logp_old_is_treated_as_a_constant(impl):
    # A caller passing the very tensor logp as logp_old (and logp_ref) must still get the
    # policy gradient: undetached, the ratio would be exp(0) with a zero gradient.
    case = random_case(11)
    policy_gradient = -case["advantages"][:, None] * weights(case["mask"], "sequence")
    for same in (("logp_old",), ("logp_old", "logp_ref")):
        record = backward(impl, case, same_as_logp=same, beta=0.0)
        assert_gradient(record["grads"]["logp"], policy_gradient, what=f"gradient with {same}=logp")
    record = backward(impl, case, same_as_logp=("logp_old",), beta=0.3, aggregation="token")
    _, grad = expected({**case, "logp_old": case["logp"]}, "token", beta=0.3)
    assert_gradient(record["grads"]["logp"], grad, what="gradient with logp_old=logp, beta 0.3")


def test_no_gradient_flows_into_old_ref_or_advantages(impl):
    case = random_case(12)
    for aggregation in AGGREGATIONS:
        record = backward(impl, case, grad=FLOATS, aggregation=aggregation, beta=0.2)
        _, grad = expected(case, aggregation, beta=0.2)
        assert_gradient(record["grads"]["logp"], grad)
        for name in FLOATS[1:]:
            assert record["grads"][name] is None, (
                f"{name} received a gradient: it is a constant of the step, detach it"
            )


# One token each: (logp, logp_old, logp_ref, advantage, beta). Ratios and log ratios far
# beyond any clamp a library applies, and log-probs whose probabilities are 0 in float64.
EXTREMES = [
    (math.log(5.0) - 1.0, -1.0, -1.0, 1.0, 0.0),  # rho = 5, A > 0: clipped
    (math.log(20.0) - 3.0, -3.0, -3.0, -2.0, 0.0),  # rho = 20, A < 0: the full ratio
    (-1.0, -26.0, -1.0, -1.0, 0.0),  # rho = e^25, A < 0
    (-1.0, -101.0, -1.0, -1.0, 0.0),  # rho = e^100, finite in float64: no "safe" exp either
    (-26.0, -1.0, -26.0, 1.0, 0.0),  # rho = e^-25, A > 0
    (-26.0, -26.0, -1.0, 0.0, 0.04),  # r = e^25
    (-1.0, -1.0, -26.0, 0.0, 0.04),  # r = e^-25
    (-800.0, -800.0, -800.0, 1.5, 0.04),  # probabilities e^-800 = 0: rho = r = 1
    (-800.0, -790.0, -805.0, -1.0, 0.04),  # rho = e^-10, r = e^-5
    (-800.0, -800.0, 0.0, 1.0, 0.0),  # r = e^800 is inf, but beta = 0: no KL term, not 0 * inf
]


def test_extreme_ratios_are_not_clamped(impl):
    # Each token in a padded batch of two rows, the second one empty, in every aggregation.
    nan = math.nan
    for logp, logp_old, logp_ref, advantage, beta in EXTREMES:
        case = dict(logp=torch.tensor([[logp, nan], [nan, nan]], dtype=F64),
                    logp_old=torch.tensor([[logp_old, nan], [nan, nan]], dtype=F64),
                    logp_ref=torch.tensor([[logp_ref, nan], [nan, nan]], dtype=F64),
                    advantages=torch.tensor([advantage, 1.0], dtype=F64),
                    mask=torch.tensor([[1, 0], [0, 0]]))  # fmt: skip
        what = f"logp {logp:g}, logp_old {logp_old:g}, logp_ref {logp_ref:g}, A = {advantage:g}"
        for aggregation in AGGREGATIONS:
            record = backward(impl, case, aggregation=aggregation, beta=beta)
            loss, grad = expected(case, aggregation, beta=beta)
            assert_tensor(record["loss"], loss, rtol=1e-9, atol=0.0,
                          what=f"{aggregation!r} loss for {what}")  # fmt: skip
            assert_gradient(record["grads"]["logp"], grad, atol=0.0,
                            what=f"{aggregation!r} gradient for {what}")  # fmt: skip


def test_tokens_with_a_zero_loss_still_count(impl):
    # A = 0 and pi_ref = pi_theta give token losses of exactly 0; the mask still counts them.
    logp = torch.log(torch.tensor([[0.5, 0.4, 0.3], [0.2, 0.6, 0.7], [0.3, 0.3, 0.3]], dtype=F64))
    case = dict(logp=logp, logp_old=logp.clone(), logp_ref=logp.clone(),
                advantages=torch.tensor([0.0, 2.0, 0.0], dtype=F64),
                mask=torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0]]))  # fmt: skip
    for aggregation, value in (("sequence", -2 / 3), ("token", -2 / 6), ("constant", -2 / 9)):
        record = backward(impl, case, aggregation=aggregation)
        assert_tensor(record["loss"], torch.tensor(value, dtype=F64), what=f"{aggregation!r} loss")
        assert_gradient(record["grads"]["logp"], expected(case, aggregation)[1])
    # One token of the first row leaves the reference: its other two tokens, still of loss 0,
    # keep counting in that row's mean.
    case["logp_ref"][0, 0] = math.log(0.25)
    for aggregation in AGGREGATIONS:
        loss, grad = expected(case, aggregation)
        record = backward(impl, case, aggregation=aggregation)
        what = f"{aggregation!r} loss, a row with zero and non-zero token losses"
        assert_tensor(record["loss"], loss, rtol=1e-10, what=what)
        assert_gradient(record["grads"]["logp"], grad, what=f"gradient, {what}")


def test_batch_without_tokens_gives_zero_and_zero_gradients(impl):
    # The empty batch (rows 2-3, NaN padding) is the second micro-batch of one logp: its zero
    # gradient adds onto the first one's, which only a working loss gets right.
    case = random_case(13)
    case["mask"][2:] = 0
    case = with_garbage(case, math.nan)
    empty = {name: value[2:] for name, value in case.items()}
    first = {name: value[:2] for name, value in case.items()}
    for aggregation in AGGREGATIONS:
        got = impl.grpo_loss(**empty, aggregation=aggregation)
        assert_tensor(got, torch.tensor(0.0, dtype=F64), what=f"{aggregation!r} loss")
        record = impl.probe.micro_batches(case, [(0, 2), (2, 4)], aggregation=aggregation)
        loss, grad = expected(first, aggregation)
        assert_tensor(record["losses"][1], torch.tensor(0.0, dtype=F64),
                      what=f"{aggregation!r} loss of a batch without tokens")  # fmt: skip
        assert_tensor(record["losses"][0], loss, rtol=1e-10, what=f"{aggregation!r} loss")
        assert_gradient(record["grad"], torch.cat([grad, torch.zeros(2, 5, dtype=F64)]),
                        what="gradient, with a batch without tokens as a micro-batch")  # fmt: skip


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_padding_reaches_neither_the_loss_nor_the_gradient(impl, aggregation):
    case = random_case(14, empty_row=True)
    loss, grad = expected(case, aggregation)
    # Large finite garbage that differs between the three: its ratio and k3 overflow to inf.
    for garbage in (math.nan, math.inf, -math.inf, 1e6, (1e6, -1e6, 0.0), (-1e6, 0.0, 1e6)):
        dirty = with_garbage(case, garbage)
        assert_tensor(impl.grpo_loss(**dirty, aggregation=aggregation), loss, rtol=1e-10,
                      what=f"loss with {garbage} in the padding")  # fmt: skip
        record = backward(impl, dirty, aggregation=aggregation)
        assert_gradient(record["grads"]["logp"], grad, what=f"gradient with {garbage} padding")


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_micro_batches_with_the_normalizer_give_the_whole_batch(impl, aggregation):
    # Rows 1 (empty) and 4-5 (made empty) put micro-batches without tokens in the split.
    case = random_case(15, batch=6, length=5, empty_row=True)
    case["mask"][4:] = 0
    batch, length = case["mask"].shape
    normalizer = {"sequence": batch, "token": int(case["mask"].sum()),
                  "constant": batch * length}[aggregation]  # fmt: skip
    loss, grad = expected(case, aggregation, beta=0.1)
    record = impl.probe.micro_batches(
        case,
        [(0, 1), (1, 2), (2, 4), (4, 6)],
        aggregation=aggregation,
        normalizer=normalizer,
        beta=0.1,
    )
    total = sum(record["losses"])
    assert_tensor(total, loss, rtol=1e-10, atol=1e-12, what="sum of the micro-batch losses")
    assert_gradient(record["grad"], grad, what="accumulated gradient")


def test_normalizer_replaces_the_denominator(impl):
    case = random_case(16, empty_row=True)
    for aggregation in AGGREGATIONS:
        # Any positive number: a count, a share of one (no clamping at 1), a numpy scalar, or
        # a 0-d tensor, as a batch's mask.sum() is.
        for normalizer in (100.0, 7, np.float64(2.5), 0.5, np.int64(5), torch.tensor(6.0)):
            loss, grad = expected(case, aggregation, normalizer=float(normalizer))
            record = backward(impl, case, aggregation=aggregation, normalizer=normalizer)
            what = f"{aggregation!r} loss with normalizer {normalizer!r}"
            assert_tensor(record["loss"], loss, rtol=1e-10, what=what)
            assert_gradient(record["grads"]["logp"], grad, what=f"gradient, {what}")
    # max_len only sets the denominator that the normalizer replaces: the whole batch's
    # B * max_len is already in it, whatever this micro-batch's width.
    width = case["mask"].shape[1]
    loss, grad = expected(case, "constant", max_len=width + 5, normalizer=30.0)
    record = backward(impl, case, aggregation="constant", max_len=width + 5, normalizer=30.0)
    what = f"'constant' loss with normalizer 30 and max_len {width + 5} (T = {width})"
    assert_tensor(record["loss"], loss, rtol=1e-10, what=what)
    assert_gradient(record["grads"]["logp"], grad, what=f"gradient, {what}")


def test_accepts_boolean_float_and_integer_masks(impl):
    case = random_case(17, empty_row=True)
    loss, _ = expected(case, "token")
    for dtype in (torch.bool, torch.float32, torch.float64, torch.int32, torch.uint8):
        got = impl.grpo_loss(**{**case, "mask": case["mask"].to(dtype)}, aggregation="token")
        assert_tensor(got, loss, rtol=1e-10, what=f"loss with a {dtype} mask")


def test_accepts_numpy_scalars_and_integer_advantages(impl):
    case = random_case(18, empty_row=True)
    case["advantages"] = torch.tensor([1, -2, 0, 3])
    settings = dict(epsilon=np.float64(0.25), beta=np.float64(0.1), epsilon_high=np.float64(0.3))
    loss, _ = expected(case, "constant", max_len=8, **{k: float(v) for k, v in settings.items()})
    got = impl.grpo_loss(**case, aggregation="constant", max_len=np.int64(8), **settings)
    assert_tensor(got, loss, rtol=1e-10, what="loss with integer advantages and numpy scalars")


def test_inputs_that_are_not_tensors_raise_type_error(impl):
    case = random_case(19)
    for name in (*FLOATS, "mask"):
        for replacement in (case[name].numpy(), case[name].tolist()):
            with pytest.raises(TypeError):
                impl.grpo_loss(**{**case, name: replacement})
                pytest.fail(f"{name} as a {type(replacement).__name__} was accepted")


def test_unknown_aggregation_raises_value_error(impl):
    for aggregation in ("dapo", "mean", "Token", ""):
        with pytest.raises(ValueError):
            impl.grpo_loss(**random_case(20), aggregation=aggregation)
            pytest.fail(f"aggregation {aggregation!r} was accepted")


def shaped_case(shape, **shapes) -> dict:
    """Valid values in any shapes: logp, logp_old, logp_ref and mask of `shape`, the advantages
    of shape[:1], unless `shapes` names another shape for one of them."""
    g = torch.Generator().manual_seed(len(shape) + 10 * sum(shape))
    sizes = {name: shape for name in (*FLOATS[:3], "mask")} | {"advantages": shape[:1]} | shapes
    case = {name: torch.log(torch.rand(sizes[name], generator=g, dtype=F64) * 0.9 + 0.05)
            for name in FLOATS[:3]}  # fmt: skip
    case["advantages"] = torch.randn(sizes["advantages"], generator=g, dtype=F64)
    case["mask"] = torch.ones(sizes["mask"], dtype=torch.int64)
    return case


# Shapes that broadcast against the log-probs' (4, 5) (the advantages': against (4,)), or that
# hold as many values: accepted, they would pair the wrong tokens or completions.
WRONG_TOKENS = [(1, 5), (4, 1), (5,), (1, 4, 5), (4, 5, 1), (), (5, 4), (2, 10), (20,)]
BROADCASTING = dict.fromkeys((*FLOATS[:3], "mask"), WRONG_TOKENS) | {
    "advantages": [(), (1,), (4, 1), (1, 4), (1, 1), (4, 5), (2, 2), (5,)],
}


def test_mismatched_shapes_raise_value_error(impl):
    case = random_case(21)
    bad = {
        "logp": [case["logp"][0], case["logp"][..., None]],
        "logp_old": [case["logp_old"][:, :3], case["logp_old"][:1], case["logp_old"].T],
        "logp_ref": [case["logp_ref"][:2], case["logp_ref"][:, :1]],
        "advantages": [case["advantages"][:1], case["advantages"][:, None], case["advantages"][0]],
        "mask": [case["mask"][:, :4], case["mask"][:1]],
    }
    for name, shapes in BROADCASTING.items():
        bad[name] += [shaped_case((4, 5), **{name: shape})[name] for shape in shapes]
    cases = [(name, (4, 5), {**case, name: x}) for name, xs in bad.items() for x in xs]
    # A batch of one completion, or of one token per completion: the advantages (B,) and a
    # row or column of the log-probs hold as many values.
    for shape, name, wrong in (((1, 5), "advantages", ()), ((1, 5), "advantages", (1, 1)),
                               ((1, 5), "advantages", (5,)), ((4, 1), "advantages", (4, 1)),
                               ((4, 1), "advantages", (1, 4)), ((1, 5), "logp_old", (5,)),
                               ((4, 1), "logp_ref", (4,)), ((1, 5), "mask", (5,)),
                               ((4, 1), "mask", (4,)), ((4, 1), "logp", (4,))):  # fmt: skip
        cases.append((name, shape, shaped_case(shape, **{name: wrong})))
    for name, shape, inputs in cases:
        what = f"{name} of shape {tuple(inputs[name].shape)} in a batch of shape {shape}"
        for aggregation in AGGREGATIONS:
            with pytest.raises(ValueError):
                impl.grpo_loss(**inputs, aggregation=aggregation)
                pytest.fail(f"{what} was accepted ({aggregation!r})")


def test_log_probs_that_are_not_2d_raise_value_error(impl):
    # All four (B, T) inputs of one shape, the advantages one per "row": consistent with each
    # other, but not a batch of (B, T) tokens.
    cases = [shaped_case(shape) for shape in ((5,), (1,), (4, 5, 1), (2, 2, 1), (1, 4, 5), ())]
    cases += [shaped_case((), advantages=(1,)), shaped_case((3,), advantages=(1,)),
              shaped_case((2, 3, 4), advantages=(2, 3))]  # fmt: skip
    for case in cases:
        shapes = {name: tuple(value.shape) for name, value in case.items()}
        for aggregation in AGGREGATIONS:
            with pytest.raises(ValueError):
                impl.grpo_loss(**case, aggregation=aggregation)
                pytest.fail(f"inputs of shapes {shapes} were accepted ({aggregation!r})")


def test_mask_that_is_not_zero_or_one_raises_value_error(impl):
    case = random_case(22)
    for value, dtype in ((2, torch.float64), (-1, torch.float64), (0.5, torch.float64),
                         (-1, torch.int64), (2, torch.int8), (255, torch.uint8)):  # fmt: skip
        mask = case["mask"].to(dtype)
        mask[0, 0] = value
        with pytest.raises(ValueError):
            impl.grpo_loss(**{**case, "mask": mask})
            pytest.fail(f"a {dtype} mask holding {value} was accepted")


def test_max_len_shorter_than_t_or_a_non_positive_normalizer_raises_value_error(impl):
    case = random_case(23)
    for options in (dict(aggregation="constant", max_len=4), dict(aggregation="constant", max_len=0),
                    dict(aggregation="constant", max_len=4, normalizer=30),  # checked all the same
                    dict(normalizer=0.0),
                    dict(aggregation="token", normalizer=-5)):  # fmt: skip
        with pytest.raises(ValueError):
            impl.grpo_loss(**case, **options)
            pytest.fail(f"{options} was accepted")
    # NaN is not positive either (though it is not <= 0), and a 0-d tensor is checked as a
    # number is: a batch's mask.sum() can be 0.
    for normalizer in (math.nan, np.float64(math.nan), torch.tensor(0), torch.tensor(-5.0),
                       torch.tensor(math.nan), torch.tensor(math.nan, dtype=F64)):  # fmt: skip
        for aggregation in AGGREGATIONS:
            with pytest.raises(ValueError):
                impl.grpo_loss(**case, aggregation=aggregation, normalizer=normalizer)
                pytest.fail(f"{aggregation!r} with normalizer {normalizer!r} was accepted")


def test_does_not_modify_its_inputs(impl):
    case = with_garbage(random_case(24, empty_row=True), math.nan)
    calls = [({"aggregation": a}, None) for a in AGGREGATIONS]
    calls += [({"aggregation": "constant", "max_len": 2}, ValueError)]
    for kwargs, error in calls:
        seen = impl.grpo_loss.observe(**case, **kwargs)
        if error is None and seen.error is not None:
            raise seen.error
        if error is not None:
            assert isinstance(seen.error, error), f"expected {error.__name__}, got {seen.error!r}"
        for name, tensor in case.items():
            torch.testing.assert_close(seen.kwargs[name], tensor, rtol=0, atol=0, equal_nan=True,
                                       msg=f"{name} was modified in place ({kwargs})")  # fmt: skip


def test_arguments_in_the_statements_order(impl):
    # Each optional argument differs from its neighbours, so any two swapped change the loss.
    arguments = {**random_case(31), "epsilon": 0.1, "beta": 0.3, "aggregation": "constant",
                 "epsilon_high": 0.25, "max_len": 7, "normalizer": 30}  # fmt: skip
    assert_positional_call_agrees(impl.grpo_loss, arguments, "grpo_loss")
