"""Hidden tests for sample_group. The implementation arrives through the `impl` fixture.

A model and a torch.Generator cannot be handed to the solution from here, so every test calls
the probe `sample` (probes.py) with a toy model's spec and a seed: the probe builds both beside
the solution and returns the samples, records of how the model was called and the state the
call left behind. The tests rebuild the same model from the same spec
(problems/support/toy_models.py) and compute what they expect from its exact logits.
"""

import math
from functools import partial

import numpy as np
import pytest
import torch

from problems.support.asserts import assert_tensor, calls_without_value_error
from problems.support.host_transfers import advice
from problems.support.toy_models import build

CONTEXT = {"kind": "ContextLM", "seed": 3}  # logits depend on the whole context, vocab 8
COUNTER = {"kind": "CounterLM"}  # emits (last token + 1) mod 10
P4 = [0.5, 0.3, 0.15, 0.05]  # a known next-token distribution
EOS3 = 3  # the EOS of the ConstantLMs: with one new token, sampling it only ends early


def constant(probs, dtype="float32"):
    return {"kind": "ConstantLM", "probs": probs, "dtype": dtype}


def prompts(*rows, dtype=torch.long):
    return torch.tensor(rows, dtype=dtype)


def sample(impl, model, prompt_ids, num_generations, max_new_tokens, eos_ids, **kwargs):
    """The probe: sample_group on the model `model` builds, with a generator seeded 0 unless
    `seed` says otherwise (None: no generator); returns a dict (see probes.py)."""
    return impl.probe.sample(model, prompt_ids, num_generations, max_new_tokens, eos_ids, **kwargs)


# ----- what the statement says, computed here -----


def sampling_logprobs(logits, temperature=1.0, top_k=0, top_p=1.0):
    """log q over the vocabulary, -inf for the tokens removed: the statement's four steps."""
    z = logits.double() / temperature
    if 0 < top_k < z.shape[-1]:
        kth_largest = z.sort(-1, descending=True).values[..., top_k - 1 : top_k]
        z = z.masked_fill(z < kth_largest, -math.inf)  # ties with the k-th stay
    if top_p < 1:
        probs, order = z.softmax(-1).sort(-1, descending=True)
        keep_sorted = probs.cumsum(-1) - probs < top_p  # the mass before each token
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        z = z.masked_fill(~keep, -math.inf)
    return z.log_softmax(-1)


def model_logits(spec, prompt_ids, group_size, completion_ids):
    """The logits that predicted each completion token, from one pass over the whole sequence."""
    sequences = torch.cat([prompt_ids.long().repeat_interleave(group_size, 0), completion_ids], 1)
    with torch.no_grad():
        logits = build(spec).logits(sequences)
    return logits[:, prompt_ids.shape[1] - 1 : -1]


def check_fields(result, rows, steps, vocab):
    """Three tensors of shape (rows, steps) with the dtypes of the statement, ids in the vocab."""
    for name, dtype in [("completion_ids", torch.int64), ("completion_mask", torch.int64),
                        ("logprobs", torch.float32)]:  # fmt: skip
        value = result[name]
        assert tuple(value.shape) == (rows, steps), (
            f"{name} should have shape {(rows, steps)}, got {tuple(value.shape)}"
        )
        assert value.dtype == dtype, f"{name} should have dtype {dtype}, got {value.dtype}"
    ids = result["completion_ids"]
    assert bool(((ids >= 0) & (ids < vocab)).all()), f"token ids outside the vocabulary: {ids}"


def check_completions(result, eos_ids):
    """Mask 1 up to and including the first EOS, 0 after; the pad id and log-prob 0 after it."""
    eos_ids = [eos_ids] if isinstance(eos_ids, int) else list(eos_ids)
    ids, mask, logprobs = result["completion_ids"], result["completion_mask"], result["logprobs"]
    for row in range(ids.shape[0]):
        tokens = ids[row].tolist()
        length = next((t + 1 for t, token in enumerate(tokens) if token in eos_ids), len(tokens))
        expected = [1] * length + [0] * (len(tokens) - length)
        assert mask[row].tolist() == expected, (
            f"row {row} {tokens}: the mask should be {expected} (1 up to and including the "
            f"first EOS of {eos_ids}), got {mask[row].tolist()}"
        )
        assert tokens[length:] == [eos_ids[0]] * (len(tokens) - length), (
            f"row {row} {tokens}: after the first EOS every token is the pad id {eos_ids[0]}"
        )
        assert torch.all(logprobs[row, length:] == 0), (
            f"row {row}: log-probs after the first EOS should be exactly 0, got {logprobs[row]}"
        )
    assert bool(torch.isfinite(logprobs).all()), f"log-probs should be finite, got {logprobs}"


def check_logprobs(result, spec, prompt_ids, group_size, **settings):
    """The log-prob of every sampled token under the sampling distribution of its context."""
    ids, mask = result["completion_ids"], result["completion_mask"].bool()
    logits = model_logits(spec, prompt_ids, group_size, ids)
    expected = sampling_logprobs(logits, **settings).gather(-1, ids[..., None])[..., 0]
    outside = mask & torch.isinf(expected)
    assert not bool(outside.any()), (
        f"with {settings or 'the defaults'}, tokens {ids[outside].tolist()} were sampled though "
        "the sampling distribution removes them"
    )
    expected = torch.where(mask, expected, torch.zeros_like(expected))
    what = f"log-probs with {settings or 'the defaults'}"
    assert_tensor(result["logprobs"], expected, rtol=1e-5, atol=2e-5, what=what)


def check_calls(result, prompt_ids, group_size, cached):
    """How the model was called: once per step until every completion has ended; the whole
    sequence so far each time, or, with a KV cache, the prompts and then only the newest token
    with the cache; an all-ones attention mask over every token the model attends to."""
    calls, ids = result["calls"], result["completion_ids"]
    prompt_length = prompt_ids.shape[1]
    sequences = torch.cat([prompt_ids.long().repeat_interleave(group_size, 0), ids], 1)
    steps = int(result["completion_mask"].sum(1).max())
    assert len(calls) == steps, (
        f"every completion has ended (or reached max_new_tokens) after {steps} steps: the model "
        f"should be called {steps} times, once per step, but was called {len(calls)} times"
    )
    for step, call in enumerate(calls):
        fed, where = call["input_ids"].long(), f"call {step + 1} of the model"
        if step == 0:  # each prompt once, or all B * G rows
            once = torch.equal(fed, prompt_ids.long())
            assert once or torch.equal(fed, sequences[:, :prompt_length]), (
                f"{where} should read the prompts, got {call['input_ids']}"
            )
            assert not call["cached"], f"{where} reads the prompts: there is no cache yet"
        elif cached:
            assert call["cached"], (
                f"{where}: this model keeps a KV cache; pass the past_key_values of the previous "
                "call (and use_cache=True)"
            )
            assert call["past_length"] == prompt_length + step - 1, (
                f"{where}: the cache passed holds {call['past_length']} tokens, expected "
                f"{prompt_length + step - 1}: pass the past_key_values the previous call returned"
            )
            newest = sequences[:, prompt_length + step - 1 : prompt_length + step]
            assert torch.equal(fed, newest), (
                f"{where}: with a KV cache, feed only the newest token of every row (the pad id "
                f"for finished rows), expected {newest}, got {call['input_ids']}"
            )
        else:
            assert not call["cached"], (
                f"{where}: this model keeps no KV cache (its forward does not take both "
                "past_key_values and use_cache): pass no past_key_values"
            )
            assert torch.equal(fed, sequences[:, : prompt_length + step]), (
                f"{where}: a model without a KV cache must read the whole sequence so far, the "
                f"pad id for finished rows, expected\n{sequences[:, : prompt_length + step]}\n"
                f"got\n{call['input_ids']}"
            )
        mask = call["attention_mask"]
        expected_shape = (fed.shape[0], prompt_length + step)
        assert mask is not None, f"{where}: pass attention_mask"
        assert tuple(mask.shape) == expected_shape and bool((mask == 1).all()), (
            f"{where}: attention_mask should be all ones of shape {expected_shape} (every token "
            f"attended to, cached ones included), got {mask}"
        )


def check_frequencies(ids, probs):
    """Empirical frequencies within 5 standard errors of `probs`; removed tokens never sampled."""
    probs = np.asarray(probs, dtype=float)
    flat = ids.flatten().numpy()
    # Before counting: bincount makes room for the largest id, and the ids come from the solution.
    outside = flat[(flat < 0) | (flat >= len(probs))]
    assert outside.size == 0, f"tokens outside the vocabulary were sampled: {outside[:10]}"
    freq = np.bincount(flat, minlength=len(probs)) / flat.size
    for token, (p, f) in enumerate(zip(probs, freq, strict=True)):
        if p == 0:
            assert f == 0, f"token {token} lies outside the sampling distribution but was sampled"
        else:
            tolerance = 5 * math.sqrt(p * (1 - p) / flat.size)
            assert abs(f - p) <= tolerance, (
                f"token {token} sampled with frequency {f:.4f}, expected {p:.4f} (+- {tolerance:.4f})"
            )


def greedy(spec, prompt_ids, steps):
    model, sequences = build(spec), prompt_ids.clone()
    for _ in range(steps):
        with torch.no_grad():
            next_token = model.logits(sequences)[:, -1].argmax(-1)
        sequences = torch.cat([sequences, next_token[:, None]], dim=1)
    return sequences[:, prompt_ids.shape[1] :]


# ----- shapes, dtypes and layout -----


def test_returns_tensors_of_the_right_shape_and_dtype(impl):
    result = sample(impl, CONTEXT, prompts([1, 2, 3], [4, 5, 6]), 3, 5, 0)
    check_fields(result, 6, 5, 8)
    assert not result["logprobs"].requires_grad, "sample under torch.no_grad(): no graph is needed"
    # This model's logits are a view of its parameter: under no_grad a view still asks for a
    # gradient, and whatever is computed from it outside no_grad carries a graph.
    result = sample(impl, constant([0.5, 0.3, 0.2]), prompts([1], [2]), 2, 4, 2)
    assert not result["logprobs"].requires_grad, (
        "the log-probs carry an autograd graph: compute them from the logits under "
        "torch.no_grad() too (or detach the logits)"
    )


def test_samples_in_float32_whatever_the_model_precision(impl):
    for dtype in ("bfloat16", "float64"):
        for temperature in (1.0, 0.7):
            spec = constant(P4, dtype)
            result = sample(impl, spec, prompts([0]), 500, 1, EOS3, temperature=temperature)
            check_fields(result, 500, 1, 4)
            logits = build(spec).table.detach().double()  # the model's own logits, exactly
            expected = torch.log_softmax(logits / temperature, -1)[result["completion_ids"]]
            what = (f"log-probs of a {dtype} model at temperature {temperature} (cast the "
                    "logits to float32 first)")  # fmt: skip
            assert_tensor(result["logprobs"], expected, rtol=1e-6, atol=1e-6, what=what)


def test_prompts_are_repeated_group_by_group(impl):
    # Prompt i ends in token i + 1, so its completion (the counter) starts at i + 2.
    result = sample(impl, COUNTER, prompts([0, 1], [0, 2], [0, 3]), 2, 3, 9)
    expected = torch.tensor([[2, 3, 4], [2, 3, 4], [3, 4, 5], [3, 4, 5], [4, 5, 6], [4, 5, 6]])
    assert torch.equal(result["completion_ids"], expected), (
        f"rows i*G .. i*G+G-1 should continue prompt i\nexpected {expected}\n"
        f"got {result['completion_ids']}"
    )


def test_accepts_integer_prompts_of_any_dtype(impl):
    for dtype in (torch.int32, torch.uint8, torch.int16):
        result = sample(impl, COUNTER, prompts([0, 1], [0, 5], dtype=dtype), 2, 3, 9)
        check_fields(result, 4, 3, 10)
        expected = torch.tensor([[2, 3, 4], [2, 3, 4], [6, 7, 8], [6, 7, 8]])
        assert torch.equal(result["completion_ids"], expected), (
            f"{dtype} prompts: expected {expected}, got {result['completion_ids']}"
        )


def test_does_not_modify_the_prompts(impl):
    for spec in (CONTEXT, {"kind": "CachedContextLM", "seed": 3}, COUNTER):
        sent = prompts([1, 2], [3, 4])
        result = sample(impl, spec, sent, 2, 4, 0)
        after = result["prompt_ids_after"]
        assert after.dtype == sent.dtype and torch.equal(after, sent), (
            f"prompt_ids were modified: sent {sent}, after the call {after}"
        )


def test_the_model_keeps_its_mode_and_weights_and_autograd_stays_on(impl):
    # Also what else a caller set on its parameters: a frozen one stays frozen, the others
    # trainable with their gradients, a bfloat16 model in bfloat16 (model.float(),
    # requires_grad_ and zero_grad work in place).
    cached = {"kind": "CachedContextLM", "seed": 3}
    for spec, train, frozen in [(CONTEXT, True, False), (CONTEXT, False, True),
                                (cached, True, True), (cached, False, False),
                                (constant(P4, "bfloat16"), True, False)]:  # fmt: skip
        result = sample(impl, spec, prompts([1, 2]), 2, 4, 0, train=train, frozen=frozen)
        mode = "training" if train else "evaluation"
        assert result["training_after"] == train, (
            f"the model came in {mode} mode and should be left in it"
        )
        assert result["weights_changed"] == [], (
            f"the model's weights changed: {result['weights_changed']}"
        )
        assert result["parameters_changed"] == [], (
            f"the model's parameters changed besides their values: {result['parameters_changed']}; "
            "sample under torch.no_grad() and leave the parameters' requires_grad, dtype and "
            "gradients as the caller left them"
        )
        assert result["grad_enabled_after"], (
            "autograd was left disabled: use `with torch.no_grad():` (or the decorator), "
            "which restores it"
        )
        assert not result["inference_mode_after"], "inference mode was left on"
    # A caller that had turned autograd off (an evaluation loop) finds it off again.
    result = sample(impl, CONTEXT, prompts([1, 2]), 2, 4, 0, autograd=False)
    assert not result["grad_enabled_after"], (
        "autograd was off when sample_group was called and is on after it: restore the state "
        "the caller left (`with torch.no_grad():` does), do not switch it on"
    )


# ----- EOS, masks and truncation -----


def test_stops_at_eos_and_pads_with_the_first_eos_id(impl):
    # From 1 the counter emits 2, 3, 4 (EOS), from 5 it emits 6, 7, 8, 9 (EOS), 0, 1, ...
    result = sample(impl, COUNTER, prompts([1], [5]), 1, 6, [9, 4])
    expected = torch.tensor([[2, 3, 4, 9, 9, 9], [6, 7, 8, 9, 9, 9]])
    assert torch.equal(result["completion_ids"], expected), (
        f"after its first EOS a completion holds the pad id (the first EOS id, 9)\n"
        f"expected {expected}\ngot {result['completion_ids']}"
    )


def test_mask_covers_tokens_up_to_and_including_the_first_eos(impl):
    result = sample(impl, COUNTER, prompts([1], [5]), 1, 6, [9, 4])
    expected = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]])
    assert torch.equal(result["completion_mask"], expected), (
        f"expected the mask {expected}, got {result['completion_mask']}"
    )
    check_completions(result, [9, 4])


def test_accepts_every_form_of_eos_ids(impl):
    # From 0 the counter emits 1, 2, 3, ...: EOS 3 ends it at the third token.
    for eos_ids in (3, np.int64(3), [3], (3, 7), np.array([7, 3]), [np.int32(3), 8]):
        result = sample(impl, COUNTER, prompts([0]), 1, 5, eos_ids)
        pad = int(np.atleast_1d(eos_ids)[0])
        expected = torch.tensor([[1, 2, 3, pad, pad]])
        assert torch.equal(result["completion_ids"], expected), (
            f"eos_ids={eos_ids!r}: expected {expected}, got {result['completion_ids']}"
        )
        assert torch.equal(result["completion_mask"], torch.tensor([[1, 1, 1, 0, 0]]))


def test_eos_ids_in_the_prompts_do_not_finish_a_row(impl):
    # A row is finished once it has *emitted* an EOS id: EOS ids anywhere in its prompt, at its
    # end included, count for nothing. Prompts with and without them, in one batch.
    eos = [9, 4]
    result = sample(impl, COUNTER, prompts([4, 9, 1], [0, 0, 5], [9, 4, 9], [3, 9, 4], [1, 2, 6]),
                    2, 7, eos)  # fmt: skip
    completions = [[2, 3, 4, 9, 9, 9, 9], [6, 7, 8, 9, 9, 9, 9], [0, 1, 2, 3, 4, 9, 9],
                   [5, 6, 7, 8, 9, 9, 9], [7, 8, 9, 9, 9, 9, 9]]  # fmt: skip
    lengths = [3, 4, 5, 5, 3]
    expected = torch.tensor(completions).repeat_interleave(2, 0)
    mask = torch.tensor([[1] * n + [0] * (7 - n) for n in lengths]).repeat_interleave(2, 0)
    for name, want in (("completion_ids", expected), ("completion_mask", mask)):
        assert torch.equal(result[name], want), (
            f"prompts holding EOS ids {eos}: a row is finished only once it has emitted one, "
            f"an EOS id in its prompt does not count\nexpected {name}\n{want}\n"
            f"got\n{result[name]}"
        )
    # Prompts of one token, an EOS id each: nothing ends the first two rows, which are truncated.
    result = sample(impl, COUNTER, prompts([9], [4], [0]), 1, 4, eos)
    expected = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8], [1, 2, 3, 4]])
    assert torch.equal(result["completion_ids"], expected), (
        f"prompts [9], [4], [0] with EOS ids {eos}: expected {expected}, got "
        f"{result['completion_ids']}"
    )
    assert torch.equal(result["completion_mask"], torch.ones(3, 4, dtype=torch.long)), (
        f"a prompt that is an EOS id does not finish its row: expected all ones, got "
        f"{result['completion_mask']}"
    )
    # With a KV cache, and a model whose logits depend on the whole context.
    spec = {"kind": "CachedContextLM", "seed": 3, "strict": True}
    prompt_ids = prompts([0, 4, 1], [2, 3, 5], [4, 4, 0])
    result = sample(impl, spec, prompt_ids, 3, 7, [0, 4], temperature=1.3)
    check_fields(result, 9, 7, 8)
    check_completions(result, [0, 4])
    check_logprobs(result, spec, prompt_ids, 3, temperature=1.3)


def test_truncated_completions_are_all_ones_in_the_mask(impl):
    result = sample(impl, COUNTER, prompts([0], [3]), 2, 4, 9)
    expected = torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4], [4, 5, 6, 7], [4, 5, 6, 7]])
    assert torch.equal(result["completion_ids"], expected)
    assert torch.equal(result["completion_mask"], torch.ones(4, 4, dtype=torch.long)), (
        "a completion without EOS is truncated: every one of its tokens counts"
    )


@pytest.mark.parametrize("settings", [{"top_k": 1}, {"top_p": 0.5}, {"temperature": 0.01}],
                         ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))  # fmt: skip
def test_log_probs_are_zero_not_nan_after_eos_when_the_pad_is_filtered_out(impl, settings):
    # The pad id 9 lies outside what the filters keep while the second row still runs, so its
    # sampling log-prob in the finished first row is -inf.
    result = sample(impl, COUNTER, prompts([1], [5]), 1, 5, [9, 4], **settings)
    assert torch.equal(result["completion_ids"], torch.tensor([[2, 3, 4, 9, 9], [6, 7, 8, 9, 9]]))
    check_completions(result, [9, 4])


def test_output_keeps_max_new_tokens_columns_when_every_completion_ends_early(impl):
    result = sample(impl, COUNTER, prompts([1], [2]), 2, 10, 4)
    check_fields(result, 4, 10, 10)
    assert torch.equal(result["completion_mask"].sum(dim=1), torch.tensor([3, 3, 2, 2]))
    check_completions(result, [4])


def test_stops_calling_the_model_once_every_completion_has_ended(impl):
    result = sample(impl, COUNTER, prompts([1], [2]), 2, 20, 4)
    assert len(result["calls"]) == 3, (
        f"every completion has ended after 3 steps: the model should be called 3 times, not "
        f"{len(result['calls'])}"
    )
    result = sample(impl, COUNTER, prompts([5], [1]), 3, 2, 9)
    assert len(result["calls"]) == 2, "with no EOS, one call per step up to max_new_tokens"
    result = sample(impl, COUNTER, prompts([3], [8]), 2, 6, [4, 9])
    assert len(result["calls"]) == 1, "every completion ended at its first token: one call"
    assert torch.equal(result["completion_mask"], torch.tensor([[1] + [0] * 5] * 4))


def test_one_new_token(impl):
    result = sample(impl, CONTEXT, prompts([1]), 4, 1, 0)
    check_fields(result, 4, 1, 8)
    check_calls(result, prompts([1]), 4, cached=False)
    check_logprobs(result, CONTEXT, prompts([1]), 4)


def test_creates_its_tensors_on_the_model_device_not_the_default_one(impl):
    # As for a model on a GPU while torch's default device is the CPU: here the model is on the
    # CPU and torch's default device is "meta" during the call, a device that holds no data.
    # Top-k and top-p build tensors of their own too: each path runs once.
    cases = ((CONTEXT, {}), ({"kind": "CachedContextLM", "seed": 3}, {}),
             (CONTEXT, {"temperature": 2.0, "top_k": 5, "top_p": 0.9}))  # fmt: skip
    for spec, settings in cases:
        prompt_ids = prompts([1, 2], [5, 3])
        try:
            result = sample(impl, spec, prompt_ids, 2, 6, [0, 4], default_device="meta",
                            watch_host=True, **settings)  # fmt: skip
        except (RuntimeError, NotImplementedError, IndexError) as exc:
            raise AssertionError(
                f"{spec['kind']} with {settings}: with torch's default device set to 'meta' "
                f"during the call, sample_group raised {type(exc).__name__}: {exc}. Create "
                "every tensor on the model's device (the device of its parameters): "
                "device=..., or *_like"
            ) from exc
        # A trip through the host gives back a CPU tensor, right here by chance (the model is
        # on the CPU), beside the model's CUDA tensors on a GPU.
        assert not result["host_transfers"], (
            f"{spec['kind']} with {settings}: sample_group called "
            f"{', '.join(result['host_transfers'])}: " + advice("the model's")
        )
        check_fields(result, 4, 6, 8)
        if settings:  # judged against its own run on the CPU: the filters have tests of their own
            plain = sample(impl, spec, prompt_ids, 2, 6, [0, 4], **settings)
            for name in ("completion_ids", "completion_mask", "logprobs"):
                same = torch.allclose(result[name], plain[name], rtol=0, atol=0, equal_nan=True)
                assert same, (
                    f"{spec['kind']} with {settings}: {name} differs when torch's default device "
                    "is 'meta' during the call. Create every tensor on the model's device"
                )
            continue
        check_completions(result, [0, 4])
        check_logprobs(result, spec, prompt_ids, 2)


# ----- log-probs of the sampling distribution -----


def test_logprobs_match_the_model_distribution(impl):
    prompt_ids = prompts([1, 2], [3, 0])
    result = sample(impl, CONTEXT, prompt_ids, 3, 6, 0)
    check_fields(result, 6, 6, 8)
    check_completions(result, [0])
    check_logprobs(result, CONTEXT, prompt_ids, 3)


SETTINGS = [
    {"temperature": 0.6},
    {"temperature": 1.7, "top_k": 3},
    {"top_k": 2},
    {"top_p": 0.7},
    {"temperature": 0.5, "top_p": 0.9},
    {"temperature": 2.0, "top_k": 5, "top_p": 0.6},
]


@pytest.mark.parametrize("settings", SETTINGS,
                         ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))  # fmt: skip
def test_samples_and_logprobs_follow_the_sampling_distribution(impl, settings):
    spec, prompt_ids = {"kind": "ContextLM", "seed": 7}, prompts([1, 2], [5, 3], [6, 6])
    result = sample(impl, spec, prompt_ids, 4, 8, [0, 4], **settings)
    check_fields(result, 12, 8, 8)
    check_completions(result, [0, 4])
    check_logprobs(result, spec, prompt_ids, 4, **settings)


def test_arguments_in_the_statements_order(impl):
    # Every other test names the settings; a caller may pass them in order: a signature with
    # top_p before top_k reads top_k=5 as top_p there.
    spec, prompt_ids = {"kind": "ContextLM", "seed": 7}, prompts([1, 2], [5, 3])
    settings = {"temperature": 2.0, "top_k": 5, "top_p": 0.8}
    in_order = sample(impl, spec, prompt_ids, 3, 6, 0, positional=True, **settings)
    by_name = sample(impl, spec, prompt_ids, 3, 6, 0, **settings)
    for field in ("completion_ids", "completion_mask", "logprobs"):
        assert torch.equal(in_order[field], by_name[field]), (
            f"{field} differs when the arguments come in the statement's order (model, "
            "prompt_ids, num_generations, max_new_tokens, eos_ids, temperature, top_k, top_p, "
            "generator) from what they are given by name: keep the statement's order"
        )
    check_logprobs(in_order, spec, prompt_ids, 3, **settings)


def test_accepts_numpy_scalars_and_integers_as_settings(impl):
    spec, prompt_ids = {"kind": "ContextLM", "seed": 7}, prompts([1, 2], [5, 3])
    settings = {"temperature": 2, "top_k": np.int64(5), "top_p": np.float64(0.8)}
    result = sample(impl, spec, prompt_ids, np.int64(3), np.int64(6), 0, **settings)
    check_fields(result, 6, 6, 8)
    check_logprobs(result, spec, prompt_ids, 3, temperature=2.0, top_k=5, top_p=0.8)
    result = sample(impl, spec, prompt_ids, 3, 6, 0, temperature=np.float32(0.5), top_p=1)
    check_logprobs(result, spec, prompt_ids, 3, temperature=0.5)


def test_samples_under_no_grad_not_inference_mode(impl):
    # A strict model answers a call with autograd or inference mode on with other logits: the
    # samples show it, whatever the calls say.
    spec = CONTEXT | {"strict": True}
    result = sample(impl, spec, prompts([1, 2]), 2, 3, 0)
    for step, call in enumerate(result["calls"]):
        assert not call["grad_enabled"], (
            f"call {step + 1} of the model ran with autograd on: sample under torch.no_grad()"
        )
        assert not call["inference_mode"], (
            f"call {step + 1} of the model ran in inference mode: use torch.no_grad(), so that "
            "the ids can feed the trainer's forward pass"
        )
    assert not result["logprobs"].requires_grad, "the log-probs should carry no autograd graph"
    assert result["backward_error"] is None, (
        f"the completion ids cannot feed a forward pass that is differentiated: "
        f"{result['backward_error']}"
    )
    check_completions(result, 0)
    check_logprobs(result, spec, prompts([1, 2]), 2)


# ----- the sampling distribution, with a model whose distribution is known -----

# (probabilities, settings, the sampling distribution q by hand)
DISTRIBUTIONS = {
    "defaults": (P4, {}, P4),
    "temperature=2": (P4, {"temperature": 2.0}, np.sqrt(P4) / np.sqrt(P4).sum()),
    "temperature=0.5": (P4, {"temperature": 0.5}, np.square(P4) / np.square(P4).sum()),
    "top_k=2": (P4, {"top_k": 2}, [0.625, 0.375, 0, 0]),
    "top_k=2 keeps the tokens tied with the 2nd": (
        [0.4, 0.2, 0.2, 0.2], {"top_k": 2}, [0.4, 0.2, 0.2, 0.2]
    ),
    "top_k=1 keeps a tie at the top": ([0.3, 0.3, 0.25, 0.15], {"top_k": 1}, [0.5, 0.5, 0, 0]),
    "top_p=0.75 keeps the token that crosses p": (P4, {"top_p": 0.75}, [0.625, 0.375, 0, 0]),
    "top_p=0.9": (P4, {"top_p": 0.9}, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0]),
    # tau = 2 gives [0.379, 0.294, 0.208, 0.120]: mass before token 2 is 0.673 < 0.75.
    "temperature before top_p": (
        P4, {"temperature": 2.0, "top_p": 0.75},
        np.array([*np.sqrt(P4[:3]), 0]) / np.sqrt(P4[:3]).sum(),
    ),
    # top-k leaves [4/7, 3/7]; 4/7 >= 0.55, so top-p keeps token 0 alone.
    "top_p after top_k": ([0.4, 0.3, 0.2, 0.1], {"top_k": 2, "top_p": 0.55}, [1, 0, 0, 0]),
    "temperature with top_k": (
        P4, {"temperature": 0.5, "top_k": 3},
        np.array([*np.square(P4[:3]), 0]) / np.square(P4[:3]).sum(),
    ),
    # Logits 1.50000036 and 1.50000048, neighbouring float32 numbers, are one number once
    # divided by 0.7: top-k, which comes after the temperature, keeps the tie.
    "top_k ties after the temperature": (
        [4.481690673115262, 4.481691207374455, math.exp(-5.0), math.exp(-5.0)],
        {"temperature": 0.7, "top_k": 1}, [0.5, 0.5, 0, 0],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_samples_follow_the_sampling_distribution(impl, name):
    probs, settings, q = DISTRIBUTIONS[name]
    result = sample(impl, constant(probs), prompts([0]), 4000, 1, EOS3, **settings)
    check_fields(result, 4000, 1, len(probs))
    ids = result["completion_ids"]
    check_frequencies(ids, q)
    with np.errstate(divide="ignore"):
        expected = torch.tensor(np.log(np.asarray(q, dtype=float)))[ids]
    assert_tensor(result["logprobs"], expected, rtol=1e-5, atol=1e-5,
                  what=f"log-probs with {settings or 'the defaults'}")  # fmt: skip


def test_a_small_temperature_sharpens_but_still_samples(impl):
    # Logits about 0.01 apart: at temperature 0.01 they give P4 again, not greedy draws (only
    # top_k=1 is greedy). Expected from the model's own float32 logits; dividing them by 0.01
    # in float32 rounds by about 1e-5.
    probs = np.power(P4, 0.01) / np.power(P4, 0.01).sum()
    logits = torch.log(torch.tensor(probs)).float().double()
    q = torch.softmax(logits / 0.01, -1)
    result = sample(impl, constant(probs), prompts([0]), 4000, 1, EOS3, temperature=0.01)
    check_fields(result, 4000, 1, len(probs))
    ids = result["completion_ids"]
    check_frequencies(ids, q.numpy())
    assert_tensor(result["logprobs"], torch.log(q)[ids], rtol=1e-4, atol=1e-4,
                  what="log-probs at temperature 0.01")  # fmt: skip


def test_top_k_zero_or_at_least_the_vocabulary_keeps_everything(impl):
    for top_k in (0, 4, 10):
        result = sample(impl, constant(P4), prompts([0]), 4000, 1, EOS3, top_k=top_k)
        check_frequencies(result["completion_ids"], P4)
        expected = torch.log(torch.tensor(P4))[result["completion_ids"]]
        assert_tensor(result["logprobs"], expected, what=f"log-probs with top_k={top_k}")


def test_the_defaults_filter_nothing_in_a_vocabulary_of_hundreds(impl):
    # 300 tokens, each 0.98 times as likely as the one before: a third of the mass lies past
    # the 50 most likely (top_k=50 is Hugging Face generate's default, not this one's).
    weights = [0.98**rank for rank in range(300)]
    probs = [w / sum(weights) for w in weights]
    result = sample(impl, constant(probs), prompts([0]), 2000, 1, EOS3)
    ids = result["completion_ids"][:, 0]
    assert int((ids >= 50).sum()) > 400, "tokens past the 50 most likely are sampled too"
    expected = torch.log(torch.tensor(probs, dtype=torch.float64))[ids]
    assert_tensor(result["logprobs"][:, 0], expected.float(), rtol=1e-4,
                  what="log-probs with the default temperature, top_k and top_p")  # fmt: skip


def test_top_p_always_keeps_the_most_likely_token(impl):
    # The top token is not token 0: a sampler that returns zeros must not pass.
    for probs in ([0.3, 0.5, 0.15, 0.05], [0.01, 0.97, 0.01, 0.01]):
        result = sample(impl, constant(probs), prompts([0]), 100, 1, EOS3, top_p=0.1)
        assert torch.all(result["completion_ids"] == 1), (
            "with top_p below the top probability only the top token remains"
        )
        assert torch.all(result["logprobs"] == 0), "the one token left has probability 1"


def test_top_p_one_keeps_every_token_of_a_large_vocabulary(impl):
    # One logit 17 above 99,999 zeros. A float32 softmax rounds part of the tail's mass away
    # (about 2.6e-4 here: its probabilities add up to more than 1), so the cumulative mass
    # reaches 1.0 thousands of tokens before the last one and a nucleus filter run at
    # top_p = 1.0 drops them, counting that error twice. 1.0 turns top-p off: each log-prob
    # lies between the exact one and torch's float32 log_softmax.
    vocab, top = 100_000, math.exp(17.0)
    probs = [top / (top + vocab - 1)] + [1 / (top + vocab - 1)] * (vocab - 1)
    logits = torch.log(torch.tensor(probs, dtype=torch.float64)).float()
    exact, float32 = logits.double().log_softmax(-1), logits.log_softmax(-1).double()
    low = torch.minimum(exact, float32) - 2e-5
    high = torch.maximum(exact, float32) + 2e-5
    for settings in ({}, {"top_p": 1.0}):
        result = sample(impl, constant(probs), prompts([0]), 64, 1, EOS3, **settings)
        check_fields(result, 64, 1, vocab)
        ids, got = result["completion_ids"][:, 0], result["logprobs"][:, 0].double()
        for row in ((got < low[ids]) | (got > high[ids])).nonzero()[:1, 0].tolist():
            token = int(ids[row])
            raise AssertionError(
                f"with {settings or 'the defaults'}, row {row} sampled token {token} with "
                f"log-prob {float(got[row]):.7g}, expected {float(exact[token]):.7g} (float32 "
                f"may give {float(float32[token]):.7g}): top_p=1.0 keeps every token, apply "
                "no nucleus filter at all"
            )


def test_top_p_keeps_a_token_only_if_the_mass_before_it_is_below_p(impl):
    # Four equal tokens: the mass before them is 0, 0.25, 0.5, 0.75 (exactly, in any order).
    # top_p=0.5 keeps two of them: the third has mass 0.5 before it, which is not below 0.5.
    result = sample(impl, constant([0.25] * 4), prompts([0]), 400, 1, EOS3, top_p=0.5)
    kept = sorted(set(result["completion_ids"].flatten().tolist()))
    assert len(kept) == 2, f"top_p=0.5 over four equal tokens keeps two, but {kept} were sampled"
    expected = torch.full((400, 1), math.log(0.5))
    assert_tensor(result["logprobs"], expected, what="log-probs with top_p=0.5 (two tokens kept)")


def test_top_k_one_is_greedy(impl):
    spec, prompt_ids = {"kind": "ContextLM", "seed": 5, "vocab": 16}, prompts([1, 2], [6, 3])
    path = greedy(spec, prompt_ids, 6)
    eos = min(set(range(16)) - set(path.flatten().tolist()))  # a token greedy never picks
    result = sample(impl, spec, prompt_ids, 2, 6, eos, top_k=1)
    expected = path.repeat_interleave(2, 0)
    assert torch.equal(result["completion_ids"], expected), (
        f"expected {expected}, got {result['completion_ids']}"
    )
    assert torch.all(result["logprobs"] == 0), "the one token left has probability 1"


def test_removed_tokens_stay_removed_whatever_the_scale_of_the_kept_ones(impl):
    # At tau = 1e-36 the kept logit divided by tau is about -3.6e35 (within the statement's
    # 1e37): a "large negative" fill such as -1e9 or -1e30 for the removed tokens is then
    # above it, and they are sampled instead. -inf (or float32's lowest) stays below.
    probs = [0.7, 0.2, 0.07, 0.03]
    for settings in ({"top_k": 1}, {"top_p": 0.5}):
        result = sample(impl, constant(probs), prompts([0]), 64, 1, EOS3, temperature=1e-36,
                        **settings)  # fmt: skip
        sampled = sorted(set(result["completion_ids"].flatten().tolist()))
        assert sampled == [0], (
            f"with {settings} at temperature 1e-36 only token 0 is kept, but {sampled} were "
            "sampled: set removed tokens to -inf, not to a large negative number"
        )
        assert torch.all(result["logprobs"] == 0), "the one token left has probability 1"


def test_tiny_temperature_is_greedy(impl):
    spec, prompt_ids = {"kind": "ContextLM", "seed": 5, "vocab": 16}, prompts([1, 2], [6, 3])
    path = greedy(spec, prompt_ids, 6)
    eos = min(set(range(16)) - set(path.flatten().tolist()))
    result = sample(impl, spec, prompt_ids, 2, 6, eos, temperature=1e-4)
    expected = path.repeat_interleave(2, 0)
    assert torch.equal(result["completion_ids"], expected), (
        f"expected {expected}, got {result['completion_ids']}"
    )


# ----- randomness -----


def test_same_seed_gives_the_same_samples_whatever_the_global_state(impl):
    prompt_ids = prompts([1, 2], [3, 4])
    first = sample(impl, CONTEXT, prompt_ids, 4, 8, 0, seed=7, global_seed=1)
    second = sample(impl, CONTEXT, prompt_ids, 4, 8, 0, seed=7, global_seed=2)
    assert torch.equal(first["completion_ids"], second["completion_ids"]), (
        "two calls with generators seeded alike should sample the same tokens: draw every "
        "random number from `generator`, not from torch's global generator"
    )
    assert torch.equal(first["logprobs"], second["logprobs"])


def test_different_seeds_give_different_samples(impl):
    prompt_ids = prompts([1, 2], [3, 4])
    first = sample(impl, CONTEXT, prompt_ids, 4, 8, 0, seed=1)
    second = sample(impl, CONTEXT, prompt_ids, 4, 8, 0, seed=2)
    assert not torch.equal(first["completion_ids"], second["completion_ids"]), (
        "generators seeded differently gave the same samples: sample with `generator`"
    )


def test_members_of_a_group_differ(impl):
    result = sample(impl, CONTEXT, prompts([1, 2]), 8, 8, 0)
    distinct = {tuple(row.tolist()) for row in result["completion_ids"]}
    assert len(distinct) > 1, "the G completions of a prompt are independent samples"


# Pair statistics of 16 cells against the true product of the marginals: above 80 with
# probability 7e-11 for independent draws (chi-square of 15 degrees of freedom).
CHI_SQUARE_LIMIT = 80.0


def test_tokens_of_different_steps_are_independent(impl):
    # A model whose next-token distribution never changes: every token of every completion is
    # an independent draw from q (the EOS id, of probability 1e-30, never comes). One noise
    # reused at every step, or a generator restarted at each step, gets each step's frequencies
    # right but ties the steps together: the frequencies of pairs of tokens show it, for two
    # steps of one completion, or of two completions of a group.
    q = np.array([0.4, 0.3, 0.2, 0.1])
    steps = 6
    result = sample(impl, constant([*q, 1e-30]), prompts([0], [1]), 1000, steps, 4, seed=3)
    check_fields(result, 2000, steps, 5)
    ids = result["completion_ids"].numpy()
    check_frequencies(result["completion_ids"], [*q, 0.0])
    even, odd = ids[0::2], ids[1::2]  # completions 2k and 2k + 1 of one prompt
    pairs = [(f"steps {s} and {t} of a completion", ids[:, s], ids[:, t])
             for s in range(steps) for t in range(s + 1, steps)]  # fmt: skip
    pairs += [(f"step {s} of completion 2k and step {t} of completion 2k + 1", even[:, s], odd[:, t])
              for s in range(steps) for t in range(steps)]  # fmt: skip
    for what, first, second in pairs:
        counts = np.bincount(first * len(q) + second, minlength=len(q) ** 2)
        expected = len(first) * np.outer(q, q).flatten()
        chi_square = float(((counts - expected) ** 2 / expected).sum())
        assert chi_square <= CHI_SQUARE_LIMIT, (
            f"the tokens at {what} are not independent draws: the same token at both in "
            f"{np.mean(first == second):.1%} of {len(first)} pairs, {q @ q:.1%} expected (pair "
            f"frequencies' chi-square {chi_square:.0f}, at most {CHI_SQUARE_LIMIT:g} for "
            "independent draws). Draw new random numbers from `generator` at every step, for "
            "every row: do not reuse one noise, or restart the generator, at each step"
        )


def test_without_a_generator_the_global_seed_decides(impl):
    prompt_ids = prompts([1, 2], [3, 4])
    first = sample(impl, CONTEXT, prompt_ids, 4, 6, 0, seed=None, global_seed=11)
    second = sample(impl, CONTEXT, prompt_ids, 4, 6, 0, seed=None, global_seed=11)
    other = sample(impl, CONTEXT, prompt_ids, 4, 6, 0, seed=None, global_seed=12)
    assert torch.equal(first["completion_ids"], second["completion_ids"]), (
        "with generator=None, the same global seed should give the same samples"
    )
    assert not torch.equal(first["completion_ids"], other["completion_ids"]), (
        "with generator=None, sample from torch's global generator (another global seed, "
        "other samples)"
    )
    # The global generator is used as a given one is, and left where that one is left.
    given = sample(impl, CONTEXT, prompt_ids, 4, 6, 0, seed=11, global_seed=99)
    assert torch.equal(first["completion_ids"], given["completion_ids"]), (
        "with generator=None and global seed 11, draw what a generator seeded 11 draws"
    )
    assert first["next_draw"] == given["next_draw"], (
        "with generator=None, torch's global generator should advance as a given generator "
        "does: draw from it, not from a new generator seeded like it"
    )


# ----- how the model is called -----


def test_a_model_that_returns_an_object_with_logits(impl):
    prompt_ids = prompts([1, 2], [4, 4])
    spec = {"kind": "ContextLM", "seed": 3, "output": "object"}
    result = sample(impl, spec, prompt_ids, 3, 5, 0, top_k=4)
    check_fields(result, 6, 5, 8)
    check_logprobs(result, spec, prompt_ids, 3, top_k=4)
    plain = sample(impl, CONTEXT, prompt_ids, 3, 5, 0, top_k=4)
    assert torch.equal(result["completion_ids"], plain["completion_ids"])


def test_without_a_cache_every_call_reads_the_whole_sequence(impl):
    prompt_ids = prompts([1, 2, 3], [4, 5, 6])
    result = sample(impl, CONTEXT, prompt_ids, 2, 7, [0, 4], temperature=1.3)
    check_calls(result, prompt_ids, 2, cached=False)
    check_logprobs(result, CONTEXT, prompt_ids, 2, temperature=1.3)


@pytest.mark.parametrize("cache", ["tuple", "object"])
def test_with_a_kv_cache_each_call_reads_only_the_newest_token(impl, cache):
    # Strict: rereading what the cache holds gets other logits, whatever the calls say.
    spec = {"kind": "CachedContextLM", "seed": 3, "cache": cache, "strict": True}
    prompt_ids = prompts([1, 2, 3], [4, 5, 6])
    result = sample(impl, spec, prompt_ids, 3, 7, [0, 4], temperature=1.3)
    check_fields(result, 6, 7, 8)
    check_calls(result, prompt_ids, 3, cached=True)
    check_completions(result, [0, 4])
    check_logprobs(result, spec, prompt_ids, 3, temperature=1.3)


def test_a_forward_taking_past_key_values_without_use_cache_gets_no_cache(impl):
    # Only a forward that takes both past_key_values and use_cache follows the convention:
    # this one takes the first alone, so every call reads the whole sequence, without a cache.
    spec = {"kind": "PastOnlyLM", "seed": 3}
    prompt_ids = prompts([1, 2, 3], [4, 5, 6])
    result = sample(impl, spec, prompt_ids, 2, 7, [0, 4], temperature=1.3)
    check_fields(result, 4, 7, 8)
    check_calls(result, prompt_ids, 2, cached=False)
    check_logprobs(result, spec, prompt_ids, 2, temperature=1.3)


def test_a_model_that_returns_no_cache_reads_the_whole_sequence_at_every_step(impl):
    # Its forward takes past_key_values and use_cache, but it returns past_key_values=None (as a
    # Hugging Face model does under gradient checkpointing): with no cache to pass, each call
    # reads the whole sequence so far. Its logits are ContextLM's with the same seed.
    prompt_ids = prompts([1, 2, 3], [4, 5, 6])
    result = sample(impl, {"kind": "NoCacheReturnedLM", "seed": 3}, prompt_ids, 2, 7, [0, 4],
                    temperature=1.3)  # fmt: skip
    check_fields(result, 4, 7, 8)
    try:
        check_calls(result, prompt_ids, 2, cached=False)
    except AssertionError as exc:
        raise AssertionError(f"this model returns past_key_values=None: {exc}") from None
    check_logprobs(result, {"kind": "ContextLM", "seed": 3}, prompt_ids, 2, temperature=1.3)


def test_cached_and_uncached_models_give_the_same_samples(impl):
    for prompt_ids in (prompts([1, 2, 3], [4, 5, 6]), prompts([2], [5], [7])):  # P = 3, P = 1
        strict = {"kind": "CachedContextLM", "seed": 4, "strict": True}
        cached = sample(impl, strict, prompt_ids, 3, 7, 0, seed=5)
        plain = sample(impl, {"kind": "ContextLM", "seed": 4}, prompt_ids, 3, 7, 0, seed=5)
        assert torch.equal(cached["completion_ids"], plain["completion_ids"])
        assert_tensor(cached["logprobs"], plain["logprobs"], what="log-probs with the cache")
        check_calls(cached, prompt_ids, 3, cached=True)


# ----- bad arguments -----

BAD_ARGUMENTS = {
    "temperature=0": {"temperature": 0.0},
    "temperature<0": {"temperature": -1.0},
    "top_k<0": {"top_k": -1},
    "top_p=0": {"top_p": 0.0},
    "top_p<0": {"top_p": -0.5},
    "top_p>1": {"top_p": 1.5},
    "top_p=nan": {"top_p": math.nan},
    "temperature=nan": {"temperature": math.nan},
    "num_generations=0": {"num_generations": 0},
    "max_new_tokens=0": {"max_new_tokens": 0},
    "1-D prompt_ids": {"prompt_ids": torch.tensor([1, 2, 3])},
    "3-D prompt_ids": {"prompt_ids": torch.ones(2, 2, 2, dtype=torch.long)},
    "prompts of no token": {"prompt_ids": torch.zeros(2, 0, dtype=torch.long)},
    "no prompt at all": {"prompt_ids": torch.zeros(0, 2, dtype=torch.long)},
    "float prompt_ids": {"prompt_ids": torch.tensor([[1.0, 2.0]])},
    "bool prompt_ids": {"prompt_ids": torch.tensor([[True, False]])},
    "empty eos_ids": {"eos_ids": []},
    "eos_ids=True": {"eos_ids": True},
    "eos_ids with a float": {"eos_ids": [0, 2.0]},
    "eos_ids with a bool": {"eos_ids": (0, True)},
}


def test_bad_arguments_raise_value_error(impl):
    def call(bad):
        arguments = {"prompt_ids": prompts([1, 2], [3, 4]), "num_generations": 2,
                     "max_new_tokens": 3, "eos_ids": 0} | bad  # fmt: skip
        settings = {key: arguments.pop(key) for key in ("temperature", "top_k", "top_p")
                    if key in arguments}  # fmt: skip
        return partial(sample, impl, CONTEXT, *arguments.values(), **settings)

    missed = calls_without_value_error((name, call(bad)) for name, bad in BAD_ARGUMENTS.items())
    assert not missed, "expected a ValueError for:\n" + "\n".join(missed)


def test_a_generator_on_another_device_raises_value_error(impl):
    # The model's weights live on the meta device, the generator on the CPU.
    with pytest.raises(ValueError):
        sample(impl, CONTEXT, prompts([1, 2]), 2, 3, 0, device="meta")
