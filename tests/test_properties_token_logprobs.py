"""Properties of reference.token_logprobs: agreement with torch, gradients, stability."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reference.token_logprobs import token_logprobs


def torch_logprobs(logits, ids, prompt_length, temperature):
    """The same quantity through torch's own log_softmax and gather."""
    scores = logits[:, prompt_length - 1 : -1] / temperature
    log_probs = torch.log_softmax(scores, dim=-1)
    return log_probs.gather(-1, ids[:, prompt_length:].unsqueeze(-1)).squeeze(-1)


@settings(max_examples=50, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(2, 8),
    st.integers(1, 9),
    st.floats(0.1, 3.0),
    st.floats(0.1, 1e4),
    st.integers(0, 2**32 - 1),
    st.data(),
)
def test_equals_torch_log_softmax_gather(B, T, V, temperature, scale, seed, data):
    prompt_length = data.draw(st.integers(1, T - 1))
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=generator, dtype=torch.float64) * scale
    ids = torch.randint(0, V, (B, T), generator=generator)
    got = token_logprobs(logits, ids, prompt_length, temperature)
    assert isinstance(got, torch.Tensor) and got.shape == (B, T - prompt_length)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, torch_logprobs(logits, ids, prompt_length, temperature))


def test_numpy_and_torch_inputs_agree():
    rng = np.random.default_rng(0)
    logits, ids = rng.normal(size=(2, 6, 5)), rng.integers(0, 5, size=(2, 6))
    from_numpy = token_logprobs(logits, ids, 2, 0.8)
    from_torch = token_logprobs(torch.from_numpy(logits), torch.from_numpy(ids), 2, 0.8)
    np.testing.assert_allclose(from_torch.numpy(), from_numpy, rtol=1e-12)


def test_gradient_matches_finite_differences():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 3, generator=generator, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(0, 3, (2, 4), generator=generator)
    assert torch.autograd.gradcheck(lambda x: token_logprobs(x, ids, 1, 0.7), (logits,))


def test_gradient_of_a_log_prob_is_one_hot_minus_softmax():
    logits = torch.tensor([[[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]], requires_grad=True)
    token_logprobs(logits, torch.tensor([[0, 1]]), 1).sum().backward()
    expected = torch.tensor([0.0, 1.0, 0.0]) - torch.softmax(torch.tensor([1.0, 2.0, 3.0]), -1)
    torch.testing.assert_close(logits.grad[0, 0], expected)
    torch.testing.assert_close(logits.grad[0, 1], torch.zeros(3))


def test_bfloat16_logits_of_magnitude_1e4_stay_finite():
    generator = torch.Generator().manual_seed(1)
    logits = (torch.randn(2, 5, 50, generator=generator) * 1e4).to(torch.bfloat16)
    ids = torch.randint(0, 50, (2, 5), generator=generator)
    got = token_logprobs(logits, ids, 2)
    assert got.dtype == torch.bfloat16 and torch.isfinite(got).all()
