"""A memory cgroup per student's process, so that a student's memory is counted whoever holds it.

Address-space limits count one process at a time. A student who forks gets the allowance
once per process; memory in files that no process maps (a memfd, /tmp) counts against none.
A memory cgroup counts all of it: anonymous memory, files in memory and kernel memory, of
every process in it. The grader moves each student's process into a group of its own as soon
as the fork server has forked it, before it runs any student code, so everything it starts is
in the group too; the fork server stays outside, and the kernel's OOM killer, acting within
the group, can only ever pick the student's processes.

The grader needs to be allowed to create groups: root with cgroup v1's memory controller, or
a cgroup v2 subtree with the memory controller enabled for it. Elsewhere `create` returns
None and the per-process limits are the only ones (`grpo-kit grade` says so).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
_names = itertools.count()


def _find_group() -> tuple[Path, str] | None:
    """(folder to create groups in, "v1" or "v2") for this process's memory cgroup."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return CGROUP_ROOT / "memory" / path.lstrip("/"), "v1"
    for line in lines:
        if line.startswith("0::"):
            folder = CGROUP_ROOT / line[3:].lstrip("/")
            with contextlib.suppress(OSError):
                if "memory" in (folder / "cgroup.subtree_control").read_text().split():
                    return folder, "v2"
    return None


@functools.cache
def _own_group() -> tuple[Path, str] | None:
    """`_find_group` once per process (a group is made per student), the groups of graders
    that are gone removed there the first time."""
    found = _find_group()
    if found:
        _remove_orphans(found[0])
    return found


def _remove_orphans(parent: Path) -> None:
    """Remove the groups of graders that are gone (killed before they could remove them)."""
    with contextlib.suppress(OSError):
        for path in parent.glob("grpo-kit-*-*"):
            pid = path.name.split("-")[2]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                with contextlib.suppress(OSError):
                    path.rmdir()  # only an empty group goes: a process left in it keeps it


class MemoryGroup:
    """One memory cgroup: move a process into it, limit it, count its OOM kills, remove it."""

    def __init__(self, path: Path, version: str):
        self.path, self.version = path, version

    @classmethod
    def create(cls) -> MemoryGroup | None:
        """A new, unlimited group under this process's own, or None where none can be made."""
        found = _own_group()
        if found is None:
            return None
        parent, version = found
        path = parent / f"grpo-kit-{os.getpid()}-{next(_names)}"
        try:
            path.mkdir()
        except OSError:
            return None
        return cls(path, version)

    def join(self, pid: int) -> None:
        """Move process `pid` (as this process sees it) into the group."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def _read(self, name: str) -> str:
        return (self.path / name).read_text()

    def limit(self, size: int) -> None:
        name = "memory.limit_in_bytes" if self.version == "v1" else "memory.max"
        (self.path / name).write_text(str(size))

    def oom_kills(self) -> int:
        """How many processes the kernel has killed in the group for going over its limit."""
        name = "memory.oom_control" if self.version == "v1" else "memory.events"
        for line in self._read(name).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self, wait_s: float = 2.0) -> None:
        """Remove the group once its processes are gone (they may take a moment to be)."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return  # an empty group left behind holds no memory
                time.sleep(0.01)
