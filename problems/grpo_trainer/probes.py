"""Probes of the capstone: they build what a GRPO step works on from plain data, run the
learner's functions on it, and return what happened, as plain data, for the tests to judge.

Everything is described by plain values, so the tests can build the very same objects in
their own process and compute what a correct step would have done:

    model      {"seed": 0, "config": {GPTConfig's fields}, "wrap": None}: a reference.gpt.GPT
               built after seeding torch's CPU generator with `seed`; "wrap" names one of
               WRAPPERS (another interface, or a policy that ends its completions as told)
    config     GRPOConfig's keyword arguments
    rollout    Rollout's fields (tensors, or None)
    optimizer  {"kind": "SGD" or "AdamW", "lr": ..., "record_grads": bool, ...}: an optimizer
               that records the learning rate (and the gradients) of every step() it takes
    scheduler  None or the name of one of SCHEDULES (a LambdaLR factor of the update count)
    reward     the name of one of REWARDS; the reward function records every call

A probe judges nothing: what it returns is only what the learner's code did.
"""

from __future__ import annotations

import contextlib
import functools
import math
import sys
from collections.abc import Callable
from dataclasses import fields

import torch

from grader.errors import UnexpectedResult
from problems.support.host_transfers import HostTransfers
from problems.support.records import Records
from problems.support.toy_models import parameter_state, state_changes
from reference.gpt import GPT, GPTConfig
from reference.grpo_config import GRPOConfig, Rollout
from reference.tasks import ReverseDigits

TASK = ReverseDigits()  # the learning test's task; its tokenizer's EOS is every probe's
EOS = TASK.tokenizer.eos_id

# ---------------------------------------------------------------- models


class LogitsOnly(torch.nn.Module):
    """A causal LM that returns its logits as a bare tensor and takes no KV cache."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask=None):
        return self.model(input_ids, attention_mask=attention_mask).logits


class NeedsMask(LogitsOnly):
    """A causal LM that must be told its attention mask, as the statement's call passes it."""

    def forward(self, input_ids, *, attention_mask):
        return super().forward(input_ids, attention_mask)


class NeverEnds(LogitsOnly):
    """A causal LM that never emits EOS: every completion is truncated."""

    def forward(self, input_ids, attention_mask=None):
        logits = super().forward(input_ids, attention_mask).clone()
        logits[..., EOS] = float("-inf")
        return logits


class EndsLast(LogitsOnly):
    """A causal LM that emits EOS as the last token that fits in its block, and never before:
    completions that end exactly at the length limit (not truncated)."""

    def forward(self, input_ids, attention_mask=None):
        logits = super().forward(input_ids, attention_mask).clone()
        if input_ids.shape[1] == self.model.config.block_size - 1:  # the last token
            eos = logits[:, -1, EOS].clone()
            logits[:, -1] = float("-inf")
            logits[:, -1, EOS] = eos
        else:
            logits[:, -1, EOS] = float("-inf")
        return logits


WRAPPERS = {
    None: lambda model: model,
    "logits_only": LogitsOnly,
    "needs_mask": NeedsMask,
    "never_ends": NeverEnds,
    "ends_last": EndsLast,
}


def build_model(spec: dict | None) -> torch.nn.Module | None:
    if spec is None:
        return None
    # The CPU generator only: torch.manual_seed also queues the seed for every kind of
    # accelerator, which takes longer than building a tiny model.
    torch.default_generator.manual_seed(spec["seed"])
    model = WRAPPERS[spec.get("wrap")](GPT(GPTConfig(**spec["config"])))
    if spec.get("frozen"):  # its first parameter frozen, as a caller freezes an embedding
        next(model.parameters()).requires_grad_(False)
    if "dtype" in spec:  # a reference model kept in bfloat16, say
        model = model.to(getattr(torch, spec["dtype"]))
    return model.train(spec.get("training", True))


def _forward_notes(model: torch.nn.Module, with_grad: bool) -> Callable[[], list]:
    """A function giving the model's `training` flag at each of its calls made with autograd
    on (`with_grad`) or off, in order. The hook that notes them lives on the model, which the
    solution holds: one it removed makes that function raise."""
    seen: list = []

    def note(module, args):
        if torch.is_grad_enabled() == with_grad:
            seen.append(module.training)

    hook = model.register_forward_pre_hook(note)

    def noted() -> list:
        if model._forward_pre_hooks.get(hook.id) is not note:
            raise UnexpectedResult("the model's forward hooks were changed: leave them as they are")
        return seen

    return noted


def watch_modes(model: torch.nn.Module) -> Callable[[], list]:
    """A function giving the modes of the model's calls made with autograd on (the passes a
    gradient comes from)."""
    noted = _forward_notes(model, with_grad=True)
    return lambda: sorted(set(noted()))


def count_passes_without_grad(model: torch.nn.Module) -> Callable[[], int]:
    """A function giving how many of the model's calls ran with autograd off: in compute_loss
    and optimize, a pass no gradient comes from (old log-probs of a pass of their own)."""
    noted = _forward_notes(model, with_grad=False)
    return lambda: len(noted())


def modes(*models: torch.nn.Module | None) -> list:
    """Each model's `training` flag (None for no model)."""
    return [None if model is None else model.training for model in models]


def parameter_states(policy: torch.nn.Module, ref: torch.nn.Module | None) -> dict[str, str]:
    """Each parameter's dtype, device and requires_grad (not its gradient, which a step sets),
    the policy's and the reference model's."""
    models = {"policy": policy, "ref_model": ref}
    return {f"{which}.{name}": state for which, model in models.items() if model is not None
            for name, state in parameter_state(model, grads=False).items()}  # fmt: skip


def named_parameters(model: torch.nn.Module) -> list:
    """The GPT's own parameter names, through any wrapper."""
    return list((model.model if isinstance(model, LogitsOnly) else model).named_parameters())


def weights(model: torch.nn.Module) -> dict:
    return {name: p.detach().clone() for name, p in named_parameters(model)}


def gradients(model: torch.nn.Module) -> dict:
    return {
        name: None if p.grad is None else p.grad.detach().clone()
        for name, p in named_parameters(model)
    }


# ---------------------------------------------------------------- optimizers and schedules


# What the probes record about the objects they hand over, kept here and not on the objects
# (see problems/support/records.py): a solution holds the optimizer and the scheduler, and
# could edit a record kept on them (del optimizer.steps[-1] hid a step too many).
RECORDS = Records()


class Recording:
    """An optimizer that records, at every step, the learning rate (and gradients) it uses.

    The record is taken by a step pre-hook, which torch runs in whatever class's step the call
    goes through: SGD.step(optimizer), which skips this class, is recorded all the same (the
    base classes are hooked below, before any solution runs)."""

    def __init__(self, model: torch.nn.Module, record_grads: bool | int = True, **options):
        """`record_grads`: the gradients of every step (True), of none (False) or of the first
        `record_grads` steps."""
        named = named_parameters(model)
        super().__init__([p for _, p in named], **options)
        if isinstance(record_grads, bool):
            record_grads = math.inf if record_grads else 0
        RECORDS[self] = {"grad_steps": record_grads, "steps": [], "named": named}
        self.register_step_pre_hook(_record_step)


def _record_step(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    kept = RECORDS[optimizer]
    record = {"lr": float(optimizer.param_groups[0]["lr"])}
    if len(kept["steps"]) < kept["grad_steps"]:
        record["grads"] = {name: None if p.grad is None else p.grad.detach().clone()
                           for name, p in kept["named"]}  # fmt: skip
    kept["steps"].append(record)


def steps_of(optimizer: Recording) -> list[dict]:
    """Every step() of `optimizer`: its learning rate (and gradients)."""
    return RECORDS[optimizer]["steps"]


class RecordingSGD(Recording, torch.optim.SGD):
    pass


class RecordingAdamW(Recording, torch.optim.AdamW):
    pass


OPTIMIZERS = {"SGD": RecordingSGD, "AdamW": RecordingAdamW}
# torch wraps a class's step with the hooks the first time an optimizer of that very class is
# built; built here, every base class's own step runs them too.
for _base in {base for kind in OPTIMIZERS.values() for base in kind.__mro__[1:]
              if "step" in vars(base) and issubclass(base, torch.optim.Optimizer)
              and base is not torch.optim.Optimizer}:  # fmt: skip
    _base([torch.zeros(1, requires_grad=True)], lr=0.0)
SCHEDULES = {"halving": lambda updates: 0.5**updates}


def build_optimizer(model: torch.nn.Module, spec: dict) -> Recording:
    options = {k: v for k, v in spec.items() if k != "kind"}
    return OPTIMIZERS[spec["kind"]](model, **options)


# What sets the optimizer's rates in every scheduler step, whichever class's step the call
# went through: get_lr() called alone computes them and sets nothing.
_SETS_RATES = torch.optim.lr_scheduler.LRScheduler._update_lr.__code__
_caller = sys._getframe


def build_scheduler(optimizer: Recording, name: str | None):
    """A LambdaLR whose steps the probe counts by the calls of its schedule that set the
    optimizer's rates for an update count not seen before: every step makes one per parameter
    group (its last_epoch is the solution's). Building it takes the first."""
    if name is None:
        return None
    schedule, updates_seen = SCHEDULES[name], []

    def counted(updates: int) -> float:
        frame = _caller(1)
        for _ in range(4):  # <listcomp>, get_lr, _update_lr
            if frame is None or frame.f_code is _SETS_RATES:
                break
            frame = frame.f_back
        if frame is not None and frame.f_code is _SETS_RATES and updates not in updates_seen:
            updates_seen.append(updates)
        return schedule(updates)

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, counted)
    RECORDS[scheduler] = {"updates_seen": updates_seen}
    return scheduler


def scheduler_steps(scheduler) -> int:
    return len(RECORDS[scheduler]["updates_seen"]) - 1


# ---------------------------------------------------------------- reward functions


def mod3(completion_ids: torch.Tensor, answers: list) -> list[float]:
    """The share of a completion's tokens that equal its answer modulo 3: varied, answer-bound."""
    targets = torch.tensor([int(a) % 3 for a in answers])
    return ((completion_ids % 3) == targets[:, None]).double().mean(1).tolist()


def mod3_tensor(completion_ids: torch.Tensor, answers: list) -> torch.Tensor:
    return torch.tensor(mod3(completion_ids, answers), dtype=torch.float64)


def mod3_tiny(completion_ids: torch.Tensor, answers: list) -> list[float]:
    """mod3 times 1e-7: groups whose std is near the advantages' eps of 1e-8."""
    return [1e-7 * r for r in mod3(completion_ids, answers)]


def mod3_ranked(completion_ids: torch.Tensor, answers: list) -> list[float]:
    """mod3 plus a quarter of each row's place in the call (row / rows), as a reward that looks
    at the whole batch may score: called per group, or on rows in another order, it gives
    other rewards, so the rewards themselves show how it was called."""
    rows = len(completion_ids)
    return [score + 0.25 * row / rows for row, score in enumerate(mod3(completion_ids, answers))]


def mod3_pairs(completion_ids: torch.Tensor, answers: list) -> list[float]:
    """mod3_ranked against the first item of each row's answer, a pair of digit strings: an
    answer can be any value, a tuple included."""
    return mod3_ranked(completion_ids, [answers[row][0] for row in range(len(completion_ids))])


def given_or_mod3(completion_ids: torch.Tensor, answers: list) -> list[float]:
    """A row's answer itself when it is a float, the same for each completion of its prompt (a
    group of equal rewards); mod3 against it when it is a string of digits."""
    scores = mod3(completion_ids, [0 if isinstance(a, float) else a for a in answers])
    return [a if isinstance(a, float) else score for a, score in zip(answers, scores, strict=True)]


def reverse_digits(completion_ids: torch.Tensor, answers: list) -> list[float]:
    """The reverse-digits task's own reward: the share of the answer's characters right."""
    return TASK.reward(TASK.tokenizer.decode_batch(completion_ids), list(answers))


REWARDS = {"mod3": mod3, "mod3_tensor": mod3_tensor, "mod3_tiny": mod3_tiny,
           "mod3_pairs": mod3_pairs, "mod3_ranked": mod3_ranked,
           "given_or_mod3": given_or_mod3, "reverse_digits": reverse_digits}  # fmt: skip


class RecordingReward:
    """One of REWARDS that records the completion ids and the answers of every call. Its
    parameters are positional-only: the statement calls reward_fn(completion_ids,
    answers_per_row), and a reward function may name its parameters as it likes."""

    def __init__(self, name: str):
        self.function = REWARDS[name]
        RECORDS[self] = []

    def __call__(self, completion_ids, answers, /):
        with torch.device("cpu"):  # a reward function's own tensors are none of the step's
            RECORDS[self].append(
                {
                    "completion_ids": torch.as_tensor(completion_ids).clone(),
                    "answers": list(answers),
                }
            )
            return self.function(completion_ids, answers)


# ---------------------------------------------------------------- plumbing


def single_threaded(probe):
    """Tiny matrices: more threads only fight over the cores (restored afterwards)."""

    @functools.wraps(probe)
    def run(*args, **kwargs):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return probe(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)

    return run


def rollout_fields(rollout, what: str) -> dict:
    """A Rollout's fields as a dict, or UnexpectedResult when `rollout` is no Rollout."""
    names = [f.name for f in fields(Rollout)]
    if not all(hasattr(rollout, name) for name in names):
        raise UnexpectedResult(f"{what} should return a Rollout, got {type(rollout).__name__}")
    return {name: getattr(rollout, name) for name in names}


def checked_dict(result, what: str) -> dict:
    if not isinstance(result, dict):
        raise UnexpectedResult(
            f"{what} should return a dict with 'loss', 'grad_norm' and 'logps', "
            f"got {type(result).__name__}"
        )
    return dict(result)


# ---------------------------------------------------------------- probes


@single_threaded
def run_completion_logps(solution, model, input_ids, prompt_length, config, weights_of_logps):
    """completion_logps, and the gradient of sum(weights_of_logps * logps) it leads to."""
    network = build_model(model)
    logps = solution.completion_logps(network, input_ids, prompt_length, GRPOConfig(**config))
    if not isinstance(logps, torch.Tensor):
        raise UnexpectedResult(
            f"completion_logps should return a tensor, got {type(logps).__name__}"
        )
    if logps.requires_grad and logps.shape == weights_of_logps.shape:
        (logps * weights_of_logps).sum().backward()
    return {"logps": logps, "grads": gradients(network)}


@single_threaded
def run_generate_rollout(
    solution, policy, ref, prompt_ids, answers, reward, eos_ids, config, seed, global_seed=0
):
    """generate_rollout with a generator seeded `seed` (and torch's global generator seeded
    `global_seed`), and the calls of its reward function."""
    policy_model, ref_model = build_model(policy), build_model(ref)
    grad_modes = watch_modes(policy_model)
    kept = parameter_states(policy_model, ref_model)
    reward_fn = RecordingReward(reward)
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(global_seed)
    rollout = solution.generate_rollout(
        policy_model,
        ref_model,
        prompt_ids,
        answers,
        reward_fn,
        eos_ids,
        GRPOConfig(**config),
        generator,
    )
    return {
        "rollout": rollout_fields(rollout, "generate_rollout"),
        "reward_calls": RECORDS[reward_fn],
        "training": modes(policy_model, ref_model),
        "grad_modes": grad_modes(),
        "parameters_changed": state_changes(kept, parameter_states(policy_model, ref_model)),
    }


@single_threaded
def run_compute_loss(solution, policy, rollout, config, normalizer=None):
    """compute_loss, and the gradient of the loss it returns."""
    network = build_model(policy)
    passes_without_grad = count_passes_without_grad(network)
    result = solution.compute_loss(network, Rollout(**rollout), GRPOConfig(**config), normalizer)
    if not (isinstance(result, tuple | list) and len(result) == 2):
        raise UnexpectedResult(f"compute_loss should return (loss, logps), got {result!r:.100}")
    loss, logps = result
    if not (isinstance(loss, torch.Tensor) and loss.requires_grad):
        raise UnexpectedResult(
            f"compute_loss's loss should be a tensor that requires grad, got {loss!r:.100}"
        )
    loss.backward()
    return {"loss": loss, "logps": logps, "grads": gradients(network),
            "passes_without_grad": passes_without_grad()}  # fmt: skip


@single_threaded
def run_optimize(solution, policy, rollout, config, optimizer, scheduler=None, stale_grads=False):
    """optimize with a recording optimizer: its result, every step() and the weights after,
    and how many times the scheduler stepped (None without one).

    `stale_grads`: every parameter comes with a gradient of ones, left over from some earlier
    backward pass of the caller's."""
    network = build_model(policy)
    passes_without_grad = count_passes_without_grad(network)
    recorder = build_optimizer(network, optimizer)
    if stale_grads:
        for _, parameter in named_parameters(network):
            parameter.grad = torch.ones_like(parameter)
    batch = Rollout(**rollout)
    schedule = build_scheduler(recorder, scheduler)
    result = solution.optimize(network, recorder, batch, GRPOConfig(**config), schedule)
    return {
        "result": checked_dict(result, "optimize"),
        "old_logps": batch.old_logps,
        "steps": steps_of(recorder),
        "weights": weights(network),
        # A step skipped at the end shows only here: in the count, and in the rates it sets.
        "scheduler_steps": None if schedule is None else scheduler_steps(schedule),
        "learning_rates": [float(group["lr"]) for group in recorder.param_groups],
        "passes_without_grad": passes_without_grad(),
    }


@single_threaded
def run_grpo_step(
    solution,
    policy,
    ref,
    optimizer,
    prompt_ids,
    answers,
    reward,
    eos_ids,
    config,
    seed,
    scheduler=None,
    default_device=None,
    watch_host=False,
):
    """grpo_step: its rollout and result, the reward calls, every step() and the weights after;
    torch's default device is `default_device` during the call, and with `watch_host` the
    result's "host_transfers" lists the calls that moved data to the host (see
    problems/support/host_transfers.py)."""
    network, ref_model = build_model(policy), build_model(ref)
    grad_modes = watch_modes(network)
    kept = parameter_states(network, ref_model)
    recorder = build_optimizer(network, optimizer)
    reward_fn = RecordingReward(reward)
    generator = torch.Generator().manual_seed(seed)
    default = contextlib.nullcontext() if default_device is None else torch.device(default_device)
    host = HostTransfers() if watch_host else contextlib.nullcontext()
    with default, host:
        result = solution.grpo_step(network, ref_model, recorder, prompt_ids, answers, reward_fn,
                                    eos_ids, GRPOConfig(**config), generator,
                                    build_scheduler(recorder, scheduler))  # fmt: skip
    if not (isinstance(result, tuple | list) and len(result) == 2):
        raise UnexpectedResult(f"grpo_step should return (rollout, dict), got {result!r:.100}")
    rollout, out = result
    return {
        "rollout": rollout_fields(rollout, "grpo_step"),
        "result": checked_dict(out, "grpo_step"),
        "reward_calls": RECORDS[reward_fn],
        "steps": steps_of(recorder),
        "weights": weights(network),
        "training": modes(network, ref_model),
        "grad_modes": grad_modes(),
        "parameters_changed": state_changes(kept, parameter_states(network, ref_model)),
        "host_transfers": host.seen if watch_host else None,
    }


@single_threaded
def train_reverse_digits(
    solution, policy, optimizer, batches, eos_ids, config, seed, stop_above=None
):
    """grpo_step on each (prompt_ids, answers) of `batches` in turn, with the task's reward.

    Stops early, to save time, once the mean reward of the last three rollouts is above
    `stop_above` (the test judges the weights itself, whatever the rollouts said). Returns,
    for every step, its rollout's completions and rewards and the weights after it.
    """
    network = build_model(policy)
    recorder = build_optimizer(network, optimizer)
    cfg, generator = GRPOConfig(**config), torch.Generator().manual_seed(seed)
    steps, means = [], []
    for prompt_ids, answers in batches:
        reward_fn = RecordingReward("reverse_digits")
        result = solution.grpo_step(
            network, None, recorder, prompt_ids, answers, reward_fn, eos_ids, cfg, generator
        )
        rollout = rollout_fields(result[0], "grpo_step")
        steps.append(
            {
                "completion_ids": rollout["completion_ids"],
                "rewards": rollout["rewards"],
                "weights": weights(network),
            }
        )
        means.append(float(torch.as_tensor(rollout["rewards"]).float().mean()))
        if stop_above is not None and len(means) >= 3 and sum(means[-3:]) / 3 > stop_above:
            break
    return {"steps": steps}
