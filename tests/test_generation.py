"""The static-cache sampler (reference/generation.py) draws what sample_group draws.

Same prompts, same generator seed: the same completions, masks and log-probs, for the kit's
GPT and for transformers models, padded or not, with temperature, top-k and top-p. The GPU
runs this very code with the decoding step compiled (tests/test_gpu.py)."""

import pytest
import torch

from reference.generation import StaticCacheSampler, draw, supports_static_cache
from reference.gpt import GPT, GPTConfig
from reference.sample_group import sample_group, sampling_logits

VOCAB, PAD, EOS = 14, 0, 1
OPTIONS = [{}, {"temperature": 0.7, "top_k": 5}, {"top_p": 0.8}]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def kit_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=VOCAB, block_size=16))


def hf(kind: str) -> torch.nn.Module:
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    torch.manual_seed(0)
    ids = dict(vocab_size=VOCAB, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=None)
    if kind == "gpt2":
        return transformers.GPT2LMHeadModel(
            transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, n_positions=32, **ids)
        ).eval()
    config = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=32, **ids)  # fmt: skip
    if kind == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).eval()
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**config)).eval()


MODELS = {"kit_gpt": kit_gpt, "hf_llama": lambda: hf("llama"), "hf_gpt2": lambda: hf("gpt2"),
          "hf_qwen2": lambda: hf("qwen2")}  # fmt: skip
PROMPTS = torch.tensor([[PAD, PAD, 5, 6, 7], [3, 4, 2, 8, 9], [PAD, PAD, PAD, 10, 2]])
MASK = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 1, 1]])


@pytest.mark.parametrize("options", OPTIONS, ids=["plain", "top_k", "top_p"])
@pytest.mark.parametrize("padded", [False, True], ids=["same_length", "left_padded"])
@pytest.mark.parametrize("name", list(MODELS))
def test_static_cache_sampler_draws_what_sample_group_draws(name, padded, options):
    model = MODELS[name]()
    mask = MASK if padded else None
    sampler = StaticCacheSampler(model, max_prompt_length=7, check_every=3)  # pads to 7
    assert sampler.static
    expected = sample_group(model, PROMPTS, 3, 8, EOS, generator=torch.Generator().manual_seed(1),
                            prompt_mask=mask, **options)  # fmt: skip
    got = sampler(model, PROMPTS, 3, 8, EOS, generator=torch.Generator().manual_seed(1),
                  prompt_mask=mask, **options)  # fmt: skip
    assert torch.equal(got.completion_ids, expected.completion_ids)
    assert torch.equal(got.completion_mask, expected.completion_mask)
    torch.testing.assert_close(got.logprobs, expected.logprobs, atol=1e-5, rtol=0)


def test_draw_is_torch_multinomial_and_entropy_is_the_tempered_distributions():
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(0)) * 3
    noise = torch.empty_like(logits).exponential_(1, generator=torch.Generator().manual_seed(2))
    tokens, logprobs, entropy = draw(logits, noise, 0.7, 10, 0.9)
    filtered = torch.log_softmax(sampling_logits(logits, 0.7, 10, 0.9), dim=-1)
    expected = torch.multinomial(filtered.exp(), 1, generator=torch.Generator().manual_seed(2))
    assert torch.equal(tokens, expected[:, 0])
    torch.testing.assert_close(logprobs, filtered.gather(-1, tokens[:, None])[:, 0])
    probs = torch.softmax(logits / 0.7, dim=-1)  # unfiltered: what TRL logs as entropy
    torch.testing.assert_close(entropy, -(probs * probs.log()).sum(-1))


def test_entropy_covers_each_completion_up_to_its_end():
    model = kit_gpt()
    sampler = StaticCacheSampler(model)
    group = sampler(model, PROMPTS, 2, 6, EOS, generator=torch.Generator().manual_seed(0))
    assert sampler.entropy.shape == group.completion_ids.shape
    assert bool((sampler.entropy[group.completion_mask.bool()] > 0).all())
    assert bool((sampler.entropy[~group.completion_mask.bool()] == 0).all())
    assert sampler.seconds > 0


class CountingGPT(GPT):
    """The kit's GPT that ends every completion at once (EOS first) and counts its calls."""

    calls = 0

    def forward(self, *args, **kwargs):
        CountingGPT.calls += 1
        output = super().forward(*args, **kwargs)
        output.logits[..., EOS] = 1e4
        return output


@pytest.mark.parametrize("check_every, calls", [(1, 1), (4, 4)])
def test_the_stop_condition_is_read_every_check_every_tokens(check_every, calls):
    torch.manual_seed(0)
    model = CountingGPT(GPTConfig(vocab_size=VOCAB, block_size=16))
    sampler = StaticCacheSampler(model, check_every=check_every)
    CountingGPT.calls = 0
    group = sampler(model, PROMPTS, 2, 8, EOS)
    # The prompt pass gives token 0 (EOS everywhere); then one decoding call per token until
    # the next check (tokens 1 .. check_every - 1).
    assert CountingGPT.calls == calls
    assert group.completion_mask.sum(1).tolist() == [1] * 6


def test_a_model_without_a_static_cache_path_is_sampled_by_sample_group():
    class LogitsOnly(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = kit_gpt()

        def forward(self, input_ids, attention_mask=None):
            return self.model(input_ids, attention_mask=attention_mask).logits

    model = LogitsOnly()
    assert not supports_static_cache(model)
    sampler = StaticCacheSampler(model)
    got = sampler(model, PROMPTS, 2, 5, EOS, generator=torch.Generator().manual_seed(0))
    expected = sample_group(model, PROMPTS, 2, 5, EOS, generator=torch.Generator().manual_seed(0))
    assert torch.equal(got.completion_ids, expected.completion_ids)
    assert sampler.entropy is None


def test_the_sampler_refreshes_its_low_precision_copy_from_the_policy():
    model = kit_gpt()
    sampler = StaticCacheSampler(model, dtype=torch.bfloat16)
    assert sampler.model is not model and next(sampler.model.parameters()).dtype == torch.bfloat16
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)
    sampler(model, PROMPTS, 1, 3, EOS)
    for mine, theirs in zip(sampler.model.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(mine, theirs.to(torch.bfloat16))


def test_the_sampler_rejects_another_model():
    sampler = StaticCacheSampler(kit_gpt())
    with pytest.raises(ValueError, match="its own policy"):
        sampler(kit_gpt(), PROMPTS, 1, 3, EOS)
