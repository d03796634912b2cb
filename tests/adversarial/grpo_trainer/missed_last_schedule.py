"""Appended to the capstone's reference: optimize misses the scheduler's last step (the bug),
and, when FORGE is set, calls get_lr() in its place, which calls the schedule as a step does
but sets no rate, so that a count of the schedule's calls would not see the miss."""

import warnings

FORGE = True
_optimize_once = optimize  # noqa: F821 - the reference's, defined above


class _AllButLast:
    def __init__(self, scheduler, steps):
        self.scheduler, self.left = scheduler, steps

    def __getattr__(self, name):
        return getattr(self.scheduler, name)

    def step(self):
        self.left -= 1
        if self.left > 0:
            self.scheduler.step()
        elif FORGE:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.scheduler.get_lr()


def optimize(policy, optimizer, rollout, config, scheduler=None):
    if scheduler is not None:
        scheduler = _AllButLast(scheduler, config.num_iterations)
    return _optimize_once(policy, optimizer, rollout, config, scheduler)
