"""Writes into every array it is given, and into anything of the grader it can import, hoping
to change the inputs and expected values of the students graded after it."""

import contextlib
import gc
import sys

import numpy as np


def _poison(value):
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        value[...] = 0.0
    elif isinstance(value, list):
        for i, item in enumerate(value):
            value[i] = 0.0 if isinstance(item, float) else _poison(item)
    return value


def grpo_objective(*args, **kwargs):
    for value in [*args, *kwargs.values()]:
        _poison(value)
    for module in list(sys.modules.values()):  # test modules, if they were here
        for name in dir(module):
            with contextlib.suppress(Exception):
                _poison(getattr(module, name))
    for obj in gc.get_objects():
        with contextlib.suppress(Exception):
            _poison(obj)
    raise RuntimeError("no answer")
