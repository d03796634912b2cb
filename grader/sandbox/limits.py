"""What one student's process may use, and how the sandboxed side imposes it on itself.

The grader decides the limits (`SandboxLimits`); the fork server applies them in each student's
process right after forking, before any student code runs. Wall-clock limits are not here: the
grader keeps them from outside, and kills a process that overruns.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

CPU_LIMIT_S = 600  # a backstop only: the wall clock, kept from outside, is the real limit


@dataclass(frozen=True)
class SandboxLimits:
    memory_mb: int = 1024  # on top of what the pre-imported interpreter already maps
    nproc: int = 64  # processes and threads
    fsize_mb: int = 16  # largest file it may write
    output_kb: int = 32  # of its printed output, kept for the report


def _vm_size_bytes() -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 30


def count_processes(uid: int) -> int:
    """How many processes of `uid` this process's /proc shows."""
    count = 0
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                count += 1
        except OSError:
            continue
    return count


def host_processes() -> dict | None:
    """Taken by the grader (not root): how many processes its uid has, and in which user
    namespace. The kernel counts all processes of a uid in a user namespace, but a sandbox's
    /proc shows only its own PID namespace: under a setuid bwrap (no new user namespace) the
    count seen from outside is the one that matters."""
    if os.getuid() == 0:
        return None
    try:
        return {"userns": os.stat("/proc/self/ns/user").st_ino,
                "count": count_processes(os.getuid())}  # fmt: skip
    except OSError:
        return None


def _already_counted(host: dict | None) -> int:
    own = count_processes(os.getuid())
    if not isinstance(host, dict):
        return own
    try:
        same_userns = os.stat("/proc/self/ns/user").st_ino == host.get("userns")
    except OSError:
        same_userns = True
    return max(own, int(host.get("count", 0))) if same_userns else own


def apply(limits: dict, own_uid: bool, host: dict | None = None) -> None:
    """Set this process's resource limits. `own_uid`: it runs as a uid of its own, so the
    process limit counts its processes alone; otherwise the limit comes on top of the
    processes its uid already has (see `host_processes`)."""
    cpu = CPU_LIMIT_S + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    # Address space counts what the interpreter and libraries already mapped (torch maps a
    # lot), so the allowance comes on top of the current size.
    address_space = _vm_size_bytes() + int(limits["memory_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    file_size = int(limits["fsize_mb"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    processes = int(limits["nproc"])
    if not own_uid:
        processes += _already_counted(host)
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
