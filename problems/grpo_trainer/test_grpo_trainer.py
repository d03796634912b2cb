"""Hidden tests for the GRPO training step. The implementation arrives through the `impl` fixture.

Models, optimizers and reward functions cannot cross to the learner's code: the probes
(probes.py) build them there from plain specs, and these tests build the very same models
here, from the same specs, to compute what a correct step does. Every expected value is
written out from first principles (log_softmax, gather, the clipped surrogate, means, an SGD
step); the tests judge effects (log-probs, gradients, how far and where the weights moved),
never what the learner's code says about itself.
"""

import math
from types import SimpleNamespace

import pytest
import torch

from problems.support.asserts import assert_scalar, assert_tensor
from problems.support.host_transfers import advice
from reference.gpt import GPT, GPTConfig
from reference.grpo_config import GRPOConfig
from reference.sample_group import sample_group
from reference.tasks import ReverseDigits

TASK = ReverseDigits()
EOS = TASK.tokenizer.eos_id
VOCAB = TASK.tokenizer.vocab_size
P, L = TASK.prompt_length, TASK.max_completion_length
TINY = {"vocab_size": VOCAB, "block_size": P + L, "n_layer": 1, "n_head": 4, "n_embd": 32}
# Prompts whose answers differ modulo 3, so the probes' "mod3" reward tells them apart.
PROMPT_IDS, ANSWERS = TASK.batch([1234, 5678, 3030, 1111])
SGD = {"kind": "SGD", "lr": 0.1}  # moves the tiny GPT's ratios well outside [0.8, 1.2]
LOSS_TYPES = ["grpo", "dapo", "dr_grpo"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny matrices: more threads only fight over the cores (the probes do the same)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny(seed: int = 0, wrap: str | None = None) -> dict:
    return {"seed": seed, "config": TINY, "wrap": wrap}


def gpt(spec: dict) -> GPT:
    """The model a probe builds from `spec` (the wrappers only change its interface)."""
    torch.default_generator.manual_seed(spec["seed"])  # as the probe does: the CPU's only
    return GPT(GPTConfig(**spec["config"]))


def config(**overrides) -> dict:
    base = dict(
        num_generations=4,
        max_completion_length=L,
        beta=0.0,
        num_iterations=1,
        loss_type="grpo",
        max_grad_norm=None,
    )
    return {**base, **overrides}


# -- what a correct step computes, written out ------------------------------------------------


def logps_of(model: GPT, input_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """(N, L) log-probs of the completion tokens: the logits at t - 1 score the token at t."""
    logits = model(input_ids).logits[:, P - 1 : -1] / temperature
    return torch.log_softmax(logits, -1).gather(-1, input_ids[:, P:, None])[..., 0]


def eos_mask(completion_ids: torch.Tensor, eos_ids=(EOS,)) -> torch.Tensor:
    """1 up to and including the first EOS of each row; all ones for a row without EOS."""
    is_eos = torch.isin(completion_ids, torch.tensor(eos_ids)).long()
    return ((is_eos.cumsum(1) - is_eos) == 0).long()


def grpo_loss(logps, old, ref, advantages, mask, cfg: GRPOConfig, normalizer: float):
    rho = torch.exp(logps - old)
    high = cfg.epsilon if cfg.epsilon_high is None else cfg.epsilon_high
    A = advantages[:, None]
    per_token = -torch.minimum(rho * A, rho.clamp(1 - cfg.epsilon, 1 + high) * A)
    if cfg.beta > 0 and ref is not None:
        log_ratio = ref - logps
        per_token = per_token + cfg.beta * (log_ratio.exp() - log_ratio - 1)  # k3
    per_token = per_token * mask
    if cfg.loss_type == "grpo":  # each completion's token mean, summed
        return (per_token.sum(1) / mask.sum(1).clamp(min=1)).sum() / normalizer
    return per_token.sum() / normalizer


def denominator(mask: torch.Tensor, cfg: GRPOConfig) -> float:
    """The whole batch's: completions, completion tokens (at least 1), or completions x L."""
    rows = mask.shape[0]
    tokens = max(float(mask.sum()), 1.0)
    return {"grpo": rows, "dapo": tokens, "dr_grpo": rows * cfg.max_completion_length}[
        cfg.loss_type
    ]


def sgd_optimize(policy: dict, rollout: dict, options: dict, lr: float, schedule=None) -> dict:
    """What optimize does with SGD (no momentum), on the whole batch at once: micro-batches
    that share the batch's normalizer add up to it. Returns the weights after and, per update,
    the learning rate, the gradient applied (clipped), the loss, the norm and the log-probs."""
    cfg = GRPOConfig(**options)
    model = gpt(policy)
    old, updates = None, []
    for k in range(cfg.num_iterations):
        update = grpo_gradient(model, rollout, cfg, old)
        old = update["logps"] if old is None else old  # the policy that sampled, kept
        update["lr"] = lr * (1.0 if schedule is None else schedule(k))
        update["grads"] = {n: p.grad.clone() for n, p in model.named_parameters()}
        with torch.no_grad():
            for name, p in model.named_parameters():
                p -= update["lr"] * update["grads"][name]
        updates.append(update)
    return {"weights": weights(model), "updates": updates, "old": old}


def grpo_gradient(model: GPT, rollout: dict, cfg: GRPOConfig, old: torch.Tensor | None) -> dict:
    """One iteration's backward pass of the GRPO loss on the whole batch, into the model's
    .grad, clipped to cfg.max_grad_norm. `old`: the sampling policy's log-probs (None on the
    first iteration: the model's own). Returns the loss, the norm before clipping and the
    log-probs."""
    model.zero_grad()
    input_ids = torch.cat([rollout["prompt_ids"], rollout["completion_ids"]], 1)
    mask = rollout["completion_mask"].float()
    logps = logps_of(model, input_ids, cfg.temperature)
    old = logps.detach() if old is None else old
    loss = grpo_loss(
        logps, old, rollout["ref_logps"], rollout["advantages"], mask, cfg, denominator(mask, cfg)
    )
    loss.backward()
    norm = math.sqrt(sum(float(p.grad.square().sum()) for p in model.parameters()))
    if cfg.max_grad_norm is not None:
        scale = min(1.0, cfg.max_grad_norm / (norm + 1e-6))
        for p in model.parameters():
            p.grad *= scale
    return {"loss": float(loss.detach()), "norm": norm, "logps": logps.detach()}


def weights(model: torch.nn.Module) -> dict:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def tensors_like(got, expected: dict, what: str, allow_none: bool = False) -> dict:
    """`got` checked to be a dict of tensors with `expected`'s names, shapes and dtypes (None
    allowed for a missing gradient): arithmetic would broadcast a tensor of a wrong shape (an
    empty one, say) into a small error."""
    if not isinstance(got, dict) or set(got) != set(expected):
        names = sorted(got) if isinstance(got, dict) else type(got).__name__
        raise AssertionError(f"{what}: expected the parameters {sorted(expected)}, got {names}")
    for name, want in expected.items():
        value = got[name]
        if value is None and allow_none:
            continue
        if not isinstance(value, torch.Tensor):
            raise AssertionError(f"{what}: {name} should be a tensor, got {type(value).__name__}")
        if value.shape != want.shape or value.dtype != want.dtype:
            raise AssertionError(
                f"{what}: {name} should be a {want.dtype} tensor of shape {tuple(want.shape)}, "
                f"got a {value.dtype} tensor of shape {tuple(value.shape)}"
            )
    return got


def assert_moved_as(got: dict, expected: dict, start: dict, what: str, rtol: float = 1e-3):
    """The weights moved from `start` to `got` as a correct step moves them to `expected`."""
    tensors_like(got, expected, what)
    size = math.sqrt(sum(float((expected[n] - start[n]).square().sum()) for n in expected))
    moved = math.sqrt(sum(float((got[n] - start[n]).square().sum()) for n in expected))
    errors = {n: float((got[n] - expected[n]).square().sum()) for n in expected}
    error = math.sqrt(sum(errors.values()))
    assert error <= rtol * size + 1e-7, (
        f"{what}: a correct step moves the weights by {size:.4g}; yours moved them by "
        f"{moved:.4g}, and {error:.3g} ({error / max(size, 1e-30):.1%} of the update) away from "
        f"where the correct step leads (most in {max(errors, key=errors.get)})"
    )


def assert_same_gradients(got: dict, expected: dict, what: str, rtol: float = 1e-3):
    tensors_like(got, expected, what, allow_none=True)
    missing = [n for n in expected if got[n] is None]
    assert not missing, f"{what}: no gradient reached {missing}"
    size = math.sqrt(sum(float(g.square().sum()) for g in expected.values()))
    error = math.sqrt(sum(float((got[n] - g).square().sum()) for n, g in expected.items()))
    assert error <= rtol * size + 1e-8, (
        f"{what}: the gradient is {error / max(size, 1e-30):.1%} away from the correct one "
        f"(norm {size:.4g})"
    )


def crafted_rollout(
    policy: dict,
    *,
    groups: int = 3,
    G: int = 4,
    seed: int = 0,
    temperature: float = 1.0,
    ref: dict | None = None,
    last_end: int = L,
) -> dict:
    """A rollout as generate_rollout gives one, made here: group i's rows share prompt i; each
    completion ends at EOS somewhere (row 0 at once, a 1-token completion) or never (rows 1
    and 2: truncated; row 1 masked out as mask_truncated_completions does). Advantages are
    arbitrary (not centred: a loss far from 0), and the sampler's log-probs are those of a
    top-k sampler, higher than the policy's own. With `last_end` < L, every completion has its
    EOS at position `last_end` or before (rows 1 and 2 there): none reaches L tokens."""
    gen = torch.Generator().manual_seed(seed)
    rows = groups * G
    prompt_ids = torch.randint(2, VOCAB, (groups, P), generator=gen).repeat_interleave(G, 0)
    completion_ids = torch.randint(2, VOCAB, (rows, L), generator=gen)
    ends = torch.randint(1, last_end + 1, (rows,), generator=gen)  # L: never ends
    ends[:3] = torch.tensor([0, last_end, last_end])
    after_end = torch.arange(L) >= ends[:, None]
    completion_ids[after_end] = EOS  # the EOS, then padding
    mask = eos_mask(completion_ids)
    mask[1] = 0
    advantages = torch.randn(rows, generator=gen)
    input_ids = torch.cat([prompt_ids, completion_ids], 1)
    with torch.no_grad():
        own = logps_of(gpt(policy), input_ids, temperature)
        ref_logps = None if ref is None else logps_of(gpt(ref), input_ids, temperature)
    return dict(
        prompt_ids=prompt_ids,
        completion_ids=completion_ids,
        completion_mask=mask,
        sampling_logps=torch.where(mask.bool(), (own + 0.3).clamp(max=0.0), 0.0),
        rewards=advantages.clone(),
        advantages=advantages,
        truncated=ends == L,
        old_logps=None,
        ref_logps=ref_logps,
        prompt_mask=None,
    )


def policy_logps(policy: dict, rollout: dict, temperature: float = 1.0) -> torch.Tensor:
    input_ids = torch.cat([rollout["prompt_ids"], rollout["completion_ids"]], 1)
    with torch.no_grad():
        return logps_of(gpt(policy), input_ids, temperature)


def optimize(impl, policy, rollout, options, optimizer=SGD, scheduler=None, **extra) -> dict:
    return impl.probe.run_optimize(policy, rollout, options, optimizer, scheduler, **extra)


# -- completion_logps -------------------------------------------------------------------------

LOGPS_CASES = {
    "groups sharing a prompt": dict(G=4, prompt=P, completion=L, temperature=1.0),
    "distinct prompts, temperature 0.5": dict(G=1, prompt=P, completion=L, temperature=0.5),
    "pairs, temperature 2": dict(G=2, prompt=P, completion=L, temperature=2.0),
    "a one-token prompt": dict(G=4, prompt=1, completion=L, temperature=1.0),
    "one-token completions": dict(G=4, prompt=P, completion=1, temperature=0.7),
    "a model returning bare logits": dict(
        G=4, prompt=P, completion=L, temperature=0.7, wrap="logits_only"
    ),
    "a model that must be given its attention mask": dict(
        G=2, prompt=P, completion=L, temperature=1.0, wrap="needs_mask"
    ),
}


@pytest.mark.parametrize("case", LOGPS_CASES.values(), ids=LOGPS_CASES.keys())
def test_completion_logps_are_the_tempered_log_probs_of_the_completion_tokens(impl, case):
    gen = torch.Generator().manual_seed(len(LOGPS_CASES) + case["G"])
    prompts = torch.randint(2, VOCAB, (8 // case["G"], case["prompt"]), generator=gen)
    completions = torch.randint(1, VOCAB, (8, case["completion"]), generator=gen)
    input_ids = torch.cat([prompts.repeat_interleave(case["G"], 0), completions], 1)
    weights_of_logps = torch.randn(8, case["completion"], generator=gen)
    spec = tiny(3, case.get("wrap"))
    options = config(temperature=case["temperature"])
    got = impl.probe.run_completion_logps(
        spec, input_ids, case["prompt"], options, weights_of_logps
    )

    model = gpt(spec)
    P_ = case["prompt"]
    logits = model(input_ids).logits[:, P_ - 1 : -1] / case["temperature"]
    expected = torch.log_softmax(logits, -1).gather(-1, input_ids[:, P_:, None])[..., 0]
    (expected * weights_of_logps).sum().backward()
    assert_tensor(
        got["logps"],
        expected.detach(),
        atol=1e-5,
        rtol=1e-4,
        what="the completion tokens' log-probs (logits / temperature)",
    )
    assert got["logps"].requires_grad, "completion_logps must stay differentiable"
    assert_same_gradients(
        got["grads"],
        {n: p.grad for n, p in model.named_parameters()},
        "the gradient through completion_logps",
    )


# -- generate_rollout -------------------------------------------------------------------------


def rollout_of(
    impl,
    policy=None,
    ref=None,
    *,
    groups=3,
    G=4,
    seed=0,
    reward="mod3",
    eos=EOS,
    global_seed=0,
    answers=None,
    **options,
):
    """(rollout, reward calls) of generate_rollout on the first `groups` prompts (and their
    answers, unless `answers` says otherwise)."""
    out = impl.probe.run_generate_rollout(
        policy or tiny(0),
        ref,
        PROMPT_IDS[:groups],
        ANSWERS[:groups] if answers is None else answers,
        reward,
        eos,
        config(num_generations=G, **options),
        seed,
        global_seed,
    )
    return SimpleNamespace(**out["rollout"]), out["reward_calls"]


def sampled_logps(model, input_ids, temperature, top_k, top_p):
    """Log-probs of the completion tokens under the distribution sampled from: temperature,
    then top-k, then top-p (the smallest set of most likely tokens whose mass reaches it)."""
    with torch.no_grad():
        logits = model(input_ids).logits[:, P - 1 : -1] / temperature
    if top_k:
        kth = torch.topk(logits, top_k, -1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, -1)
    order = probs.argsort(-1, descending=True)
    sorted_probs = probs.gather(-1, order)
    mass_before = sorted_probs.cumsum(-1) - sorted_probs
    drop = torch.zeros_like(probs, dtype=torch.bool).scatter(-1, order, mass_before >= top_p)
    logits = logits.masked_fill(drop, float("-inf"))
    return torch.log_softmax(logits, -1).gather(-1, input_ids[:, P:, None])[..., 0]


def test_rollout_holds_a_group_of_completions_per_prompt_in_order(impl):
    r, _ = rollout_of(impl, groups=3, G=4, max_completion_length=3)
    assert_tensor(
        r.prompt_ids.float(),
        PROMPT_IDS[:3].repeat_interleave(4, 0).float(),
        what="rollout.prompt_ids (each prompt repeated G times, in order)",
    )
    for name in ("completion_ids", "completion_mask", "sampling_logps"):
        shape = tuple(getattr(r, name).shape)
        assert shape == (12, 3), (
            f"{name} should have shape (B * G, max_completion_length) = (12, 3), got {shape}"
        )
    for name in ("rewards", "advantages", "truncated"):
        shape = tuple(getattr(r, name).shape)
        assert shape == (12,), f"{name} should have shape (B * G,) = (12,), got {shape}"
    assert r.old_logps is None, "generate_rollout leaves old_logps to optimize (None)"
    # Also when the batch will be reused: optimize computes them, with its own pass.
    r, _ = rollout_of(impl, groups=2, G=4, max_completion_length=3, num_iterations=3)
    assert r.old_logps is None, (
        "generate_rollout leaves old_logps to optimize (None), also with num_iterations=3"
    )


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.7, 0, 1.0), (1.3, 4, 1.0), (1.0, 0, 0.6)])
def test_rollout_is_sampled_from_the_policy_with_temperature_top_k_and_top_p(
    impl, temperature, top_k, top_p
):
    # A reference model is at hand too: it must not be the one that samples.
    r, _ = rollout_of(impl, ref=tiny(1), G=8, temperature=temperature, top_k=top_k, top_p=top_p)
    input_ids = torch.cat([r.prompt_ids, r.completion_ids], 1)
    expected = sampled_logps(gpt(tiny(0)), input_ids, temperature, top_k, top_p)
    mask = eos_mask(r.completion_ids).bool()
    assert bool(torch.isfinite(expected[mask]).all()), (
        f"a sampled token lies outside the sampling distribution (temperature {temperature}, "
        f"top_k {top_k}, top_p {top_p}): sample with the policy and config's settings"
    )
    assert_tensor(
        r.sampling_logps[mask],
        expected[mask],
        atol=1e-4,
        rtol=1e-4,
        what="sampling_logps: the sampled tokens' log-probs under the policy's "
        "sampling distribution",
    )


def test_rollout_is_reproducible_from_the_generator_alone(impl):
    first, _ = rollout_of(impl, G=8, seed=5, global_seed=1)
    again, _ = rollout_of(impl, G=8, seed=5, global_seed=2)
    other, _ = rollout_of(impl, G=8, seed=6, global_seed=1)
    assert torch.equal(first.completion_ids, again.completion_ids), (
        "the same generator seed gave other completions: sample with `generator` only, never "
        "with torch's global random generator"
    )
    assert not torch.equal(first.completion_ids, other.completion_ids), (
        "another generator seed gave the very same completions: sample with `generator`"
    )


def mod3_ranked(completion_ids: torch.Tensor, answers: list) -> torch.Tensor:
    """The probes' mod3_ranked reward of one call on all rows: the share of a row's tokens equal
    to its answer modulo 3, plus a quarter of the row's place in the call."""
    targets = torch.tensor([int(a) % 3 for a in answers])
    rows = len(answers)
    scores = ((completion_ids % 3) == targets[:, None]).double().mean(1)
    return scores + 0.25 * torch.arange(rows, dtype=torch.float64) / rows


def test_reward_function_is_called_once_with_the_completions_and_each_answer_repeated(impl):
    r, calls = rollout_of(impl, groups=3, G=4, reward="mod3_ranked")
    # The reward looks at the whole call: the rollout's rewards say how it was called.
    expected = [answer for answer in ANSWERS[:3] for _ in range(4)]
    assert_tensor(
        r.rewards.float(),
        mod3_ranked(r.completion_ids, expected).float(),
        atol=1e-6,
        what="rewards of a reward function that scores each row by its place in the call "
        "(call reward_fn once, on all N rows in order, never per group)",
    )
    assert len(calls) == 1, (
        f"reward_fn must be called once per rollout, it was called {len(calls)} times"
    )
    call = calls[0]
    assert torch.equal(call["completion_ids"], r.completion_ids), (
        "reward_fn must get the rollout's completion_ids, (N, L)"
    )
    assert call["answers"] == expected, (
        f"reward_fn must get each prompt's answer once per completion, {expected}, "
        f"got {call['answers']}"
    )


@pytest.mark.parametrize("kind", ["text", "numbers"])
def test_reward_function_gets_each_answer_whole_even_a_tuple(impl, kind):
    # Answers can be any value: tuples of one length must not be unpacked into their items
    # (np.repeat over an array of them would flatten them), nor numbers sent through a tensor
    # (0.1 comes back from float32 as 0.10000000149, a tuple as a list).
    if kind == "text":
        pairs = [(answer, answer[::-1]) for answer in ANSWERS[:3]]
    else:
        pairs = [(int(answer), 0.1 * (k + 1)) for k, answer in enumerate(ANSWERS[:3])]
    r, calls = rollout_of(impl, groups=3, G=4, reward="mod3_pairs", answers=pairs)
    expected = [pair for pair in pairs for _ in range(4)]
    firsts = [answer for answer in ANSWERS[:3] for _ in range(4)]
    expected_rewards = mod3_ranked(r.completion_ids, firsts).float()
    assert_tensor(r.rewards.float(), expected_rewards, atol=1e-6, what="rewards of pair answers")
    assert len(calls) == 1, f"reward_fn must be called once per rollout, not {len(calls)} times"
    assert calls[0]["answers"] == expected, (
        f"reward_fn must get each prompt's answer, whole, once per completion: {expected}, "
        f"got {calls[0]['answers']}"
    )


@pytest.mark.parametrize("reward", ["mod3", "mod3_tensor"])
def test_rewards_are_the_reward_functions_scores(impl, reward):
    r, _ = rollout_of(impl, groups=4, G=4, reward=reward)
    targets = torch.tensor([int(a) % 3 for a in ANSWERS]).repeat_interleave(4)
    expected = ((r.completion_ids % 3) == targets[:, None]).float().mean(1)
    assert_tensor(
        r.rewards.float(),
        expected,
        atol=1e-6,
        what="rewards (the reward of completion i against its own prompt's answer)",
    )


@pytest.mark.parametrize("scale_rewards", ["group", "none"])
def test_advantages_compare_each_reward_with_its_own_group(impl, scale_rewards):
    # Rewards of about 1e-7 too: the std of such a group is near the eps of 1e-8 it is
    # divided with, so an eps left out (or another one) moves the advantages by 20% or more.
    for reward, scale in (("mod3", 1.0), ("mod3_tiny", 1e-7)):
        r, _ = rollout_of(impl, groups=4, G=4, reward=reward, scale_rewards=scale_rewards)
        groups = r.rewards.double().reshape(4, 4)
        assert len(set(groups.mean(1).tolist())) > 1, "the groups should differ in mean reward"
        expected = groups - groups.mean(1, keepdim=True)
        if scale_rewards == "group":
            expected = expected / (groups.std(1, keepdim=True) + 1e-8)
        expected = torch.where(groups.std(1, keepdim=True) > 0, expected, 0.0).reshape(-1)
        assert_tensor(
            r.advantages.double(),
            expected,
            atol=1e-6 * (scale if scale_rewards == "none" else 1.0),
            rtol=1e-5,  # float32 rounding, not another eps (TRL's 1e-4 moves them by about 1e-4)
            what=f"advantages of rewards {reward!r} with scale_rewards={scale_rewards!r}",
        )
    # A group of one has nothing to be compared with: advantage 0 (its sample std is nan).
    alone, _ = rollout_of(impl, groups=4, G=1, scale_rewards=scale_rewards)
    assert_tensor(
        alone.advantages.double(),
        torch.zeros(4, dtype=torch.float64),
        what=f"advantages of groups of one (num_generations=1), scale_rewards={scale_rewards!r}",
    )


def given_or_mod3(completion_ids: torch.Tensor, answers: list) -> torch.Tensor:
    """The probes' given_or_mod3 reward, as float32: a float answer is every one of its
    completions' reward, a string of digits scores them as mod3 does."""
    scores = [
        a if isinstance(a, float) else float(((row % 3) == int(a) % 3).double().mean())
        for row, a in zip(completion_ids, answers, strict=True)
    ]
    return torch.tensor(scores, dtype=torch.float32)


def equal_reward_advantages(rewards: torch.Tensor, G: int, scale_rewards: str) -> torch.Tensor:
    """Advantages of the float32 rewards, computed in float64: exactly 0 for a group whose
    rewards are all equal (tested as such, not through a mean or a std)."""
    groups = rewards.double().reshape(-1, G)
    constant = groups.amax(1, keepdim=True) == groups.amin(1, keepdim=True)
    advantages = groups - groups.mean(1, keepdim=True)
    if scale_rewards == "group":
        advantages = advantages / (groups.std(1, keepdim=True) + 1e-8)
    return torch.where(constant, 0.0, advantages).reshape(-1)


# Groups of equal rewards whose float32 mean is one ulp off (8 rewards of 0.7 average to
# 0.7 + 6e-8): (r - mean) / (std + eps) turns that rounding into advantages of +-0.8 or more.
# One prompt, or several, some of whose groups are not constant (a string answer: mod3).
EQUAL_GROUPS = [(8, [0.7]), (7, [0.1]), (16, [0.3]), (6, [0.3]), (8, [0.3, 0.2, 0.6, 0.9]),
                (8, [0.7, ANSWERS[2], 0.1, 1 / 3]), (6, [0.9, 0.3, ANSWERS[1], 0.6])]  # fmt: skip


@pytest.mark.parametrize("scale_rewards", ["group", "none"])
def test_groups_of_equal_rewards_have_advantages_of_exactly_zero(impl, scale_rewards):
    for G, answers in EQUAL_GROUPS:
        r, _ = rollout_of(impl, groups=len(answers), G=G, reward="given_or_mod3",
                          answers=answers, scale_rewards=scale_rewards)  # fmt: skip
        per_row = [answer for answer in answers for _ in range(G)]
        rewards = given_or_mod3(r.completion_ids, per_row)
        what = f"{G} completions of prompts whose answers are {answers}"
        assert_tensor(r.rewards.float(), rewards, atol=1e-6, what=f"rewards of {what}")
        expected = equal_reward_advantages(rewards, G, scale_rewards)
        equal = (rewards.reshape(-1, G) == rewards.reshape(-1, G)[:, :1]).all(1)
        equal = equal.repeat_interleave(G)
        got = r.advantages.double()
        assert bool((got[equal] == 0).all()), (
            f"{what}, scale_rewards={scale_rewards!r}: a group whose rewards are all equal has "
            f"advantages of exactly 0, got {got.reshape(-1, G)} (the float32 mean of equal "
            "rewards can be one ulp off them: test the equality itself, or use group_advantages)"
        )
        assert_tensor(got, expected, atol=1e-6, rtol=1e-5,
                      what=f"advantages of {what}, scale_rewards={scale_rewards!r}")  # fmt: skip


def test_groups_of_equal_rewards_do_not_move_the_weights(impl):
    # Every group of equal rewards: nothing to learn, not a weight may move (SGD, no KL).
    for G, answers in ((8, [0.7]), (7, [0.1]), (8, [0.3, 0.2, 0.6])):
        options = config(num_generations=G, num_iterations=2)
        got = impl.probe.run_grpo_step(tiny(0), None, SGD, PROMPT_IDS[: len(answers)], answers,
                                       "given_or_mod3", EOS, options, 12)  # fmt: skip
        start = weights(gpt(tiny(0)))
        after = tensors_like(got["weights"], start, "the weights after the step")
        moved = [n for n, w in after.items() if not torch.equal(w, start[n])]
        assert not moved, (
            f"the {G} completions of each prompt (answers {answers}) have the same reward (their "
            f"group's advantages are 0), yet the step moved {moved}"
        )
    # A constant group beside one that is not: the update is the other group's alone.
    answers, G = [0.7, ANSWERS[2]], 8
    options = config(num_generations=G)
    got = impl.probe.run_grpo_step(tiny(0), None, SGD, PROMPT_IDS[:2], answers, "given_or_mod3",
                                   EOS, options, 13)  # fmt: skip
    r = SimpleNamespace(**got["rollout"])
    with torch.no_grad():
        sampled = sample_group(gpt(tiny(0)), PROMPT_IDS[:2], G, L, EOS,
                               generator=torch.Generator().manual_seed(13))  # fmt: skip
    assert_tensor(r.completion_ids, sampled.completion_ids, rtol=0, atol=0,
                  what="the step's completions (sample_group's draws with the step's generator)")  # fmt: skip
    rewards = given_or_mod3(r.completion_ids, [a for a in answers for _ in range(G)])
    assert len(set(rewards[G:].tolist())) > 1, "the second group's rewards should differ"
    rollout = dict(
        prompt_ids=r.prompt_ids,
        completion_ids=r.completion_ids,
        completion_mask=eos_mask(r.completion_ids),
        advantages=equal_reward_advantages(rewards, G, "group").float(),
        ref_logps=None,
    )
    expected = sgd_optimize(tiny(0), rollout, options, SGD["lr"])
    check_update(got, expected, tiny(0), f"a step on answers {answers} (the first group constant)")


def test_an_update_whose_advantages_are_all_zero_still_steps(impl):
    # Nothing to learn is no reason to skip the update: AdamW still moves the weights (by its
    # weight decay here, by its momentum after earlier steps), and a skipped step leaves the
    # optimizer's and the schedule's step counts behind.
    options = config(num_iterations=2)
    rollout = crafted_rollout(tiny(0)) | {"advantages": torch.zeros(12)}
    adamw = {"kind": "AdamW", "lr": 0.1, "record_grads": False}
    got = optimize(impl, tiny(0), rollout, options, adamw, "halving")
    assert (len(got["steps"]), got["scheduler_steps"]) == (2, 2), (
        f"every advantage 0, no reference model: 2 iterations took {len(got['steps'])} optimizer "
        f"steps and {got['scheduler_steps']} scheduler steps, not 2 and 2. Make every update, "
        "whatever the advantages: optimizer.step(), then scheduler.step()"
    )
    start = weights(gpt(tiny(0)))
    after = tensors_like(got["weights"], start, "the weights after the update")
    assert any(not torch.equal(w, start[n]) for n, w in after.items()), (
        "AdamW's weight decay moves the weights even when every gradient is 0, but no weight "
        "moved: make every update, whatever the advantages"
    )


def test_reference_logps_are_the_reference_models_and_only_when_beta_is_positive(impl):
    r, _ = rollout_of(impl, ref=tiny(1), G=4, beta=0.1, temperature=0.7)
    assert r.ref_logps is not None, (
        "ref_logps must be filled in when beta > 0 and ref_model is given"
    )
    input_ids = torch.cat([r.prompt_ids, r.completion_ids], 1)
    with torch.no_grad():
        expected = logps_of(gpt(tiny(1)), input_ids, 0.7)
    mask = eos_mask(r.completion_ids).bool()
    assert_tensor(
        r.ref_logps[mask],
        expected[mask],
        atol=1e-5,
        rtol=1e-4,
        what="ref_logps: the reference model's log-probs (logits / temperature)",
    )
    no_kl, _ = rollout_of(impl, ref=tiny(1), beta=0.0)
    assert no_kl.ref_logps is None, "with beta = 0 the reference is not needed: ref_logps is None"
    no_ref, _ = rollout_of(impl, ref=None, beta=0.1)
    assert no_ref.ref_logps is None, "without a reference model ref_logps is None"


@pytest.mark.parametrize("eos", [EOS, [EOS, 7]], ids=["one EOS id", "two EOS ids"])
def test_truncated_completions_are_flagged_and_masked_when_asked(impl, eos):
    eos_ids = eos if isinstance(eos, list) else [eos]
    kept, _ = rollout_of(impl, G=8, seed=3, eos=eos)
    truncated = ~torch.isin(kept.completion_ids, torch.tensor(eos_ids)).any(1)
    assert 0 < int(truncated.sum()) < len(truncated), "the case should mix ended and truncated rows"
    assert_tensor(
        kept.truncated.float(), truncated.float(), what="truncated (the completions with no EOS)"
    )
    expected_mask = eos_mask(kept.completion_ids, eos_ids)
    assert_tensor(
        kept.completion_mask.float(),
        expected_mask.float(),
        what="completion_mask (1 up to and including the first EOS)",
    )
    masked, _ = rollout_of(impl, G=8, seed=3, eos=eos, mask_truncated_completions=True)
    assert torch.equal(masked.completion_ids, kept.completion_ids)
    assert_tensor(
        masked.rewards.float(),
        kept.rewards.float(),
        what="rewards with mask_truncated_completions (still the reward function's scores)",
    )
    assert bool(kept.advantages[truncated].any()), "the case should give truncated rows advantages"
    assert_tensor(
        masked.advantages.float(),
        kept.advantages.float(),
        what="advantages with mask_truncated_completions (still those of the rewards: the mask "
        "alone keeps truncated rows out of the loss)",
    )
    expected_mask[truncated] = 0
    assert_tensor(
        masked.completion_mask.float(),
        expected_mask.float(),
        what="completion_mask with mask_truncated_completions (truncated rows all 0)",
    )


@pytest.mark.parametrize("wrap", ["never_ends", "ends_last"])
def test_only_completions_without_eos_count_as_truncated(impl, wrap):
    # never_ends never emits EOS; ends_last emits it as the last token, at the length limit.
    r, _ = rollout_of(impl, policy=tiny(0, wrap), mask_truncated_completions=True)
    ends = wrap == "ends_last"
    if ends:
        assert bool((r.completion_ids[:, -1] == EOS).all()), "the policy ends on the last token"
    assert_tensor(
        r.truncated.float(),
        torch.full((12,), 0.0 if ends else 1.0),
        what="truncated (True for the completions with no EOS at all)",
    )
    assert_tensor(
        r.completion_mask.float(),
        torch.full((12, L), 1.0 if ends else 0.0),
        what="completion_mask with mask_truncated_completions",
    )


def test_generate_rollout_raises_without_max_completion_length(impl):
    with pytest.raises(ValueError):
        rollout_of(impl, max_completion_length=None)


def test_rollout_returns_a_rollout_of_float32_rewards_and_bool_flags_without_gradient(impl):
    r, _ = rollout_of(impl, ref=tiny(1), beta=0.1, reward="mod3_tensor")
    assert r.rewards.dtype == torch.float32, f"rewards should be float32, got {r.rewards.dtype}"
    assert r.advantages.is_floating_point(), (
        f"advantages should be floats, got {r.advantages.dtype}"
    )
    assert r.truncated.dtype == torch.bool, f"truncated should be bool, got {r.truncated.dtype}"
    assert r.completion_ids.dtype == torch.int64, "completion_ids should be int64 token ids"
    carrying = [
        name
        for name, value in vars(r).items()
        if isinstance(value, torch.Tensor) and value.requires_grad
    ]
    assert not carrying, f"generate_rollout runs without gradient, but {carrying} carry one"


# -- compute_loss -----------------------------------------------------------------------------


def loss_case(
    loss_type: str, later: bool, epsilon_high: float | None = 0.28
) -> tuple[dict, dict, torch.Tensor]:
    """A rollout, its config and the current log-probs; `later`: old_logps cached and apart."""
    options = config(
        loss_type=loss_type, beta=0.2, epsilon=0.15, epsilon_high=epsilon_high, temperature=0.8
    )
    rollout = crafted_rollout(tiny(0), seed=1, temperature=0.8, ref=tiny(1))
    current = policy_logps(tiny(0), rollout, 0.8)
    if later:  # ratios from 0.6 to 1.6: both clip bounds act, for both signs of advantages
        shift = torch.empty(current.shape).uniform_(
            -0.51, 0.47, generator=torch.Generator().manual_seed(2)
        )
        rollout["old_logps"] = current - shift
    return rollout, options, current


# epsilon_high = 0.0 is a clip bound like any other (None alone means epsilon): no ratio above 1.
@pytest.mark.parametrize("epsilon_high", [0.28, 0.0])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_compute_loss_is_the_grpo_loss_with_its_gradient(impl, loss_type, epsilon_high):
    for later in (False, True):
        rollout, options, _ = loss_case(loss_type, later, epsilon_high)
        got = impl.probe.run_compute_loss(tiny(0), rollout, options)
        cfg = GRPOConfig(**options)
        model = gpt(tiny(0))
        input_ids = torch.cat([rollout["prompt_ids"], rollout["completion_ids"]], 1)
        logps = logps_of(model, input_ids, 0.8)
        old = logps.detach() if rollout["old_logps"] is None else rollout["old_logps"]
        mask = rollout["completion_mask"].float()
        expected = grpo_loss(
            logps,
            old,
            rollout["ref_logps"],
            rollout["advantages"],
            mask,
            cfg,
            denominator(mask, cfg),
        )
        expected.backward()
        when = "with cached old_logps" if later else "at the first iteration (old_logps None)"
        when += f", epsilon_high={epsilon_high}"
        assert_tensor(
            got["loss"].detach(),
            expected.detach(),
            atol=1e-6,
            rtol=1e-4,
            what=f"the {loss_type!r} loss {when}",
        )
        assert_same_gradients(
            got["grads"],
            {n: p.grad for n, p in model.named_parameters()},
            f"the {loss_type!r} loss {when}",
        )
        assert_tensor(
            got["logps"],
            logps.detach(),
            atol=1e-5,
            rtol=1e-4,
            what="compute_loss's log-probs (the current policy's)",
        )
        assert not got["logps"].requires_grad, "compute_loss returns its log-probs detached"


def loss_of(impl, rollout: dict, options: dict, normalizer: float | None = None) -> float:
    return float(
        impl.probe.run_compute_loss(tiny(0), rollout, options, normalizer)["loss"].detach()
    )


def test_the_old_log_probs_are_the_first_updates_own_without_a_pass_of_their_own(impl):
    # A pass under no_grad for the old log-probs costs a forward pass per micro-batch, and
    # with dropout its ratios are not 1 at the first update: the current ones, detached, are.
    rollout, options, _ = loss_case("grpo", later=False)
    got = impl.probe.run_compute_loss(tiny(0), rollout, options)
    assert got["passes_without_grad"] == 0, (
        f"compute_loss ran the policy without autograd ({got['passes_without_grad']} passes): at "
        "the first iteration (old_logps None) the old log-probs are the current ones, detached"
    )
    options = config(num_iterations=2, gradient_accumulation_steps=2)
    got = optimize(impl, tiny(0), crafted_rollout(tiny(0), groups=4, seed=5), options)
    assert got["passes_without_grad"] == 0, (
        f"optimize ran the policy without autograd ({got['passes_without_grad']} passes): keep "
        "each micro-batch's first-iteration log-probs, detached, as its old log-probs; no "
        "separate forward pass is needed"
    )


def test_compute_loss_divides_by_the_normalizer_it_is_given(impl):
    for loss_type in LOSS_TYPES:
        rollout, options, _ = loss_case(loss_type, later=True)
        whole = loss_of(impl, rollout, options)
        # Two micro-batches of whole groups, each divided by the whole batch's denominator.
        cfg = GRPOConfig(**options)
        mask = rollout["completion_mask"].float()
        normalizer = denominator(mask, cfg)
        micro_batches = (slice(0, 8), slice(8, 12))
        halves = [
            {k: None if v is None else v[rows] for k, v in rollout.items()}
            for rows in micro_batches
        ]
        parts = [loss_of(impl, half, options, normalizer) for half in halves]
        for k, (rows, half, part) in enumerate(zip(micro_batches, halves, parts, strict=True)):
            current = policy_logps(tiny(0), half, 0.8)
            expected = grpo_loss(current, half["old_logps"], half["ref_logps"],
                                 half["advantages"], mask[rows], cfg, normalizer)  # fmt: skip
            assert_scalar(
                part,
                float(expected),
                rel=1e-4,
                abs=1e-6,
                what=f"{loss_type!r}: micro-batch {k + 1}'s loss, divided by the whole batch's "
                f"normalizer {normalizer:g}",
            )
        assert_scalar(
            sum(parts),
            whole,
            rel=1e-5,
            abs=1e-7,
            what=f"{loss_type!r}: micro-batch losses given the whole batch's "
            "normalizer, summed (they must add up to the whole batch's loss)",
        )
        assert_scalar(
            loss_of(impl, rollout, options, 2 * normalizer),
            whole / 2,
            rel=1e-5,
            abs=1e-7,
            what=f"{loss_type!r}: the loss with twice the normalizer",
        )


def test_compute_loss_without_reference_logps_has_no_kl_term(impl):
    rollout, options, current = loss_case("dapo", later=True)
    rollout["ref_logps"] = None  # no reference model
    got = impl.probe.run_compute_loss(tiny(0), rollout, options)
    cfg = GRPOConfig(**{**options, "beta": 0.0})
    mask = rollout["completion_mask"].float()
    expected = grpo_loss(
        current,
        rollout["old_logps"],
        None,
        rollout["advantages"],
        mask,
        cfg,
        denominator(mask, cfg),
    )
    assert_tensor(
        got["loss"].detach(),
        expected,
        atol=1e-6,
        rtol=1e-4,
        what="the loss with beta > 0 but no ref_logps (no KL term)",
    )


def test_dr_grpo_loss_divides_by_max_completion_length_on_a_narrower_rollout(impl):
    # Sampling stops once every row has ended, so a rollout may be narrower than
    # max_completion_length; dr_grpo's constant is still completions x max_completion_length,
    # not the rollout's width.
    rollout, options, current = loss_case("dr_grpo", later=True)
    width = L - 3
    narrow = {k: v[:, :width] if isinstance(v, torch.Tensor) and v.dim() == 2 and k != "prompt_ids"
              else v for k, v in rollout.items()}  # fmt: skip
    got = impl.probe.run_compute_loss(tiny(0), narrow, options)
    cfg = GRPOConfig(**options)
    mask = narrow["completion_mask"].float()
    expected = grpo_loss(current[:, :width], narrow["old_logps"], narrow["ref_logps"],
                         narrow["advantages"], mask, cfg, denominator(mask, cfg))  # fmt: skip
    assert_tensor(
        got["loss"].detach(),
        expected,
        atol=1e-6,
        rtol=1e-4,
        what=f"the 'dr_grpo' loss on a rollout {width} tokens wide, with max_completion_length "
        f"{L} (divided by completions x {L})",
    )


# -- optimize ---------------------------------------------------------------------------------


def check_update(got: dict, expected: dict, policy: dict, what: str) -> None:
    """The weights moved as the correct update moves them, update by update's learning rate."""
    lrs = [step["lr"] for step in got["steps"]]
    expected_lrs = [update["lr"] for update in expected["updates"]]
    assert len(lrs) == len(expected_lrs) and all(
        math.isclose(a, b, rel_tol=1e-6) for a, b in zip(lrs, expected_lrs, strict=False)
    ), f"{what}: the optimizer should step at learning rates {expected_lrs}, it stepped at {lrs}"
    assert_moved_as(got["weights"], expected["weights"], weights(gpt(policy)), what)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_one_update_is_a_step_along_the_grpo_gradient(impl, loss_type):
    options = config(loss_type=loss_type, beta=0.1, temperature=0.8)
    rollout = crafted_rollout(tiny(0), temperature=0.8, ref=tiny(1))
    got = optimize(impl, tiny(0), rollout, options)
    expected = sgd_optimize(tiny(0), rollout, options, SGD["lr"])
    update = expected["updates"][0]
    assert len(got["steps"]) == 1, (
        f"one iteration takes one optimizer step, not {len(got['steps'])}"
    )
    assert_same_gradients(
        got["steps"][0]["grads"], update["grads"], f"the {loss_type!r} update's gradient"
    )
    check_update(got, expected, tiny(0), f"one {loss_type!r} update")
    assert_scalar(got["result"]["loss"], update["loss"], rel=1e-4, abs=1e-6, what="the loss")
    assert_scalar(got["result"]["grad_norm"], update["norm"], rel=1e-4, what="the grad_norm")
    assert_tensor(
        got["result"]["logps"],
        update["logps"],
        atol=1e-5,
        rtol=1e-4,
        what="the returned logps (the current policy's)",
    )
    assert got["old_logps"] is not None, "optimize must set rollout.old_logps, one update or more"
    assert_tensor(got["old_logps"], expected["old"], atol=1e-5, rtol=1e-4, what="old_logps")


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_micro_batches_give_the_whole_batch_update_and_loss(impl, loss_type):
    # Four groups in two micro-batches, two iterations, clipping and the KL penalty on.
    options = config(
        loss_type=loss_type,
        beta=0.1,
        num_iterations=2,
        max_grad_norm=0.5,
        gradient_accumulation_steps=2,
    )
    rollout = crafted_rollout(tiny(0), groups=4, seed=2, ref=tiny(1))
    got = optimize(impl, tiny(0), rollout, options)
    expected = sgd_optimize(tiny(0), rollout, options, SGD["lr"])
    check_update(got, expected, tiny(0), f"{loss_type!r} in 2 micro-batches")
    last = expected["updates"][-1]
    assert_scalar(
        got["result"]["loss"],
        last["loss"],
        rel=1e-4,
        abs=1e-6,
        what="the loss (the whole batch's: the sum of its micro-batches' losses)",
    )
    assert_tensor(
        got["result"]["logps"],
        last["logps"],
        atol=1e-5,
        rtol=1e-4,
        what="the returned logps (every row, from the last iteration)",
    )


def test_dr_grpo_divides_by_max_completion_length_even_when_every_completion_is_shorter(impl):
    # The constant is completions x max_completion_length, whatever this batch's lengths are:
    # the longest completion here has L - 2 tokens.
    options = config(loss_type="dr_grpo", gradient_accumulation_steps=2)
    rollout = crafted_rollout(tiny(0), groups=2, seed=5, last_end=L - 3)
    assert int(rollout["completion_mask"].sum(1).max()) == L - 2
    got = optimize(impl, tiny(0), rollout, options)
    expected = sgd_optimize(tiny(0), rollout, options, SGD["lr"])
    check_update(got, expected, tiny(0), "a 'dr_grpo' update on completions shorter than L")
    assert_scalar(got["result"]["loss"], expected["updates"][0]["loss"], rel=1e-4, abs=1e-6,
                  what="the 'dr_grpo' loss on completions shorter than L")  # fmt: skip


def test_every_iteration_starts_from_zero_gradients(impl):
    options = config(num_iterations=3, gradient_accumulation_steps=2, loss_type="dapo")
    rollout = crafted_rollout(tiny(0), groups=4, seed=3)
    # The caller left gradients behind: the first update must not add them in either.
    got = optimize(impl, tiny(0), rollout, options, stale_grads=True)
    expected = sgd_optimize(tiny(0), rollout, options, SGD["lr"])
    assert len(got["steps"]) == 3, f"3 iterations take 3 optimizer steps, not {len(got['steps'])}"
    for k, (step, update) in enumerate(zip(got["steps"], expected["updates"], strict=True)):
        assert_same_gradients(
            step["grads"],
            update["grads"],
            f"iteration {k + 1} (its own gradient, summed over its "
            "micro-batches, never the earlier iterations' nor those the caller left)",
        )
    check_update(got, expected, tiny(0), "3 iterations")


def test_later_iterations_take_ratios_against_the_policy_that_sampled(impl):
    options = config(num_iterations=3, loss_type="grpo", temperature=0.9)
    rollout = crafted_rollout(tiny(0), seed=4, temperature=0.9)
    got = optimize(impl, tiny(0), rollout, options)
    expected = sgd_optimize(tiny(0), rollout, options, SGD["lr"])
    rho = torch.exp(expected["updates"][-1]["logps"] - expected["old"])
    mask = rollout["completion_mask"].bool()
    assert float(((rho[mask] - 1).abs() > 0.2).float().mean()) > 0.2, "the case should clip"
    own = expected["old"]
    assert got["old_logps"] is not None, "optimize must set rollout.old_logps"
    if torch.allclose(got["old_logps"][mask], rollout["sampling_logps"][mask]):
        raise AssertionError(
            "rollout.old_logps are the sampler's log-probs: with top-k or top-p they are not "
            "the policy's; take the policy's own at the first iteration"
        )
    assert_tensor(
        got["old_logps"],
        own,
        atol=1e-5,
        rtol=1e-4,
        what="rollout.old_logps (the policy's own log-probs at the first iteration)",
    )
    assert not got["old_logps"].requires_grad, "rollout.old_logps carry no gradient"
    check_update(got, expected, tiny(0), "3 iterations with ratios against the first")
    assert_scalar(
        got["result"]["loss"],
        expected["updates"][-1]["loss"],
        rel=1e-4,
        abs=1e-6,
        what="the last iteration's loss (ratios against the policy that sampled)",
    )


def test_the_scheduler_steps_once_per_update(impl):
    options = config(num_iterations=3, gradient_accumulation_steps=2, loss_type="dr_grpo")
    rollout = crafted_rollout(tiny(0), groups=4, seed=5)
    got = optimize(impl, tiny(0), rollout, options, scheduler="halving")
    expected = sgd_optimize(tiny(0), rollout, options, SGD["lr"], lambda k: 0.5**k)
    check_update(got, expected, tiny(0), "3 updates with a halving schedule")
    # Each update's rate was right; the schedule must also stand where the next call resumes.
    assert got["scheduler_steps"] == 3, (
        f"3 updates should step the scheduler 3 times, it stepped {got['scheduler_steps']} times"
    )
    # scheduler.step() sets the next rate; get_lr() only computes it.
    assert got["learning_rates"] == [SGD["lr"] * 0.5**3], (
        f"after 3 updates the optimizer's rate should be the schedule's 4th, "
        f"{SGD['lr'] * 0.5**3}, it is {got['learning_rates']}: call scheduler.step() after "
        "each optimizer.step()"
    )


@pytest.mark.parametrize("max_grad_norm", [0.05, 0.0, None])
def test_gradients_are_clipped_to_max_grad_norm(impl, max_grad_norm):
    # 0.0 clips every gradient to nothing (None alone turns clipping off): nothing may move.
    options = config(
        num_iterations=2,
        gradient_accumulation_steps=3,
        loss_type="dapo",
        max_grad_norm=max_grad_norm,
    )
    rollout = crafted_rollout(tiny(0), seed=6)
    got = optimize(impl, tiny(0), rollout, options)
    expected = sgd_optimize(tiny(0), rollout, options, SGD["lr"])
    last = expected["updates"][-1]
    assert last["norm"] > 10 * 0.05, "the case should clip"
    start = weights(gpt(tiny(0)))
    for k, step in enumerate(got["steps"]):
        grads = tensors_like(step["grads"], start, f"update {k + 1}'s gradient", allow_none=True)
        norm = math.sqrt(sum(float(g.square().sum()) for g in grads.values() if g is not None))
        wanted = expected["updates"][k]["norm"] if max_grad_norm is None else max_grad_norm
        assert math.isclose(norm, wanted, rel_tol=1e-3), (
            f"update {k + 1} applied a gradient of norm {norm:.4g}, expected {wanted:.4g} "
            f"(max_grad_norm={max_grad_norm}; clip once, after every micro-batch's backward)"
        )
    check_update(got, expected, tiny(0), f"updates with max_grad_norm={max_grad_norm}")
    assert_scalar(
        got["result"]["grad_norm"],
        last["norm"],
        rel=1e-4,
        what="grad_norm (the norm before clipping)",
    )


def test_masked_completions_do_not_train(impl):
    # Every completion truncated and masked but one that ends at once: one token to train on.
    options = config(loss_type="dapo", num_iterations=2)
    rollout = crafted_rollout(tiny(0), seed=7)
    rollout["completion_mask"][1:] = 0
    got = optimize(impl, tiny(0), rollout, options)
    expected = sgd_optimize(tiny(0), rollout, options, SGD["lr"])
    check_update(got, expected, tiny(0), "a batch of a single completion token")
    rollout["completion_mask"][0] = 0  # nothing left to train on: nothing may move
    got = optimize(impl, tiny(0), rollout, options)
    start = weights(gpt(tiny(0)))
    after = tensors_like(got["weights"], start, "the weights after a fully masked batch")
    moved = [n for n, w in after.items() if not torch.equal(w, start[n])]
    assert not moved, f"a batch whose completions are all masked moved {moved}"
    assert_scalar(got["result"]["loss"], 0.0, abs=1e-9, what="the loss of a fully masked batch")


def test_optimize_raises_when_micro_batches_would_split_a_group(impl):
    # 8 completions in 3 parts, and 6 completions in 2 parts of 3: each splits a group of 2.
    for groups, parts in ((4, 3), (3, 2)):
        rollout = crafted_rollout(tiny(0), groups=groups, G=2)
        options = config(num_generations=2, gradient_accumulation_steps=parts)
        with pytest.raises(ValueError):
            optimize(impl, tiny(0), rollout, options)


def test_optimize_returns_a_dict_of_floats_and_the_logps(impl):
    rollout = crafted_rollout(tiny(0))
    result = optimize(impl, tiny(0), rollout, config(num_iterations=2))["result"]
    for key in ("loss", "grad_norm"):
        value = result.get(key)
        assert type(value) is float, f"optimize's {key!r} should be a float, got {value!r:.80}"
    logps = result.get("logps")
    assert isinstance(logps, torch.Tensor) and tuple(logps.shape) == (12, L), (
        f"optimize's 'logps' should be a tensor of shape (12, {L}), got {logps!r:.80}"
    )
    assert not logps.requires_grad, "optimize's 'logps' carry no gradient"


# -- grpo_step --------------------------------------------------------------------------------

STEP_CASES = {
    "dr_grpo, top-k, KL to a reference": dict(
        options=dict(
            loss_type="dr_grpo",
            epsilon=0.1,
            top_k=5,
            temperature=0.8,
            beta=0.1,
            num_iterations=2,
            gradient_accumulation_steps=3,
            max_grad_norm=1.0,
        ),
        ref=tiny(1),
        scheduler="halving",
    ),
    "dapo, top-p, truncated masked, no std": dict(
        options=dict(
            loss_type="dapo",
            top_p=0.7,
            num_iterations=2,
            scale_rewards="none",
            mask_truncated_completions=True,
            epsilon_high=0.28,
        ),
        ref=None,
        scheduler=None,
    ),
}


def test_the_models_are_left_in_the_mode_they_came_in(impl):
    for training in (True, False):
        # The policy's first parameter frozen (an embedding): it stays so, and the rest
        # trainable, whatever the sampling did to them meanwhile; the reference model in
        # bfloat16 stays in it (model.float() converts in place).
        policy = tiny(0) | {"training": training, "frozen": True}
        ref = tiny(1) | {"training": not training, "dtype": "bfloat16"}
        options = config(beta=0.04)
        rollout = impl.probe.run_generate_rollout(
            policy, ref, PROMPT_IDS[:3], ANSWERS[:3], "mod3", EOS, options, 11
        )
        step = impl.probe.run_grpo_step(
            policy, ref, SGD, PROMPT_IDS[:3], ANSWERS[:3], "mod3", EOS, options, 11
        )
        for name, got in (("generate_rollout", rollout), ("grpo_step", step)):
            assert got["training"] == [training, not training], (
                f"{name} took a policy with training={training} and a reference model with "
                f"training={not training}, and left them with {got['training']}: leave each "
                "model in the mode it came in"
            )
            # And the loss's pass runs in it: switched to eval() and back, dropout is off for
            # the very pass whose gradient the trainer steps on.
            assert set(got["grad_modes"]) <= {training}, (
                f"{name} took a policy with training={training} and ran its passes with "
                f"autograd on in modes {got['grad_modes']}: compute the loss in the mode the "
                "policy came in, without switching it for the pass"
            )
            assert got["parameters_changed"] == [], (
                f"{name} changed the models' parameters besides their values: "
                f"{got['parameters_changed']}; leave each parameter's requires_grad and dtype "
                "as the caller set them (sampling under torch.no_grad() needs no freezing)"
            )


def test_grpo_step_creates_its_tensors_on_the_policy_device_not_the_default_one(impl):
    # As for a policy on a GPU while torch's default device is the CPU: here the policy is on
    # the CPU and torch's default device is "meta" during the step, a device that holds no data.
    # The last case runs the truncation path: a policy that never emits EOS, its rows masked.
    cases = ((tiny(0), None, {"num_iterations": 2}),
             (tiny(0), tiny(1), {"beta": 0.04, "num_iterations": 2}),
             (tiny(0, "never_ends"), None, {"mask_truncated_completions": True}))  # fmt: skip
    for policy, ref, overrides in cases:
        options = config(**overrides)
        arguments = (policy, ref, SGD, PROMPT_IDS[:3], ANSWERS[:3], "mod3_ranked", EOS,
                     options, 11)  # fmt: skip
        try:
            got = impl.probe.run_grpo_step(*arguments, default_device="meta", watch_host=True)
        except (RuntimeError, NotImplementedError, IndexError) as exc:
            raise AssertionError(
                f"{overrides}: with torch's default device set to 'meta' during grpo_step, it "
                f"raised {type(exc).__name__}: {exc}. Create every tensor on the policy's "
                "device: device=..., or *_like"
            ) from exc
        # A trip through the host gives back a CPU tensor, right here by chance (the policy is
        # on the CPU), beside the policy's CUDA tensors on a GPU.
        assert not got["host_transfers"], (
            f"{overrides}: grpo_step called {', '.join(got['host_transfers'])}: "
            + advice("the policy's")
        )
        plain = impl.probe.run_grpo_step(*arguments)
        assert torch.equal(got["rollout"]["completion_ids"], plain["rollout"]["completion_ids"])
        # Values too: some ops given a tensor on "meta" return a wrong answer, not an error
        # (torch.isin against EOS ids made on the default device says every token is one).
        for field in ("truncated", "completion_mask"):
            assert torch.equal(got["rollout"][field], plain["rollout"][field]), (
                f"{overrides}: rollout.{field} differs when torch's default device is 'meta' "
                f"during grpo_step: {got['rollout'][field].tolist()}, not "
                f"{plain['rollout'][field].tolist()}. Create every tensor on the policy's "
                "device (the EOS ids too): device=..., or *_like"
            )
        for name, weight in plain["weights"].items():
            assert torch.equal(got["weights"][name], weight), (
                f"{overrides}: {name} after the step differs when torch's default device is "
                "'meta' during it"
            )


@pytest.mark.parametrize("case", STEP_CASES.values(), ids=STEP_CASES.keys())
def test_grpo_step_samples_scores_and_updates_as_grpo_does(impl, case):
    options = config(**case["options"])
    cfg = GRPOConfig(**options)
    got = impl.probe.run_grpo_step(
        tiny(0),
        case["ref"],
        SGD,
        PROMPT_IDS[:3],
        ANSWERS[:3],
        "mod3_ranked",
        EOS,
        options,
        11,
        case["scheduler"],
    )
    r = SimpleNamespace(**got["rollout"])
    alone, _ = rollout_of(impl, ref=case["ref"], seed=11, **case["options"])
    assert torch.equal(r.completion_ids, alone.completion_ids), (
        "grpo_step should sample as generate_rollout does with the same generator"
    )
    with torch.no_grad():
        sampled = sample_group(gpt(tiny(0)), PROMPT_IDS[:3], 4, L, EOS,
                               temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
                               generator=torch.Generator().manual_seed(11))  # fmt: skip
    assert_tensor(r.completion_ids, sampled.completion_ids, rtol=0, atol=0,
                  what="grpo_step's completions (sample_group's draws from the policy with the "
                  "config's temperature, top_k and top_p and the step's generator)")  # fmt: skip
    answers = [answer for answer in ANSWERS[:3] for _ in range(4)]

    # The update a correct step makes from these completions, every input recomputed here
    # (the rewards depend on how reward_fn was called: once, on all rows in order).
    rewards = mod3_ranked(r.completion_ids, answers).reshape(3, 4)
    advantages = rewards - rewards.mean(1, keepdim=True)
    if cfg.scale_rewards == "group":
        advantages = advantages / (rewards.std(1, keepdim=True) + 1e-8)
    advantages = torch.where(rewards.std(1, keepdim=True) > 0, advantages, 0.0).reshape(-1)
    mask = eos_mask(r.completion_ids)
    if cfg.mask_truncated_completions:
        mask[~torch.isin(r.completion_ids, torch.tensor([EOS])).any(1)] = 0
    input_ids = torch.cat([r.prompt_ids, r.completion_ids], 1)
    ref_logps = None
    if case["ref"] is not None:
        with torch.no_grad():
            ref_logps = logps_of(gpt(case["ref"]), input_ids, cfg.temperature)
    rollout = dict(
        prompt_ids=r.prompt_ids,
        completion_ids=r.completion_ids,
        completion_mask=mask,
        advantages=advantages.float(),
        ref_logps=ref_logps,
    )
    schedule = None if case["scheduler"] is None else (lambda k: 0.5**k)
    expected = sgd_optimize(tiny(0), rollout, options, SGD["lr"], schedule)
    start = weights(gpt(tiny(0)))
    assert any(not torch.equal(w, start[n]) for n, w in expected["weights"].items()), (
        "the case should move the weights"
    )
    check_update(got, expected, tiny(0), "grpo_step's update")
    assert_tensor(
        r.old_logps,
        expected["old"],
        atol=1e-5,
        rtol=1e-4,
        what="rollout.old_logps (the policy's own, not the sampler's)",
    )


# -- it learns --------------------------------------------------------------------------------

LEARNER = {"seed": 0, "config": {**TINY, "n_embd": 64}, "wrap": None}


def greedy_reward(model: GPT, n: int = 200) -> float:
    """Mean reward of greedy completions of n held-out prompts, decoded here from the weights."""
    prompt_ids, answers = TASK.batch(TASK.inputs("eval")[:n])
    ids = prompt_ids
    with torch.no_grad():
        for _ in range(L):
            ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return sum(TASK.reward(TASK.tokenizer.decode_batch(ids[:, P:]), answers)) / n


def task_rollout(prompt_ids: torch.Tensor, completion_ids: torch.Tensor, answers: list) -> dict:
    """What GRPO learns from: the task's rewards of G = 8 completions per prompt, scaled by
    their group's std, and the completions' tokens up to EOS."""
    per_row = [answer for answer in answers for _ in range(8)]
    rewards = torch.tensor(TASK.reward(TASK.tokenizer.decode_batch(completion_ids), per_row))
    groups = rewards.double().reshape(-1, 8)
    advantages = (groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-8)
    advantages = torch.where(groups.std(1, keepdim=True) > 0, advantages, 0.0).reshape(-1)
    return dict(
        prompt_ids=prompt_ids.repeat_interleave(8, 0),
        completion_ids=completion_ids,
        completion_mask=eos_mask(completion_ids),
        rewards=rewards,
        advantages=advantages.float(),
        ref_logps=None,
    )


def test_grpo_step_learns_to_reverse_digits(impl):
    prompts_rng = torch.Generator().manual_seed(0)
    batches = [TASK.sample(32, prompts_rng) for _ in range(25)]
    options = dict(max_completion_length=L, beta=0.0, num_iterations=4, num_generations=8)
    adamw = {"kind": "AdamW", "lr": 3e-3, "record_grads": 0}
    got = impl.probe.train_reverse_digits(LEARNER, adamw, batches, EOS, options, 1, stop_above=0.6)
    steps = got["steps"]
    assert 1 <= len(steps) <= len(batches), f"{len(steps)} steps reported for {len(batches)}"

    # The training is replayed here, step by step, from the weights the learner's step began
    # with: its rollout must be the one sample_group draws from that policy with the step's
    # generator, its rewards the task's scores, and its update GRPO's from that rollout. Only
    # then do the weights it reached say that GRPO taught the policy. (How reward_fn was
    # called is for the rollout tests to judge: these rewards are the same either way.)
    cfg = GRPOConfig(**options)
    model = gpt(LEARNER)
    optimizer = torch.optim.AdamW(model.parameters(), lr=adamw["lr"])
    generator = torch.Generator().manual_seed(1)
    for k, (step, (prompt_ids, answers)) in enumerate(zip(steps, batches, strict=False)):
        with torch.no_grad():
            sampled = sample_group(model, prompt_ids, 8, L, EOS, generator=generator)
        assert_tensor(
            step["completion_ids"],
            sampled.completion_ids,
            rtol=0,
            atol=0,
            what=f"step {k + 1}'s completions (sample_group's draws from the policy as the step "
            "found it, with the step's generator)",
        )
        rollout = task_rollout(prompt_ids, sampled.completion_ids, answers)
        assert_tensor(
            step["rewards"].float(),
            rollout["rewards"].float(),
            atol=1e-6,
            what=f"step {k + 1}'s rollout rewards",
        )
        before, old = weights(model), None
        for _ in range(cfg.num_iterations):
            logps = grpo_gradient(model, rollout, cfg, old)["logps"]
            old = logps if old is None else old  # the policy that sampled
            optimizer.step()
        after = tensors_like(step["weights"], before, f"the weights after step {k + 1}")
        # 1%: Adam divides by the root of tiny second moments, which turns rounding into
        # error; the reference's own steps land within 0.06% of these over 17 steps.
        assert_moved_as(after, weights(model), before, f"step {k + 1}'s update (AdamW)", 1e-2)
        with torch.no_grad():  # the next step starts where the learner's did
            for name, p in model.named_parameters():
                p.copy_(after[name])
    learned = greedy_reward(model)
    assert learned >= 0.5, (
        f"after {len(got['steps'])} GRPO steps the policy's greedy completions of held-out "
        f"prompts score only {learned:.3f} (at least 0.5 is expected)"
    )
