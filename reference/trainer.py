"""The GRPO training loop around the capstone's step (reference/grpo_trainer.py).

    trainer = Trainer(GRPOConfig(max_steps=150), task=get_task("reverse"))
    summary = trainer.train()        # progress bar, metrics.jsonl, checkpoint.pt, plots, eval

What the loop adds to the step: the optimizer and its schedule, reproducible prompt and
sampling streams, metrics with TRL's names, sampled completions and greedy evaluations as it
goes, checkpoints and resume, data parallelism over several processes
(`torchrun --nproc_per_node N`) and optional TensorBoard logs. The policy can be any causal LM
(a transformers model, with LoRA through `peft_config=`); the default is a small GPT. The
model is prepared by reference/model_setup.py and sampled by reference/generation.py.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from types import ModuleType

import torch
import torch.distributed as dist

import reference.grpo_trainer as reference_step
from reference.generation import StaticCacheSampler, supports_static_cache
from reference.gpt import GPT, GPTConfig
from reference.group_stats import group_stats
from reference.grpo_config import GRPOConfig, Rollout
from reference.kl_estimators import kl_k3
from reference.model_setup import (
    AdapterDisabled,
    apply_lora,
    cast_lm_head_to_fp32,
    disable_dropout,
    enable_gradient_checkpointing,
    model_eos_ids,
    reference_model,
)
from reference.sample_group import sample_group
from reference.tasks import Task, exact_match_reward

# A reward function, called as TRL calls its own: keyword arguments `prompts`, `completions`,
# `completion_ids` and every other column of the data (e.g. `answer`), one entry per
# completion; it returns one float per completion. Extra keywords it does not use land in
# **kwargs.
TextRewardFn = Callable[..., Sequence[float]]


def best_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def text_reward(
    decode: Callable[[torch.Tensor], list[str]],
    reward_funcs: Sequence[TextRewardFn],
    weights: Sequence[float] | None = None,
    prompts: list[str] | None = None,
    parts: dict[str, torch.Tensor] | None = None,
) -> Callable[[torch.Tensor, list], torch.Tensor]:
    """One reward_fn on token ids: decode, then the weighted sum of the text rewards (as TRL).

    The reward_fn's `answers` (one per completion) become keyword arguments: an answer that
    is a dict gives one keyword per key (the columns of its row), any other answer is
    `answer`. `prompts`, one per prompt, are repeated for the completions of its group.
    `parts`, when given, receives each function's unweighted rewards under its name.
    """
    weights = [1.0] * len(reward_funcs) if weights is None else list(weights)
    if len(weights) != len(reward_funcs):
        raise ValueError(f"{len(weights)} reward_weights for {len(reward_funcs)} reward functions")

    def reward_fn(completion_ids: torch.Tensor, answers: list) -> torch.Tensor:
        completions = decode(completion_ids)
        columns = _columns(answers)
        if prompts is not None:
            group = len(completions) // len(prompts)
            columns["prompts"] = [p for p in prompts for _ in range(group)]
        total = torch.zeros(len(completions))
        for weight, func in zip(weights, reward_funcs, strict=True):
            kwargs = {"completions": completions, "completion_ids": completion_ids.tolist(),
                      **columns}  # fmt: skip
            _check_reward_signature(func, kwargs)
            scores = func(**kwargs)
            scores = torch.as_tensor([float(x) for x in scores], dtype=torch.float32)
            if scores.shape != total.shape:
                raise ValueError(f"reward function {_name(func)} returned {len(scores)} "
                                 f"rewards for {len(completions)} completions")  # fmt: skip
            if parts is not None:
                parts[_name(func)] = scores
            total += weight * scores
        return total

    return reward_fn


def _check_reward_signature(func: Callable, kwargs: dict) -> None:
    """A clear error for a reward function that cannot take TRL's keyword arguments."""
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):  # a builtin or C function: let the call decide
        return
    try:
        signature.bind(**kwargs)
    except TypeError as exc:
        raise TypeError(
            f"reward function {_name(func)} cannot be called as TRL calls reward functions, "
            f"with the keyword arguments {', '.join(kwargs)} ({exc}): name the ones it uses "
            "and end its parameters with **kwargs"
        ) from None


def _columns(answers: list) -> dict[str, list]:
    """{column: one value per row}: the keys of dict answers, else a single `answer` column."""
    if answers and all(isinstance(a, dict) for a in answers):
        return {key: [a.get(key) for a in answers] for key in answers[0]}
    return {"answer": list(answers)}


def _name(func: Callable) -> str:
    return getattr(func, "__name__", type(func).__name__)


def task_reward(task: Task) -> TextRewardFn:
    """A task's own reward, task.reward(completions, answers), as a TRL-style reward function."""

    def reward(completions: list[str], answer: list, **kwargs) -> list[float]:
        return task.reward(completions, answer)

    reward.__name__ = f"{task.name}_reward"
    return reward


def adamw(model: torch.nn.Module, config: GRPOConfig) -> torch.optim.AdamW:
    """AdamW with the config's settings over the parameters that train (a LoRA model's
    adapters only)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(
        trainable, lr=config.learning_rate, weight_decay=config.weight_decay,
        betas=(config.adam_beta1, config.adam_beta2),
    )  # fmt: skip


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    return float((values * mask).sum() / mask.sum().clamp(min=1))


def prompt_mask(task: Task, prompt_ids: torch.Tensor) -> torch.Tensor | None:
    """The hook for tasks whose prompts differ in length: they left-pad them and define
    `prompt_mask(prompt_ids)` (1 = real token). None for tasks with fixed-length prompts."""
    return task.prompt_mask(prompt_ids) if hasattr(task, "prompt_mask") else None


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    task: Task,
    inputs: list[int],
    max_new_tokens: int | None = None,  # None: the task's own limit
    batch_size: int = 500,
    sampler: Callable | None = None,  # e.g. the trainer's StaticCacheSampler; None: sample_group
) -> dict:
    """Greedy decoding (top-k = 1) on `inputs`: exact-match rate and mean task reward.

    A task may define `exact_match(completions, answers)` (1.0 / 0.0 each) when a right
    completion is not the answer string itself, as in the GSM8K-style template.
    """
    device = next(model.parameters()).device
    exact, reward = 0.0, 0.0
    tok = task.tokenizer
    exact_match = getattr(task, "exact_match", exact_match_reward)
    max_new_tokens = max_new_tokens or task.max_completion_length
    sample = sampler or sample_group
    for start in range(0, len(inputs), batch_size):
        prompt_ids, answers = task.batch(inputs[start : start + batch_size])
        padding = prompt_mask(task, prompt_ids)
        group = sample(
            model, prompt_ids.to(device), 1, max_new_tokens, tok.eos_id, top_k=1,
            prompt_mask=padding,
        )  # fmt: skip
        completions = tok.decode_batch(group.completion_ids.cpu())
        exact += sum(exact_match(completions, answers))
        reward += sum(task.reward(completions, answers))
    return {"exact_match": exact / len(inputs), "reward": reward / len(inputs)}


def lr_lambda(config: GRPOConfig) -> Callable[[int], float]:
    """Linear warmup to learning_rate, then constant, linear decay or cosine decay to 0.

    The scheduler steps once per optimizer update, num_iterations times per trainer step,
    while warmup_steps and max_steps count trainer steps: the schedule converts.
    """
    warmup = config.warmup_steps * config.num_iterations
    total = config.max_steps * config.num_iterations

    def factor(update: int) -> float:
        if update < warmup:
            return (update + 1) / (warmup + 1)
        progress = (update - warmup) / max(1, total - warmup)
        if config.lr_scheduler_type == "linear":
            return max(0.0, 1.0 - progress)
        if config.lr_scheduler_type == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
        return 1.0

    return factor


def default_policy(task: Task, config: GRPOConfig) -> GPT:
    torch.manual_seed(config.seed)  # same initial weights on every process and every run
    block_size = task.prompt_length + config.max_completion_length
    return GPT(GPTConfig(vocab_size=task.tokenizer.vocab_size, block_size=block_size))


class Trainer:
    """GRPO on a task: `train()` runs config.max_steps steps and returns a summary dict.

    reward_funcs are TRL-style reward functions (see TextRewardFn); None: the task's reward.
    peft_config (a peft.LoraConfig) trains LoRA adapters instead of the whole policy.
    """

    def __init__(
        self,
        config: GRPOConfig,
        task: Task,
        policy: torch.nn.Module | None = None,
        reward_funcs: Sequence[TextRewardFn] | None = None,
        device: torch.device | str | None = None,
        step: ModuleType = reference_step,  # any module with grpo_step, e.g. a learner's solution
        show_progress: bool = True,
        peft_config=None,
    ):
        self.config, self.task, self.step_impl = config, task, step
        if config.max_completion_length is None:
            config.max_completion_length = task.max_completion_length
        self.rank, self.world_size = _init_distributed()
        if config.prompts_per_step % self.world_size:
            raise ValueError(
                f"prompts_per_step={config.prompts_per_step} must be divisible by the "
                f"{self.world_size} processes"
            )
        self.device = torch.device(device) if device is not None else best_device()
        self.show_progress = show_progress and self.rank == 0
        self.output_dir = Path(config.output_dir)

        self.policy = self._prepare_policy(policy, peft_config).to(self.device)
        bf16 = config.uses_bf16(self.device)
        # The frozen starting point the KL is measured against: none at all when beta = 0; a
        # LoRA policy's is itself with the adapters off; on CUDA a bf16 copy (it only runs
        # forward passes, which autocast computes in bf16 anyway).
        self.ref_model = None
        if config.beta > 0:
            dtype = torch.bfloat16 if bf16 and self.device.type == "cuda" else None
            self.ref_model = reference_model(self.policy, dtype)
        self.model = self.policy  # what the step trains: the DDP wrapper when there is one
        if self.world_size > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.model = torch.nn.parallel.DistributedDataParallel(self.policy, device_ids=ids)
        self.optimizer = adamw(self.policy, config)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(config))
        funcs = list(reward_funcs) if reward_funcs is not None else [task_reward(task)]
        self.reward_funcs = funcs
        self.reward_parts: dict[str, torch.Tensor] = {}
        self.reward_fn = text_reward(task.tokenizer.decode_batch, funcs, config.reward_weights)
        self.sampler = self._sampler(bf16)
        # A learner's step module may predate the sampler argument: it then samples alone.
        self.step_takes_sampler = "sample_fn" in inspect.signature(step.grpo_step).parameters
        # Prompts: one stream shared by every process, each takes its slice of the global batch.
        # Sampling: one stream per process, so processes sample different completions.
        self.prompt_generator = torch.Generator().manual_seed(config.seed)
        self.sample_generator = torch.Generator(self.device).manual_seed(
            config.seed * 1000 + self.rank + 1
        )
        self.step = 0
        self.num_tokens = 0
        self.start_evaluation: dict | None = None  # greedy evaluation before the first step
        self.writer = None  # TensorBoard, opened by train()

    def _prepare_policy(self, policy: torch.nn.Module | None, peft_config) -> torch.nn.Module:
        config = self.config
        policy = policy if policy is not None else default_policy(self.task, config)
        if peft_config is not None:
            policy = apply_lora(policy, peft_config)
        if config.disable_dropout:
            disable_dropout(policy)
        if config.gradient_checkpointing:
            enable_gradient_checkpointing(policy)
        if config.cast_lm_head_to_fp32:
            cast_lm_head_to_fp32(policy)
        return policy

    def _sampler(self, bf16: bool) -> StaticCacheSampler:
        """Sampling on a static KV cache where the model has one; compiled and sampling from a
        bf16 copy of the policy on CUDA (see reference/generation.py)."""
        config = self.config
        static = supports_static_cache(self.policy)
        if config.cache_implementation == "static" and not static:
            raise ValueError(
                f"cache_implementation='static' needs the kit's GPT or a transformers model; "
                f"{type(self.policy).__name__} has no static cache path"
            )
        static = static and config.cache_implementation != "dynamic"
        cuda = self.device.type == "cuda"
        compile_ = config.compile_generation
        return StaticCacheSampler(
            self.policy, max_prompt_length=self.task.prompt_length,
            check_every=config.stop_check_interval, static=static,
            compile=static and (cuda if compile_ is None else compile_),
            dtype=torch.bfloat16 if static and cuda and bf16 else None,
        )  # fmt: skip

    # -- one step -------------------------------------------------------------------------

    def train_step(self) -> dict:
        config = self.config
        start = time.perf_counter()
        prompt_ids, answers = self.task.sample(config.prompts_per_step, self.prompt_generator)
        per_rank = config.prompts_per_step // self.world_size
        mine = slice(self.rank * per_rank, (self.rank + 1) * per_rank)
        prompt_ids, answers = prompt_ids[mine], answers[mine]
        padding = prompt_mask(self.task, prompt_ids)
        prompts = self.prompt_texts(prompt_ids, padding)
        self.reward_parts = {}
        reward_fn = text_reward(self.task.tokenizer.decode_batch, self.reward_funcs,
                                config.reward_weights, prompts, self.reward_parts)  # fmt: skip
        extra = {} if padding is None else {"prompt_mask": padding}
        if self.step_takes_sampler:
            extra["sample_fn"] = self.sampler
        self.sampler.entropy, self.sampler.seconds = None, 0.0
        rollout, update = self.step_impl.grpo_step(
            self.model, self.ref_model, self.optimizer, prompt_ids, answers, reward_fn,
            self.task.tokenizer.eos_id, config, self.sample_generator, self.scheduler, **extra,
        )  # fmt: skip
        self.step += 1
        metrics = self.metrics(rollout, update["logps"])
        metrics.update(
            step=self.step, loss=update["loss"], grad_norm=update["grad_norm"],
            learning_rate=self.scheduler.get_last_lr()[0], step_time=time.perf_counter() - start,
        )  # fmt: skip
        if self.sampler.seconds > 0:  # completion tokens over the whole batch, per second
            metrics["tokens_per_second"] = metrics["completion_tokens"] / self.sampler.seconds
        if config.log_completions and self.step % config.logging_steps == 0:
            metrics["completions"] = self.sample_completions(rollout, prompts)
        return metrics

    def prompt_texts(self, prompt_ids: torch.Tensor, padding: torch.Tensor | None) -> list[str]:
        tok = self.task.tokenizer
        if hasattr(tok, "decode_prompts"):  # a tokenizer whose prompts hold EOS-like tokens
            return tok.decode_prompts(prompt_ids, padding)
        return tok.decode_batch(prompt_ids)

    def sample_completions(self, rollout: Rollout, prompts: list[str]) -> list[dict]:
        """The first completions of the batch (this process's), with their rewards."""
        G, n = self.config.num_generations, self.config.num_completions_to_print
        texts = self.task.tokenizer.decode_batch(rollout.completion_ids[:n].cpu())
        return [
            {"prompt": prompts[row // G], "completion": text, "reward": float(rollout.rewards[row])}
            for row, text in enumerate(texts)
        ]

    def metrics(self, rollout: Rollout, logps: torch.Tensor) -> dict:
        """TRL's metrics over the global batch (gathered from every process)."""
        mask = rollout.completion_mask.float()
        old = rollout.old_logps if rollout.old_logps is not None else logps
        ratios = torch.exp(logps - old)
        kl = kl_k3(logps, rollout.ref_logps) if rollout.ref_logps is not None else 0 * logps
        # TRL's entropy, of the tempered distribution at each sampled position, comes with the
        # sampler's draws; a step that sampled otherwise gives the one-sample estimate.
        entropy = self.sampler.entropy
        if entropy is None or entropy.shape != mask.shape:
            entropy = -rollout.sampling_logps
        padded = rollout.prompt_mask is not None  # padding is no token
        prompt_tokens = int(rollout.prompt_mask.sum()) if padded else rollout.prompt_ids.numel()
        local = {
            "rewards": rollout.rewards, "mask": mask, "truncated": rollout.truncated,
            "ratios": ratios, "advantages": rollout.advantages, "kl": kl,
            "entropy": entropy.to(mask.device),
            "prompt_tokens": torch.tensor([prompt_tokens], device=mask.device),
        }  # fmt: skip
        for name, scores in self.reward_parts.items():
            local[f"rewards/{name}"] = scores.to(mask.device)
        full = {name: _gather(value) for name, value in local.items()}
        stats = group_stats(
            full["rewards"], self.config.num_generations, full["mask"], full["truncated"],
            ratios=full["ratios"], advantages=full["advantages"],
            epsilon=self.config.epsilon, epsilon_high=self.config.epsilon_high,
        )  # fmt: skip
        completion_tokens = int(full["mask"].sum())
        self.num_tokens += int(full["prompt_tokens"].sum()) + completion_tokens
        stats = {name: float(value) for name, value in stats.items()}
        stats.update(
            clip_ratio=stats["clip_ratio/region_mean"],
            kl=masked_mean(full["kl"], full["mask"]),
            entropy=masked_mean(full["entropy"], full["mask"]),
            advantage_abs=float(full["advantages"].abs().mean()),
            num_tokens=self.num_tokens, completion_tokens=completion_tokens,
        )  # fmt: skip
        for name in self.reward_parts:
            stats[f"rewards/{name}/mean"] = float(full[f"rewards/{name}"].mean())
        return stats

    # -- the loop ---------------------------------------------------------------------------

    def train(self, resume: bool = False) -> dict:
        from tqdm.auto import tqdm

        config = self.config
        if resume:
            self.load_checkpoint()
        if self.rank == 0:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            _truncate_metrics(self.metrics_path, self.step)
            self.writer = self._tensorboard()
        bar = tqdm(
            total=config.max_steps, initial=self.step, desc="GRPO", unit="step",
            disable=not self.show_progress, dynamic_ncols=True,
        )  # fmt: skip
        say = bar.write if self.show_progress else (lambda text: None)
        if self.start_evaluation is None and config.eval_steps:
            self.start_evaluation = self.evaluate_now()
            self._log_evaluation(self.start_evaluation, say)
        self.policy.train()
        metrics: dict = {}
        while self.step < config.max_steps:
            metrics = self.train_step()
            last = self.step == config.max_steps
            if config.eval_steps and (self.step % config.eval_steps == 0 or last):
                evaluation = self.evaluate_now()
                metrics.update({f"eval/{key}": value for key, value in evaluation.items()})
                self._log_evaluation(evaluation, say)
            for row in metrics.get("completions", []):
                say(f"step {self.step} reward {row['reward']:.3f} | {row['prompt']!r} -> "
                    f"{row['completion']!r}")  # fmt: skip
            if self.rank == 0:
                with self.metrics_path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(metrics) + "\n")
                self._tensorboard_step(metrics)
            postfix = {"reward": f"{metrics['reward']:.3f}", "kl": f"{metrics['kl']:.4f}"}
            if "tokens_per_second" in metrics:
                postfix["tok/s"] = f"{metrics['tokens_per_second']:.0f}"
            bar.set_postfix(postfix)
            bar.update(1)
            if config.save_steps and self.step % config.save_steps == 0:
                self.save_checkpoint()
        bar.close()
        self.save_checkpoint()
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        return {"steps": self.step, "last": metrics}

    def _log_evaluation(self, evaluation: dict, say: Callable[[str], None]) -> None:
        say(f"step {self.step} greedy evaluation: exact match {evaluation['exact_match']:.3f}, "
            f"reward {evaluation['reward']:.3f}")  # fmt: skip
        if self.writer is not None:
            for key, value in evaluation.items():
                self.writer.add_scalar(f"eval/{key}", value, self.step)

    def _tensorboard(self):
        if self.config.report_to != "tensorboard":
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError(
                "report_to='tensorboard' needs tensorboard: "
                "pip install -c constraints.txt -e '.[tensorboard]'"
            ) from exc
        return SummaryWriter(str(self.output_dir / "tensorboard"))

    def _tensorboard_step(self, metrics: dict) -> None:
        if self.writer is None:
            return
        for name, value in metrics.items():
            if isinstance(value, int | float) and name != "step":
                self.writer.add_scalar(name, value, self.step)
        rows = metrics.get("completions")
        if rows:
            table = "| prompt | completion | reward |\n| --- | --- | --- |\n" + "\n".join(
                f"| {r['prompt']!r} | {r['completion']!r} | {r['reward']:.3f} |" for r in rows
            )
            self.writer.add_text("completions", table, self.step)

    @property
    def metrics_path(self) -> Path:
        return self.output_dir / "metrics.jsonl"

    @property
    def checkpoint_path(self) -> Path:
        return self.output_dir / "checkpoint.pt"

    @property
    def eval_inputs(self) -> list:
        """The held-out inputs greedy evaluations decode (the first eval_size)."""
        return self.task.inputs("eval")[: self.config.eval_size]

    @property
    def owns_reference(self) -> bool:
        """Whether the reference model has weights of its own (not None, nor the LoRA policy
        with its adapters off)."""
        return self.ref_model is not None and not isinstance(self.ref_model, AdapterDisabled)

    def evaluate_now(self) -> dict:
        """Greedy decoding of the policy on the held-out inputs."""
        return evaluate(self.policy, self.task, self.eval_inputs,
                        self.config.max_completion_length, sampler=self.sampler)  # fmt: skip

    def evaluate(self) -> dict[str, dict]:
        """Greedy decoding on held-out inputs, before (the starting point) and after training.

        "before" is the evaluation train() made before its first step, else the reference
        model's, else (no training and no reference) the policy's own.
        """
        after = self.evaluate_now()
        before = self.start_evaluation
        if before is None and self.owns_reference:
            before = evaluate(self.ref_model, self.task, self.eval_inputs,
                              self.config.max_completion_length)  # fmt: skip
        return {"before": before if before is not None else after, "after": after}

    # -- checkpoints ------------------------------------------------------------------------

    def save_checkpoint(self) -> None:
        sample_generators = _gather_state(self.sample_generator)  # every process takes part
        if self.rank != 0:
            return
        state = {
            "step": self.step,
            "num_tokens": self.num_tokens,
            "config": asdict(self.config),
            "policy": self.policy.state_dict(),
            "ref_model": self.ref_model.state_dict() if self.owns_reference else None,
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "prompt_generator": self.prompt_generator.get_state(),
            "sample_generators": sample_generators,
            "start_evaluation": self.start_evaluation,
        }
        if isinstance(self.policy, GPT):
            state["model_config"] = asdict(self.policy.config)
        tmp = self.checkpoint_path.with_suffix(".tmp")
        torch.save(state, tmp)
        tmp.replace(self.checkpoint_path)  # never leave a half-written checkpoint behind

    def load_checkpoint(self) -> None:
        if not self.checkpoint_path.is_file():
            raise FileNotFoundError(
                f"no checkpoint at {self.checkpoint_path}: train once without --resume first, "
                "or point --output-dir at the run to continue"
            )
        # On the CPU: generator states must stay there; load_state_dict moves the rest.
        state = torch.load(self.checkpoint_path, map_location="cpu", weights_only=True)
        self.policy.load_state_dict(state["policy"])
        if state["ref_model"] is not None and self.ref_model is not None:
            self.ref_model.load_state_dict(state["ref_model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.prompt_generator.set_state(state["prompt_generator"])
        generators = state["sample_generators"]
        if len(generators) != self.world_size:
            raise ValueError(
                f"the checkpoint was written by {len(generators)} processes: resume with as many"
            )
        self.sample_generator.set_state(generators[self.rank])
        self.step, self.num_tokens = state["step"], state["num_tokens"]
        self.start_evaluation = state.get("start_evaluation")


def _init_distributed() -> tuple[int, int]:
    """(rank, world size): from torchrun's environment, else a single process."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if world_size == 1:
        return 0, 1
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size()


def _gather(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate one tensor from every process (rank order); itself with one process."""
    if not (dist.is_available() and dist.is_initialized()):
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts)


def _gather_state(generator: torch.Generator) -> list[torch.Tensor]:
    """Every process's generator state, so a resumed run samples exactly as it would have."""
    state = generator.get_state()
    if not (dist.is_available() and dist.is_initialized()):
        return [state]
    states = [None] * dist.get_world_size()
    dist.all_gather_object(states, state)
    return states


def _truncate_metrics(path: Path, step: int) -> None:
    """Keep the metrics of steps <= `step`: a resumed run rewrites the steps after its checkpoint."""
    if not path.exists():
        return
    lines = path.read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= step]
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")


class GRPO:
    """The compact interface some RL libraries use, on prompt tensors and a reward function.

        trainer = GRPO(model=policy, ref_model=ref, reward_fn=fn, group_size=4, kl_coef=0.1,
                       learning_rate=1e-4, max_new_tokens=8, max_grad_norm=1.0)
        stats = trainer.train(prompts=prompt_ids, n_epochs=3)   # {"mean_reward", "kl", ...}

    reward_fn(prompt_ids (N, P), completion_ids (N, L)) -> N rewards, N = prompts * group_size.
    Options named as in TRL take TRL's defaults: learning_rate 1e-6, max_grad_norm 1.0, seed 42,
    one update per sampled batch (num_iterations=1) and no weight decay; any other GRPOConfig
    option can be passed by name. The EOS id defaults to the model's (its config's
    eos_token_id); without one, completions run to max_new_tokens.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        ref_model: torch.nn.Module | None,
        reward_fn: Callable[[torch.Tensor, torch.Tensor], Sequence[float] | torch.Tensor],
        group_size: int = 8,
        kl_coef: float = 0.0,
        learning_rate: float = 1e-6,
        max_new_tokens: int = 256,
        max_grad_norm: float | None = 1.0,
        eos_token_id: int | Sequence[int] | None = None,
        batch_size: int = 8,
        seed: int = 42,
        **config_options,
    ):
        self.model, self.ref_model, self.reward_fn = model, ref_model, reward_fn
        options = {"num_iterations": 1, **config_options}
        self.config = GRPOConfig(
            num_generations=group_size, beta=kl_coef if ref_model is not None else 0.0,
            learning_rate=learning_rate, max_completion_length=max_new_tokens,
            max_grad_norm=max_grad_norm, seed=seed, **options,
        )  # fmt: skip
        if eos_token_id is None:
            eos_token_id = model_eos_ids(model) or None
        # Without an EOS id every completion runs to max_new_tokens (-1 is never sampled).
        self.eos_ids = eos_token_id if eos_token_id is not None else -1
        self.batch_size = batch_size
        if self.config.disable_dropout:
            disable_dropout(model)
        self.optimizer = adamw(model, self.config)
        self.generator = torch.Generator(next(model.parameters()).device).manual_seed(seed)
        self.sampler = StaticCacheSampler(model, check_every=self.config.stop_check_interval)

    def train(self, prompts: torch.Tensor, n_epochs: int = 1) -> dict:
        """n_epochs passes over `prompts` (B, P), batch_size prompts at a time. Each batch is
        sampled once (group_size completions per prompt), scored, and used for num_iterations
        optimizer updates. Returns the last epoch's mean statistics and every epoch's."""
        history = []
        self.model.train()
        for _ in range(n_epochs):
            epoch = []
            for start in range(0, prompts.shape[0], self.batch_size):
                batch = prompts[start : start + self.batch_size]

                def reward(completion_ids, rows, batch=batch):
                    return self.reward_fn(batch.repeat_interleave(len(rows) // len(batch), 0)
                                          .to(completion_ids.device), completion_ids)  # fmt: skip

                rollout, update = reference_step.grpo_step(
                    self.model, self.ref_model, self.optimizer, batch, [None] * len(batch),
                    reward, self.eos_ids, self.config, self.generator, sample_fn=self.sampler,
                )  # fmt: skip
                kl = 0.0
                if rollout.ref_logps is not None:
                    kl = masked_mean(kl_k3(update["logps"], rollout.ref_logps),
                                     rollout.completion_mask)  # fmt: skip
                epoch.append({"mean_reward": float(rollout.rewards.mean()), "kl": kl,
                              "loss": update["loss"]})  # fmt: skip
            history.append({key: sum(b[key] for b in epoch) / len(epoch) for key in epoch[0]})
        return {**history[-1], "history": history}
