"""Reference solution of the capstone: one GRPO training step, built from the earlier problems.

    generate_rollout   sample G completions per prompt, score them, compute group advantages,
                       cache the old-policy and reference log-probs the updates need
    completion_logps   per-token log-probs of the completion tokens under a model
    compute_loss       the GRPO loss of a (micro-)batch under the current policy
    optimize           num_iterations updates on one rollout, in micro-batches
    grpo_step          generate_rollout + optimize

Every formula comes from the reference solution of its own problem; this module only wires
them together. The training loop around it (logging, checkpoints, evaluation, several
processes) is reference/trainer.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from reference.group_advantages import group_advantages
from reference.grpo_config import GRPOConfig, Rollout
from reference.grpo_loss_torch import grpo_loss
from reference.sample_group import position_ids, sample_group
from reference.token_logprobs import token_logprobs

# reward_fn(completion_ids (N, L), answers: one per row) -> N rewards
RewardFn = Callable[[torch.Tensor, list], Sequence[float] | torch.Tensor]


def completion_logps(
    model: torch.nn.Module,
    input_ids: torch.Tensor,  # (N, P + L) prompt then completion
    prompt_length: int,
    config: GRPOConfig,
    attention_mask: torch.Tensor | None = None,  # (N, P + L) for left-padded prompts
) -> torch.Tensor:
    """(N, L) log-probs of the completion tokens, from logits divided by the temperature."""
    extra = {}
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    else:  # positions as when sampling: counting real tokens only
        positions = position_ids(model, attention_mask)
        extra = {} if positions is None else {"position_ids": positions}
    with config.autocast(input_ids.device):
        output = model(input_ids, attention_mask=attention_mask, **extra)
    logits = output if isinstance(output, torch.Tensor) else output.logits  # (N, P + L, V)
    # float32 whatever the autocast dtype: ratios of bf16 log-probs are far too coarse.
    return token_logprobs(logits.float(), input_ids, prompt_length, config.temperature)


@torch.no_grad()
def generate_rollout(
    policy: torch.nn.Module,
    ref_model: torch.nn.Module | None,
    prompt_ids: torch.Tensor,  # (B, P)
    answers: list,  # B answers, one per prompt
    reward_fn: RewardFn,
    eos_ids: int | Sequence[int],
    config: GRPOConfig,
    generator: torch.Generator | None = None,
    prompt_mask: torch.Tensor | None = None,  # (B, P) left-padded prompts: 1 = real token
) -> Rollout:
    if config.max_completion_length is None:
        raise ValueError("config.max_completion_length is None: set it to the longest completion")
    G = config.num_generations
    device = next(policy.parameters()).device
    prompt_ids = prompt_ids.to(device)
    # Sample with the bare model: a DistributedDataParallel wrapper hides the KV-cache arguments.
    sampler = getattr(policy, "module", policy)
    with config.autocast(device):
        group = sample_group(
            sampler, prompt_ids, G, config.max_completion_length, eos_ids,
            temperature=config.temperature, top_k=config.top_k, top_p=config.top_p,
            generator=generator, prompt_mask=prompt_mask,
        )  # fmt: skip
    completion_ids = group.completion_ids  # (N, L), N = B * G
    # Scores can come from anywhere (a Python function, a list): make them a float tensor.
    answers_per_row = [answer for answer in answers for _ in range(G)]
    rewards = torch.as_tensor(
        reward_fn(completion_ids, answers_per_row), dtype=torch.float32, device=device
    )  # (N,)
    advantages = group_advantages(rewards, G, scale_by_std=config.scale_by_std)  # (N,)

    eos = torch.as_tensor(eos_ids, device=device).reshape(-1)
    truncated = ~torch.isin(completion_ids, eos).any(dim=1)  # (N,) never stopped
    mask = group.completion_mask
    if config.mask_truncated_completions:
        mask = mask * ~truncated[:, None]

    rollout = Rollout(
        prompt_ids=prompt_ids.repeat_interleave(G, dim=0),
        completion_ids=completion_ids,
        completion_mask=mask,
        sampling_logps=group.logprobs,
        rewards=rewards,
        advantages=advantages,
        truncated=truncated,
        prompt_mask=None if prompt_mask is None else prompt_mask.to(device).repeat_interleave(G, 0),
    )
    P, attention = prompt_ids.shape[1], rollout.attention_mask  # None: no padding
    # Computed once here, not at each update: the policy that sampled is gone after one step.
    if config.num_iterations > 1:
        rollout.old_logps = completion_logps(policy, rollout.input_ids, P, config, attention)
    if config.beta > 0 and ref_model is not None:
        rollout.ref_logps = completion_logps(ref_model, rollout.input_ids, P, config, attention)
    return rollout


def compute_loss(
    policy: torch.nn.Module,
    rollout: Rollout,
    config: GRPOConfig,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss to minimize (0-d) and the current log-probs (N, L), detached, for metrics."""
    logps = completion_logps(
        policy, rollout.input_ids, rollout.prompt_ids.shape[1], config, rollout.attention_mask
    )
    # One update per batch: the old policy is the current one, so rho = 1 but its gradient is not 0.
    old = rollout.old_logps if rollout.old_logps is not None else logps.detach()
    ref = rollout.ref_logps if rollout.ref_logps is not None else logps.detach()
    loss = grpo_loss(
        logps, old, ref, rollout.advantages, rollout.completion_mask,
        epsilon=config.epsilon, beta=config.beta if rollout.ref_logps is not None else 0.0,
        aggregation=config.aggregation, epsilon_high=config.epsilon_high,
        max_len=config.max_completion_length, normalizer=normalizer,
    )  # fmt: skip
    return loss, logps.detach()


def _normalizer(rollout: Rollout, config: GRPOConfig) -> float:
    """The whole batch's loss denominator, shared by its micro-batches (and its processes)."""
    mask = rollout.completion_mask
    if config.aggregation == "token":
        local = mask.sum().float()
    elif config.aggregation == "sequence":
        local = torch.tensor(float(mask.shape[0]), device=mask.device)
    else:
        local = torch.tensor(float(mask.shape[0] * config.max_completion_length), device=mask.device)
    if dist.is_available() and dist.is_initialized():
        # DDP averages gradients over processes, so each one divides by global / world size.
        dist.all_reduce(local)
        local = local / dist.get_world_size()
    return max(float(local), 1e-8)


def optimize(
    policy: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    rollout: Rollout,
    config: GRPOConfig,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
) -> dict:
    """num_iterations optimizer steps on one rollout.

    Returns the last iteration's loss and gradient norm (floats) and its log-probs (N, L),
    taken before that iteration's update (the ratios and the KL of the metrics use them).
    """
    micro_batches = rollout.split(config.gradient_accumulation_steps, config.num_generations)
    normalizer = _normalizer(rollout, config)
    losses, grad_norms, logps = [], [], []
    for _ in range(config.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        total, logps = 0.0, []
        for i, micro in enumerate(micro_batches):
            # Under DDP only the last backward of a step averages the gradients across processes.
            last = i == len(micro_batches) - 1
            skip_sync = not last and hasattr(policy, "no_sync")
            with policy.no_sync() if skip_sync else contextlib.nullcontext():
                loss, micro_logps = compute_loss(policy, micro, config, normalizer)
                loss.backward()  # micro-batch losses share one normalizer: their sum is the loss
            total += float(loss.detach())
            logps.append(micro_logps)
        params = [p for p in policy.parameters() if p.grad is not None]
        grad_norm = torch.nn.utils.clip_grad_norm_(
            params, config.max_grad_norm if config.max_grad_norm is not None else float("inf")
        )
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        losses.append(total)
        grad_norms.append(float(grad_norm))
    optimizer.zero_grad(set_to_none=True)
    return {"loss": losses[-1], "grad_norm": grad_norms[-1], "logps": torch.cat(logps)}


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
    prompt_mask: torch.Tensor | None = None,
) -> tuple[Rollout, dict]:
    """One GRPO step: sample and score a group per prompt, then update the policy."""
    rollout = generate_rollout(
        policy, ref_model, prompt_ids, answers, reward_fn, eos_ids, config, generator, prompt_mask
    )
    return rollout, optimize(policy, optimizer, rollout, config, scheduler)
