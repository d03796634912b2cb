"""Properties of reference.kl_estimators on numpy and torch inputs."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from reference.kl_estimators import kl_k1, kl_k2, kl_k3

log_probs = arrays(np.float64, st.integers(1, 20), elements=st.floats(-30.0, 0.0))


@settings(max_examples=50, deadline=None)
@given(st.data())
def test_k2_and_k3_are_never_negative(data):
    logp = data.draw(log_probs)
    logp_ref = data.draw(arrays(np.float64, logp.shape, elements=st.floats(-30.0, 0.0)))
    assert np.all(kl_k2(logp, logp_ref) >= 0)
    assert np.all(kl_k3(logp, logp_ref) >= 0)


@settings(max_examples=50, deadline=None)
@given(log_probs)
def test_all_estimators_vanish_when_the_policies_agree(logp):
    for estimator in (kl_k1, kl_k2, kl_k3):
        assert np.all(estimator(logp, logp.copy()) == 0)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.05, 1.0), min_size=2, max_size=6), st.data())
def test_k1_and_k3_expectations_equal_the_exact_kl(weights, data):
    p = np.array(weights) / np.sum(weights)
    q_weights = data.draw(st.lists(st.floats(0.05, 1.0), min_size=len(p), max_size=len(p)))
    q = np.array(q_weights) / np.sum(q_weights)
    exact = np.sum(p * np.log(p / q))
    for estimator in (kl_k1, kl_k3):
        assert np.isclose(np.sum(p * estimator(np.log(p), np.log(q))), exact, atol=1e-12)


def test_torch_inputs_give_torch_outputs_with_gradients():
    logp = torch.log(torch.tensor([[0.5, 0.2], [0.9, 0.1]], dtype=torch.float64)).requires_grad_()
    logp_ref = torch.log(torch.tensor([[0.25, 0.4], [0.8, 0.3]], dtype=torch.float64))
    for estimator in (kl_k1, kl_k2, kl_k3):
        got = estimator(logp, logp_ref)
        assert isinstance(got, torch.Tensor) and got.shape == (2, 2)
        expected = estimator(logp.detach().numpy(), logp_ref.numpy())
        np.testing.assert_allclose(got.detach().numpy(), expected, rtol=1e-12)
    assert torch.autograd.gradcheck(lambda x: kl_k3(x, logp_ref), (logp,))


def test_k3_gradient_is_one_minus_r():
    # d/d logp of (r - 1 - log r), r = exp(logp_ref - logp): 1 - r. It pushes logp down where
    # the policy is above the reference and up where it is below.
    logp = torch.log(torch.tensor([0.5, 0.2], dtype=torch.float64)).requires_grad_()
    logp_ref = torch.log(torch.tensor([0.25, 0.4], dtype=torch.float64))
    kl_k3(logp, logp_ref).sum().backward()
    r = torch.exp(logp_ref - logp.detach())
    torch.testing.assert_close(logp.grad, 1 - r)
