"""Hidden tests for grpo_loss. The implementation arrives through the `impl` fixture."""

import math

import numpy as np
import pytest
import torch

from problems.support.asserts import assert_tensor

AGGREGATIONS = ["sequence", "token", "constant"]
F64 = torch.float64


def random_case(seed: int, batch: int = 4, length: int = 5, empty_row: bool = False) -> dict:
    """float64 tensors; ratios spread inside and outside the clip range."""
    g = torch.Generator().manual_seed(seed)
    logp = torch.log(torch.rand(batch, length, generator=g, dtype=F64) * 0.9 + 0.05)
    lengths = torch.randint(1, length + 1, (batch,), generator=g)
    if empty_row:
        lengths[1] = 0
    return dict(
        logp=logp,
        logp_old=logp + 0.3 * torch.randn(batch, length, generator=g, dtype=F64),
        logp_ref=logp + 0.5 * torch.randn(batch, length, generator=g, dtype=F64),
        advantages=torch.randn(batch, generator=g, dtype=F64),
        mask=(torch.arange(length)[None, :] < lengths[:, None]).long(),
    )


def expected_loss(case, epsilon=0.2, beta=0.04, aggregation="sequence", epsilon_high=None,
                  max_len=None, normalizer=None) -> float:  # fmt: skip
    """The statement's formula in plain numpy."""
    lp, lo, lr, a, m = (case[k].detach().double().numpy() for k in
                        ("logp", "logp_old", "logp_ref", "advantages", "mask"))  # fmt: skip
    keep = m == 1
    lp, lo, lr = (np.where(keep, x, 0.0) for x in (lp, lo, lr))
    high = epsilon if epsilon_high is None else epsilon_high
    rho = np.exp(lp - lo)
    surrogate = np.minimum(rho * a[:, None], np.clip(rho, 1 - epsilon, 1 + high) * a[:, None])
    kl = np.exp(lr - lp) - (lr - lp) - 1
    per_token = np.where(keep, -(surrogate - beta * kl), 0.0)
    counts = keep.sum(axis=1)
    if aggregation == "sequence":
        total = (per_token.sum(axis=1) / np.maximum(counts, 1)).sum()
        default = m.shape[0]
    elif aggregation == "token":
        total, default = per_token.sum(), max(counts.sum(), 1)
    else:
        total, default = per_token.sum(), m.shape[0] * (max_len or m.shape[1])
    return float(total / (normalizer or default))


def token_weights(mask: torch.Tensor, aggregation: str, max_len=None) -> torch.Tensor:
    """d loss / d (per-token loss): each token's weight in the aggregation."""
    m = mask.to(F64)
    if aggregation == "sequence":
        return m / (m.sum(dim=1, keepdim=True).clamp(min=1) * m.shape[0])
    if aggregation == "token":
        return m / m.sum().clamp(min=1)
    return m / (m.shape[0] * (max_len or m.shape[1]))


def grad_of_logp(impl, case, **kwargs) -> torch.Tensor:
    logp = case["logp"].clone().requires_grad_()
    loss = impl.grpo_loss(**{**case, "logp": logp}, **kwargs)
    loss.backward()
    assert logp.grad is not None, "no gradient reached logp"
    return logp.grad


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("seed", [0, 1])
def test_value_matches_the_formula(impl, seed, aggregation):
    case = random_case(seed, empty_row=seed == 1)
    got = impl.grpo_loss(**case, aggregation=aggregation, beta=0.1, epsilon_high=0.28)
    expected = expected_loss(case, aggregation=aggregation, beta=0.1, epsilon_high=0.28)
    assert_tensor(got, torch.tensor(expected, dtype=F64), rtol=1e-10, atol=1e-12)


def test_defaults_are_epsilon_0_2_beta_0_04_and_sequence(impl):
    case = random_case(2)
    assert_tensor(impl.grpo_loss(**case), torch.tensor(expected_loss(case), dtype=F64))


def test_constant_aggregation_uses_max_len(impl):
    case = random_case(3)
    got = impl.grpo_loss(**case, aggregation="constant", max_len=8)
    expected = expected_loss(case, aggregation="constant", max_len=8)
    assert_tensor(got, torch.tensor(expected, dtype=F64))


def test_returns_a_0d_tensor_attached_to_the_graph(impl):
    case = random_case(4)
    case["logp"] = case["logp"].clone().requires_grad_()
    loss = impl.grpo_loss(**case)
    assert isinstance(loss, torch.Tensor), f"expected a tensor, got {type(loss).__name__}"
    assert loss.ndim == 0, f"expected a 0-d tensor, got shape {tuple(loss.shape)}"
    assert loss.requires_grad, "the loss is cut from the graph of logp: gradients cannot flow"


def test_keeps_float32(impl):
    case = {k: v.float() if v.is_floating_point() else v for k, v in random_case(5).items()}
    loss = impl.grpo_loss(**case)
    assert loss.dtype == torch.float32, f"expected float32, got {loss.dtype}"
    assert_tensor(loss, torch.tensor(expected_loss(case)), rtol=1e-5)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_gradient_matches_finite_differences(impl, aggregation):
    case = random_case(6, empty_row=True)
    logp = case["logp"].clone().requires_grad_()
    fixed = {k: v for k, v in case.items() if k != "logp"}

    def loss_of(x):
        return impl.grpo_loss(x, **fixed, aggregation=aggregation, beta=0.1, epsilon_high=0.28)

    assert torch.autograd.gradcheck(loss_of, (logp,), eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_first_iteration_gradient_is_the_policy_gradient(impl, aggregation):
    # logp_old = logp.detach(): every ratio is 1, and d loss / d logp = -A * token weight.
    case = random_case(7, empty_row=True)
    case["logp_old"] = case["logp"].detach()
    grad = grad_of_logp(impl, case, beta=0.0, aggregation=aggregation)
    expected = -case["advantages"][:, None] * token_weights(case["mask"], aggregation)
    assert_tensor(grad, expected, rtol=1e-10, atol=1e-12, what="gradient at ratio 1")


def test_first_iteration_loss_is_about_zero_with_centered_advantages(impl):
    case = random_case(8)
    case["advantages"] = case["advantages"] - case["advantages"].mean()
    case["logp_old"] = case["logp"].detach()
    loss = impl.grpo_loss(**case, beta=0.0)
    assert_tensor(loss, torch.tensor(0.0, dtype=F64), atol=1e-12, what="loss at ratio 1")
    grad = grad_of_logp(impl, case, beta=0.0)
    assert grad.abs().max() > 0.01, "the gradient at ratio 1 must not be zero"


def test_first_iteration_gradient_includes_the_kl_term(impl):
    # d k3 / d logp = 1 - exp(logp_ref - logp), weighted by beta.
    case = random_case(9)
    case["logp_old"] = case["logp"].detach()
    grad = grad_of_logp(impl, case, beta=0.5, aggregation="token")
    a, lp, lr = case["advantages"][:, None], case["logp"], case["logp_ref"]
    per_token = -a + 0.5 * (1 - torch.exp(lr - lp))
    expected = per_token * token_weights(case["mask"], "token")
    assert_tensor(grad, expected, rtol=1e-10, atol=1e-12)


def test_logp_old_is_treated_as_a_constant(impl):
    # A caller passing the very same tensor as logp_old must still get the policy gradient.
    case = random_case(10)
    logp = case["logp"].clone().requires_grad_()
    loss = impl.grpo_loss(logp, logp, case["logp_ref"], case["advantages"], case["mask"], beta=0.0)
    loss.backward()
    expected = -case["advantages"][:, None] * token_weights(case["mask"], "sequence")
    assert_tensor(logp.grad, expected, rtol=1e-10, atol=1e-12, what="gradient with logp_old=logp")


def test_no_gradient_flows_into_old_ref_or_advantages(impl):
    case = {k: v.clone().requires_grad_() if v.is_floating_point() else v
            for k, v in random_case(11).items()}  # fmt: skip
    impl.grpo_loss(**case).backward()
    assert case["logp"].grad is not None, "no gradient reached logp"
    for name in ("logp_old", "logp_ref", "advantages"):
        assert case[name].grad is None, f"{name} received a gradient: it must be detached"


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("garbage", [math.nan, math.inf, -math.inf], ids=str)
def test_padding_reaches_neither_the_loss_nor_the_gradient(impl, aggregation, garbage):
    case = random_case(12)
    clean = impl.grpo_loss(**case, aggregation=aggregation)
    padding = case["mask"] == 0
    assert padding.any()
    dirty = {**case}
    for name in ("logp", "logp_old", "logp_ref"):
        dirty[name] = case[name].masked_fill(padding, garbage)
    assert_tensor(impl.grpo_loss(**dirty, aggregation=aggregation), clean, what="loss")
    grad = grad_of_logp(impl, dirty, aggregation=aggregation)
    assert torch.isfinite(grad).all(), f"non-finite gradient with {garbage} in the padding"
    assert torch.all(grad[padding] == 0), "padding positions must get a zero gradient"


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_micro_batches_with_the_normalizer_give_the_whole_batch_gradient(impl, aggregation):
    case = random_case(13, batch=6, length=5, empty_row=True)
    batch, length = case["mask"].shape
    normalizer = {
        "sequence": batch,
        "token": int(case["mask"].sum()),
        "constant": batch * length,
    }[aggregation]
    whole_grad = grad_of_logp(impl, case, aggregation=aggregation)
    whole_loss = impl.grpo_loss(**case, aggregation=aggregation)

    logp = case["logp"].clone().requires_grad_()
    total = 0.0
    for rows in (slice(0, 1), slice(1, 4), slice(4, 6)):
        part = {k: v[rows] for k, v in {**case, "logp": logp}.items()}
        loss = impl.grpo_loss(**part, aggregation=aggregation, normalizer=normalizer)
        loss.backward()  # gradients accumulate in logp.grad, as in gradient accumulation
        total += loss.detach()
    assert_tensor(total, whole_loss.detach(), rtol=1e-10, atol=1e-12, what="sum of micro-losses")
    assert_tensor(logp.grad, whole_grad, rtol=1e-10, atol=1e-12, what="accumulated gradient")


def test_normalizer_replaces_the_token_count(impl):
    case = random_case(14)
    got = impl.grpo_loss(**case, aggregation="token", normalizer=100.0)
    expected = expected_loss(case, aggregation="token", normalizer=100.0)
    assert_tensor(got, torch.tensor(expected, dtype=F64), rtol=1e-10)


def test_accepts_boolean_masks(impl):
    case = random_case(15)
    expected = impl.grpo_loss(**case, aggregation="token")
    got = impl.grpo_loss(**{**case, "mask": case["mask"].bool()}, aggregation="token")
    assert_tensor(got, expected, what="loss with a boolean mask")


def test_numpy_inputs_raise_type_error(impl):
    case = {k: v.numpy() for k, v in random_case(16).items()}
    with pytest.raises(TypeError):
        impl.grpo_loss(**case)


def test_unknown_aggregation_raises_value_error(impl):
    with pytest.raises(ValueError):
        impl.grpo_loss(**random_case(17), aggregation="dapo")


def test_mismatched_shapes_raise_value_error(impl):
    case = random_case(18)
    with pytest.raises(ValueError):
        impl.grpo_loss(**{**case, "advantages": case["advantages"][:1]})


def test_does_not_modify_its_inputs(impl):
    case = random_case(19)
    case["logp"][case["mask"] == 0] = math.nan
    copies = {k: v.clone() for k, v in case.items()}
    impl.grpo_loss(**case, aggregation="token")
    for name, tensor in case.items():
        torch.testing.assert_close(
            tensor,
            copies[name],
            rtol=0,
            atol=0,
            equal_nan=True,
            msg=f"{name} was modified in place",
        )
