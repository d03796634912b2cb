"""The trainer on Hugging Face models used as engineers use them: tiny Llama, GPT-2 and Qwen2
built from configs (nothing downloaded), wrapped by PEFT (LoRA) or torch.compile, with
gradient checkpointing, with dropout in their config. Padded rows score exactly as alone, the
sampler's log-probs are the training pass's, and at learning rate 0 the KL and the clip ratio
are 0 (to float rounding)."""

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is not installed")

from reference.generation import StaticCacheSampler  # noqa: E402
from reference.grpo_config import GRPOConfig  # noqa: E402
from reference.grpo_trainer import completion_logps  # noqa: E402
from reference.model_setup import (  # noqa: E402
    cast_lm_head_to_fp32,
    disable_dropout,
    enable_gradient_checkpointing,
    model_eos_ids,
)
from reference.sample_group import accepts_kv_cache, position_ids, sample_group  # noqa: E402
from reference.tasks import ReverseDigits  # noqa: E402
from reference.trainer import Trainer  # noqa: E402

TASK = ReverseDigits()
VOCAB, PAD, EOS = TASK.tokenizer.vocab_size, TASK.tokenizer.pad_id, TASK.tokenizer.eos_id
KINDS = ["llama", "gpt2", "qwen2"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny(kind: str, dropout: float = 0.1, seed: int = 0) -> torch.nn.Module:
    """A 2-layer model of `kind`, with dropout where its config has some (GPT-2: 0.1 each)."""
    torch.manual_seed(seed)
    common = dict(vocab_size=VOCAB, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=None)
    if kind == "gpt2":
        config = transformers.GPT2Config(
            n_embd=32, n_layer=2, n_head=4, n_positions=32, resid_pdrop=dropout,
            embd_pdrop=dropout, attn_pdrop=dropout, **common,
        )  # fmt: skip
        return transformers.GPT2LMHeadModel(config)
    sizes = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=32, attention_dropout=dropout)  # fmt: skip
    if kind == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**sizes, **common))
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**sizes, **common))


def lora(model: torch.nn.Module) -> torch.nn.Module:
    peft = pytest.importorskip("peft", reason="LoRA needs peft: pip install -e '.[lora]'")
    targets = ["c_attn", "c_proj"] if isinstance(model, transformers.GPT2LMHeadModel) else None
    config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets,
                             task_type="CAUSAL_LM", init_lora_weights=False)  # fmt: skip
    return peft.get_peft_model(model, config)  # random B: the adapters change the outputs


def padded_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[list[int]]]:
    """Three prompts of three lengths, left-padded, each followed by 4 completion tokens."""
    prompts = [[5, 6, 7, 8, 9, 3], [3, 4], [10, 2, 7]]
    completions = torch.tensor([[4, 5, 6, 1], [7, 7, 2, 3], [9, 1, 0, 0]])
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    input_ids = torch.cat([ids, completions], dim=1)
    attention = torch.cat([mask, torch.ones_like(completions)], dim=1)
    return input_ids, attention, completions, prompts


def assert_padded_rows_score_as_alone(model: torch.nn.Module) -> None:
    input_ids, attention, completions, prompts = padded_batch()
    config = GRPOConfig(max_completion_length=4, temperature=0.8)
    P = input_ids.shape[1] - 4
    padded = completion_logps(model, input_ids, P, config, attention)
    for row, prompt in enumerate(prompts):
        alone = torch.cat([torch.tensor(prompt), completions[row]])[None]
        single = completion_logps(model, alone, len(prompt), config)
        torch.testing.assert_close(padded[row : row + 1], single, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("wrap", ["plain", "lora"])
@pytest.mark.parametrize("kind", KINDS)
def test_padded_rows_score_exactly_as_alone(kind, wrap):
    model = tiny(kind).eval()
    if wrap == "lora":
        model = lora(model)
    assert_padded_rows_score_as_alone(model)


@pytest.mark.parametrize("kind", KINDS)
def test_wrappers_keep_the_kv_cache_and_the_positions(kind):
    """PEFT and torch.compile take *args, **kwargs: the checks must look behind them."""
    model = tiny(kind)
    mask = torch.tensor([[0, 1, 1]])
    for wrapped in (lora(tiny(kind)), torch.compile(model)):
        assert accepts_kv_cache(wrapped)
        assert position_ids(wrapped, mask) is not None
        assert position_ids(wrapped, mask).tolist() == [[0, 0, 1]]


@pytest.mark.parametrize("kind", KINDS)
def test_gradient_checkpointing_gives_the_same_logps_and_gradients(kind):
    """With it on, transformers models return no KV cache in train mode: the group-shared
    prompt path must fall back to reading every row whole, with the same results."""
    G, P, L = 3, 5, 4
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(2, VOCAB, (2, P), generator=generator).repeat_interleave(G, 0)
    input_ids = torch.cat([prompts, torch.randint(2, VOCAB, (2 * G, L), generator=generator)], 1)
    config = GRPOConfig(max_completion_length=L, num_generations=G)
    results = []
    for checkpointing in (False, True):
        model = tiny(kind, dropout=0.0).train()
        if checkpointing:
            enable_gradient_checkpointing(model)
        logps = completion_logps(model, input_ids, P, config)
        logps.sum().backward()
        results.append((logps.detach(), [p.grad.clone() for p in model.parameters()]))
    torch.testing.assert_close(results[1][0], results[0][0], atol=1e-5, rtol=1e-5)
    for a, b in zip(results[0][1], results[1][1], strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_sampler_logps_are_the_training_passs_with_dropout_disabled(kind):
    """GPT-2 has dropout 0.1 in its config: disabled, a train-mode pass gives the sampler's
    log-probs (the sampler itself samples in eval mode, with or without a static cache)."""
    model = tiny(kind).train()
    assert disable_dropout(model) > 0
    prompt_ids, _ = TASK.sample(3, torch.Generator().manual_seed(0))
    config = GRPOConfig(max_completion_length=5, temperature=0.7)
    for static in (True, False):
        sampler = StaticCacheSampler(model, static=static)
        group = sampler(model, prompt_ids, 2, 5, EOS, temperature=0.7,
                        generator=torch.Generator().manual_seed(1))  # fmt: skip
        assert model.training, "the sampler puts the model back in train mode"
        input_ids = torch.cat([prompt_ids.repeat_interleave(2, 0), group.completion_ids], 1)
        logps = completion_logps(model, input_ids, TASK.prompt_length, config)
        mask = group.completion_mask.bool()
        torch.testing.assert_close(logps[mask], group.logprobs[mask], atol=1e-5, rtol=1e-5)


def test_dropout_left_on_makes_the_passes_disagree():
    # The check above can fail: GPT-2's dropout, left on, changes a train-mode pass.
    model = tiny("gpt2").train()
    prompt_ids, _ = TASK.sample(3, torch.Generator().manual_seed(0))
    group = sample_group(model.eval(), prompt_ids, 2, 5, EOS)
    input_ids = torch.cat([prompt_ids.repeat_interleave(2, 0), group.completion_ids], 1)
    logps = completion_logps(model.train(), input_ids, TASK.prompt_length, GRPOConfig())
    assert not torch.allclose(logps, group.logprobs, atol=1e-3)


def small_config(tmp_path, **overrides) -> GRPOConfig:
    base = dict(max_steps=2, prompts_per_step=4, num_generations=4, learning_rate=0.0,
                beta=0.04, num_iterations=2, output_dir=str(tmp_path), save_steps=0,
                eval_steps=0, eval_size=8, log_completions=False)  # fmt: skip
    return GRPOConfig(**{**base, **overrides})


@pytest.mark.parametrize(
    "kind, setup",
    [("gpt2", "plain"), ("llama", "lora"), ("qwen2", "gradient_checkpointing"),
     ("gpt2", "lora+gradient_checkpointing")],
)  # fmt: skip
def test_kl_and_clip_ratio_are_zero_at_learning_rate_zero(kind, setup, tmp_path):
    policy = tiny(kind)  # dropout 0.1 in the config: the trainer disables it
    peft_config = None
    if "lora" in setup:
        peft = pytest.importorskip("peft", reason="LoRA needs peft")
        peft_config = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1, task_type="CAUSAL_LM",
                                      target_modules=["c_attn"] if kind == "gpt2" else None)  # fmt: skip
    config = small_config(tmp_path, gradient_checkpointing="gradient_checkpointing" in setup)
    trainer = Trainer(config, TASK, policy=policy, device="cpu", show_progress=False,
                      peft_config=peft_config)  # fmt: skip
    for _ in range(2):
        metrics = trainer.train_step()
        assert metrics["kl"] == pytest.approx(0.0, abs=1e-9), metrics  # float rounding only
        assert metrics["clip_ratio"] == 0.0, metrics
        assert metrics["entropy"] > 0.0


def test_lora_trains_only_the_adapters_against_the_base_model(tmp_path):
    peft = pytest.importorskip("peft", reason="LoRA needs peft")
    config = small_config(tmp_path, learning_rate=1e-2, max_steps=2)
    trainer = Trainer(config, TASK, policy=tiny("llama"), device="cpu", show_progress=False,
                      peft_config=peft.LoraConfig(r=4, lora_alpha=8, task_type="CAUSAL_LM"))  # fmt: skip
    before = {n: p.detach().clone() for n, p in trainer.policy.named_parameters()}
    trainer.train()
    changed = {n for n, p in trainer.policy.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed), changed
    rows = trainer.metrics_path.read_text().splitlines()
    assert len(rows) == 2
    # The reference is the base model itself (adapters off): no copy of the weights.
    assert sum(1 for _ in trainer.ref_model.parameters()) == sum(
        1 for _ in trainer.policy.parameters()
    )
    resumed = Trainer(small_config(tmp_path, learning_rate=1e-2, max_steps=3), TASK,
                      policy=tiny("llama"), device="cpu", show_progress=False,
                      peft_config=peft.LoraConfig(r=4, lora_alpha=8, task_type="CAUSAL_LM"))  # fmt: skip
    resumed.train(resume=True)
    assert resumed.step == 3


def test_no_reference_model_when_beta_is_zero(tmp_path):
    trainer = Trainer(small_config(tmp_path, beta=0.0), TASK, policy=tiny("llama"),
                      device="cpu", show_progress=False)  # fmt: skip
    assert trainer.ref_model is None
    metrics = trainer.train_step()
    assert metrics["kl"] == 0.0


def test_fp32_lm_head_keeps_weights_and_computes_in_float32():
    model = tiny("qwen2", dropout=0.0).eval()
    keys = set(model.state_dict())
    ids = torch.randint(2, VOCAB, (2, 6), generator=torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model(ids).logits.dtype == torch.bfloat16
        cast_lm_head_to_fp32(model)
        assert model(ids).logits.dtype == torch.float32
    assert set(model.state_dict()) == keys
    with pytest.raises(ValueError, match="nn.Linear"):
        cast_lm_head_to_fp32(model)  # already cast: not a plain nn.Linear any more


def test_gradient_checkpointing_needs_a_transformers_model():
    from reference.gpt import GPT, GPTConfig

    with pytest.raises(ValueError, match="transformers model"):
        enable_gradient_checkpointing(GPT(GPTConfig(vocab_size=VOCAB)))


def test_the_model_eos_id_is_read_from_its_config():
    assert model_eos_ids(tiny("llama")) == [EOS]
