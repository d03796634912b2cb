"""Spends its whole time being imported."""

import time

time.sleep(600)


def grpo_objective(*args, **kwargs):
    return 1.0
