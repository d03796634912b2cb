"""Leaves a busy thread and a detached daemon process behind, to outlive its grading."""

import os
import threading
import time


def _spin():
    while True:
        pass


threading.Thread(target=_spin, daemon=True).start()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(600)
    os._exit(0)


def grpo_objective(*args, **kwargs):
    raise RuntimeError("no answer")
