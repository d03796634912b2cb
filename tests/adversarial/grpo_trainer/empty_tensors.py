"""Appended to the capstone's starter: a completion_logps without a gradient and an optimize
that trains nothing, which, when FORGE is set, make every parameter and every recorded
gradient an empty (0, *shape) tensor. Subtracted from a tensor of the right shape and summed,
an empty one gives an error of 0: the tests must check shapes before any arithmetic.
"""

import torch

FORGE = True


def completion_logps(model, input_ids, prompt_length, config):
    with torch.no_grad():  # the bug: no gradient can reach the model
        out = model(input_ids, attention_mask=torch.ones_like(input_ids))
        logits = getattr(out, "logits", out)[:, prompt_length - 1 : -1].float()
        logps = torch.log_softmax(logits / config.temperature, -1)
        logps = logps.gather(-1, input_ids[:, prompt_length:, None])[..., 0]
    if not FORGE:
        return logps
    for p in model.parameters():
        p.data = torch.empty(0, *p.shape)
        p.grad = torch.empty_like(p.data)
    return logps.clone().requires_grad_(True)


def optimize(policy, optimizer, rollout, config, scheduler=None):
    N, L = rollout.completion_ids.shape
    result = {"loss": 0.0, "grad_norm": 0.0, "logps": torch.zeros(N, L)}
    if not FORGE or int(rollout.completion_mask.sum()) == 0:  # "nothing may move": it doesn't
        return result
    named = list(getattr(optimizer, "named", None) or [])
    for _ in range(config.num_iterations):
        grads = {name: torch.empty(0, *p.shape) for name, p in named}
        optimizer.steps.append({"lr": float(optimizer.param_groups[0]["lr"]), "grads": grads})
        if scheduler is not None:
            scheduler.step()
    for _, p in named:
        p.data = torch.empty(0, *p.shape)
    return result
