"""Floods its pipes from several threads (output and forged frames) and never answers."""

import contextlib
import json
import os
import struct
import threading

FRAME = b"".join(
    struct.pack(">I", len(body)) + body
    for body in [json.dumps({"callback": 1, "args": [], "kwargs": {}}).encode()] * 1000
)


def _flood():
    while True:
        for fd in range(1, 16):
            with contextlib.suppress(OSError):
                os.write(fd, FRAME)


def grpo_objective(*args, **kwargs):
    for _ in range(4):
        threading.Thread(target=_flood, daemon=True).start()
    _flood()
