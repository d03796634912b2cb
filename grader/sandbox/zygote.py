"""The fork server: a warm interpreter in the sandbox that forks a fresh process per student.

Started by the grader (``forkserver.py``) running `main` with a JSON CONFIG argument,
under bubblewrap when it is available, with a control socket (Unix, SOCK_SEQPACKET) whose
descriptor number CONFIG gives. It imports numpy, and torch for torch problems, once; says it
is ready; then answers the grader's requests one at a time:

    fork   a new process for one student's problem, given its three pipes (as descriptors)
           and its limits. When this server may switch uids (it runs as root), the process
           becomes a uid of its own, so it can neither signal nor trace anyone else, and its
           process limit counts its own processes only, and an IPC namespace of its own, so
           its POSIX message queues and System V objects go with it, unseen by later students.
    end    kill every process of that student (its uid's, or its process group's), reap it,
           remove its folder and (with a uid of its own) its System V IPC objects and its
           files in /dev/shm, and say how it ended

Student code never runs in this process: only in the forked children, after they have left
this process's session, closed the control socket, dropped privileges and set their limits.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from grader.execution import preimport
from grader.sandbox import child, limits

PR_SET_PDEATHSIG = 1
CLONE_NEWIPC = 0x08000000  # linux/sched.h
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
# add_key, request_key and keyctl by architecture (audit arch -> numbers). A key a student adds
# to its uid's keyring outlives every process, the sandbox and the grader itself (until the
# machine reboots), counts against no memory group, and any later process, another student's
# included, can read it if its permissions say so: /proc/keys lists it for them.
X32_BIT = 0x40000000
KEYRING_SYSCALLS = {
    0xC000003E: (248, 249, 250, X32_BIT | 248, X32_BIT | 249, X32_BIT | 250),  # x86_64, x32
    0x40000003: (286, 287, 288),  # i386
    0xC00000B7: (217, 218, 219),  # aarch64
}
_SECCOMP_ALLOW, _SECCOMP_ENOSYS = 0x7FFF0000, 0x00050000 | 38
MAX_FDS = 3
KILL_ROUNDS = 100
IPC_RMID = 0  # linux/ipc.h
SHM = "/dev/shm"  # POSIX semaphores and shared memory: writable by every student (bwrap.py)
# Limits of the sandbox's own System V IPC namespace (where the kernel lets this server set
# them). A segment is destroyed once no process has it attached, so its memory is only held
# while mapped, where the address-space limit counts it; message queues are few and small.
IPC_SYSCTLS = {"kernel/shm_rmid_forced": "1", "kernel/msgmni": "8", "kernel/msgmnb": "16384"}


def _preimport(torch: bool) -> None:
    """What every student's process needs, loaded once here and shared by all of them."""
    preimport(torch)
    if torch:
        import torch as torch_module

        torch_module.set_num_threads(1)


def _can_switch_uid(uid: int) -> bool:
    """Whether a forked process can become `uid` (root only; checked, not assumed)."""
    if os.getuid() != 0:
        return False
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os._exit(0)
        except BaseException:  # noqa: BLE001 - any failure means no
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _home(uid: int | None) -> str:
    """A fresh folder of the student's own under /tmp (in a sandbox, only this server may
    write there; without one, /tmp is shared with other graders: hence a unique name)."""
    path = tempfile.mkdtemp(prefix="student-", dir="/tmp")
    if uid is not None:
        os.chown(path, uid, uid)
    return path


def _become_student(request: dict, fds: list[int], control: socket.socket,
                    own_uid: bool, confined: bool, home: str) -> None:  # fmt: skip
    """In the forked process: leave everything of the server behind, then serve."""
    requests_fd, replies_fd, output_fd = fds
    control.close()
    os.setsid()  # a process group of its own, which `end` kills as a whole
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(output_fd, 1)  # prints go to the output pipe, which the grader drains
    os.dup2(output_fd, 2)
    os.chdir(home)
    os.environ.update(HOME=home, TMPDIR=home)
    tempfile.tempdir = None  # importing torch here made tempfile settle on /tmp: ask TMPDIR again
    if own_uid:
        with contextlib.suppress(OSError):  # where the kernel refuses, IPC stays the server's
            _own_ipc_namespace()
        uid = int(request["uid"])
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    limits.apply(request["limits"], own_uid=own_uid, host=request.get("host"))
    with contextlib.suppress(OSError, AttributeError):  # a kernel without seccomp filters
        _no_keyrings()
    child.serve(requests_fd, replies_fd, confined)


def _alive(pid: str) -> bool:
    """Not a zombie (a killed process stays in /proc until its parent reaps it)."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"


def _kill_uid(uid: int) -> None:
    """SIGKILL every live process of `uid` this server can see, until none is left."""
    for _ in range(KILL_ROUNDS):
        found = False
        for entry in os.listdir("/proc"):
            try:
                if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid and _alive(entry):
                    os.kill(int(entry), signal.SIGKILL)
                    found = True
            except OSError:
                continue
        if not found:
            return
        time.sleep(0.005)


def _remove_ipc(uid: int) -> None:
    """Remove the System V shared memory, queues and semaphores `uid` made or owns: they
    outlive their processes, and memory in a segment counts against no process's limit."""
    libc = ctypes.CDLL(None, use_errno=True)
    remove = {"shm": lambda i: libc.shmctl(i, IPC_RMID, None),
              "msg": lambda i: libc.msgctl(i, IPC_RMID, None),
              "sem": lambda i: libc.semctl(i, 0, IPC_RMID)}  # fmt: skip
    for kind, rmid in remove.items():
        try:
            with open(f"/proc/sysvipc/{kind}") as table:
                header, *rows = [line.split() for line in table]
        except OSError:
            continue
        owner, creator = header.index("uid"), header.index("cuid")
        for row in rows:  # the id is the second column of every table
            if uid in (int(row[owner]), int(row[creator])):
                rmid(int(row[1]))


def _no_keyrings() -> None:
    """Refuse this process and all it starts the kernel's key management calls (a seccomp
    filter, which needs no privilege once no_new_privs is set)."""
    program = [(0x20, 0, 0, 4)]  # load the architecture
    for arch, numbers in KEYRING_SYSCALLS.items():
        block = [(0x20, 0, 0, 0)]  # load the call's number
        block += [(0x15, len(numbers) - i, 0, n) for i, n in enumerate(numbers)]
        block += [(0x06, 0, 0, _SECCOMP_ALLOW), (0x06, 0, 0, _SECCOMP_ENOSYS)]
        program += [(0x15, 0, len(block), arch), *block]
    program.append((0x06, 0, 0, _SECCOMP_ALLOW))

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                    ("k", ctypes.c_uint32)]  # fmt: skip

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(program))(*(Filter(*line) for line in program))
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    fprog = Program(len(program), filters)
    if (
        prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0
        or prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0
    ):
        raise OSError(ctypes.get_errno(), "the seccomp filter could not be set")


def _own_ipc_namespace() -> None:
    """Give this student's process an IPC namespace of its own (before it drops root): POSIX
    message queues, which `_remove_ipc` cannot see, outlive their process and would be shared
    with every later student of this server; in a namespace of its own, they and System V
    objects alike go when its last process does, and no other student can open them."""
    if ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWIPC) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWIPC) failed")
    _limit_ipc()


def _limit_ipc() -> None:
    for name, value in IPC_SYSCTLS.items():
        with contextlib.suppress(OSError), open(f"/proc/sys/{name}", "w") as setting:
            setting.write(value)


def _remove_shm(uid: int) -> None:
    """Remove what `uid` left in /dev/shm (POSIX semaphores and shared memory, a process pool's
    locks): every student of this server may write there, and a later one could read it.
    Folders go in one `rm` for all: one per folder took minutes for 150,000 of them, past the
    grader's wait for the server, and made the student ungradable."""
    full_folders = False
    with contextlib.suppress(OSError), os.scandir(SHM) as entries:
        for entry in list(entries):
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if not entry.is_dir(follow_symlinks=False):
                    os.unlink(entry.path)
                    continue
                with contextlib.suppress(OSError):
                    os.rmdir(entry.path)  # most are empty: no process to start
                    continue
                full_folders = True
    if full_folders:  # find hands rm as many as an argument list holds, several times if need be
        subprocess.run(["find", SHM, "-mindepth", "1", "-maxdepth", "1", "-uid", str(uid),
                        "-exec", "rm", "-rf", "--one-file-system", "--", "{}", "+"],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)  # fmt: skip


def _remove_folder(home: str) -> None:
    """Remove a student's folder, however deep: shutil.rmtree recurses, and a tree deeper
    than Python's recursion limit would stay, filling the /tmp later students share."""
    with contextlib.suppress(OSError):
        os.rmdir(home)  # most students write nothing: no process to start
        return
    subprocess.run(["rm", "-rf", "--one-file-system", "--", home], stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)  # fmt: skip


def _ending(status: int) -> dict:
    if os.WIFSIGNALED(status):
        return {"signal": os.WTERMSIG(status)}
    return {"exited": os.waitstatus_to_exitcode(status)}


class Server:
    def __init__(self, control: socket.socket, own_uids: bool, confined: bool):
        self.control, self.own_uids, self.confined = control, own_uids, confined
        self.children: dict[int, tuple[int | None, str]] = {}  # pid -> (uid, home)

    def fork(self, request: dict, fds: list[int]) -> dict:
        if len(fds) != MAX_FDS:
            return {"error": f"fork needs {MAX_FDS} descriptors, got {len(fds)}"}
        uid = int(request["uid"]) if self.own_uids else None
        home = _home(uid)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _become_student(request, fds, self.control, self.own_uids, self.confined, home)
            except BaseException:  # noqa: BLE001 - a child must never return into the server
                code = 70
            os._exit(code)
        for fd in fds:
            os.close(fd)
        self.children[pid] = (uid, home)
        return {"pid": pid}

    def end(self, request: dict) -> dict:
        pid = request.get("pid")
        if pid not in self.children:
            return {"error": f"no student process {pid}"}
        uid, home = self.children.pop(pid)
        # Had it ended before we came to end it? A process that just closed its pipes may still
        # be on its way out: the grader says how long to give it.
        deadline = time.monotonic() + min(float(request.get("wait_s", 0)), 5.0)
        done, status = os.waitpid(pid, os.WNOHANG)
        while not done and time.monotonic() < deadline:
            time.sleep(0.005)
            done, status = os.waitpid(pid, os.WNOHANG)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if uid is None:
                os.killpg(pid, signal.SIGKILL)
            elif not done:
                os.kill(pid, signal.SIGKILL)
        if not done:  # reaped before the search, which then usually finds no one left to wait for
            os.waitpid(pid, 0)
        if uid is not None:
            _kill_uid(uid)
            _remove_ipc(uid)
            _remove_shm(uid)
        _remove_folder(home)
        return _ending(status) if done else {"killed": True}

    def serve(self) -> None:
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.control, 1 << 16, MAX_FDS)
            except (ConnectionError, OSError):
                return
            if not data:
                return  # the grader closed the socket: it is done or gone
            try:
                request = json.loads(data)
                handler = {"fork": self.fork, "end": self.end}[request["op"]]
                reply = handler(request, fds) if handler == self.fork else handler(request)
            except Exception as exc:  # noqa: BLE001 - a bad request must not end the server
                for fd in fds:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            self.control.send(json.dumps(reply).encode())


def main() -> None:
    config = json.loads(sys.argv[-1])
    control = socket.socket(fileno=int(config["control_fd"]))
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    _preimport(bool(config["torch"]))
    if config.get("own_ipc"):  # never the machine's own settings
        _limit_ipc()
    own_uids = bool(config["switch_uids"]) and _can_switch_uid(int(config["probe_uid"]))
    control.send(json.dumps({"ready": True, "own_uids": own_uids}).encode())
    Server(control, own_uids, bool(config.get("confine"))).serve()


if __name__ == "__main__":
    main()
