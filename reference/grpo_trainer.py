"""Reference solution of the capstone: one GRPO training step, built from the earlier problems.

    generate_rollout   sample G completions per prompt, score them, compute group advantages,
                       cache the reference log-probs the updates need
    completion_logps   per-token log-probs of the completion tokens under a model
                       (completion_logits reads a group's shared prompt only once)
    compute_loss       the GRPO loss of a (micro-)batch under the current policy
    optimize           num_iterations updates on one rollout, in micro-batches; the first one
                       also gives the old policy's log-probs the later ones need
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

from reference.completion_mask import completion_mask, truncated_rows
from reference.group_advantages import group_advantages
from reference.grpo_config import GRPOConfig, Rollout
from reference.grpo_loss_torch import grpo_loss
from reference.logprob_chunks import chunked_token_logprobs
from reference.masked_token_loss import loss_denominator
from reference.sample_group import (
    SampledGroup,
    _forward_parameters,
    accepts_kv_cache,
    position_ids,
    sample_group,
    select_cache_rows,
)

# reward_fn(completion_ids (N, L), answers: one per row) -> N rewards
RewardFn = Callable[[torch.Tensor, list], Sequence[float] | torch.Tensor]
# A sampler called as sample_group is, e.g. reference.generation.StaticCacheSampler.
SampleFn = Callable[..., SampledGroup]


def completion_logps(
    model: torch.nn.Module,
    input_ids: torch.Tensor,  # (N, P + L) prompt then completion
    prompt_length: int,
    config: GRPOConfig,
    attention_mask: torch.Tensor | None = None,  # (N, P + L) for left-padded prompts
) -> torch.Tensor:
    """(N, L) log-probs of the completion tokens, from logits divided by the temperature."""
    with config.autocast(input_ids.device):
        logits = completion_logits(model, input_ids, prompt_length, attention_mask)  # (N, L, V)
    # float32 whatever the autocast dtype (ratios of bf16 log-probs are far too coarse), computed
    # by token_logprobs a few rows at a time so that no float32 copy of all the logits is kept.
    return chunked_token_logprobs(logits, input_ids[:, prompt_length - 1 :], config.temperature)


def completion_logits(
    model: torch.nn.Module,
    input_ids: torch.Tensor,  # (N, P + L)
    prompt_length: int,
    attention_mask: torch.Tensor | None = None,  # (N, P + L), None: no padding
) -> torch.Tensor:
    """(N, L, V) the logits at positions P - 1 .. P + L - 2, those that predict the completion.

    The model reads only what it must. The last token predicts nothing that is scored: it is
    left out. Consecutive rows with the same prompt (a group) share it: a model that takes a
    KV cache reads each prompt once, and its keys and values serve every completion of the
    group (the gradients of the copies add up in the backward pass). With G completions per
    prompt this about halves the work when prompts are as long as completions. A second pass
    has costs of its own (every weight's gradient is summed from two), so a prompt too short
    to spare a tenth of the tokens is read with the rest.
    """
    P, T = prompt_length, input_ids.shape[1]
    L = T - P
    padded = attention_mask is not None
    mask = attention_mask if padded else torch.ones_like(input_ids)
    # Positions as when sampling, counting real tokens only, for a model that takes them.
    positions = position_ids(model, mask) if padded else None
    # Logits only where they are used, from a model that can skip the others (transformers').
    keeps_logits = "logits_to_keep" in _forward_parameters(model)

    def run(rows, start: int, end: int, keep: int, **cache):
        """The model on tokens start .. end - 1 of `rows`, the tokens before them cached;
        the logits of the last `keep` positions at least (0: of every position)."""
        extra = {} if positions is None else {"position_ids": positions[rows, start:end]}
        if keeps_logits:
            extra["logits_to_keep"] = keep
        return model(input_ids[rows, start:end], attention_mask=mask[rows, :end], **extra, **cache)

    def every_row_alone() -> torch.Tensor:
        return _logits(run(slice(None), 0, T - 1, keep=L))[:, -L:]  # (N, L, V)

    prompts = torch.cat([input_ids[:, :P], mask[:, :P]], dim=1)  # (N, 2P) tokens and padding
    _, group_of_row, group_sizes = torch.unique_consecutive(
        prompts, dim=0, return_inverse=True, return_counts=True
    )  # (N,) and (n_groups,)
    spared = (len(prompts) - len(group_sizes)) * P  # prompt tokens a shared cache spares
    repeated = 10 * spared >= len(prompts) * (T - 1) and P < T - 1  # and a token after it
    if not (repeated and accepts_kv_cache(model)):
        return every_row_alone()

    first_rows = torch.cumsum(group_sizes, dim=0) - group_sizes  # (n_groups,)
    prompt_output = run(first_rows, 0, P, keep=1, use_cache=True)  # logits (n_groups, 1+, V)
    if prompt_output.past_key_values is None:  # no cache after all (gradient checkpointing)
        return every_row_alone()
    past = select_cache_rows(prompt_output.past_key_values, group_of_row)  # each row's prompt
    output = run(slice(None), P, T - 1, keep=0, past_key_values=past, use_cache=True)
    last_prompt_logits = _logits(prompt_output)[group_of_row, -1:]  # (N, 1, V)
    return torch.cat([last_prompt_logits, _logits(output)], dim=1)  # (N, L, V)


def _logits(output) -> torch.Tensor:
    return output if isinstance(output, torch.Tensor) else output.logits


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
    sample_fn: SampleFn | None = None,  # None: sample_group
) -> Rollout:
    if config.max_completion_length is None:
        raise ValueError("config.max_completion_length is None: set it to the longest completion")
    G = config.num_generations
    device = next(policy.parameters()).device
    prompt_ids = prompt_ids.to(device)
    # Sample with the bare model: a DistributedDataParallel wrapper hides the KV-cache arguments.
    sampler = getattr(policy, "module", policy)
    sample = sample_fn or sample_group
    with config.autocast(device):
        group = sample(
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

    truncated = truncated_rows(completion_ids, eos_ids)  # (N,) never stopped
    mask = group.completion_mask  # (N, L)
    if config.mask_truncated_completions:
        mask = completion_mask(completion_ids, eos_ids, mask_truncated=True)

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
    # The old policy's log-probs need no pass of their own: optimize's first iteration gives them.
    if config.beta > 0 and ref_model is not None:
        rollout.ref_logps = completion_logps(
            ref_model, rollout.input_ids, prompt_ids.shape[1], config, rollout.attention_mask
        )
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
    # None at the first iteration: the current policy is the one that sampled, so rho = 1 (but
    # its gradient is not 0), and optimize keeps these log-probs as the old ones.
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
    local = loss_denominator(mask, config.aggregation, config.max_completion_length)
    total = torch.as_tensor(local, dtype=torch.float32, device=mask.device)
    world_size = 1
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(total)
        world_size = dist.get_world_size()
    # DDP averages gradients over processes, so each one divides by global / world size.
    return max(float(total), 1.0) / world_size


def optimize(
    policy: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    rollout: Rollout,
    config: GRPOConfig,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
) -> dict:
    """num_iterations optimizer steps on one rollout; fills in rollout.old_logps (N, L).

    Returns the last iteration's loss and gradient norm (floats) and its log-probs (N, L),
    taken before that iteration's update (the ratios and the KL of the metrics use them).
    """
    micro_batches = rollout.split(config.gradient_accumulation_steps, config.num_generations)
    normalizer = _normalizer(rollout, config)
    for _ in range(config.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        loss_sum, logps = 0.0, []
        for i, micro in enumerate(micro_batches):
            # Under DDP only the last backward of a step averages the gradients across processes.
            last = i == len(micro_batches) - 1
            skip_sync = not last and hasattr(policy, "no_sync")
            with policy.no_sync() if skip_sync else contextlib.nullcontext():
                loss, micro_logps = compute_loss(policy, micro, config, normalizer)
                loss.backward()  # micro-batch losses share one normalizer: their sum is the loss
            loss_sum += loss.detach()
            logps.append(micro_logps)
            if micro.old_logps is None:
                # First iteration: no optimizer step has happened yet (in any micro-batch or
                # process), so the policy is still the one that sampled and these are the old
                # log-probs a separate pass would recompute. Exact because the forward pass is
                # deterministic: reference.gpt has no dropout (with dropout on, a separate pass
                # would draw other masks: no closer to the sampling policy's log-probs).
                micro.old_logps = micro_logps
        params = [p for p in policy.parameters() if p.grad is not None]
        grad_norm = torch.nn.utils.clip_grad_norm_(
            params, config.max_grad_norm if config.max_grad_norm is not None else float("inf")
        )
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    rollout.old_logps = torch.cat([micro.old_logps for micro in micro_batches])  # for metrics
    return {"loss": float(loss_sum), "grad_norm": float(grad_norm), "logps": torch.cat(logps)}


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
    sample_fn: SampleFn | None = None,
) -> tuple[Rollout, dict]:
    """One GRPO step: sample and score a group per prompt, then update the policy."""
    rollout = generate_rollout(
        policy, ref_model, prompt_ids, answers, reward_fn, eos_ids, config, generator, prompt_mask,
        sample_fn,
    )  # fmt: skip
    return rollout, optimize(policy, optimizer, rollout, config, scheduler)
