"""The trainer's plain data: its configuration and a rollout (one batch of scored completions).

Option names follow Hugging Face TRL's `GRPOConfig` wherever they mean the same thing, so a
configuration reads the same in both. Kit-only options are marked as such. The defaults are
tuned for the kit's default task (a small GPT reversing 4 digits learns it in about 40 steps):
learning_rate and num_iterations are higher than TRL's, which are meant for pretrained models.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, fields

import torch

# TRL's loss_type names -> the aggregations of reference.masked_token_loss.aggregate_loss.
LOSS_TYPES = {"grpo": "sequence", "dapo": "token", "dr_grpo": "constant"}
SCALE_REWARDS = ("group", "none")
LR_SCHEDULERS = ("constant", "linear", "cosine")
CACHE_IMPLEMENTATIONS = ("static", "dynamic")
REPORT_TO = ("none", "tensorboard")


@dataclass
class GRPOConfig:
    # Generation: G completions of every prompt.
    num_generations: int = 8
    max_completion_length: int | None = None  # None: the task's own limit
    temperature: float = 1.0
    top_k: int = 0  # 0: off
    top_p: float = 1.0  # 1.0: off
    # Loss.
    beta: float = 0.04  # weight of the k3 KL to the reference model; 0 skips the reference
    epsilon: float = 0.2
    epsilon_high: float | None = None  # clip-higher (DAPO uses 0.28); None: same as epsilon
    loss_type: str = "dapo"  # "grpo" (per sequence), "dapo" (per token), "dr_grpo" (constant)
    scale_rewards: str = "group"  # "group": divide advantages by the group std; "none": don't
    mask_truncated_completions: bool = False
    reward_weights: list[float] | None = None  # one per reward function; None: all 1
    num_iterations: int = 4  # updates per generated batch (TRL's default is 1)
    # The model.
    disable_dropout: bool = True  # dropout off, so every pass agrees (TRL's default is False)
    gradient_checkpointing: bool = False  # recompute activations in backward (transformers)
    cast_lm_head_to_fp32: bool = False  # the output layer in float32 under bf16 autocast
    # Generation.
    cache_implementation: str | None = None  # "static", "dynamic"; None: static if supported
    compile_generation: bool | None = None  # kit-only: CUDA-graph the decoding step; None: on CUDA
    stop_check_interval: int = 8  # kit-only: tokens between two checks that all completions ended
    # Optimization.
    learning_rate: float = 3e-3
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    max_grad_norm: float | None = 1.0  # None: no gradient clipping
    warmup_steps: int = 0
    lr_scheduler_type: str = "constant"  # "constant", "linear" or "cosine" (after warmup)
    max_steps: int = 60
    prompts_per_step: int = 32  # kit-only: prompts per optimizer step, over all processes
    gradient_accumulation_steps: int = 1  # micro-batches per optimizer step (same result)
    # Bookkeeping.
    seed: int = 0
    bf16: bool | None = None  # None: bf16 autocast on CUDA, float32 elsewhere
    output_dir: str = "runs/grpo"
    save_steps: int = 50  # 0: checkpoint only at the end
    eval_size: int = 200  # kit-only: held-out inputs for the greedy evaluations
    eval_steps: int = 20  # greedy evaluation every eval_steps steps, at the start and end; 0: off
    logging_steps: int = 10  # print (and log) sampled completions every logging_steps steps
    log_completions: bool = True
    num_completions_to_print: int = 2
    report_to: str = "none"  # "tensorboard": also write TensorBoard logs to output_dir/tensorboard

    def __post_init__(self) -> None:
        positive = ("num_generations", "num_iterations", "max_steps", "prompts_per_step",
                    "gradient_accumulation_steps", "stop_check_interval", "logging_steps")  # fmt: skip
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {list(LOSS_TYPES)}, not {self.loss_type!r}")
        if isinstance(self.scale_rewards, bool):  # TRL's older boolean form
            self.scale_rewards = "group" if self.scale_rewards else "none"
        if self.scale_rewards not in SCALE_REWARDS:
            raise ValueError(
                f"scale_rewards must be one of {list(SCALE_REWARDS)}, not {self.scale_rewards!r}"
            )
        if self.lr_scheduler_type not in LR_SCHEDULERS:
            raise ValueError(
                f"lr_scheduler_type must be one of {list(LR_SCHEDULERS)}, "
                f"not {self.lr_scheduler_type!r}"
            )
        if self.cache_implementation not in (None, *CACHE_IMPLEMENTATIONS):
            raise ValueError(
                f"cache_implementation must be one of {list(CACHE_IMPLEMENTATIONS)} or None, "
                f"not {self.cache_implementation!r}"
            )
        if self.report_to not in REPORT_TO:
            raise ValueError(f"report_to must be one of {list(REPORT_TO)}, not {self.report_to!r}")
        if self.eval_steps < 0 or self.num_completions_to_print < 0:
            raise ValueError("eval_steps and num_completions_to_print must be >= 0")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.beta < 0 or self.epsilon < 0:
            raise ValueError("beta and epsilon must be >= 0")

    @property
    def aggregation(self) -> str:
        return LOSS_TYPES[self.loss_type]

    @property
    def scale_by_std(self) -> bool:
        return self.scale_rewards == "group"

    def uses_bf16(self, device: torch.device) -> bool:
        return self.bf16 if self.bf16 is not None else device.type == "cuda"

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        """bf16 autocast for forward passes on CUDA (or when bf16 is asked for); else nothing."""
        if not self.uses_bf16(device):
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


@dataclass
class Rollout:
    """A batch of scored completions; rows i*G .. i*G + G - 1 are the group of prompt i.

    N = n_prompts * G rows, P = prompt length, L = max_completion_length.
    """

    prompt_ids: torch.Tensor  # (N, P) each prompt repeated G times
    completion_ids: torch.Tensor  # (N, L)
    completion_mask: torch.Tensor  # (N, L) 1 on the tokens that count in the loss
    sampling_logps: torch.Tensor  # (N, L) log-probs under the sampling distribution
    rewards: torch.Tensor  # (N,)
    advantages: torch.Tensor  # (N,)
    truncated: torch.Tensor  # (N,) bool: the completion never emitted EOS
    old_logps: torch.Tensor | None = None  # (N, L) the sampling policy's: optimize fills it in
    ref_logps: torch.Tensor | None = None  # (N, L) cached when beta > 0
    prompt_mask: torch.Tensor | None = None  # (N, P) left-padded prompts: 1 = real token

    @property
    def input_ids(self) -> torch.Tensor:
        return torch.cat([self.prompt_ids, self.completion_ids], dim=1)  # (N, P + L)

    @property
    def attention_mask(self) -> torch.Tensor | None:
        """(N, P + L) 1 on real tokens; None when no prompt is padded."""
        if self.prompt_mask is None:
            return None
        return torch.cat([self.prompt_mask, torch.ones_like(self.completion_ids)], dim=1)

    def split(self, parts: int, group_size: int) -> list[Rollout]:
        """`parts` micro-batches of whole groups (a group's advantages belong together)."""
        groups = self.rewards.shape[0] // group_size
        if groups % parts:
            raise ValueError(
                f"{groups} groups cannot be split into {parts} equal micro-batches: make "
                "prompts_per_step (per process) a multiple of gradient_accumulation_steps"
            )
        rows = groups // parts * group_size
        return [self.select(slice(i * rows, (i + 1) * rows)) for i in range(parts)]

    def select(self, rows: slice) -> Rollout:
        return Rollout(**{
            f.name: None if getattr(self, f.name) is None else getattr(self, f.name)[rows]
            for f in fields(self)
        })  # fmt: skip

    @staticmethod
    def cat(rollouts: list[Rollout]) -> Rollout:
        """One rollout made of several (for example the rollouts of every DDP process)."""
        first = rollouts[0]
        return Rollout(**{
            f.name: None if getattr(first, f.name) is None
            else torch.cat([getattr(r, f.name) for r in rollouts])
            for f in fields(first)
        })  # fmt: skip

    def to(self, device: torch.device | str) -> Rollout:
        return Rollout(**{
            f.name: None if getattr(self, f.name) is None else getattr(self, f.name).to(device)
            for f in fields(self)
        })  # fmt: skip
