"""Forks as many sleeping processes as it can (at most 2000, to stay finite without limits)."""

import os
import time


def grpo_objective(*args, **kwargs):
    for _ in range(2000):
        try:
            if os.fork() == 0:
                time.sleep(30)
                os._exit(0)
        except OSError:
            break
    raise RuntimeError("no answer")
