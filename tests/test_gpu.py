"""The GPU paths, on a CUDA device (skipped without one): the static-cache sampler with its
decoding step compiled and replayed as a CUDA graph, the bf16 sampling copy and reference
model, and a few trainer steps. tests/test_generation.py runs the same sampler eagerly on the
CPU against sample_group.

    .venv/bin/python -m pytest tests/test_gpu.py -v
"""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

transformers = pytest.importorskip("transformers", reason="transformers is not installed")

from reference.generation import StaticCacheSampler  # noqa: E402
from reference.grpo_config import GRPOConfig  # noqa: E402
from reference.tasks import ReverseDigits  # noqa: E402
from reference.trainer import Trainer  # noqa: E402

TASK = ReverseDigits()
EOS, PAD = TASK.tokenizer.eos_id, TASK.tokenizer.pad_id


def tiny_qwen2(scale: float = 1.0) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=TASK.tokenizer.vocab_size, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=64, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=None,
    )  # fmt: skip
    model = transformers.Qwen2ForCausalLM(config)
    with torch.no_grad():  # larger weights: clear argmaxes, so greedy decoding has no near-ties
        for p in model.parameters():
            if p.ndim > 1:
                p.mul_(scale)
    return model.cuda()


def test_compiled_decoding_gives_the_eager_greedy_completions():
    model = tiny_qwen2(scale=8.0).eval()
    prompts = torch.tensor([[PAD, 5, 6, 7], [3, 4, 2, 8]], device="cuda")
    mask = (prompts != PAD).long()
    eager = StaticCacheSampler(model, max_prompt_length=6)
    compiled = StaticCacheSampler(model, max_prompt_length=6, compile=True)
    expected = eager(model, prompts, 2, 12, EOS, top_k=1, prompt_mask=mask)
    for _ in range(3):  # the first call compiles and captures; later ones replay
        got = compiled(model, prompts, 2, 12, EOS, top_k=1, prompt_mask=mask)
        assert torch.equal(got.completion_ids, expected.completion_ids)
        torch.testing.assert_close(got.logprobs, expected.logprobs, atol=1e-3, rtol=0)


def test_compiled_sampling_follows_the_weights_the_policy_has_now():
    model = tiny_qwen2(scale=8.0)
    prompts = torch.tensor([[5, 6, 7, 8]], device="cuda")
    sampler = StaticCacheSampler(model, compile=True, dtype=torch.bfloat16)
    first = sampler(model, prompts, 1, 8, EOS, top_k=1)
    with torch.no_grad():
        model.lm_head.weight.neg_()  # every argmax moves
    second = sampler(model, prompts, 1, 8, EOS, top_k=1)
    assert not torch.equal(first.completion_ids, second.completion_ids)


def test_trainer_steps_on_cuda_with_compiled_sampling_and_a_bf16_reference(tmp_path):
    config = GRPOConfig(max_steps=3, prompts_per_step=8, num_generations=4, learning_rate=0.0,
                        beta=0.04, num_iterations=2, output_dir=str(tmp_path), save_steps=0,
                        eval_steps=0, log_completions=False)  # fmt: skip
    trainer = Trainer(config, TASK, policy=tiny_qwen2(), device="cuda", show_progress=False)
    assert trainer.sampler.compiled and trainer.sampler.model is not trainer.policy
    assert next(trainer.ref_model.parameters()).dtype == torch.bfloat16
    for _ in range(config.max_steps):
        metrics = trainer.train_step()
        assert metrics["clip_ratio"] == 0.0  # learning rate 0: the policy never moves
        assert 0.0 <= metrics["kl"] < 1e-2  # bf16 reference against the float32 policy
        assert metrics["tokens_per_second"] > 0
