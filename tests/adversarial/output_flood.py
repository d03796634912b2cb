"""Writes a flood of output to stdout and stderr, hoping to fill a pipe or the disk."""

import os

BLOCK = b"PASSED " * 10_000


def grpo_objective(*args, **kwargs):
    for _ in range(2_000):
        os.write(1, BLOCK)
        os.write(2, BLOCK)
    raise RuntimeError("no answer")
