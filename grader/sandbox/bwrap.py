"""The bubblewrap command line that starts a fork server in a sandbox.

The sandbox has no network, a private /tmp that only root may write to (and a private
/dev/shm that everyone may, as on any machine), a new PID namespace
that dies with the grader, and a read-only view of the interpreter, the libraries and a few of
the kit's files: the modules the sandboxed side runs, the test support (toy models), the probes
of the problems it serves and, for the capstone, the reference modules it builds on. Hidden
tests, other reference solutions and students' files do not exist in it: a student's source
arrives over a pipe. Without a usable bwrap, processes run with resource limits only, and
`sandbox_mode` says so, so that reports can say it loudly.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

NO_BWRAP_ENV = "GRPO_KIT_NO_BWRAP"  # set to 1 to force the rlimits-only fallback
TMP_SIZE = 256 * 1024 * 1024  # bytes of the private /tmp, shared by a fork server's children
# What every sandbox unshares; the probe in `bwrap_command` asks for the same.
ISOLATION = ("--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
             "--unshare-cgroup-try", "--die-with-parent", "--new-session")  # fmt: skip
PR_SET_PDEATHSIG = 1  # linux/prctl.h
KIT_ROOT = Path(__file__).resolve().parents[2]
# The kit's modules the sandboxed side imports, and the test support its probes use.
SANDBOX_FILES = (
    "grader/__init__.py",
    "grader/errors.py",
    "grader/values.py",
    "grader/execution.py",
    "grader/sandbox/__init__.py",
    "grader/sandbox/child.py",
    "grader/sandbox/confine.py",
    "grader/sandbox/frames.py",
    "grader/sandbox/limits.py",
    "grader/sandbox/zygote.py",
    "grader/tampering",
    "problems/__init__.py",
    "problems/support",
)


@functools.cache
def bwrap_command() -> str | None:
    """The bwrap executable if it can actually start a sandbox here, else None."""
    if os.environ.get(NO_BWRAP_ENV) == "1":
        return None
    path = shutil.which("bwrap")
    if path is None:
        return None
    # The same isolation the sandboxes get: bwrap that is installed but cannot create one of
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
        from grader.sandbox.cgroup import MemoryGroup

        group = MemoryGroup.create()
        if group:
            group.remove()
            return None
        return (
            "WARNING: the grader cannot create memory cgroups (it needs root and cgroup v1's "
            "memory controller, or a cgroup v2 subtree with the memory controller enabled), so "
            "memory is limited per process: a submission that forks, or keeps files in memory, "
            "can hold several times --memory-limit."
        )
    return (
        "WARNING: bubblewrap is not available, so submissions run with resource limits only: "
        "they can read other files, use the network and outlive their tests. Install it "
        "(Debian: apt-get install bubblewrap) before grading a real class."
    )


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that has Linux SIGKILL the process when its parent dies; None elsewhere.

    The kernel sends the signal when the *thread* that started the process ends, so start
    processes from threads that outlive them (the main thread, or a pool's worker).
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


class _BindPlan:
    """bwrap arguments, creating every parent directory world-readable (bwrap's are 0700)."""

    def __init__(self):
        self.args: list[str] = []
        self.made: set[Path] = {Path("/")}
        self.bound: list[Path] = []
        self.hidden: list[Path] = []

    def parents(self, target: Path) -> None:
        for parent in reversed(target.parents):
            # A folder inside a bound one exists already, unless a hidden folder covers it.
            exists = any(parent.is_relative_to(b) for b in self.bound) and not any(
                parent.is_relative_to(h) for h in self.hidden
            )
            if parent not in self.made and not exists:
                self.args += ["--perms", "0755", "--dir", str(parent)]
                self.made.add(parent)

    def ro_bind(self, source: Path, target: Path | None = None) -> None:
        target = target or source
        self.parents(target)
        self.args += ["--ro-bind", str(source), str(target)]
        self.bound.append(target)

    def hide(self, directory: Path) -> None:
        """Cover a directory with an empty tmpfs, so only files bound afterwards show."""
        self.parents(directory)
        self.args += ["--perms", "0755", "--tmpfs", str(directory)]
        self.made.add(directory)
        self.hidden.append(directory)


def visible_kit_files(probes: tuple[str, ...], reference: tuple[str, ...]) -> list[Path]:
    """The kit files a sandbox shows: its own modules, test support, the probes of its
    problems (their paths) and the reference modules they build on (by module name)."""
    paths = [KIT_ROOT / name for name in SANDBOX_FILES]
    paths += [Path(path) for path in probes]
    if reference:
        paths += [KIT_ROOT / "reference" / f"{name}.py" for name in ("__init__", *reference)]
    return [path for path in paths if path.exists()]


@functools.cache
def system_binds(probes: tuple[str, ...], reference: tuple[str, ...]) -> tuple[str, ...]:
    """bwrap arguments for what a sandbox sees: the system, Python, a few kit files."""
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
    prefixes = [p for p in sorted({Path(sys.base_prefix).resolve(), Path(sys.prefix)})
                if not p.is_relative_to("/usr")]  # fmt: skip
    # A checkout (its venv inside it, say) is covered whole, its .git and tests included, as it
    # may also sit inside a bound folder (/usr/src/app, a venv's src/). An install's folder is
    # site-packages: only the kit's own folders there are covered.
    checkout = (KIT_ROOT / "pyproject.toml").exists()
    inside = [p for p in prefixes if checkout and p.is_relative_to(KIT_ROOT)]
    for prefix in prefixes:
        if prefix not in inside:
            plan.ro_bind(prefix)
    for folder in (
        [KIT_ROOT] if checkout else [KIT_ROOT / f for f in ("grader", "problems", "reference")]
    ):
        plan.hide(folder)
    for prefix in inside:  # bound again over the covered checkout
        plan.ro_bind(prefix)
    # Then the few kit files the sandbox may see.
    for path in visible_kit_files(probes, reference):
        plan.ro_bind(path)
    return tuple(plan.args)


def command(probes: tuple[str, ...], reference: tuple[str, ...], program: list[str]) -> list[str]:
    """`program` run in a new sandbox that shows the kit files of `visible_kit_files`."""
    return [
        bwrap_command(),
        *ISOLATION,
        # The private /tmp comes first: the kit or its venv may live under /tmp (a CI clone),
        # and binds made after it still show through. Only root (the fork server) writes to
        # it: each student's process gets a folder of its own there.
        "--perms", "0755", "--size", str(TMP_SIZE), "--tmpfs", "/tmp",
        *system_binds(probes, reference),
        "--proc", "/proc", "--dev", "/dev",
        # A /dev/shm students may write to, as on any machine: a process pool's locks are POSIX
        # semaphores there (a pool failed with "Permission denied" in the sandbox alone). The
        # fork server removes what each student left in it (zygote.py).
        "--perms", "1777", "--size", str(TMP_SIZE), "--tmpfs", "/dev/shm",
        "--chdir", "/tmp",
        *program,
    ]  # fmt: skip
