"""The GRPO training loop around the capstone's step (reference/grpo_trainer.py).

    trainer = Trainer(GRPOConfig(max_steps=150), task=get_task("reverse"))
    summary = trainer.train()        # progress bar, metrics.jsonl, checkpoint.pt, plots, eval

What the loop adds to the step: the optimizer and its schedule, reproducible prompt and
sampling streams, metrics with TRL's names, checkpoints and resume, a greedy evaluation
against the untrained starting point, and data parallelism over several processes
(`torchrun --nproc_per_node N`). The policy can be any causal LM; the default is a small GPT.
"""

from __future__ import annotations

import copy
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
from reference.gpt import GPT, GPTConfig
from reference.group_stats import group_stats
from reference.grpo_config import GRPOConfig, Rollout
from reference.kl_estimators import kl_k3
from reference.sample_group import sample_group
from reference.tasks import Task, exact_match_reward

# A text reward function, as in the curriculum: (completions, answers) -> one float each.
TextRewardFn = Callable[[list[str], list], list[float]]


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
) -> Callable[[torch.Tensor, list], torch.Tensor]:
    """One reward_fn on token ids: decode, then the weighted sum of the text rewards (as TRL)."""
    weights = [1.0] * len(reward_funcs) if weights is None else list(weights)
    if len(weights) != len(reward_funcs):
        raise ValueError(f"{len(weights)} reward_weights for {len(reward_funcs)} reward functions")

    def reward_fn(completion_ids: torch.Tensor, answers: list) -> torch.Tensor:
        completions = decode(completion_ids)
        total = torch.zeros(len(completions))
        for weight, func in zip(weights, reward_funcs, strict=True):
            total += weight * torch.as_tensor(func(completions, answers), dtype=torch.float32)
        return total

    return reward_fn


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
    for start in range(0, len(inputs), batch_size):
        prompt_ids, answers = task.batch(inputs[start : start + batch_size])
        padding = prompt_mask(task, prompt_ids)
        group = sample_group(
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
    """GRPO on a task: `train()` runs config.max_steps steps and returns a summary dict."""

    def __init__(
        self,
        config: GRPOConfig,
        task: Task,
        policy: torch.nn.Module | None = None,
        reward_funcs: Sequence[TextRewardFn] | None = None,
        device: torch.device | str | None = None,
        step: ModuleType = reference_step,  # any module with grpo_step, e.g. a learner's solution
        show_progress: bool = True,
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

        policy = policy if policy is not None else default_policy(task, config)
        self.policy = policy.to(self.device)
        # The frozen reference is the starting point; it also serves as the "before" of the eval.
        self.ref_model = copy.deepcopy(self.policy).eval().requires_grad_(False)
        self.model = self.policy  # what the step trains: the DDP wrapper when there is one
        if self.world_size > 1:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.model = torch.nn.parallel.DistributedDataParallel(self.policy, device_ids=ids)
        self.optimizer = torch.optim.AdamW(
            self.policy.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay,
            betas=(config.adam_beta1, config.adam_beta2),
        )  # fmt: skip
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_lambda(config))
        self.reward_fn = reference_step_reward(task, reward_funcs, config)
        # Prompts: one stream shared by every process, each takes its slice of the global batch.
        # Sampling: one stream per process, so processes sample different completions.
        self.prompt_generator = torch.Generator().manual_seed(config.seed)
        self.sample_generator = torch.Generator(self.device).manual_seed(
            config.seed * 1000 + self.rank + 1
        )
        self.step = 0
        self.num_tokens = 0

    # -- one step -------------------------------------------------------------------------

    def train_step(self) -> dict:
        config = self.config
        start = time.perf_counter()
        prompt_ids, answers = self.task.sample(config.prompts_per_step, self.prompt_generator)
        per_rank = config.prompts_per_step // self.world_size
        mine = slice(self.rank * per_rank, (self.rank + 1) * per_rank)
        padding = prompt_mask(self.task, prompt_ids[mine])
        rollout, update = self.step_impl.grpo_step(
            self.model, self.ref_model, self.optimizer, prompt_ids[mine], answers[mine],
            self.reward_fn, self.task.tokenizer.eos_id, config, self.sample_generator,
            self.scheduler, **({} if padding is None else {"prompt_mask": padding}),
        )  # fmt: skip
        self.step += 1
        metrics = self.metrics(rollout, update["logps"])
        metrics.update(
            step=self.step, loss=update["loss"], grad_norm=update["grad_norm"],
            learning_rate=self.scheduler.get_last_lr()[0], step_time=time.perf_counter() - start,
        )  # fmt: skip
        return metrics

    def metrics(self, rollout: Rollout, logps: torch.Tensor) -> dict:
        """TRL's metrics over the global batch (gathered from every process)."""
        mask = rollout.completion_mask.float()
        old = rollout.old_logps if rollout.old_logps is not None else logps
        ratios = torch.exp(logps - old)
        kl = kl_k3(logps, rollout.ref_logps) if rollout.ref_logps is not None else 0 * logps
        padded = rollout.prompt_mask is not None  # padding is no token
        prompt_tokens = int(rollout.prompt_mask.sum()) if padded else rollout.prompt_ids.numel()
        local = {
            "rewards": rollout.rewards, "mask": mask, "truncated": rollout.truncated,
            "ratios": ratios, "advantages": rollout.advantages, "kl": kl,
            "entropy": -rollout.sampling_logps,  # E[-log p(token)] under sampling: the entropy
            "prompt_tokens": torch.tensor([prompt_tokens], device=mask.device),
        }  # fmt: skip
        full = {name: _gather(value) for name, value in local.items()}
        stats = group_stats(
            full["rewards"], self.config.num_generations, full["mask"], full["truncated"],
            ratios=full["ratios"], advantages=full["advantages"],
            epsilon=self.config.epsilon, epsilon_high=self.config.epsilon_high,
        )  # fmt: skip
        self.num_tokens += int(full["prompt_tokens"].sum()) + int(full["mask"].sum())
        stats = {name: float(value) for name, value in stats.items()}
        stats.update(
            clip_ratio=stats["clip_ratio/region_mean"],
            kl=masked_mean(full["kl"], full["mask"]),
            entropy=masked_mean(full["entropy"], full["mask"]),
            advantage_abs=float(full["advantages"].abs().mean()),
            num_tokens=self.num_tokens,
        )  # fmt: skip
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
        bar = tqdm(
            total=config.max_steps, initial=self.step, desc="GRPO", unit="step",
            disable=not self.show_progress, dynamic_ncols=True,
        )  # fmt: skip
        self.policy.train()
        metrics: dict = {}
        while self.step < config.max_steps:
            metrics = self.train_step()
            if self.rank == 0:
                with self.metrics_path.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(metrics) + "\n")
            bar.set_postfix(reward=f"{metrics['reward']:.3f}", kl=f"{metrics['kl']:.4f}")
            bar.update(1)
            if config.save_steps and self.step % config.save_steps == 0:
                self.save_checkpoint()
        bar.close()
        self.save_checkpoint()
        return {"steps": self.step, "last": metrics}

    @property
    def metrics_path(self) -> Path:
        return self.output_dir / "metrics.jsonl"

    @property
    def checkpoint_path(self) -> Path:
        return self.output_dir / "checkpoint.pt"

    def evaluate(self) -> dict[str, dict]:
        """Greedy decoding on held-out inputs, before (reference model) and after training."""
        inputs = self.task.inputs("eval")[: self.config.eval_size]
        max_new_tokens = self.config.max_completion_length
        self.policy.eval()
        try:
            return {
                "before": evaluate(self.ref_model, self.task, inputs, max_new_tokens),
                "after": evaluate(self.policy, self.task, inputs, max_new_tokens),
            }
        finally:
            self.policy.train()

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
            "ref_model": self.ref_model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "prompt_generator": self.prompt_generator.get_state(),
            "sample_generators": sample_generators,
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
        state = torch.load(self.checkpoint_path, map_location="cpu", weights_only=False)
        self.policy.load_state_dict(state["policy"])
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


def reference_step_reward(
    task: Task, reward_funcs: Sequence[TextRewardFn] | None, config: GRPOConfig
) -> Callable[[torch.Tensor, list], torch.Tensor]:
    funcs = list(reward_funcs) if reward_funcs is not None else [task.reward]
    return text_reward(task.tokenizer.decode_batch, funcs, config.reward_weights)


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
    """

    def __init__(
        self,
        model: torch.nn.Module,
        ref_model: torch.nn.Module | None,
        reward_fn: Callable[[torch.Tensor, torch.Tensor], Sequence[float] | torch.Tensor],
        group_size: int = 4,
        kl_coef: float = 0.1,
        learning_rate: float = 1e-4,
        max_new_tokens: int = 8,
        max_grad_norm: float | None = 1.0,
        eos_token_id: int | Sequence[int] | None = None,
        batch_size: int = 8,
        seed: int = 0,
        **config_options,
    ):
        self.model, self.ref_model, self.reward_fn = model, ref_model, reward_fn
        self.config = GRPOConfig(
            num_generations=group_size, beta=kl_coef if ref_model is not None else 0.0,
            learning_rate=learning_rate, max_completion_length=max_new_tokens,
            max_grad_norm=max_grad_norm, seed=seed, **config_options,
        )  # fmt: skip
        # Without an EOS id every completion runs to max_new_tokens (-1 is never sampled).
        self.eos_ids = eos_token_id if eos_token_id is not None else -1
        self.batch_size = batch_size
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
        self.generator = torch.Generator(next(model.parameters()).device).manual_seed(seed)

    def train(self, prompts: torch.Tensor, n_epochs: int = 1) -> dict:
        """n_epochs passes over `prompts` (B, P) in batches; the last epoch's mean statistics."""
        history = []
        for _ in range(n_epochs):
            epoch = []
            for start in range(0, prompts.shape[0], self.batch_size):
                batch = prompts[start : start + self.batch_size]

                def reward(completion_ids, rows, batch=batch):
                    return self.reward_fn(batch.repeat_interleave(len(rows) // len(batch), 0)
                                          .to(completion_ids.device), completion_ids)  # fmt: skip

                rollout, update = reference_step.grpo_step(
                    self.model, self.ref_model, self.optimizer, batch, [None] * len(batch),
                    reward, self.eos_ids, self.config, self.generator,
                )  # fmt: skip
                kl = 0.0
                if rollout.ref_logps is not None:
                    kl = masked_mean(kl_k3(update["logps"], rollout.ref_logps),
                                     rollout.completion_mask)  # fmt: skip
                epoch.append({"mean_reward": float(rollout.rewards.mean()), "kl": kl,
                              "loss": update["loss"]})  # fmt: skip
            history.append({key: sum(b[key] for b in epoch) / len(epoch) for key in epoch[0]})
        return {**history[-1], "history": history}
