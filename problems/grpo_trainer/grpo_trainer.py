"""Problem: the GRPO training step. Read README.md, then replace the five bodies below.

The kit gives you the data types (GRPOConfig, Rollout) and the solutions of the earlier
problems, imported below: use them rather than rewriting a formula.
"""

from __future__ import annotations

import contextlib  # noqa: F401 - DistributedDataParallel's no_sync() is a context manager
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist  # noqa: F401 - only if you want several processes

from reference.group_advantages import group_advantages  # noqa: F401
from reference.grpo_config import GRPOConfig, Rollout
from reference.grpo_loss_torch import grpo_loss  # noqa: F401
from reference.sample_group import sample_group  # noqa: F401
from reference.token_logprobs import token_logprobs  # noqa: F401

# reward_fn(completion_ids (N, L), answers: one per row) -> N rewards
RewardFn = Callable[[torch.Tensor, list], Sequence[float] | torch.Tensor]


def completion_logps(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    prompt_length: int,
    config: GRPOConfig,
) -> torch.Tensor:
    """Per-token log-probs of the completion tokens under `model`, shape (N, L).

    Args:
        model: a causal LM; `model(input_ids, attention_mask=...)` returns logits (N, T, V)
            or an object with `.logits`.
        input_ids: (N, P + L) prompt tokens then completion tokens.
        prompt_length: P.
        config: config.temperature divides the logits, as when sampling.
    """
    raise NotImplementedError("completion_logps is not implemented yet: write its body")


def generate_rollout(
    policy: torch.nn.Module,
    ref_model: torch.nn.Module | None,
    prompt_ids: torch.Tensor,
    answers: list,
    reward_fn: RewardFn,
    eos_ids: int | Sequence[int],
    config: GRPOConfig,
    generator: torch.Generator | None = None,
) -> Rollout:
    """Sample config.num_generations completions of each prompt and score them (no gradient).

    Args:
        policy: the model being trained; it samples the completions.
        ref_model: the frozen reference model, or None.
        prompt_ids: (B, P) prompts, all the same length.
        answers: B answers, one per prompt, passed to reward_fn (one per completion row).
        reward_fn: reward_fn(completion_ids, answers_per_row) -> N rewards.
        eos_ids: the end-of-sequence token id(s).
        config: num_generations, max_completion_length, temperature, top_k, top_p,
            scale_rewards, mask_truncated_completions, num_iterations, beta.
        generator: the random stream for sampling.

    Returns:
        A Rollout with every field filled in but old_logps (optimize's first iteration gives
        them); ref_logps only when config.beta > 0 and there is a reference model.

    Raises:
        ValueError: config.max_completion_length is None.
    """
    raise NotImplementedError("generate_rollout is not implemented yet: write its body")


def compute_loss(
    policy: torch.nn.Module,
    rollout: Rollout,
    config: GRPOConfig,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The GRPO loss of `rollout` under the current policy.

    The old log-probs are rollout.old_logps, or the current ones, detached, while it is None
    (the first iteration: the current policy is the one that sampled). Without
    rollout.ref_logps there is no KL term.

    Returns:
        (loss, logps): the 0-d loss to minimize, differentiable, and the current per-token
        log-probs (N, L), detached. `normalizer`, when given, replaces the loss's denominator.
    """
    raise NotImplementedError("compute_loss is not implemented yet: write its body")


def optimize(
    policy: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    rollout: Rollout,
    config: GRPOConfig,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
) -> dict:
    """config.num_iterations optimizer steps on one rollout, each over
    config.gradient_accumulation_steps micro-batches, with gradient clipping.

    The first iteration's log-probs are the old ones of the later iterations; set
    rollout.old_logps (N, L) to them. The scheduler, if any, steps once per optimizer step.

    Returns:
        {"loss": float, "grad_norm": float, "logps": (N, L) tensor} of the last iteration.
    """
    raise NotImplementedError("optimize is not implemented yet: write its body")


def grpo_step(
    policy: torch.nn.Module,
    ref_model: torch.nn.Module | None,
    optimizer: torch.optim.Optimizer,
    prompt_ids: torch.Tensor,
    answers: list,
    reward_fn: RewardFn,
    eos_ids: int | Sequence[int],
    config: GRPOConfig,
    generator: torch.Generator | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
) -> tuple[Rollout, dict]:
    """One GRPO step: generate_rollout, then optimize. Returns (rollout, optimize's dict)."""
    raise NotImplementedError("grpo_step is not implemented yet: write its body")
