"""Ignores SIGINT and SIGTERM and swallows KeyboardInterrupt, so soft timeouts cannot stop it."""

import signal
import time

signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)


def grpo_objective(*args, **kwargs):
    while True:
        try:
            time.sleep(0.1)
        except BaseException:  # noqa: SIM105 - swallowing every interrupt is the attack
            continue
