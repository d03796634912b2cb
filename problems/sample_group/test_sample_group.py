"""Hidden tests for sample_group. The implementation arrives through the `impl` fixture.

The models (grader/toy_models.py) are tiny and built from seeded tensors, so every expected
value below is computed from the model's own logits by a few lines of independent code.
"""

import math

import numpy as np
import pytest
import torch

from problems.support.asserts import assert_tensor
from problems.support.toy_models import (
    VOCAB,
    CachedPositionalBigramLM,
    ConstantLM,
    CounterLM,
    LogitsOutputLM,
    PositionalBigramLM,
)


def generator(seed=0):
    return torch.Generator().manual_seed(seed)


def prompts(*rows):
    return torch.tensor(rows, dtype=torch.long)


def full_logits(model, prompt_ids, group_size, completion_ids):
    """The model's logits predicting each completion token, from one uncached forward."""
    sequences = torch.cat([prompt_ids.repeat_interleave(group_size, 0), completion_ids], dim=1)
    with torch.no_grad():
        logits = PositionalBigramLM.logits(model, sequences)
    return logits[:, prompt_ids.shape[1] - 1 : -1]


def greedy(model, prompt_ids, steps):
    sequences = prompt_ids.clone()
    for _ in range(steps):
        with torch.no_grad():
            next_token = PositionalBigramLM.logits(model, sequences)[:, -1].argmax(-1)
        sequences = torch.cat([sequences, next_token[:, None]], dim=1)
    return sequences[:, prompt_ids.shape[1] :]


def frequencies(ids, vocab):
    return np.bincount(ids.flatten().numpy(), minlength=vocab) / ids.numel()


def assert_frequencies_match(ids, probs):
    """Empirical frequencies within 5 standard errors of `probs` (and absent tokens absent)."""
    probs = np.asarray(probs, dtype=float)
    freq = frequencies(ids, len(probs))
    for token, (p, f) in enumerate(zip(probs, freq, strict=True)):
        if p == 0:
            assert f == 0, f"token {token} lies outside the sampling distribution but was sampled"
        else:
            tolerance = 5 * math.sqrt(p * (1 - p) / ids.numel()) + 1e-12
            assert abs(f - p) <= tolerance, (
                f"token {token} sampled with frequency {f:.4f}, expected {p:.4f} (+- {tolerance:.4f})"
            )


P4 = [0.5, 0.3, 0.15, 0.05]  # a known next-token distribution (no EOS among these tokens)
NO_EOS = 7  # an EOS id ConstantLM(P4) never emits


def sample_constant(impl, probs, n=4000, **kwargs):
    out = impl.sample_group(
        ConstantLM(probs), prompts([0]), n, 1, NO_EOS, generator=generator(), **kwargs
    )
    return out.completion_ids, out.logprobs


# ----- shapes, dtypes and layout -----


def test_shapes_and_dtypes(impl):
    out = impl.sample_group(
        PositionalBigramLM(), prompts([1, 2, 3], [4, 5, 6]), 3, 5, 0, generator=generator()
    )
    for name in ("completion_ids", "completion_mask", "logprobs"):
        value = getattr(out, name)
        assert isinstance(value, torch.Tensor), f"{name} should be a torch tensor"
        assert tuple(value.shape) == (6, 5), f"{name} should have shape (6, 5), got {value.shape}"
    assert out.completion_ids.dtype == torch.long, "completion_ids should be int64 token ids"
    assert out.completion_mask.dtype == torch.long, "completion_mask should be int64 zeros and ones"
    assert out.logprobs.dtype == torch.float32, "logprobs should be float32"


def test_prompts_are_repeated_group_by_group(impl):
    # Prompt i ends in token i + 1, so its completion (the counter) starts at i + 2.
    out = impl.sample_group(
        CounterLM(), prompts([0, 1], [0, 2], [0, 3]), 2, 3, 9, generator=generator()
    )
    expected = torch.tensor([[2, 3, 4], [2, 3, 4], [3, 4, 5], [3, 4, 5], [4, 5, 6], [4, 5, 6]])
    assert torch.equal(out.completion_ids, expected), (
        f"rows i*G .. i*G+G-1 should continue prompt i\nexpected {expected}\ngot {out.completion_ids}"
    )


def test_does_not_modify_the_prompts(impl):
    prompt_ids = prompts([1, 2], [3, 4])
    impl.sample_group(PositionalBigramLM(), prompt_ids, 2, 4, 0, generator=generator())
    assert torch.equal(prompt_ids, prompts([1, 2], [3, 4])), "prompt_ids was modified"


# ----- EOS, masks and truncation -----


def test_stops_at_eos_and_pads_with_the_first_eos_id(impl):
    # From 1 the counter emits 2, 3, 4 (EOS), from 5 it emits 6, 7, 8, 9 (EOS), 0, 1, ...
    out = impl.sample_group(CounterLM(), prompts([1], [5]), 1, 6, [9, 4], generator=generator())
    expected = torch.tensor([[2, 3, 4, 9, 9, 9], [6, 7, 8, 9, 9, 9]])
    assert torch.equal(out.completion_ids, expected), (
        f"after its first EOS a completion holds the pad id (the first EOS id, 9)\n"
        f"expected {expected}\ngot {out.completion_ids}"
    )


def test_mask_covers_tokens_up_to_and_including_the_first_eos(impl):
    out = impl.sample_group(CounterLM(), prompts([1], [5]), 1, 6, [9, 4], generator=generator())
    expected = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]])
    assert torch.equal(out.completion_mask.long(), expected), (
        f"expected the mask {expected}, got {out.completion_mask}"
    )


def test_single_int_eos_id(impl):
    out = impl.sample_group(CounterLM(), prompts([0]), 1, 5, 3, generator=generator())
    assert torch.equal(out.completion_ids, torch.tensor([[1, 2, 3, 3, 3]]))
    assert torch.equal(out.completion_mask.long(), torch.tensor([[1, 1, 1, 0, 0]]))


def test_truncated_completion_is_all_ones_in_the_mask(impl):
    out = impl.sample_group(CounterLM(), prompts([0]), 2, 4, 9, generator=generator())
    assert torch.equal(out.completion_ids, torch.tensor([[1, 2, 3, 4]] * 2))
    assert torch.equal(out.completion_mask.long(), torch.ones(2, 4, dtype=torch.long)), (
        "a completion without EOS is truncated: every one of its tokens counts"
    )


def test_logprobs_are_zero_after_eos(impl):
    out = impl.sample_group(CounterLM(), prompts([1], [5]), 1, 6, [9, 4], generator=generator())
    assert torch.all(torch.isfinite(out.logprobs)), "logprobs should be finite everywhere"
    assert torch.all(out.logprobs[out.completion_mask == 0] == 0), (
        f"log-probs after the first EOS should be 0, got {out.logprobs}"
    )


def test_pad_outside_the_top_k_gives_zero_not_nan(impl):
    # With top_k=1 the pad id 9 is filtered out while the second row still runs, so its
    # sampling log-prob in the finished first row is -inf.
    out = impl.sample_group(
        CounterLM(), prompts([1], [5]), 1, 5, [9, 4], top_k=1, generator=generator()
    )
    assert torch.equal(out.completion_ids, torch.tensor([[2, 3, 4, 9, 9], [6, 7, 8, 9, 9]]))
    assert torch.all(torch.isfinite(out.logprobs)), f"logprobs should be finite, got {out.logprobs}"
    assert torch.all(out.logprobs[out.completion_mask == 0] == 0)


def test_output_keeps_max_new_tokens_columns_when_every_completion_ends_early(impl):
    out = impl.sample_group(CounterLM(), prompts([1], [2]), 2, 10, 4, generator=generator())
    assert tuple(out.completion_ids.shape) == (4, 10)
    assert torch.equal(out.completion_mask.sum(dim=1).long(), torch.tensor([3, 3, 2, 2]))


def test_stops_calling_the_model_once_every_completion_has_ended(impl):
    # Every completion has ended after 3 steps; the model raises on a 4th call.
    out = impl.sample_group(
        CounterLM(max_calls=3), prompts([1], [2]), 2, 20, 4, generator=generator()
    )
    assert tuple(out.completion_ids.shape) == (4, 20)


def test_max_new_tokens_limits_the_length(impl):
    out = impl.sample_group(PositionalBigramLM(), prompts([1]), 4, 1, 0, generator=generator())
    assert tuple(out.completion_ids.shape) == (4, 1)


# ----- log-probs of the sampling distribution -----


def test_logprobs_match_the_model_distribution(impl):
    model, prompt_ids = PositionalBigramLM(), prompts([1, 2], [3, 0])
    out = impl.sample_group(model, prompt_ids, 3, 6, 0, generator=generator())
    logits = full_logits(model, prompt_ids, 3, out.completion_ids)
    expected = torch.log_softmax(logits, -1).gather(-1, out.completion_ids[..., None])[..., 0]
    expected = torch.where(out.completion_mask.bool(), expected, torch.zeros_like(expected))
    assert_tensor(out.logprobs, expected, rtol=1e-4, atol=1e-5, what="logprobs")


def test_logprobs_use_the_temperature(impl):
    model, prompt_ids = PositionalBigramLM(seed=3), prompts([1, 2], [3, 0])
    out = impl.sample_group(model, prompt_ids, 3, 6, 0, temperature=0.6, generator=generator())
    logits = full_logits(model, prompt_ids, 3, out.completion_ids) / 0.6
    expected = torch.log_softmax(logits, -1).gather(-1, out.completion_ids[..., None])[..., 0]
    expected = torch.where(out.completion_mask.bool(), expected, torch.zeros_like(expected))
    assert_tensor(out.logprobs, expected, rtol=1e-4, atol=1e-5, what="logprobs at temperature 0.6")


def test_logprobs_are_renormalized_after_top_k(impl):
    ids, logprobs = sample_constant(impl, P4, n=200, top_k=2)
    expected = torch.log(torch.tensor([0.5, 0.3])[ids] / 0.8)
    assert_tensor(logprobs, expected, rtol=1e-4, atol=1e-6, what="logprobs after top_k=2")


def test_logprobs_are_renormalized_after_top_p(impl):
    ids, logprobs = sample_constant(impl, P4, n=200, top_p=0.9)
    expected = torch.log(torch.tensor(P4[:3])[ids] / 0.95)
    assert_tensor(logprobs, expected, rtol=1e-4, atol=1e-6, what="logprobs after top_p=0.9")


def test_logprobs_do_not_track_gradients(impl):
    out = impl.sample_group(PositionalBigramLM(), prompts([1, 2]), 2, 3, 0, generator=generator())
    assert not out.logprobs.requires_grad, "sample under torch.no_grad(): no graph is needed"


# ----- the sampling distribution -----


def test_samples_follow_the_model_distribution(impl):
    ids, _ = sample_constant(impl, P4)
    assert_frequencies_match(ids, P4)


def test_temperature_reshapes_the_distribution(impl):
    ids, _ = sample_constant(impl, P4, temperature=2.0)
    tempered = np.sqrt(P4) / np.sqrt(P4).sum()  # softmax(log p / 2)
    assert_frequencies_match(ids, tempered)


def test_top_k_keeps_exactly_the_k_most_likely_tokens(impl):
    ids, _ = sample_constant(impl, P4, top_k=2)
    assert_frequencies_match(ids, [0.625, 0.375, 0, 0])


def test_top_k_zero_or_at_least_vocab_keeps_everything(impl):
    for top_k in (0, 4, 10):
        ids, _ = sample_constant(impl, P4, top_k=top_k)
        assert_frequencies_match(ids, P4)


def test_top_p_keeps_the_token_that_crosses_p(impl):
    # 0.5 < 0.75 <= 0.5 + 0.3: the smallest nucleus with mass >= 0.75 is {0, 1}.
    ids, _ = sample_constant(impl, P4, top_p=0.75)
    assert_frequencies_match(ids, [0.625, 0.375, 0, 0])


def test_top_p_never_samples_outside_the_nucleus(impl):
    ids, _ = sample_constant(impl, P4, top_p=0.9)
    assert_frequencies_match(ids, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0])


def test_top_p_always_keeps_the_most_likely_token(impl):
    ids, logprobs = sample_constant(impl, P4, n=100, top_p=0.1)
    assert torch.all(ids == 0), "with top_p below the top probability only the top token remains"
    assert torch.all(logprobs == 0)


def test_top_p_applies_to_what_top_k_left(impl):
    # top_k=2 leaves [4/7, 3/7]; 4/7 >= 0.55, so top-p then keeps token 0 alone.
    ids, _ = sample_constant(impl, [0.4, 0.3, 0.2, 0.1], n=200, top_k=2, top_p=0.55)
    assert torch.all(ids == 0), "apply temperature, then top-k, then top-p to the renormalized rest"


def test_top_k_one_is_greedy(impl):
    model, prompt_ids = PositionalBigramLM(seed=5), prompts([1, 2], [6, 3])
    out = impl.sample_group(model, prompt_ids, 2, 6, VOCAB + 1, top_k=1, generator=generator())
    expected = greedy(model, prompt_ids, 6).repeat_interleave(2, 0)
    assert torch.equal(out.completion_ids, expected), (
        f"expected {expected}, got {out.completion_ids}"
    )
    assert torch.all(out.logprobs == 0), "the one token left has probability 1"


def test_tiny_temperature_is_greedy(impl):
    model, prompt_ids = PositionalBigramLM(seed=5), prompts([1, 2], [6, 3])
    out = impl.sample_group(
        model, prompt_ids, 2, 6, VOCAB + 1, temperature=1e-4, generator=generator()
    )
    expected = greedy(model, prompt_ids, 6).repeat_interleave(2, 0)
    assert torch.equal(out.completion_ids, expected), (
        f"expected {expected}, got {out.completion_ids}"
    )


# ----- randomness -----


def test_same_seed_gives_the_same_samples(impl):
    model, prompt_ids = PositionalBigramLM(), prompts([1, 2], [3, 4])
    first = impl.sample_group(model, prompt_ids, 4, 8, 0, generator=generator(7))
    second = impl.sample_group(model, prompt_ids, 4, 8, 0, generator=generator(7))
    assert torch.equal(first.completion_ids, second.completion_ids)
    assert torch.equal(first.logprobs, second.logprobs)


def test_different_seeds_give_different_samples(impl):
    model, prompt_ids = PositionalBigramLM(), prompts([1, 2], [3, 4])
    first = impl.sample_group(model, prompt_ids, 4, 8, VOCAB + 1, generator=generator(1))
    second = impl.sample_group(model, prompt_ids, 4, 8, VOCAB + 1, generator=generator(2))
    assert not torch.equal(first.completion_ids, second.completion_ids)


def test_members_of_a_group_differ(impl):
    out = impl.sample_group(
        PositionalBigramLM(), prompts([1, 2]), 8, 8, VOCAB + 1, generator=generator()
    )
    distinct = {tuple(row.tolist()) for row in out.completion_ids}
    assert len(distinct) > 1, "the G completions of a prompt are independent samples"


def test_without_a_generator_the_global_seed_decides(impl):
    model, prompt_ids = PositionalBigramLM(), prompts([1, 2])
    with torch.random.fork_rng():
        torch.manual_seed(11)
        first = impl.sample_group(model, prompt_ids, 4, 6, 0).completion_ids
        torch.manual_seed(11)
        second = impl.sample_group(model, prompt_ids, 4, 6, 0).completion_ids
    assert torch.equal(first, second)


# ----- model conventions -----


def test_model_returning_an_object_with_logits(impl):
    out = impl.sample_group(
        LogitsOutputLM(seed=2), prompts([1, 2]), 3, 5, 0, generator=generator(4)
    )
    plain = impl.sample_group(
        PositionalBigramLM(seed=2), prompts([1, 2]), 3, 5, 0, generator=generator(4)
    )
    assert torch.equal(out.completion_ids, plain.completion_ids)


def test_the_whole_sequence_reaches_a_model_without_cache(impl):
    # The model raises unless each call gets the whole sequence so far.
    out = impl.sample_group(
        PositionalBigramLM(), prompts([1, 2, 3]), 2, 5, VOCAB + 1, generator=generator()
    )
    assert tuple(out.completion_ids.shape) == (2, 5)


def test_kv_cache_is_used_when_the_model_supports_it(impl):
    # The model raises unless it gets the prompt once, then one token per step with the cache.
    out = impl.sample_group(
        CachedPositionalBigramLM(),
        prompts([1, 2, 3], [4, 5, 6]),
        2,
        5,
        VOCAB + 1,
        generator=generator(),
    )
    assert tuple(out.completion_ids.shape) == (4, 5)


def test_cached_and_uncached_models_give_the_same_samples(impl):
    prompt_ids = prompts([1, 2, 3], [4, 5, 6])
    cached = impl.sample_group(
        CachedPositionalBigramLM(seed=4), prompt_ids, 3, 7, 0, generator=generator(5)
    )
    plain = impl.sample_group(
        PositionalBigramLM(seed=4), prompt_ids, 3, 7, 0, generator=generator(5)
    )
    assert torch.equal(cached.completion_ids, plain.completion_ids)
    assert_tensor(cached.logprobs, plain.logprobs, what="logprobs with the cache")


# ----- bad arguments -----


@pytest.mark.parametrize(
    "bad",
    [
        dict(temperature=0.0),
        dict(temperature=-1.0),
        dict(top_k=-1),
        dict(top_p=0.0),
        dict(top_p=1.5),
        dict(num_generations=0),
        dict(max_new_tokens=0),
        dict(prompt_ids=torch.tensor([1, 2, 3])),
        dict(eos_ids=[]),
    ],
    ids=lambda bad: ",".join(bad),
)
def test_bad_arguments_raise_value_error(impl, bad):
    arguments = dict(prompt_ids=prompts([1, 2]), num_generations=2, max_new_tokens=3, eos_ids=0)
    arguments.update(bad)
    with pytest.raises(ValueError):
        impl.sample_group(PositionalBigramLM(), generator=generator(), **arguments)
