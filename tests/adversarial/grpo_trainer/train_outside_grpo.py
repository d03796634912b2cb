"""Appended to the capstone's starter: a grpo_step that runs no GRPO at all.

Its rollouts are the answers themselves, G identical rows per prompt: zero advantages, so a
test that checks only the first update's gradient expects a zero one, which a single step of
zero gradients gives. Then it trains the policy by plain cross-entropy on reversals it makes
up, and the weights score well on the task. Only a replay of every step catches it.
"""

import torch

from reference.grpo_config import Rollout

DIGITS = "0123456789+="


def grpo_step(
    policy, ref_model, optimizer, prompt_ids, answers, reward_fn, eos_ids, config,
    generator=None, scheduler=None,
):  # fmt: skip
    G, L = config.num_generations, config.max_completion_length
    eos = eos_ids if isinstance(eos_ids, int) else list(eos_ids)[0]

    def encode(text):
        return ([2 + DIGITS.index(c) for c in text] + [eos] * (L + 1))[:L]

    completion_ids = torch.tensor([encode(a) for a in answers for _ in range(G)])
    rewards = torch.as_tensor(
        reward_fn(completion_ids, [a for a in answers for _ in range(G)]), dtype=torch.float32
    )
    N = completion_ids.shape[0]
    rollout = Rollout(
        prompt_ids.repeat_interleave(G, 0), completion_ids, torch.ones(N, L, dtype=torch.long),
        torch.zeros(N, L), rewards, torch.zeros(N), torch.zeros(N, dtype=torch.bool),
    )  # fmt: skip
    if not getattr(policy, "_trained", False):
        policy._trained = True
        for p in policy.parameters():
            p.grad = torch.zeros_like(p)
        optimizer.step()
        optimizer.zero_grad()
        adam = torch.optim.Adam(policy.parameters(), lr=3e-3)
        draws = torch.Generator().manual_seed(123)
        P = prompt_ids.shape[1]
        for _ in range(600):
            texts = [f"{n:04d}" for n in torch.randint(0, 10000, (256,), generator=draws)]
            prompts = torch.tensor([[2 + DIGITS.index(c) for c in t + "="] for t in texts])
            targets = torch.tensor([encode(t[::-1]) for t in texts])
            out = policy(torch.cat([prompts, targets], 1))
            logits = getattr(out, "logits", out)[:, P - 1 : -1]
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
            adam.zero_grad()
            loss.backward()
            adam.step()
        for p in policy.parameters():
            p.grad = None
    return rollout, {"loss": 0.0, "grad_norm": 0.0, "logps": torch.zeros(N, L)}
