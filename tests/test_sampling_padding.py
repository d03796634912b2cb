"""Left-padded prompts sample exactly as each prompt would alone (reference sample_group)."""

import pytest
import torch

from reference.gpt import GPT, GPTConfig
from reference.sample_group import sample_group

VOCAB, PAD, EOS = 12, 0, 1
PROMPTS = [[5, 6, 7, 8, 9], [3, 4], [10, 2, 7]]  # three lengths: one batch needs padding
NEW_TOKENS = 6


class WithoutCache(torch.nn.Module):
    """The same model seen through the plain interface: logits only, no KV cache."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask=None):
        return self.model(input_ids, attention_mask=attention_mask).logits


def left_padded(prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return ids, mask


def kit_gpt() -> GPT:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=VOCAB, block_size=16)).eval()
    with torch.no_grad():  # larger weights than the init: clear argmaxes, no near-ties
        for p in model.parameters():
            if p.ndim > 1:
                p.mul_(20.0)
    return model


def hf_model(kind: str) -> torch.nn.Module:
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    torch.manual_seed(0)
    if kind == "llama":
        config = transformers.LlamaConfig(
            vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
            initializer_range=0.5,
        )  # fmt: skip
        return transformers.LlamaForCausalLM(config).eval()
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=32, initializer_range=0.5,
        bos_token_id=EOS, eos_token_id=EOS,
    )  # fmt: skip
    return transformers.GPT2LMHeadModel(config).eval()


MODELS = {
    "kit_gpt": kit_gpt,
    "kit_gpt_without_cache": lambda: WithoutCache(kit_gpt()),
    "hf_llama": lambda: hf_model("llama"),
    "hf_llama_without_cache": lambda: WithoutCache(hf_model("llama")),
    "hf_gpt2": lambda: hf_model("gpt2"),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_a_left_padded_batch_samples_like_each_prompt_alone(name):
    model = MODELS[name]()
    ids, mask = left_padded(PROMPTS)
    batch = sample_group(model, ids, 2, NEW_TOKENS, EOS, top_k=1, prompt_mask=mask)
    for i, prompt in enumerate(PROMPTS):
        alone = sample_group(model, torch.tensor([prompt]), 2, NEW_TOKENS, EOS, top_k=1)
        rows = slice(2 * i, 2 * i + 2)
        assert batch.completion_ids[rows].tolist() == alone.completion_ids.tolist(), prompt
        assert torch.equal(batch.completion_mask[rows], alone.completion_mask)
        torch.testing.assert_close(batch.logprobs[rows], alone.logprobs, atol=1e-5, rtol=0)


def test_the_padding_matters_without_the_mask():
    # The check above can fail: the same padded ids read as real tokens sample differently.
    # (GPT-2's absolute positions also need position_ids; Llama's rotary ones are shift-free.)
    model = hf_model("gpt2")
    ids, mask = left_padded(PROMPTS)
    masked = sample_group(model, ids, 1, NEW_TOKENS, EOS, top_k=1, prompt_mask=mask)
    unmasked = sample_group(model, ids, 1, NEW_TOKENS, EOS, top_k=1)
    assert not torch.equal(masked.completion_ids, unmasked.completion_ids)


def test_an_all_ones_prompt_mask_changes_nothing():
    model = kit_gpt()
    ids = torch.tensor([[5, 6, 7], [3, 4, 2]])
    seeded = [torch.Generator().manual_seed(3) for _ in range(2)]
    plain = sample_group(model, ids, 4, NEW_TOKENS, EOS, generator=seeded[0])
    masked = sample_group(model, ids, 4, NEW_TOKENS, EOS, generator=seeded[1],
                          prompt_mask=torch.ones_like(ids))  # fmt: skip
    assert torch.equal(plain.completion_ids, masked.completion_ids)
    torch.testing.assert_close(plain.logprobs, masked.logprobs)


@pytest.mark.parametrize(
    "mask, message",
    [
        ([[1, 1, 0], [1, 1, 1]], "left padding"),  # right padding
        ([[0, 1, 1], [0, 0, 0]], "left padding"),  # a prompt with no real token
        ([[0, 2, 1], [1, 1, 1]], "only 0"),
        ([[1, 1], [1, 1]], "shaped like prompt_ids"),
    ],
)
def test_a_prompt_mask_that_is_not_left_padding_is_rejected(mask, message):
    ids = torch.tensor([[5, 6, 7], [3, 4, 2]])
    with pytest.raises(ValueError, match=message):
        sample_group(kit_gpt(), ids, 1, 2, EOS, prompt_mask=torch.tensor(mask))
