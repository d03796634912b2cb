"""Read one student's files, find the problem files among them, and check them before anything runs.

A student's files come as a folder or a zip (and a folder may hold zips), in the plain layout::

    SUBMISSIONS/<student>/<slug>.py     one file per problem (any subset of the problems)
    SUBMISSIONS/<student>.zip           the same files, at the top of the zip or in folders

or in an LMS's download layout (``grader/layouts.py``), which hands the files it found for
each student to the same `Intake`. A file is taken for a problem when its name is
``<slug>.py``, at any depth; a near miss (``Group_Stats.py``, ``group_stats (1).py``,
``group_stats-1.py``) is taken too, with a note saying so. A ``.py`` file that only looks like
a problem's name (``grp_stats.py``) is not graded: that problem's tests say "did you mean".
Anything else a student ships (``conftest.py``, ``pytest.ini``, ``sitecustomize.py``, ...) is
ignored, listed in that student's report, and never reaches the sandbox. Whatever is wrong
with one student's files (a file that cannot be read, is not UTF-8 or has a syntax error; a zip
that is damaged, encrypted, a symbolic link, a path that leaves the zip) becomes a reason
reported on every test of that problem, or of all problems: it never stops the batch, and
everybody else is graded.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import stat
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath

from grader.problems import REFERENCE_DIR, Problem
from grader.sources import MAX_SOURCE_BYTES, check_source

MAX_ZIP_BYTES = 8 * 1024 * 1024
MAX_ZIP_ENTRIES = 200
MAX_DEPTH = 6  # folders below a student's folder (or zip) that are searched for problem files
# A student's name as a folder or zip name: letters (any script), digits, _.@+- and inner
# spaces; never a path separator or a leading dot.
STUDENT_NAME = re.compile(r"[\w@+](?:[\w.@+ -]{0,126}[\w.@+-])?")
RESERVED_SUFFIXES = (".csv", ".json", ".html", ".zip")  # the grader's own files in OUT
# One line, or a parenthesized list over several.
IMPORT_FROM_REFERENCE = re.compile(r"^from reference\.(\w+) import (?:\([^)]*\)|.*)$", re.MULTILINE)
REJECTED_SUFFIX = ".rejected"
JUNK_PARTS = ("__MACOSX", "__pycache__", ".ipynb_checkpoints")
COPY_SUFFIX = re.compile(r"(?:_\(\d+\)|_copy(?:_\(?\d+\)?)?|_\d+)$")


@dataclass
class Submission:
    """One student's files: the source of each problem, or why it cannot run, and who it is."""

    student: str  # the identifier the results are filed under (and the LMS needs back)
    sources: dict[str, bytes] = field(default_factory=dict)  # slug -> file contents
    rejected: dict[str, str] = field(default_factory=dict)  # slug -> reason shown on each test
    ignored: list[str] = field(default_factory=list)  # entries that are not problem files
    notes: list[str] = field(default_factory=list)  # how near-miss file names were matched
    hints: dict[str, str] = field(default_factory=dict)  # slug -> "did you mean" for a missing file
    name: str = ""  # the student's name, when the LMS gives it
    email: str = ""
    sid: str = ""  # the student or LMS id, when the LMS gives one
    layout: str = "plain"
    submitted_at: datetime | None = None
    marked_late: bool = False  # the LMS says late, without a time

    def __post_init__(self):
        # From file names (undecodable bytes arrive as lone surrogates) or an LMS's metadata:
        # made text that every report and gradebook can be written in.
        self.name, self.email, self.sid = (
            printable(str(v)) for v in (self.name, self.email, self.sid)
        )

    def submitted(self, slug: str) -> bool:
        """Whether a file was handed in for `slug` (even one that cannot run)."""
        return slug in self.sources or slug in self.rejected

    def fingerprint(self, slug: str) -> str:
        """What this submission's `slug` was graded from: its bytes, or why there are none."""
        if slug in self.sources:
            return "sha256:" + hashlib.sha256(self.sources[slug]).hexdigest()
        reason = self.rejected.get(slug) or self.hints.get(slug)
        if reason is not None:
            return "reason:" + hashlib.sha256(reason.encode()).hexdigest()
        return "missing"

    def identity(self) -> dict:
        return {"id": self.student, "name": self.name, "email": self.email, "sid": self.sid,
                "layout": self.layout, "marked_late": self.marked_late,
                "submitted_at": self.submitted_at.isoformat() if self.submitted_at else None}  # fmt: skip


def printable(name: str) -> str:
    """A file name as it can be shown and saved (undecodable bytes become U+FFFD)."""
    try:
        data = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no byte gave, as an LMS's metadata may hold
        data = name.encode("utf-8", "surrogatepass")
    return data.decode("utf-8", "replace")[:200]


def valid_student(name: str) -> bool:
    return (bool(STUDENT_NAME.fullmatch(name)) and name != "gradebook.csv"
            and not name.lower().endswith(RESERVED_SUFFIXES))  # fmt: skip


# ------------------------------------------------------------------ the entries of a tree


@dataclass
class Entry:
    """One entry of a student's folder or zip."""

    path: str  # relative, with / between parts, as shown to the student
    kind: str  # "file", "dir", "link", "other" or "unsafe"
    size: int = 0
    read: Callable[[], bytes] | None = None  # at most MAX_SOURCE_BYTES + 1 bytes
    disk: Path | None = None  # the file itself, for an entry of a folder

    @property
    def parts(self) -> tuple[str, ...]:
        return PurePosixPath(self.path).parts


def _read_file(path: Path) -> Callable[[], bytes]:
    def read() -> bytes:
        with path.open("rb") as file:
            return file.read(MAX_SOURCE_BYTES + 1)

    return read


def folder_entries(folder: Path) -> Iterator[Entry]:
    """The entries under `folder`, depth first, never following a symbolic link."""
    stack = [(folder, "")]
    while stack:
        directory, prefix = stack.pop()
        with os.scandir(directory) as listing:
            found = sorted(listing, key=lambda e: e.name)
        for item in found:
            shown = f"{prefix}{item.name}"
            try:
                mode = item.stat(follow_symlinks=False).st_mode
            except OSError as exc:
                yield Entry(shown, "other", read=_failing(exc))
                continue
            if stat.S_ISLNK(mode):
                yield Entry(shown, "link")
            elif stat.S_ISDIR(mode):
                yield Entry(shown, "dir")
                if shown.count("/") < MAX_DEPTH:
                    stack.append((Path(item.path), shown + "/"))
            elif stat.S_ISREG(mode):
                path = Path(item.path)
                yield Entry(shown, "file", item.stat(follow_symlinks=False).st_size,
                            _read_file(path), path)  # fmt: skip
            else:
                yield Entry(shown, "other")


def _failing(exc: OSError) -> Callable[[], bytes]:
    def read() -> bytes:
        raise exc

    return read


def _unsafe(name: str) -> bool:
    path = PurePosixPath(name)
    return name.startswith("/") or ".." in path.parts or "\\" in name or "\x00" in name


def _zip_entry(archive: zipfile.ZipFile, info: zipfile.ZipInfo, prefix: str) -> Entry:
    name = info.filename
    shown = prefix + name.rstrip("/")
    if _unsafe(name):
        return Entry(prefix + name, "unsafe")
    if info.is_dir():
        return Entry(shown, "dir")
    if stat.S_ISLNK(info.external_attr >> 16):
        return Entry(shown, "link")

    def read() -> bytes:  # at most the size limit (plus one byte), whatever the entry claims
        with archive.open(info) as member:
            return member.read(MAX_SOURCE_BYTES + 1)

    return Entry(shown, "file", info.file_size, read)


def _why_unreadable(exc: Exception) -> str:
    text = str(exc).lower()
    if "encrypted" in text or "password" in text:
        return "it is encrypted: zip it again without a password"
    if isinstance(exc, NotImplementedError):
        return "it uses a compression method that is not supported: zip it again (deflate)"
    return f"it is damaged ({type(exc).__name__}): zip it again"


# ------------------------------------------------------------------ matching names to problems


def match_slug(stem: str, slugs) -> tuple[str | None, bool]:
    """(slug, renamed) for a .py file's stem: exactly `<slug>`, or a near miss of it."""
    if stem in slugs:
        return stem, False
    base = re.sub(r"[\s.\-]+", "_", stem.strip().lower())
    while True:
        if base in slugs:
            return base, True
        shorter = COPY_SUFFIX.sub("", base)
        if shorter == base or not shorter:
            return None, False
        base = shorter


def close_slug(stem: str, slugs) -> str | None:
    base = re.sub(r"[\s.\-]+", "_", stem.strip().lower())
    close = difflib.get_close_matches(base, list(slugs), n=1, cutoff=0.75)
    return close[0] if close else None


class Intake:
    """Adds one student's files, keeping the first reason a problem's file cannot run."""

    def __init__(self, student: str, problems: list[Problem], **identity):
        self.submission = Submission(student, **identity)
        self.problems = {p.slug: p for p in problems}
        self.candidates: dict[str, list[tuple[Entry, bool]]] = {}
        self.unmatched: list[Entry] = []

    # -- the checks of one file

    def add(self, slug: str, data: bytes) -> None:
        if slug in self.submission.sources or slug in self.submission.rejected:
            self.reject(slug, f"{slug}.py was handed in more than once: keep one copy")
            return
        reason = check_source(slug, data, self.problems[slug].builds_on)
        if reason:
            self.reject(slug, reason)
        else:
            self.submission.sources[slug] = data

    def reject(self, slug: str, reason: str) -> None:
        self.submission.sources.pop(slug, None)
        self.submission.rejected.setdefault(slug, reason)

    def reject_all(self, reason: str) -> Submission:
        self.submission.sources.clear()
        self.submission.rejected = dict.fromkeys(self.problems, reason)
        return self.submission

    def ignore(self, name: str, why: str = "") -> None:
        self.submission.ignored.append(printable(name) + (f" ({why})" if why else ""))

    # -- trees of entries

    def take(self, entries: list[Entry], where: str = "", zips: bool = True) -> None:
        """Sort `entries` into candidates for each problem and ignored files; open zips."""
        for entry in entries:
            parts = entry.parts
            name = parts[-1] if parts else entry.path
            if any(part in JUNK_PARTS or part.startswith("._") for part in parts):
                continue  # what macOS and Jupyter leave behind
            if entry.kind == "unsafe":
                slug = PurePosixPath(entry.path.replace("\\", "/")).stem
                if entry.path.endswith(".py") and slug in self.problems:
                    self.reject(slug, f"{slug}.py is at an unsafe path in the zip "
                                f"({printable(entry.path)!r}): zip the file itself, at the top of "
                                "the zip or in one folder")  # fmt: skip
                else:
                    self.ignore(entry.path, "a path that leaves the zip")
                continue
            if name.endswith(".zip") and entry.kind == "file" and zips:
                self.take_zip_entry(entry)
                continue
            if not name.endswith(".py"):
                if entry.kind != "dir":
                    self.ignore(entry.path)
                continue
            slug, renamed = match_slug(name[:-3], self.problems)
            if slug is None:
                if entry.kind != "dir":
                    self.unmatched.append(entry)
                continue
            self.candidates.setdefault(slug, []).append((entry, renamed))

    def take_zip(self, path: Path) -> None:
        """A student's zip, as the whole submission (its problems are rejected if it is bad)."""
        try:
            if path.stat().st_size > MAX_ZIP_BYTES:
                self.reject_all(f"{path.name} is larger than {MAX_ZIP_BYTES >> 20} MiB")
                return
            with zipfile.ZipFile(path) as archive:
                infos = archive.infolist()
                if len(infos) > MAX_ZIP_ENTRIES:
                    self.reject_all(f"{path.name} holds more than {MAX_ZIP_ENTRIES} files")
                    return
                self.take([_zip_entry(archive, info, "") for info in infos], zips=False)
                self.finish()
        except Exception as exc:  # noqa: BLE001 - a damaged zip must never stop the batch
            self.reject_all(
                f"{path.name} cannot be read as a zip file ({type(exc).__name__}): upload it again"
            )

    def take_zip_entry(self, entry: Entry) -> None:
        """A zip found among a student's files (an LMS upload): read now, while it is open."""
        import io

        if entry.size > MAX_ZIP_BYTES:
            self.ignore(entry.path, f"larger than {MAX_ZIP_BYTES >> 20} MiB")
            return
        try:
            data = entry.disk.read_bytes()  # its size was checked above
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                infos = archive.infolist()[:MAX_ZIP_ENTRIES]
                self.take([_zip_entry(archive, info, entry.path + "/") for info in infos],
                          zips=False)  # fmt: skip
                self.finish(keep_open=True)
        except Exception as exc:  # noqa: BLE001 - a damaged zip must never stop the batch
            self.ignore(entry.path, f"cannot be read as a zip file ({type(exc).__name__})")

    def finish(self, keep_open: bool = False) -> Submission:
        """Decide each problem's file among its candidates, and the hints for near misses.

        Called while a zip the entries read from is still open; `keep_open` leaves the
        unmatched files for the caller's own finish (a zip inside a folder).
        """
        for slug, found in self.candidates.items():
            if len(found) > 1:
                names = ", ".join(repr(printable(e.path)) for e, _ in found[:4])
                self.reject(slug, f"{slug}.py was handed in more than once ({names}): keep one "
                            "copy")  # fmt: skip
                continue
            entry, renamed = found[0]
            self._take_file(slug, entry, renamed)
        self.candidates = {}
        if keep_open:
            return self.submission
        for entry in self.unmatched:
            slug = close_slug(PurePosixPath(entry.path).stem, self.problems)
            if slug and not self.submission.submitted(slug) and slug not in self.submission.hints:
                self.submission.hints[slug] = (
                    f"no {slug}.py was submitted; {printable(entry.path)!r} was handed in: did "
                    f"you mean {slug}.py? Rename it and hand it in again"
                )
            self.ignore(entry.path, f"did you mean {slug}.py?" if slug else "")
        self.unmatched = []
        return self.submission

    def _take_file(self, slug: str, entry: Entry, renamed: bool) -> None:
        shown = printable(entry.path)
        if entry.kind == "link":
            self.reject(slug, f"{slug}.py is a symbolic link: hand in the file itself")
            return
        if entry.kind == "dir":
            self.reject(slug, f"{slug}.py is a folder, not a file: hand in the file itself")
            return
        if entry.kind != "file" or entry.read is None:
            self.reject(slug, f"{slug}.py is not a file (a folder?): hand in the file itself")
            return
        if entry.size > MAX_SOURCE_BYTES:
            self.reject(slug, f"{slug}.py is larger than {MAX_SOURCE_BYTES // 1024} KiB")
            return
        try:
            data = entry.read()
        except OSError as exc:
            self.reject(slug, f"{slug}.py cannot be read ({exc.strerror}): hand it in again")
            return
        except Exception as exc:  # noqa: BLE001 - encrypted, unsupported or corrupt zip entries
            self.reject(slug, f"{slug}.py in the zip cannot be read: {_why_unreadable(exc)}")
            return
        if renamed:
            self.submission.notes.append(f"took {shown!r} as {slug}.py: name it {slug}.py")
        elif entry.path.count("/") >= 2:
            self.submission.notes.append(f"took {slug}.py from {shown!r}, folders down")
        self.add(slug, data)


def from_folder(folder: Path, problems: list[Problem], student: str | None = None,
                **identity) -> Submission:  # fmt: skip
    """A student's folder (files at any depth, zips inside opened)."""
    intake = Intake(student or folder.name, problems, **identity)
    try:
        entries = list(folder_entries(folder))
    except OSError as exc:
        return intake.reject_all(f"the folder {printable(folder.name)} cannot be read ({exc})")
    if len(entries) > 10 * MAX_ZIP_ENTRIES:
        return intake.reject_all(f"{printable(folder.name)} holds more than "
                                 f"{10 * MAX_ZIP_ENTRIES} files: hand in the problem files only")  # fmt: skip
    intake.take(entries)
    return intake.finish()


def from_files(files: list[tuple[str, Path]], problems: list[Problem], student: str,
               **identity) -> Submission:  # fmt: skip
    """A student's loose files, each under the name the student gave it (an LMS download)."""
    intake = Intake(student, problems, **identity)
    entries = []
    for shown, path in files:
        if path.is_symlink():
            entries.append(Entry(shown, "link"))
        elif path.is_file():
            entries.append(Entry(shown, "file", path.stat().st_size, _read_file(path), path))
        else:
            entries.append(Entry(shown, "other"))
    intake.take(entries)
    return intake.finish()


def from_zip(path: Path, problems: list[Problem], student: str | None = None,
             **identity) -> Submission:  # fmt: skip
    intake = Intake(student or path.stem, problems, **identity)
    intake.take_zip(path)
    return intake.finish()


def find_submissions(root: Path, problems: list[Problem]) -> tuple[list[Submission], list[str]]:
    """Every student's submission under `root` in the plain layout, and warnings about entries
    that were skipped."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder of submissions")
    found: dict[str, Submission] = {}
    warnings = []
    for entry in sorted(root.iterdir()):
        name = entry.stem if entry.suffix == ".zip" else entry.name
        shown = printable(entry.name)
        if entry.name.startswith(".") or entry.name in JUNK_PARTS:
            continue
        if not valid_student(name):
            warnings.append(f"skipped {shown!r}: rename it to letters, digits, spaces and _.@+- "
                            "(no leading dot, no path separator)")  # fmt: skip
            continue
        if entry.is_dir() and not entry.is_symlink():
            submission = from_folder(entry, problems)
        elif entry.suffix == ".zip" and entry.is_file() and not entry.is_symlink():
            submission = from_zip(entry, problems)
        else:
            warnings.append(f"skipped {shown!r}: expected a folder or a .zip per student")
            continue
        if name in found:
            warnings.append(f"skipped {shown!r}: {name} already has a submission")
            continue
        found[name] = submission
    return list(found.values()), warnings


def standalone_source(source: str, keep: tuple[str, ...] = ()) -> str:
    """A reference-derived solution (or catalogued mistake) as a student would hand it in.

    A submission may not import the kit's reference solutions (except the modules in `keep`,
    which its problem builds on), so ``from reference.x import ...`` lines are replaced by the
    source of ``reference/x.py`` (benchmarks and tests use this).
    """

    def inline(match: re.Match) -> str:
        if match.group(1) in keep:
            return match.group(0)
        module = (REFERENCE_DIR / f"{match.group(1)}.py").read_text(encoding="utf-8")
        return standalone_source(module.replace("from __future__ import annotations\n", ""), keep)

    return IMPORT_FROM_REFERENCE.sub(inline, source)


def stage(submission: Submission, folder: Path) -> Path:
    """Write the files to grade into `folder`, with a ``.rejected`` note for each rejected one
    (and for each missing file a "did you mean" names).

    The trusted side reads both; a sandboxed process gets a file's text over its pipe.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for slug, data in submission.sources.items():
        (folder / f"{slug}.py").write_bytes(data)
    for slug, reason in (submission.hints | submission.rejected).items():
        (folder / f"{slug}.py{REJECTED_SUFFIX}").write_text(reason + "\n", encoding="utf-8")
    return folder
