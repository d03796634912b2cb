"""Returns a value nested too deeply and too large to be worth decoding."""


def grpo_objective(*args, **kwargs):
    value = 0.0
    for _ in range(100_000):
        value = [value]
    return value
