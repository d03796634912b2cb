"""The trainer learns, and its seams hold: cached log-probs, micro-batches, resume, metrics."""

import inspect
import json

import pytest
import torch

from reference.gpt import GPT, GPTConfig
from reference.grpo_config import GRPOConfig
from reference.grpo_trainer import completion_logps, generate_rollout, optimize
from reference.tasks import ReverseDigits, get_task
from reference.trainer import GRPO, Trainer, task_reward, text_reward

TASK = ReverseDigits()
EOS = TASK.tokenizer.eos_id


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def small_config(tmp_path, **overrides) -> GRPOConfig:
    base = dict(max_steps=3, prompts_per_step=8, num_generations=4, output_dir=str(tmp_path),
                save_steps=0, eval_size=50)  # fmt: skip
    return GRPOConfig(**{**base, **overrides})


def params(model):
    return [p.detach().clone() for p in model.parameters()]


def a_rollout(policy, **overrides):
    config = GRPOConfig(max_completion_length=5, num_generations=4, **overrides)
    prompt_ids, answers = TASK.sample(6, torch.Generator().manual_seed(0))
    reward = text_reward(TASK.tokenizer.decode_batch, [task_reward(TASK)])
    rollout = generate_rollout(policy, None, prompt_ids, answers, reward, EOS, config,
                               torch.Generator().manual_seed(1))  # fmt: skip
    return rollout, config


def tiny_policy():
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=TASK.tokenizer.vocab_size, block_size=10))


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The default task, default config, 40 steps on the CPU (the run the README shows)."""
    torch.set_num_threads(1)
    output = tmp_path_factory.mktemp("run")
    trainer = Trainer(GRPOConfig(max_steps=40, output_dir=str(output)), get_task("reverse"),
                      device="cpu", show_progress=False)  # fmt: skip
    trainer.train()
    return trainer, trainer.evaluate()


def test_default_task_learns_to_exact_match_on_held_out_inputs(trained):
    _, results = trained
    assert results["before"]["exact_match"] <= 0.05, results
    assert results["after"]["exact_match"] >= 0.9, results


def test_metrics_are_logged_every_step_with_trl_names(trained, trl_metrics):
    trainer, _ = trained
    rows = [json.loads(line) for line in trainer.metrics_path.read_text().splitlines()]
    assert [row["step"] for row in rows] == list(range(1, 41))
    for name in trl_metrics:
        assert all(name in row for row in rows), f"metric {name!r} missing"
    assert rows[-1]["reward"] > rows[0]["reward"] + 0.5
    assert rows[-1]["num_tokens"] > rows[0]["num_tokens"]


def test_run_plot_is_written(trained, tmp_path):
    from reference.plots import plot_run

    trainer, _ = trained
    png = plot_run(trainer.metrics_path, tmp_path / "run.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("micro_batches", [1, 3])
def test_cached_old_logps_equal_fresh_ones_at_the_first_iteration(micro_batches):
    policy = tiny_policy()
    rollout, config = a_rollout(policy, num_iterations=2, gradient_accumulation_steps=micro_batches)
    fresh = completion_logps(policy, rollout.input_ids, rollout.prompt_ids.shape[1], config)
    optimize(policy, torch.optim.AdamW(policy.parameters(), lr=1e-2), rollout, config)
    mask = rollout.completion_mask.bool()
    torch.testing.assert_close(rollout.old_logps[mask], fresh.detach()[mask])


def test_old_logps_from_the_first_iteration_give_the_update_of_a_separate_pass():
    """Taking the old log-probs from the first update's forward pass changes nothing."""
    start, updated = params(tiny_policy()), []
    for separate_pass in (False, True):
        policy = tiny_policy()
        rollout, config = a_rollout(policy, num_iterations=3, beta=0.0,
                                    gradient_accumulation_steps=2)  # fmt: skip
        if separate_pass:
            with torch.no_grad():
                P = rollout.prompt_ids.shape[1]
                rollout.old_logps = completion_logps(policy, rollout.input_ids, P, config)
        optimize(policy, torch.optim.AdamW(policy.parameters(), lr=1e-2), rollout, config)
        updated.append(params(policy))
    # The same update up to rounding: a micro-batch's forward pass and the whole batch's round
    # differently, and Adam's division by tiny second moments turns that rounding into a
    # visible error on a few weights (6e-5 of the update on one CPU, below 1e-6 on another).
    # A wrong old log-prob (the sampler's, or a refreshed one) moves the weights elsewhere.
    cached, separate = updated
    error = sum(float((b - a).square().sum()) for a, b in zip(cached, separate, strict=True))
    moved = sum(float((a - s).square().sum()) for a, s in zip(cached, start, strict=True))
    assert error**0.5 <= 1e-3 * moved**0.5, f"{error**0.5:.3g} apart, after moving {moved**0.5:.3g}"


class WithoutCache(torch.nn.Module):
    """The same model through the plain interface (no KV cache): every row reads its prompt."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        takes_positions = "position_ids" in inspect.signature(self.model.forward).parameters
        extra = {"position_ids": position_ids} if takes_positions else {}
        return self.model(input_ids, attention_mask=attention_mask, **extra).logits


def shared_prompt_model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    vocab = TASK.tokenizer.vocab_size
    if kind == "kit_gpt":
        return GPT(GPTConfig(vocab_size=vocab, block_size=12))
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    if kind == "hf_llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(
            vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
        ))  # fmt: skip
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=32,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,  # two passes must agree
    ))  # fmt: skip


@pytest.mark.parametrize("padded", [False, True], ids=["same_length", "left_padded"])
@pytest.mark.parametrize("kind", ["kit_gpt", "hf_llama", "hf_gpt2"])
def test_a_group_reads_its_prompt_once_with_the_same_logps_and_gradients(kind, padded):
    model = shared_prompt_model(kind)
    G, P, L = 3, 6, 5
    prompts = torch.randint(2, 14, (4, P), generator=torch.Generator().manual_seed(0))
    prompt_mask = torch.ones_like(prompts)
    if padded:
        prompt_mask[0, :2] = prompt_mask[2, :4] = 0
        prompts = prompts.masked_fill(prompt_mask == 0, TASK.tokenizer.pad_id)
    completions = torch.randint(2, 14, (4 * G, L), generator=torch.Generator().manual_seed(1))
    input_ids = torch.cat([prompts.repeat_interleave(G, 0), completions], dim=1)
    attention = None
    if padded:
        attention = torch.cat(
            [prompt_mask.repeat_interleave(G, 0), torch.ones_like(completions)], 1
        )
    config = GRPOConfig(max_completion_length=L, num_generations=G, temperature=0.7)
    read = []
    hook = model.register_forward_pre_hook(lambda _, args: read.append(args[0].numel()))
    shared = completion_logps(model, input_ids, P, config, attention)
    hook.remove()
    assert sum(read) == 4 * P + 4 * G * (L - 1), "each prompt read once, the last token never"
    plain = completion_logps(WithoutCache(model), input_ids, P, config, attention)
    torch.testing.assert_close(shared, plain, atol=1e-5, rtol=1e-5)
    weights = next(model.parameters())
    (g_shared,) = torch.autograd.grad((shared * completions).sum(), weights)
    (g_plain,) = torch.autograd.grad((plain * completions).sum(), weights)
    torch.testing.assert_close(g_shared, g_plain, atol=1e-5, rtol=1e-4)


def test_loss_is_about_zero_at_every_step_while_parameters_change(tmp_path):
    config = small_config(tmp_path, num_iterations=1, loss_type="grpo", beta=0.0, max_steps=4)
    trainer = Trainer(config, TASK, device="cpu", show_progress=False)
    for _ in range(config.max_steps):
        before = params(trainer.policy)
        metrics = trainer.train_step()
        assert abs(metrics["loss"]) < 1e-5, metrics["loss"]
        assert any(
            not torch.equal(a, b) for a, b in zip(params(trainer.policy), before, strict=True)
        )


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
def test_micro_batches_give_the_same_update_as_one_big_batch(loss_type):
    updated = []
    for micro_batches in (1, 2, 3):
        policy = tiny_policy()
        rollout, config = a_rollout(policy, loss_type=loss_type, num_iterations=2, beta=0.0,
                                    gradient_accumulation_steps=micro_batches)  # fmt: skip
        rollout.advantages = rollout.advantages + 0.3  # a loss and gradient far from 0
        optimize(policy, torch.optim.SGD(policy.parameters(), lr=0.5), rollout, config)
        updated.append(params(policy))
    for other in updated[1:]:
        for a, b in zip(updated[0], other, strict=True):
            torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-5)


def test_resume_continues_exactly_where_the_run_stopped(tmp_path):
    straight = Trainer(small_config(tmp_path / "a", max_steps=4), TASK, device="cpu",
                       show_progress=False)  # fmt: skip
    straight.train()
    first = Trainer(small_config(tmp_path / "b", max_steps=2), TASK, device="cpu",
                    show_progress=False)  # fmt: skip
    first.train()
    resumed = Trainer(small_config(tmp_path / "b", max_steps=4), TASK, device="cpu",
                      show_progress=False)  # fmt: skip
    resumed.train(resume=True)
    for a, b in zip(params(straight.policy), params(resumed.policy), strict=True):
        torch.testing.assert_close(b, a)
    steps = [json.loads(line)["step"] for line in resumed.metrics_path.read_text().splitlines()]
    assert steps == [1, 2, 3, 4]


def test_resume_without_a_checkpoint_says_what_to_do(tmp_path):
    trainer = Trainer(small_config(tmp_path), TASK, device="cpu", show_progress=False)
    with pytest.raises(FileNotFoundError, match="without --resume"):
        trainer.train(resume=True)


def test_the_same_seed_gives_the_same_run(tmp_path):
    runs = []
    for name in ("a", "b"):
        trainer = Trainer(small_config(tmp_path / name), TASK, device="cpu", show_progress=False)
        trainer.train()
        runs.append(params(trainer.policy))
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a, b)


def test_simple_api_trains_and_reports_reward_and_kl():
    policy, ref = tiny_policy(), tiny_policy()

    def reward_fn(prompt_ids, completion_ids):
        return (completion_ids == prompt_ids[:, :1]).float().mean(1)  # repeat the first digit

    prompts, _ = TASK.sample(8, torch.Generator().manual_seed(0))
    trainer = GRPO(model=policy, ref_model=ref, reward_fn=reward_fn, group_size=4, kl_coef=0.1,
                   learning_rate=1e-2, max_new_tokens=5, max_grad_norm=1.0, batch_size=4)  # fmt: skip
    stats = trainer.train(prompts=prompts, n_epochs=3)
    assert {"mean_reward", "kl"} <= set(stats)
    assert 0.0 <= stats["mean_reward"] <= 1.0 and stats["kl"] >= 0.0
    assert len(stats["history"]) == 3
    assert stats["mean_reward"] > stats["history"][0]["mean_reward"]


def test_trainer_rejects_a_batch_it_cannot_split(tmp_path):
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        Trainer(small_config(tmp_path, prompts_per_step=6, gradient_accumulation_steps=4), TASK,
                device="cpu", show_progress=False).train_step()  # fmt: skip


def test_schedule_counts_trainer_steps_whatever_num_iterations(tmp_path):
    # 2 updates per step: warmup must end after 2 trainer steps, and the linear decay reach
    # half the peak at step 3 of 4 (not 0 by then, as a schedule counting updates would).
    config = small_config(tmp_path, max_steps=4, num_iterations=2, warmup_steps=2,
                          lr_scheduler_type="linear", learning_rate=1e-2)  # fmt: skip
    trainer = Trainer(config, TASK, device="cpu", show_progress=False)
    trainer.train()
    rows = [json.loads(line) for line in trainer.metrics_path.read_text().splitlines()]
    rates = [row["learning_rate"] for row in rows]  # the rate of the next update, after each step
    assert 0 < rates[0] < 1e-2, rates
    assert rates[1] == pytest.approx(1e-2), rates
    assert rates[2] == pytest.approx(0.5e-2), rates


def test_cosine_schedule_decays_to_zero_at_max_steps(tmp_path):
    config = small_config(tmp_path, max_steps=4, num_iterations=3, lr_scheduler_type="cosine")
    trainer = Trainer(config, TASK, device="cpu", show_progress=False)
    trainer.train()
    rates = [
        json.loads(line)["learning_rate"] for line in trainer.metrics_path.read_text().splitlines()
    ]
    assert rates == sorted(rates, reverse=True) and rates[1] == pytest.approx(
        config.learning_rate / 2
    )
    assert rates[-1] == pytest.approx(0.0, abs=1e-12)


def test_completions_longer_than_the_task_needs_train_and_evaluate(tmp_path):
    config = small_config(tmp_path, max_steps=1, max_completion_length=9, eval_size=8)
    trainer = Trainer(config, TASK, device="cpu", show_progress=False)
    trainer.train()
    assert trainer.policy.config.block_size >= TASK.prompt_length + 9
    assert set(trainer.evaluate()) == {"before", "after"}


def test_bf16_autocast_keeps_float32_logps(tmp_path):
    # What CUDA runs by default, tried on the CPU: the ratios need float32 log-probs.
    config = small_config(tmp_path, max_steps=1, bf16=True)
    trainer = Trainer(config, TASK, device="cpu", show_progress=False)
    policy = tiny_policy()
    rollout, _ = a_rollout(policy)
    logps = completion_logps(policy, rollout.input_ids, TASK.prompt_length, config)
    assert logps.dtype == torch.float32
    metrics = trainer.train_step()
    assert all(value == value for value in metrics.values()), "a metric is NaN under bf16"


def test_trainer_runs_any_step_module(tmp_path):
    # What the capstone's README promises: Trainer(config, task, step=your_module).
    from types import SimpleNamespace

    import reference.grpo_trainer as reference_step

    calls = []

    def grpo_step(*args, **kwargs):
        calls.append(args[3].shape)  # the prompts this process got
        return reference_step.grpo_step(*args, **kwargs)

    trainer = Trainer(small_config(tmp_path, max_steps=2), TASK, device="cpu",
                      step=SimpleNamespace(grpo_step=grpo_step), show_progress=False)  # fmt: skip
    trainer.train()
    assert calls == [torch.Size([8, TASK.prompt_length])] * 2
    assert len(trainer.metrics_path.read_text().splitlines()) == 2


def test_completions_and_evaluations_are_logged_as_training_goes(tmp_path, capsys):
    config = small_config(tmp_path, max_steps=4, logging_steps=2, eval_steps=2,
                          num_completions_to_print=3)  # fmt: skip
    trainer = Trainer(config, TASK, device="cpu")
    trainer.train()
    rows = [json.loads(line) for line in trainer.metrics_path.read_text().splitlines()]
    assert [("completions" in row, "eval/exact_match" in row) for row in rows] == [
        (False, False),
        (True, True),
        (False, False),
        (True, True),
    ]
    sample = rows[1]["completions"]
    assert len(sample) == 3 and {"prompt", "completion", "reward"} <= set(sample[0])
    assert sample[0]["prompt"].endswith("=")
    assert trainer.start_evaluation is not None  # step 0, the "before" of the report
    captured = capsys.readouterr()
    printed = captured.out + captured.err
    assert "step 0 greedy evaluation" in printed and "step 2 reward" in printed
    assert all(row["tokens_per_second"] > 0 for row in rows)


def test_entropy_is_the_tempered_distributions_not_a_one_sample_estimate(tmp_path):
    config = small_config(tmp_path, temperature=0.7, top_k=3)
    trainer = Trainer(config, TASK, device="cpu", show_progress=False)
    metrics = trainer.train_step()
    # The uniform 14-token distribution of an untrained model: entropy near log(14) = 2.64,
    # while the sampled tokens, from the top 3 only, would estimate at most log(3) = 1.10.
    assert metrics["entropy"] > 2.0, metrics["entropy"]


def test_reward_functions_get_prompts_completions_and_columns_as_trl_passes_them(tmp_path):
    seen = {}

    def reward(prompts, completions, completion_ids, answer, **kwargs):
        seen.update(prompts=prompts, completions=completions, answer=answer, extra=kwargs)
        return [float(c == a) for c, a in zip(completions, answer, strict=True)]

    config = small_config(tmp_path, prompts_per_step=2, num_generations=3)
    trainer = Trainer(config, TASK, reward_funcs=[reward], device="cpu", show_progress=False)
    metrics = trainer.train_step()
    assert len(seen["prompts"]) == len(seen["completions"]) == len(seen["answer"]) == 6
    assert seen["prompts"][0] == seen["prompts"][2] and seen["prompts"][0].endswith("=")
    assert seen["answer"][0] == seen["prompts"][0][:-1][::-1]  # the answer column, per row
    assert seen["extra"] == {}
    assert "rewards/reward/mean" in metrics


def test_tensorboard_logs_are_written_when_asked(tmp_path):
    pytest.importorskip("tensorboard", reason="needs tensorboard: pip install -e '.[tensorboard]'")
    config = small_config(tmp_path, max_steps=2, report_to="tensorboard", logging_steps=1)
    Trainer(config, TASK, device="cpu", show_progress=False).train()
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


def test_compact_api_takes_trl_defaults_and_the_models_eos_id():
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=16, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, eos_token_id=3, bos_token_id=None,
    ))  # fmt: skip
    trainer = GRPO(model=model, ref_model=None, reward_fn=lambda p, c: c.float().mean(1))
    assert trainer.eos_ids == [3]
    assert trainer.config.num_iterations == 1 and trainer.config.learning_rate == 1e-6
    assert trainer.optimizer.defaults["weight_decay"] == 0.0
    stats = trainer.train(torch.randint(4, 16, (2, 3)), n_epochs=1)
    assert len(stats["history"]) == 1


def test_addition_writes_the_sum_backwards_at_a_fixed_width():
    task = get_task("addition")
    assert task.render(1234) == ("12+34=", "640")
    assert task.render(9999) == ("99+99=", "891")
    assert task.max_completion_length == 4  # 3 digits and EOS


def test_cli_threads_option(tmp_path, capsys):
    from grader.cli import main

    code = main(["train", "--output-dir", str(tmp_path), "--max-steps", "1", "--threads", "1",
                 "--eval-size", "10", "--device", "cpu"])  # fmt: skip
    assert code == 0
    assert "1 CPU thread(s)" in capsys.readouterr().out
    assert main(["train", "--threads", "0", "--output-dir", str(tmp_path)]) == 2


def test_a_prompt_too_short_to_spare_a_tenth_of_the_tokens_is_read_with_the_rest():
    model = GPT(GPTConfig(vocab_size=TASK.tokenizer.vocab_size, block_size=40))
    G, P, L = 4, 2, 30  # sharing would spare 1.5 of the 31 tokens each row reads
    prompts = torch.randint(2, 14, (2, P), generator=torch.Generator().manual_seed(0))
    completions = torch.randint(2, 14, (2 * G, L), generator=torch.Generator().manual_seed(1))
    input_ids = torch.cat([prompts.repeat_interleave(G, 0), completions], dim=1)
    calls = []
    hook = model.register_forward_pre_hook(lambda _, args: calls.append(args[0].shape))
    completion_logps(model, input_ids, P, GRPOConfig(max_completion_length=L))
    hook.remove()
    assert calls == [torch.Size([2 * G, P + L - 1])]


def test_a_reward_function_with_the_old_signature_gets_a_clear_error(tmp_path):
    def old_style(completions, answers):
        return [0.0] * len(completions)

    trainer = Trainer(small_config(tmp_path), TASK, reward_funcs=[old_style], device="cpu",
                      show_progress=False)  # fmt: skip
    with pytest.raises(TypeError, match="old_style cannot be called as TRL calls.*\\*\\*kwargs"):
        trainer.train_step()
