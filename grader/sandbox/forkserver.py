"""The grader's side of the fork servers: start them, get a student's process, end it.

A fork server (``zygote.py``) is one sandboxed interpreter that has imported numpy (and torch)
once. Each student's problem gets a fresh process forked from it, in milliseconds, instead of
a new sandbox and a new interpreter. When the server runs as root it gives every student's
process a uid of its own, and one server serves a whole trusted pytest run. Otherwise (the
grader is not root, or there is no bubblewrap) processes could signal each other, so each
student gets a server of their own, started ahead of need.

Everything a student's process sends is read with a deadline (``frames.Reader``); the server
itself is the grader's code, but it is asked with a timeout too: a server that stops answering
is killed, with its whole sandbox, and the next student gets a new one.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass

from grader.errors import GraderError
from grader.sandbox import bwrap, cgroup, frames
from grader.sandbox.limits import SandboxLimits, host_processes

STARTUP_GRACE_S = 60.0  # importing torch under load is the grader's time, not the student's
SANDBOX_UID_BASE = 2_000_000
ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    # One thread each: many students' processes run side by side, and threads count as
    # processes against their limit.
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    # glibc gives each new thread an arena of its own, up to 8 per core, and each reserves 64
    # MiB of address space it mostly never uses: under the address-space limit a solution's
    # 16 threads then "can't start new thread" beside 4M positions, which pass locally.
    "MALLOC_ARENA_MAX": "2",
    # torch.compile runs the code eagerly, as the tests' own process has it do (problems'
    # conftest): no C++ compiler or cache is needed, and a compiled helper scores the same.
    "TORCH_COMPILE_DISABLE": "1",
    "TORCHINDUCTOR_CACHE_DIR": "/tmp",
}
_uids = itertools.count()


def _next_uid() -> int:
    """A uid no other student's process on this machine has now (the pid keeps concurrent
    trusted pytest runs apart, whole: pids go up to 2**22, so uids stay under 2**31; a run has
    one student's process at a time)."""
    return SANDBOX_UID_BASE + os.getpid() * 100 + next(_uids) % 100


@dataclass(frozen=True)
class Key:
    """What a fork server serves: torch or not, the probes files it shows, and the reference
    modules (the capstone's) it shows."""

    torch: bool
    probes: tuple[str, ...]  # paths
    reference: tuple[str, ...] = ()


class StudentProcess:
    """One student's process for one problem: frames in, frames out, within deadlines."""

    def __init__(self, server: ForkServer, pid: int, requests_fd: int, replies_fd: int,
                 output_fd: int, output_kb: int, group: cgroup.MemoryGroup | None):  # fmt: skip
        self.server, self.pid, self.group = server, pid, group
        self.requests_fd = requests_fd
        os.set_blocking(requests_fd, False)
        self.reader = frames.Reader(replies_fd, output_fd, keep=output_kb * 1024)
        self.ending: dict | None = None
        self._ids = itertools.count(1)

    def exchange(self, message: dict, deadline: float) -> dict:
        """Send a request and return the reply with the same id (frames.Late, frames.Closed,
        frames.FrameError or ValueError otherwise)."""
        message = message | {"id": next(self._ids)}
        self.reader.write(self.requests_fd, message, deadline)
        reply = self.reader.read(deadline)
        if reply.get("id") != message["id"]:
            raise frames.FrameError("it answered out of turn (it wrote to the grader's pipe)")
        return reply

    def end(self, wait_s: float = 0.0) -> dict:
        """Kill whatever is left of it and say how it ended: {"signal": n} or {"exited": n},
        or {"killed": True} if it was still running after `wait_s` seconds; with
        "out_of_memory": True if the kernel killed one of its processes over its memory."""
        if self.ending is None:
            try:
                self.ending = self.server.end(self.pid, wait_s)
                if self.group and self.group.oom_kills():
                    self.ending["out_of_memory"] = True
            finally:
                if self.group:
                    self.group.remove()
            for fd in (self.requests_fd, self.reader.fd, self.reader.output_fd):
                if fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
        return self.ending


def _descendant(root: int, inner_pid: int) -> int:
    """The pid of `root`'s descendant that its own PID namespace numbers `inner_pid`."""
    todo = [root]
    while todo:
        pid = todo.pop()
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("NSpid:") and pid != root and int(line.split()[-1]) == inner_pid:
                    return pid
        with open(f"/proc/{pid}/task/{pid}/children") as children:
            todo += [int(child) for child in children.read().split()]
    raise ValueError(f"no process {inner_pid} under {root}")


def _anonymous_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise ValueError(f"no RssAnon for process {pid}")


class ForkServer:
    """One sandboxed fork server (see the module docstring)."""

    def __init__(self, key: Key):
        self.key = key
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sandboxed = sandboxed = bwrap.bwrap_command() is not None
        config = {
            "control_fd": theirs.fileno(),
            "torch": key.torch,
            # Only under bubblewrap: elsewhere the interpreter may live where another uid
            # cannot read (/root/.pyenv).
            "switch_uids": sandboxed,
            "probe_uid": _next_uid(),
            "own_ipc": sandboxed,  # its own IPC namespace, whose limits it may set
            # Only where the sandbox mounts the system read-only: without it, a student's
            # process may write where Python's own modules are (confine.py).
            "confine": sandboxed,
        }
        # The kit's own folder first: the sandbox must run these very files, whatever copy of
        # the kit the environment has installed.
        boot = f"import sys; sys.path.insert(0, {str(bwrap.KIT_ROOT)!r}); " \
               "from grader.sandbox.zygote import main; main()"  # fmt: skip
        program = [sys.executable, "-I", "-u", "-c", boot, json.dumps(config)]
        command = bwrap.command(key.probes, key.reference, program) if sandboxed else program
        self.errors = tempfile.TemporaryFile()  # noqa: SIM115 - what the server says if it fails
        try:
            self.process = subprocess.Popen(
                command, env=ENV, cwd="/tmp", pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.errors,
                start_new_session=True,  # its own process group: one kill ends it all
                preexec_fn=None if sandboxed else bwrap.die_with_parent(),
            )  # fmt: skip
        except OSError as exc:
            raise GraderError(f"the sandbox could not be started: {exc}") from None
        finally:
            theirs.close()
        self.own_uids: bool | None = None  # known once ready

    def _ask(
        self, message: dict, fds: tuple[int, ...] = (), timeout: float = STARTUP_GRACE_S
    ) -> dict:
        try:
            if message:
                socket.send_fds(self.control, [json.dumps(message).encode()], list(fds))
            self.control.settimeout(timeout)
            data = self.control.recv(1 << 16)
            if not data:
                raise OSError("the fork server exited")
            return json.loads(data)
        except (OSError, ValueError) as exc:
            reason = self._death(exc)
            self.close()
            raise GraderError(f"the sandbox stopped working: {reason}") from None

    def _death(self, exc: Exception) -> str:
        if self.process.poll() is None:
            return f"no answer ({type(exc).__name__}: {exc})"
        self.errors.seek(0)
        errors = self.errors.read()[-4000:].decode(errors="replace").strip()
        return f"it exited with status {self.process.returncode}" + (
            f": {errors}" if errors else ""
        )

    def wait_ready(self) -> None:
        if self.own_uids is None:
            reply = self._ask({})
            if reply.get("ready") is not True:
                self.close()
                raise GraderError(f"the sandbox did not start: {reply}")
            self.own_uids = bool(reply.get("own_uids"))

    def fork(self, limits: SandboxLimits) -> StudentProcess:
        """A fresh student's process, ready for its first request."""
        self.wait_ready()
        requests_r, requests_w = os.pipe()
        replies_r, replies_w = os.pipe()
        output_r, output_w = os.pipe()
        theirs = (requests_r, replies_w, output_w)
        request = {"op": "fork", "uid": _next_uid(), "limits": asdict(limits),
                   "host": None if self.own_uids else host_processes()}  # fmt: skip
        try:
            reply = self._ask(request, theirs)
        finally:
            for fd in theirs:
                os.close(fd)
        if "pid" not in reply:
            for fd in (requests_w, replies_r, output_r):
                os.close(fd)
            raise GraderError(f"the sandbox could not start a process: {reply.get('error')}")
        group = self._memory_group(reply["pid"], limits) if self.sandboxed else None
        process = StudentProcess(self, reply["pid"], requests_w, replies_r, output_r,
                                 limits.output_kb, group)  # fmt: skip
        try:
            ready = process.reader.read(time.monotonic() + STARTUP_GRACE_S)
        except (frames.Late, frames.Closed, frames.FrameError) as exc:
            process.end()
            why = {frames.Late: "timed out"}.get(type(exc), str(exc))
            raise GraderError(f"the sandbox did not start a student's process: {why}") from None
        if ready.get("ready") is not True:
            process.end()
            raise GraderError("the sandbox did not start a student's process")
        return process

    def _memory_group(self, pid: int, limits: SandboxLimits) -> cgroup.MemoryGroup | None:
        """A memory group for the new process `pid` (as the sandbox numbers it), which runs no
        student code before its first request; None where the grader cannot make one."""
        group = cgroup.MemoryGroup.create()
        if group is None:
            return None
        try:
            host_pid = _descendant(self.process.pid, pid)
            # The pages it shares with the server count once it writes them: hence those too.
            group.limit(_anonymous_bytes(host_pid) + limits.memory_mb * 1024 * 1024)
            group.join(host_pid)
        except (OSError, ValueError):
            group.remove()
            return None
        return group

    def end(self, pid: int, wait_s: float = 0.0) -> dict:
        if self.process.poll() is not None:
            return {"signal": int(signal.SIGKILL)}  # the whole sandbox is gone, and it with it
        return self._ask({"op": "end", "pid": pid, "wait_s": wait_s})

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.control.close()
        self.process.wait()
        self.errors.close()


class Servers:
    """This process's fork servers: one per Key when it may give each student a uid of its
    own; otherwise one per student, the next one started while the current one works."""

    def __init__(self):
        self.shared: dict[Key, ForkServer] = {}
        self.spares: dict[Key, ForkServer] = {}

    def warm(self, key: Key) -> None:
        """Start a server for `key` now, without waiting for it: the first student finds it
        ready (or nearly), its imports done while the grader did other work."""
        if key not in self.shared and key not in self.spares:
            with contextlib.suppress(GraderError):  # acquire says it again, for a student
                self.spares[key] = ForkServer(key)

    def acquire(self, key: Key) -> ForkServer:
        server = self.shared.get(key)
        if server is not None and server.process.poll() is None:
            return server
        server = self.spares.pop(key, None) or ForkServer(key)
        server.wait_ready()
        if server.own_uids:
            self.shared[key] = server
        else:
            self.spares[key] = ForkServer(key)  # for the next student
        return server

    def release(self, server: ForkServer) -> None:
        """Done with one student: a server of their own goes with them."""
        if self.shared.get(server.key) is not server:
            server.close()

    def close_all(self) -> None:
        for server in [*self.shared.values(), *self.spares.values()]:
            server.close()
        self.shared.clear()
        self.spares.clear()


SERVERS = Servers()
atexit.register(SERVERS.close_all)
