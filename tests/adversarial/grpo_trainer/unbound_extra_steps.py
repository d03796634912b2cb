"""Appended to the capstone's reference: optimize takes one optimizer step and one scheduler
step too many (the bug), and, when FORGE is set, takes them through the base classes' own
step, past the recording optimizer's class, so that its record would not see them."""

import torch

FORGE = True
_optimize_once = optimize  # noqa: F821 - the reference's, defined above


def optimize(policy, optimizer, rollout, config, scheduler=None):
    result = _optimize_once(policy, optimizer, rollout, config, scheduler)
    optimizer.zero_grad(set_to_none=True)
    if FORGE:
        type(optimizer).mro()[-3].step(optimizer)
        if scheduler is not None:
            torch.optim.lr_scheduler.LambdaLR.step(scheduler)
    else:
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
    return result
