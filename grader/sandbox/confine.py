"""What a student's process may not do, enforced by an audit hook: run code its file does not
show, start a program, or read its own memory through /proc.

A module the submission writes and then imports (a folder put on sys.path or in an importer
cache, a zip archive, a .pyc, a .pth file, a loader or a library given its path) runs code that
its source does not show, so the class report cannot read it. So does text turned into code
while it runs: text decoded from base64 and handed to a code generator (a dataclass's field
names, a timer's statement, a forward reference, a loader's source, a pickle that calls exec).
`confine`, called before the submission runs, installs an audit hook that Python gives no way
to remove. The sandbox leaves a student's process two places to write (its own folder and
/dev/shm): files there work as on any machine, as data, but the hook refuses Python's import
machinery any file from such a place (whichever finder or path led there), a file compiled from
one, a library loaded from one, and changing who may write a file or folder. Text compiled at
run time is held to the rules of the class report: text in which the report would find a lead
(the kit's `grader.tampering` scan) is refused, since no person will read it. It also refuses
code objects built from bytes or by hand, a pickle naming reflection (builtins' functions,
private names, modules of the kit or of the import system), starting a program (also through
_posixsubprocess.fork_exec, which raises no event), links and moves, and /proc/<pid>/mem or
map_files.

The hook calls only what it took when this module was imported (C functions of `posix`, the
scan), so a submission that patches `os.access` or `sys._getframe` changes nothing it sees.
A local run has no such hook: there the learner's own files are the learner's business.
"""

from __future__ import annotations

import _posixsubprocess
import _thread
import builtins
import io
import posix
import re
import sys
from importlib.machinery import (
    ExtensionFileLoader,
    NamespaceLoader,
    SourceFileLoader,
    SourcelessFileLoader,
)
from types import FrameType
from zipimport import zipimporter

from grader.tampering.scan import leads

# Events that start another program: nothing a solution needs, and a program is a second
# process, out of the report's sight, with the student's rights.
STARTS_PROGRAMS = frozenset(
    {"os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.startfile", "subprocess.Popen",
     "pty.spawn"}
)  # fmt: skip
# Events that would let a path checked here name another place when it is used (a link made or
# moved, another current folder: a relative path is read from it), or make a folder the process
# wrote to look like one it could not have written (its mode, owner or access list).
MOVES_PATHS = frozenset({"os.symlink", "os.link", "os.rename", "os.chdir", "os.fchdir"})
CHANGES_RIGHTS = frozenset({"os.chmod", "os.chown", "os.setxattr", "os.removexattr"})
# Code made without text a scan could read: unmarshalled bytes (the import machinery's own .pyc
# reads excepted) and code objects built by hand.
BUILDS_CODE = frozenset({"marshal.loads", "code.__new__"})
# What a pickle may name. A pickle calls whatever it names with arguments it holds, and a dotted
# name walks attributes: builtins' getattr or exec, a module's private dictionary of hooks, a
# module of the kit's are reflection a scan of the file cannot see. Plain data, tensors, arrays,
# classes, and the functions a process pool sends are what a solution pickles.
UNPICKLED_MODULES = re.compile(
    r"(grader|problems|_?pytest|pluggy|os|posix|sys|_?thread(ing)?|subprocess|_posixsubprocess"
    r"|importlib|_frozen_importlib\w*|_imp|zipimport|marshal|types|code|codeop|runpy|_?pickle"
    r"|copy|_?ctypes|gc|inspect|timeit|typing|dataclasses|_?operator|weakref|_weakref"
    r"|signal|pty|shutil|io|_io|torch\.(_dynamo|_inductor|fx|jit|hub|package|_C|utils"
    r"|optim|nn\.modules\.module|_ops|ops|library|serialization))(\.\w+)*"
)
UNPICKLED_PRIVATE = re.compile(
    r"_rebuild\w*|_reconstruct(or)?|_CallItem|_ResultItem|_ExceptionWithTraceback|_load_from_bytes"
    r"|_process_chunk"
)
# Builtins a pickle may name: classes (data, exceptions), not the functions or the classes that
# reach into other objects.
_BUILTIN_CLASSES = frozenset(
    name for name, value in vars(builtins).items() if isinstance(value, type)
    and value not in (type, super, memoryview, classmethod, staticmethod, property)
)  # fmt: skip
# The code that reads a module's file to run it: importlib's finders and loaders, zipimport,
# and the stdlib modules that run a file or a .pth file (as frozen modules or from their files).
_LOADERS_FROZEN = ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>",
                   "<frozen zipimport>", "<frozen site>", "<frozen runpy>")  # fmt: skip
_LOADERS_FILES = re.compile(
    r"/(importlib/_bootstrap(_external)?|zipimport|site|runpy|pkgutil)\.py$"
)
# A process's /proc folder and the folder of /proc itself (the events do not show a dir_fd:
# os.open("mem", dir_fd=os.open("/proc/self", ...))), and its memory or mapped files as files,
# by any path (through /dev/fd/<n>/.. too).
_PROCESS_FOLDER = re.compile(r"^/proc(/(self|thread-self|\d+)(/task/\d+)?)?/?$")
_MEMORY_NAMES = re.compile(r"(^|/)(mem|map_files)(/|$)")
# A source file's declared encoding: the scan reads text as UTF-8, so bytes declaring another
# (utf-7 hides a line in what looks like a comment) are refused.
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.MULTILINE)
# The two lines of a frozen dataclass's generated methods that set or delete an attribute past
# the class's own __setattr__, as the class report flags in a file; the rest of the text is
# scanned as any other.
_DATACLASS_FROZEN = re.compile(
    r"\s*(super\(cls, self\)\.__(setattr__\(name, value\)|delattr__\(name\))"
    r"|__dataclass_builtins_object__\.__setattr__\(self,'\w+',[\w.()]+\))"
)

# The import machinery's own loaders, which read files (checked as they open them): a loader of
# the submission's (a get_data or get_source that returns what it made) is another class.
_FILE_LOADERS = (SourceFileLoader, SourcelessFileLoader, ExtensionFileLoader, NamespaceLoader,
                 zipimporter)  # fmt: skip
# Taken now, before any submission code runs: what the hook calls must not be what a
# submission can replace (os.access, os.path.realpath, sys._getframe are module attributes).
_access, _getcwd, _stat = posix.access, posix.getcwd, posix.stat
_getframe, _thread_id, _open = sys._getframe, _thread.get_ident, io.open
_ENCODING = sys.getfilesystemencoding()
_IS_FOLDER = 0o040000  # S_IFDIR, in st_mode's S_IFMT bits (0o170000)


class ConfinedError(PermissionError):
    """An operation the sandbox refuses a submission."""


def _plain(text: object) -> str | None:
    """The characters the system receives, through the base types' own methods: a subclass of
    str or bytes could answer `startswith` or `decode` otherwise."""
    if isinstance(text, str):
        return "".join((text,))
    if isinstance(text, bytes):
        return bytes.decode(text, _ENCODING, "surrogateescape")
    return None


def _absolute(path: str) -> str:
    """`path` from the root, with `.` and `..` taken by name, as os.path.abspath has it."""
    parts: list[str] = []
    for part in (path if path.startswith("/") else _getcwd() + "/" + path).split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part and part != ".":
            parts.append(part)
    return "/" + "/".join(parts)


def _is_folder(path: str) -> bool:
    try:
        return _stat(path).st_mode & 0o170000 == _IS_FOLDER
    except (OSError, ValueError):
        return False


def _writable(path: str) -> bool:
    """Whether the process could have written what `path` names: an anonymous file (memfd:...),
    or anything in a folder it may write (the folder itself for a folder, the nearest one that
    exists otherwise). A folder stays as writable as it was: changing rights is refused."""
    if path.startswith(("memfd:", "/memfd:")):
        return True
    folder = _absolute(path)
    while folder != "/" and not _is_folder(folder):
        folder = folder.rsplit("/", 1)[0] or "/"
    return _access(folder, 2)  # W_OK


def _identity(path: str) -> tuple[int, int] | None:
    try:
        status = _stat(path)
    except (OSError, ValueError):
        return None
    return status.st_dev, status.st_ino


def _loader_frame(frame: FrameType) -> bool:
    """Whether `frame` belongs to the import machinery."""
    name = frame.f_code.co_filename
    return name in _LOADERS_FROZEN or bool(_LOADERS_FILES.search(name))


def _loader(depth: int) -> bool:
    """Whether the frame `depth` levels above the caller belongs to the import machinery."""
    return _loader_frame(_getframe(depth + 1))


def _library_import(frame: FrameType | None, source: str) -> bool:
    """Whether `frame` is library code that an import runs: it and the frames that called it,
    up to the import machinery, are from files the process could not have written (frozen
    modules included). Libraries compile text of their own as they import (typing, dataclasses),
    in which the report's rules find what they would in any library; none of it is the
    student's, whose frames (its file, or text compiled at run time) break the chain. Library
    functions it calls directly are no import: their caller is its frame."""
    first = frame
    while frame is not None:
        if _loader_frame(frame):
            # The import machinery itself compiles only the file it read (checked by content):
            # called directly, it compiles whatever text it is given. And it imports with a
            # loader of its own: the submission's loader hands it text.
            if frame is first:
                return False
            while frame is not None and _loader_frame(frame):
                loader = frame.f_locals.get("self")
                if loader is not None and type(loader) not in _FILE_LOADERS:
                    return False
                frame = frame.f_back
            return True
        name = frame.f_code.co_filename
        library = name.startswith("<frozen ") or (name.startswith("/") and not _writable(name))
        if not library or _absolute(name) == source:
            return False
        frame = frame.f_back
    return False


def _unread_leads(source: object, filename: str, generated_by_dataclass: bool) -> list[str]:
    """What the class report would flag in text compiled at run time, as `what (line n)`:
    empty for text that is exactly the file it names (a module imported from its source)."""
    if isinstance(source, bytes):
        raw = b"".join((source,))
    elif isinstance(source, str):
        raw = str.encode("".join((source,)), "utf-8", "surrogateescape")
    else:
        return ["a syntax tree built at run time"]
    if filename.startswith("/") and not _writable(filename):
        try:
            with _open(filename, "rb") as file:
                if file.read() == raw:
                    return []
        except (OSError, ValueError):
            pass
    declared = _CODING.search(b"\n".join(raw.split(b"\n", 2)[:2]))
    if declared and declared.group(1).lower().replace(b"_", b"-") not in (b"utf-8", b"utf8"):
        return [f"text declaring the encoding {declared.group(1).decode(errors='replace')}"]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return ["text that is not UTF-8"]
    lines = text.splitlines()
    return [
        f"{lead.what} (line {lead.line})"
        for lead in leads(text)
        if not (
            generated_by_dataclass
            and 0 < lead.line <= len(lines)
            and _DATACLASS_FROZEN.fullmatch(lines[lead.line - 1])
        )
    ]


def confine(source_path: str, source_text: str) -> None:
    """From now on, refuse this process what the module docstring lists. `source_path` is the
    submission's own file, which the kit compiles from `source_text` (tracebacks read it): it
    lies in the student's folder, so the process could rewrite it, and only that text may be
    compiled under its name."""
    source = _absolute(source_path)
    fork_exec_library = _identity(getattr(_posixsubprocess, "__file__", None) or "/")
    scanning: set[int] = set()  # threads whose text the hook is scanning (the scan compiles)

    def refuse(what: str) -> None:
        raise ConfinedError(
            f"the grader's sandbox refuses this: {what}. A solution runs only the code in its "
            "file and starts no program"
        )

    def hook(event: str, args: tuple) -> None:
        if event in STARTS_PROGRAMS:
            refuse(f"starting a program ({event})")
        if event in MOVES_PATHS:
            refuse(f"moving or linking files, or changing folder ({event})")
        if event in CHANGES_RIGHTS:
            refuse(f"changing the rights of a file or folder ({event})")
        if event == "open" and args:
            path = _plain(args[0])
            if path is None:
                return  # a file descriptor
            if _PROCESS_FOLDER.match(_absolute(path)) or _MEMORY_NAMES.search(path):
                refuse(f"opening {path}")
            if _loader(1) and _writable(path):
                refuse(f"importing code from {path}, a file it could have written")
        elif event == "compile" and len(args) > 1:  # (source, filename)
            filename = _plain(args[1]) or ""
            if _plain(args[0]) == source_text or _thread_id() in scanning:
                return  # its own file's text, or the scan's own parse
            if filename and not filename.startswith("<") and _writable(filename):
                refuse(f"compiling {filename}, a file it could have written")
            if _absolute(filename) == source:
                refuse(f"compiling other text under its own file's name, {filename}")
            caller = _getframe(1)
            if _library_import(caller, source):
                return
            by_dataclass = caller.f_code.co_name == "_create_fn" and all(
                frame.f_code.co_filename.endswith("/dataclasses.py")
                for frame in (caller, caller.f_back)
                if frame is not None
            )
            scanning.add(_thread_id())
            try:
                flagged = _unread_leads(args[0], filename, by_dataclass)
            finally:
                scanning.discard(_thread_id())
            if flagged:
                refuse(f"running text as code that the class report would flag: {flagged[0]}")
        elif event in BUILDS_CODE:
            if (
                event == "marshal.loads"
                and _loader(1)
                and _loader(2)
                and type(_getframe(2).f_locals.get("self")) in _FILE_LOADERS
            ) or (event == "code.__new__" and _library_import(_getframe(1), source)):
                return  # a .pyc read by importlib's own loaders, or a library's import
            refuse(f"building code from bytes or by hand ({event})")
        elif event == "pickle.find_class" and len(args) > 1:
            module, name = _plain(args[0]) or "", _plain(args[1]) or ""
            if (
                (module == "builtins" and name not in _BUILTIN_CLASSES)
                or UNPICKLED_MODULES.fullmatch(module)
                or any(
                    part.startswith("_") and not UNPICKLED_PRIVATE.fullmatch(part)
                    for part in name.split(".")
                )  # fmt: skip
            ):
                refuse(f"unpickling {module}.{name}, which a solution has no use for")
        elif event == "import" and len(args) > 1:  # (module, filename of an extension, ...)
            filename = _plain(args[1])
            if _plain(args[0]) == "_posixsubprocess" or (
                filename is not None and _identity(filename) == fork_exec_library
            ):  # a fresh copy, under any name, has the real fork_exec
                refuse("importing _posixsubprocess afresh")
            if filename is not None and _writable(filename):
                refuse(f"loading {filename}, a library it could have written")
        elif event == "ctypes.dlopen" and args:
            library = _plain(args[0])
            if (
                library is not None
                and "/" in library
                and (_writable(library) or _identity(library) == fork_exec_library)
            ):
                refuse(f"loading {library}, a library it could have written or a fresh copy")

    sys.addaudithook(hook)

    # The one way to start a program that raises no audit event (subprocess's and
    # multiprocessing's spawn go through it): replaced, and never imported afresh.
    def fork_exec(*args, **kwargs):
        refuse("starting a program (_posixsubprocess.fork_exec)")

    _posixsubprocess.fork_exec = fork_exec
