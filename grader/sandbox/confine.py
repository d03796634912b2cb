"""What a student's process may not do, enforced by an audit hook: load code it wrote, start a
program, or read its own memory through /proc.

A module the submission writes and then imports (a folder put on sys.path or in an importer
cache, a zip archive, a .pyc, a .pth file, a loader or a library given its path) runs code that
its source does not show, so the class report cannot read it. The sandbox leaves a student's
process two places to write (its own folder and /dev/shm): files there work as on any machine,
as data. `confine`, called before the submission runs, installs an audit hook that Python gives
no way to remove. It refuses Python's import machinery any file from such a place (whichever
finder or path led there), a file compiled from one (its own source excepted), a library
loaded from one, starting a program (also through _posixsubprocess.fork_exec, which raises no
event), links and moves, and /proc/<pid>/mem or map_files.

A local run has no such hook: there the learner's own files are the learner's business.
"""

from __future__ import annotations

import os
import re
import sys

# Events that start another program: nothing a solution needs, and a program is a second
# process, out of the report's sight, with the student's rights.
STARTS_PROGRAMS = frozenset(
    {"os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.startfile", "subprocess.Popen",
     "pty.spawn"}
)  # fmt: skip
# Events that would let a path checked here name another place when it is used: a link made or
# moved, or another current folder (a relative path is read from it).
MOVES_PATHS = frozenset({"os.symlink", "os.link", "os.rename", "os.chdir", "os.fchdir"})
# The code that reads a module's file to run it: importlib's finders and loaders, zipimport,
# and the stdlib modules that run a file or a .pth file (as frozen modules or from their files).
_LOADERS_FROZEN = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>",
                   "<frozen zipimport>", "<frozen site>", "<frozen runpy>")  # fmt: skip
_LOADERS_FILES = re.compile(
    r"/(importlib/_bootstrap(_external)?|zipimport|site|runpy|pkgutil)\.py$"
)
# A process's memory, and files mapped into it, as files, and the folders that hold them (the
# events do not show a dir_fd: os.open("mem", dir_fd=os.open("/proc/self", ...))).
_PROCESS_MEMORY = re.compile(
    r"^/proc(/(self|thread-self|\d+)(/task/\d+)?(/(mem|map_files)(/.*)?)?)?/?$"
)
_MEMORY_NAMES = re.compile(r"(^|/)(mem|map_files)(/|$)")


class ConfinedError(PermissionError):
    """An operation the sandbox refuses a submission."""


def _plain(text: object) -> str | None:
    """The characters the system receives, through the base types' own methods: a subclass of
    str or bytes could answer `startswith` or `decode` otherwise."""
    if isinstance(text, str):
        return "".join((text,))
    if isinstance(text, bytes):
        return bytes.decode(text, sys.getfilesystemencoding(), "surrogateescape")
    return None


def _writable(path: str) -> bool:
    """Whether the process could have written what `path` names, or what it resolves to: an
    anonymous file (memfd:...) counts, and so does anything in a folder it may write (the
    folder itself for a folder, the nearest one that exists otherwise)."""
    for named in (os.path.abspath(path), os.path.realpath(path)):
        if not named.startswith("/") or named.startswith("/memfd:"):  # memfd:, pipe:[..]
            return True
        folder = named if os.path.isdir(named) else os.path.dirname(named)
        while folder != "/" and not os.path.isdir(folder):
            folder = os.path.dirname(folder)
        if os.access(folder, os.W_OK):
            return True
    return False


def _loading() -> bool:
    """Whether the code that raised the event (the frame above the hook's caller) is the
    import machinery reading a file."""
    frame = sys._getframe(2)
    name = frame.f_code.co_filename
    return name in _LOADERS_FROZEN or bool(_LOADERS_FILES.search(name))


def confine(source_path: str, source_text: str) -> None:
    """From now on, refuse this process what the module docstring lists. `source_path` is the
    submission's own file, which the kit compiles from `source_text` (tracebacks read it): it
    lies in the student's folder, so the process could rewrite it, and only that text may be
    compiled under its name."""
    source = os.path.realpath(source_path)

    def refuse(what: str) -> None:
        raise ConfinedError(
            f"the grader's sandbox refuses this: {what}. A solution runs only the code in its "
            "file and starts no program"
        )

    # The checks call os.path and os.access functions, which raise no audit event of their own.
    def hook(event: str, args: tuple) -> None:
        if event in STARTS_PROGRAMS:
            refuse(f"starting a program ({event})")
        if event in MOVES_PATHS:
            refuse(f"moving or linking files, or changing folder ({event})")
        if event == "open" and args:
            path = _plain(args[0])
            if path is None:
                return  # a file descriptor
            if (
                _PROCESS_MEMORY.match(os.path.abspath(path))
                or _PROCESS_MEMORY.match(os.path.realpath(path))
                or (not path.startswith("/") and _MEMORY_NAMES.search(path))  # with a dir_fd
            ):
                refuse(f"opening {path}")
            if _loading() and _writable(path):
                refuse(f"importing code from {path}, a file it could have written")
        elif event == "compile" and len(args) > 1:  # (source, filename)
            filename = _plain(args[1])
            submitted = (
                os.path.realpath(filename or "") == source and _plain(args[0]) == source_text
            )
            if (
                filename
                and not filename.startswith("<")  # "<string>": text, not a file
                and not submitted
                and _writable(filename)
            ):
                refuse(f"compiling {filename}, a file it could have written")
        elif event == "import" and len(args) > 1:  # (module, filename of an extension, ...)
            if _plain(args[0]) == "_posixsubprocess":  # a fresh copy has the real fork_exec
                refuse("importing _posixsubprocess afresh")
            filename = _plain(args[1])
            if filename is not None and _writable(filename):
                refuse(f"loading {filename}, a library it could have written")
        elif event == "ctypes.dlopen" and args:
            library = _plain(args[0])
            if library is not None and "/" in library and _writable(library):
                refuse(f"loading {library}, a library it could have written")

    sys.addaudithook(hook)
    # The one way to start a program that raises no audit event (subprocess's and
    # multiprocessing's spawn go through it): replaced, and never imported afresh.
    import _posixsubprocess

    def fork_exec(*args, **kwargs):
        refuse("starting a program (_posixsubprocess.fork_exec)")

    _posixsubprocess.fork_exec = fork_exec
