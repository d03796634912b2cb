"""Sleeps for a day: costs no CPU, so a CPU-time limit alone would never stop it."""

import time


def grpo_objective(*args, **kwargs):
    time.sleep(86_400)
