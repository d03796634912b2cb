"""Start the sandboxed child and talk to it under a wall clock kept from outside.

The child runs under bubblewrap when it works here: no network, a private /tmp, a new PID
namespace that dies with us, and a read-only view of the interpreter, the libraries and the
few kit files the child needs (for the capstone, also the reference solutions its starter
imports), plus the student's files. Without bubblewrap the child
gets resource limits only, and `sandbox_mode()` says so, so that reports can say it loudly.
Whatever the child does, it cannot stop the clock: a call that overruns is ended by killing
the child's whole process group (and with it the PID namespace).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import itertools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from grader.sandbox.child import count_processes
from grader.sandbox.protocol import (
    ProtocolError,
    UnsupportedValue,
    describe_exception,
    frame_length,
    header_size,
    pack_frame,
    parse_frame,
)

STARTUP_GRACE_S = 30.0  # importing numpy/torch in the child is ours, not the student's, time
CPU_LIMIT_S = 600  # a backstop only: the wall clock, kept from outside, is the real limit
NO_BWRAP_ENV = "GRPO_KIT_NO_BWRAP"  # set to 1 to force the rlimits-only fallback
CHILD_ENV = {
    "PATH": "/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    # One thread each: the batch runs many children side by side, and threads count as processes.
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    # torch.optim imports torch._dynamo, which creates its cache folder at import: point it at
    # one that exists, since the child's own uid may not write to its /tmp.
    "TORCHINDUCTOR_CACHE_DIR": "/tmp",
}
SANDBOX_UID_BASE = 2_000_000
SUBMISSION_DIR = "/submission"  # where the child sees the student's files
# What every sandbox unshares; the probe in `bwrap_command` asks for the same.
ISOLATION = ("--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
             "--unshare-cgroup-try", "--die-with-parent", "--new-session")  # fmt: skip
PR_SET_PDEATHSIG = 1  # linux/prctl.h
_uids = itertools.count()


@dataclass(frozen=True)
class Limits:
    """What one submission may use. Times are wall-clock seconds."""

    call_s: float = 10.0  # per call of a student function (and for importing the file)
    total_s: float = 60.0  # all calls of one submission together
    memory_mb: int = 1024
    nproc: int = 32
    fsize_mb: int = 16
    output_kb: int = 32  # of the student's printed output kept for the report


class SandboxFailure(Exception):
    """The child timed out, crashed, ran out of memory or broke the protocol; it is now dead."""


class SandboxStartFailure(SandboxFailure):
    """The child never became ready. No student code had run yet: this is the grader's problem."""


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that has Linux SIGKILL the child when its parent dies; None elsewhere.

    The kernel sends the signal when the *thread* that started the child ends, so start
    children from threads that outlive them (the main thread, or a pool's worker).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: no signal would ever come
            os._exit(1)

    return preexec


@functools.cache
def bwrap_command() -> str | None:
    """The bwrap executable if it can actually start a sandbox here, else None."""
    if os.environ.get(NO_BWRAP_ENV) == "1":
        return None
    path = shutil.which("bwrap")
    if path is None:
        return None
    # The same isolation the children get: bwrap that is installed but cannot create one of
    # these namespaces here (a container, a hardened kernel) counts as unavailable.
    probe = [path, *ISOLATION, "--ro-bind", "/", "/", "--tmpfs", "/tmp", "--proc", "/proc",
             "--dev", "/dev", "true"]  # fmt: skip
    try:
        return (
            path if subprocess.run(probe, capture_output=True, timeout=30).returncode == 0 else None
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def sandbox_mode() -> str:
    return "bubblewrap" if bwrap_command() else "rlimits only (bubblewrap unavailable)"


def sandbox_warning() -> str | None:
    if bwrap_command():
        return None
    return (
        "WARNING: bubblewrap is not available, so submissions run with resource limits only: "
        "they can read other files, use the network and outlive their tests. Install it "
        "(Debian: apt-get install bubblewrap) before grading a real class."
    )


def _kit_files(reference: tuple[str, ...]) -> list[Path]:
    """The kit files the child may see: the sandbox package, the models tests hand over, and
    the `reference` modules (``kit_types.SANDBOX_REFERENCE``) its problem builds on."""
    sandbox_dir = Path(__file__).resolve().parent
    grader_dir = sandbox_dir.parent
    reference_dir = grader_dir.parent / "reference"
    wanted = [grader_dir / name for name in ("__init__.py", "kit_types.py", "toy_models.py")]
    wanted += [sandbox_dir] + [reference_dir / f"{name}.py" for name in reference]
    return [path for path in wanted if path.exists()]


class _BindPlan:
    """bwrap arguments, creating every parent directory world-readable (bwrap's are 0700)."""

    def __init__(self):
        self.args: list[str] = []
        self.made: set[Path] = {Path("/")}

    def parents(self, target: Path) -> None:
        for parent in reversed(target.parents):
            if parent not in self.made and not any(parent.is_relative_to(m) for m in self._binds()):
                self.args += ["--perms", "0755", "--dir", str(parent)]
                self.made.add(parent)

    def _binds(self) -> list[Path]:
        return [Path(self.args[i + 2]) for i, a in enumerate(self.args) if a == "--ro-bind"]

    def ro_bind(self, source: Path, target: Path | None = None) -> None:
        target = target or source
        self.parents(target)
        self.args += ["--ro-bind", str(source), str(target)]

    def hide(self, directory: Path) -> None:
        """Cover a directory with an empty tmpfs, so only files bound afterwards show."""
        self.parents(directory)
        self.args += ["--perms", "0755", "--tmpfs", str(directory)]
        self.made.add(directory)


@functools.cache
def _system_binds(reference: tuple[str, ...] = ()) -> tuple[str, ...]:
    """bwrap arguments for what a child sees: the system, Python, a few kit files."""
    plan = _BindPlan()
    plan.ro_bind(Path("/usr"))
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            plan.args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            plan.ro_bind(path)
    if Path("/etc/ld.so.cache").exists():
        plan.ro_bind(Path("/etc/ld.so.cache"))
    for prefix in {Path(sys.base_prefix).resolve(), Path(sys.prefix)}:
        if not prefix.is_relative_to("/usr"):
            plan.ro_bind(prefix)
    # The kit's packages may sit inside a bound prefix (a non-editable install): hide them
    # all (reference/ too, even when no file of it is shown), then show the few files.
    kit_root = Path(__file__).resolve().parents[2]
    for package in sorted({kit_root / "grader", kit_root / "reference"}):
        plan.hide(package)
    for path in _kit_files(reference):
        plan.ro_bind(path)
    return tuple(plan.args)


def _bwrap_args(submission: Path, inside: Path, reference: tuple[str, ...]) -> list[str]:
    # `inside` is /submission or a file in it; bwrap would create /submission as 0700.
    return [
        bwrap_command(),
        *ISOLATION,
        # The private /tmp comes first: the kit or its venv may live under /tmp (a CI clone),
        # and binds made after it still show through.
        "--tmpfs", "/tmp",
        *_system_binds(reference),
        "--perms", "0755", "--dir", SUBMISSION_DIR,
        "--ro-bind", str(submission), str(inside),
        "--proc", "/proc", "--dev", "/dev", "--chdir", "/tmp",
    ]  # fmt: skip


def _host_processes() -> dict | None:
    """What a child under bwrap needs to set RLIMIT_NPROC right when the grader is not root.

    The kernel counts all processes of the uid in the user namespace that owns them, but the
    child's /proc shows only its PID namespace. Under a setuid bwrap (no new user namespace)
    the count that matters is the one seen from here.
    """
    if os.getuid() == 0:
        return None  # the child becomes a fresh uid of its own, with no other processes
    try:
        userns = os.stat("/proc/self/ns/user").st_ino
        count = count_processes(os.getuid())
    except OSError:
        return None
    return {"userns": userns, "processes": count}


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class _OutputDrain(threading.Thread):
    """Reads the child's stderr (where its prints go) so it never blocks, keeping the start."""

    def __init__(self, fd: int, keep: int):
        super().__init__(daemon=True)
        self.fd, self.keep = fd, keep
        self.kept = bytearray()
        self.dropped = 0

    def run(self) -> None:
        while chunk := os.read(self.fd, 65536):
            room = self.keep - len(self.kept)
            self.kept += chunk[:room]
            self.dropped += max(0, len(chunk) - room)

    def text(self) -> str:
        text = self.kept.decode("utf-8", errors="replace")
        return text + (
            f"\n... ({self.dropped} more bytes of output dropped)" if self.dropped else ""
        )


def _packed_answer(answer: dict) -> bytes:
    try:
        return pack_frame(answer)
    except UnsupportedValue as exc:  # the test's function returned more than a frame holds
        return pack_frame({"error": describe_exception(exc)})


class SandboxProcess:
    """One sandboxed child that sees `root` (a submission file, or a student's folder of them).

    `exchange` sends a frame and awaits the reply within a wall-clock allowance; on a timeout,
    a crash or malformed data the child is killed and SandboxFailure says what happened.
    """

    def __init__(self, root: Path, limits: Limits, torch: bool = False,
                 reference: tuple[str, ...] = ()):  # fmt: skip
        self.limits = limits
        bwrap = bwrap_command()
        root = root.resolve()
        self.root_is_file = root.is_file()
        inside = Path(SUBMISSION_DIR) / (root.name if self.root_is_file else "")
        self.inside = inside if bwrap else root
        config = {
            "limits": asdict(limits) | {"cpu_s": CPU_LIMIT_S},
            "torch": torch,
            # A grader running as root gives each child its own unprivileged uid, so that
            # RLIMIT_NPROC binds it alone. Only under bubblewrap: elsewhere the interpreter
            # may live where that uid cannot read (/root/.pyenv).
            "uid": (SANDBOX_UID_BASE + (os.getpid() % 100_000) * 100 + next(_uids) % 100)
            if bwrap
            else None,
            "host": _host_processes() if bwrap else None,
        }
        child = [sys.executable, "-I", "-m", "grader.sandbox.child", json.dumps(config)]
        command = _bwrap_args(root, self.inside, reference) + child if bwrap else child
        self.sandboxed = bool(bwrap)
        self.started = False  # until the ready frame, a failure is the grader's, not the student's
        try:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=CHILD_ENV,
                cwd="/tmp",
                start_new_session=True,  # its own process group, so one kill ends all it started
                # bwrap's --die-with-parent does this in the sandbox; without it, ask the kernel.
                preexec_fn=None if bwrap else die_with_parent(),
            )
        except OSError as exc:
            raise SandboxStartFailure(f"the sandbox could not be started: {exc}") from None
        os.set_blocking(self.process.stdin.fileno(), False)
        os.set_blocking(self.process.stdout.fileno(), False)
        self.output = _OutputDrain(self.process.stderr.fileno(), limits.output_kb * 1024)
        self.output.start()
        self._buffer = bytearray()

    def path_inside(self, path: Path) -> str:
        """Where the child sees `path`, a file under the root it was given."""
        return str(self.inside if self.root_is_file else self.inside / path.name)

    # ------------------------------------------------------------ lifecycle

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            pipe.close()
        self.output.join(timeout=1)

    def _exit_description(self) -> str:
        try:
            code = self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "stopped answering"
        number = -code if code < 0 else code - 128 if (self.sandboxed and code > 128) else 0
        if number == signal.SIGXCPU:
            return "crashed: CPU time limit exceeded"
        if number == signal.SIGKILL:
            return f"crashed: killed by SIGKILL (memory limit of {self.limits.memory_mb} MiB?)"
        if number:
            return f"crashed: killed by {_signal_name(number)}"
        if not self.started:
            return f"exited with status {code}"
        return f"exited with status {code} (never call sys.exit, os._exit or quit)"

    # ------------------------------------------------------------ frames under a deadline

    def _fail(self, reason: str) -> SandboxFailure:
        self.kill()
        output = self.output.text().strip()
        tail = f"\n--- its output ---\n{output[-2000:]}" if output else ""
        return SandboxFailure(reason + tail)

    def _send(self, data: bytes, deadline: float, late: str) -> None:
        fd, view = self.process.stdin.fileno(), memoryview(data)
        while view:
            if not select.select([], [fd], [], max(0.0, deadline - time.monotonic()))[1]:
                raise self._fail(late)
            try:
                view = view[os.write(fd, view) :]
            except BrokenPipeError:
                raise self._fail(self._exit_description()) from None

    def _read(self, count: int, deadline: float, late: str) -> bytes:
        fd = self.process.stdout.fileno()
        while len(self._buffer) < count:
            if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise self._fail(late)
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise self._fail(self._exit_description())
            self._buffer += chunk
        data = bytes(self._buffer[:count])
        del self._buffer[:count]
        return data

    def exchange(self, message: dict | None, allowance: float, late: str,
                 on_callback: Callable[[dict], dict] | None = None) -> dict:  # fmt: skip
        """Send `message` (if any) and return the reply, all within `allowance` seconds.

        `late` is the reason given if the time runs out. With `on_callback`, a frame that asks
        for a test's function (``{"callback": ...}``) is answered with what `on_callback`
        returns for it, under the same clock, and the wait for the reply goes on.
        """
        deadline = time.monotonic() + max(0.0, allowance)
        try:
            if message is not None:
                self._send(pack_frame(message), deadline, late)
            while True:
                length = frame_length(self._read(header_size(), deadline, late))
                frame = parse_frame(self._read(length, deadline, late))
                if on_callback is None or "callback" not in frame:
                    return frame
                self._send(_packed_answer(on_callback(frame)), deadline, late)
        except ProtocolError as exc:
            raise self._fail(f"sent malformed data ({exc})") from None

    def wait_ready(self) -> None:
        """Wait for the ready frame; SandboxStartFailure if it does not come."""
        try:
            reply = self.exchange(None, STARTUP_GRACE_S, f"timed out after {STARTUP_GRACE_S:g} s")
            if reply.get("ready") is not True:
                raise self._fail("its first frame was not the ready frame")
        except SandboxFailure as exc:
            raise SandboxStartFailure(f"the sandbox did not start: {exc}") from None
        self.started = True
