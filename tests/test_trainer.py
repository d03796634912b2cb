"""The trainer learns, and its seams hold: cached log-probs, micro-batches, resume, metrics."""

import json

import pytest
import torch

from reference.gpt import GPT, GPTConfig
from reference.grpo_config import GRPOConfig
from reference.grpo_trainer import completion_logps, generate_rollout, optimize
from reference.tasks import ReverseDigits, get_task
from reference.trainer import GRPO, Trainer, text_reward

TASK = ReverseDigits()
EOS = TASK.tokenizer.eos_id
TRL_METRICS = ("reward", "reward_std", "frac_reward_zero_std", "kl", "entropy", "clip_ratio",
               "completions/mean_length", "completions/clipped_ratio", "num_tokens", "step_time")  # fmt: skip


@pytest.fixture(autouse=True)
def one_thread():
    # Tiny matrices: a second thread only competes for the CI machine's two cores.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def small_config(tmp_path, **overrides) -> GRPOConfig:
    base = dict(max_steps=3, prompts_per_step=8, num_generations=4, output_dir=str(tmp_path),
                save_steps=0, eval_size=50)  # fmt: skip
    return GRPOConfig(**{**base, **overrides})


def params(model):
    return [p.detach().clone() for p in model.parameters()]


def a_rollout(policy, **overrides):
    config = GRPOConfig(max_completion_length=5, num_generations=4, **overrides)
    prompt_ids, answers = TASK.sample(6, torch.Generator().manual_seed(0))
    reward = text_reward(TASK.tokenizer.decode_batch, [TASK.reward])
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


def test_metrics_are_logged_every_step_with_trl_names(trained):
    trainer, _ = trained
    rows = [json.loads(line) for line in trainer.metrics_path.read_text().splitlines()]
    assert [row["step"] for row in rows] == list(range(1, 41))
    for name in TRL_METRICS:
        assert all(name in row for row in rows), f"metric {name!r} missing"
    assert rows[-1]["reward"] > rows[0]["reward"] + 0.5
    assert rows[-1]["num_tokens"] > rows[0]["num_tokens"]


def test_run_plot_is_written(trained, tmp_path):
    from reference.plots import plot_run

    trainer, _ = trained
    png = plot_run(trainer.metrics_path, tmp_path / "run.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cached_old_logps_equal_fresh_ones_at_the_first_iteration():
    policy = tiny_policy()
    rollout, config = a_rollout(policy, num_iterations=2)
    fresh = completion_logps(policy, rollout.input_ids, rollout.prompt_ids.shape[1], config)
    mask = rollout.completion_mask.bool()
    torch.testing.assert_close(rollout.old_logps[mask], fresh.detach()[mask])


def test_loss_is_about_zero_at_every_step_while_parameters_change(tmp_path):
    config = small_config(tmp_path, num_iterations=1, loss_type="grpo", beta=0.0, max_steps=4)
    trainer = Trainer(config, TASK, device="cpu", show_progress=False)
    for _ in range(config.max_steps):
        before = params(trainer.policy)
        metrics = trainer.train_step()
        assert abs(metrics["loss"]) < 1e-5, metrics["loss"]
        assert any(not torch.equal(a, b) for a, b in zip(params(trainer.policy), before, strict=True))


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
