"""Find, unpack and check a class's submissions before anything runs.

Layout::

    SUBMISSIONS/<student>/<slug>.py     one file per problem (any subset of the problems)
    SUBMISSIONS/<student>.zip           the same files, at the top of the zip or in one folder

Only ``<slug>.py`` files of known problems are taken; anything else a student ships
(``conftest.py``, ``pytest.ini``, ``sitecustomize.py``, ...) is ignored, listed in that
student's report, and never reaches the sandbox. Whatever is wrong with one student's files
(a file that cannot be read, is not UTF-8 or has a syntax error; a zip that is damaged,
encrypted, a symbolic link, a path that leaves the zip) becomes a reason reported on every test
of that problem, or of all problems: it never stops the batch, and everybody else is graded.
"""

from __future__ import annotations

import re
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from grader.problems import REFERENCE_DIR, Problem
from grader.sources import MAX_SOURCE_BYTES, check_source

MAX_ZIP_BYTES = 8 * 1024 * 1024
MAX_ZIP_ENTRIES = 200
STUDENT_NAME = re.compile(r"[A-Za-z0-9_@+][A-Za-z0-9_.@+-]{0,127}")
IMPORT_FROM_REFERENCE = re.compile(r"^from reference\.(\w+) import .*$", re.MULTILINE)
REJECTED_SUFFIX = ".rejected"


@dataclass
class Submission:
    """One student's files: the source of each problem, or why it cannot run."""

    student: str
    sources: dict[str, bytes] = field(default_factory=dict)  # slug -> file contents
    rejected: dict[str, str] = field(default_factory=dict)  # slug -> reason shown on each test
    ignored: list[str] = field(default_factory=list)  # entries that are not problem files


def printable(name: str) -> str:
    """A file name as it can be shown and saved (undecodable bytes become U+FFFD)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")[:200]


class _Intake:
    """Adds one student's files, keeping the first reason a problem's file cannot run."""

    def __init__(self, student: str, problems: list[Problem]):
        self.submission = Submission(student)
        self.problems = {p.slug: p for p in problems}

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


def _from_folder(folder: Path, problems: list[Problem]) -> Submission:
    intake = _Intake(folder.name, problems)
    try:
        entries = sorted(folder.iterdir())
    except OSError as exc:
        return intake.reject_all(f"the folder {printable(folder.name)} cannot be read ({exc})")
    for path in entries:
        slug = path.stem if path.suffix == ".py" and path.stem in intake.problems else None
        try:
            mode = path.lstat().st_mode
        except OSError as exc:
            intake.ignore(path.name, f"cannot be read: {exc.strerror}")
            continue
        if slug is None:
            intake.ignore(path.name)
        elif stat.S_ISLNK(mode):
            intake.reject(slug, f"{slug}.py is a symbolic link: hand in the file itself")
        elif not stat.S_ISREG(mode):
            intake.reject(slug, f"{slug}.py is not a file (a folder?): hand in the file itself")
        else:
            try:
                with path.open("rb") as file:
                    data = file.read(MAX_SOURCE_BYTES + 1)
            except OSError as exc:
                intake.reject(slug, f"{slug}.py cannot be read ({exc.strerror}): hand it in again")
                continue
            intake.add(slug, data)
    return intake.submission


def _zip_slug(name: str, problems: dict) -> str | None:
    """The problem a zip entry is the file of: ``<slug>.py`` at the top or in one folder."""
    path = PurePosixPath(name)
    if len(path.parts) > 2 or path.suffix != ".py" or path.parts[0] == "__MACOSX":
        return None
    return path.stem if path.stem in problems else None


def _unsafe(name: str) -> bool:
    path = PurePosixPath(name)
    return name.startswith("/") or ".." in path.parts or "\\" in name or "\x00" in name


def _read_member(archive: zipfile.ZipFile, entry: zipfile.ZipInfo) -> bytes:
    """At most the size limit (plus one byte), whatever the entry claims: no zip bomb."""
    with archive.open(entry) as member:
        return member.read(MAX_SOURCE_BYTES + 1)


def _why_unreadable(exc: Exception) -> str:
    text = str(exc).lower()
    if "encrypted" in text or "password" in text:
        return "it is encrypted: zip it again without a password"
    if isinstance(exc, NotImplementedError):
        return "it uses a compression method that is not supported: zip it again (deflate)"
    return f"it is damaged ({type(exc).__name__}): zip it again"


def _from_zip(path: Path, problems: list[Problem]) -> Submission:
    intake = _Intake(path.stem, problems)
    try:
        if path.stat().st_size > MAX_ZIP_BYTES:
            return intake.reject_all(f"{path.name} is larger than {MAX_ZIP_BYTES >> 20} MiB")
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
            if len(entries) > MAX_ZIP_ENTRIES:
                return intake.reject_all(f"{path.name} holds more than {MAX_ZIP_ENTRIES} files")
            for entry in entries:
                _add_zip_entry(intake, archive, entry)
    except Exception as exc:  # noqa: BLE001 - a damaged zip must never stop the batch
        return intake.reject_all(
            f"{path.name} cannot be read as a zip file ({type(exc).__name__}): upload it again"
        )
    return intake.submission


def _add_zip_entry(intake: _Intake, archive: zipfile.ZipFile, entry: zipfile.ZipInfo) -> None:
    name = entry.filename
    if _unsafe(name):
        slug = PurePosixPath(name.replace("\\", "/")).stem
        if name.endswith(".py") and slug in intake.problems:
            intake.reject(slug, f"{slug}.py is at an unsafe path in the zip ({printable(name)!r}):"
                          " zip the file itself, at the top of the zip or in one folder")  # fmt: skip
        else:
            intake.ignore(name, "a path that leaves the zip")
        return
    slug = _zip_slug(name.rstrip("/"), intake.problems)
    if slug is None:
        intake.ignore(name)
    elif entry.is_dir():
        intake.reject(slug, f"{slug}.py in the zip is a folder: zip the file itself")
    elif stat.S_ISLNK(entry.external_attr >> 16):
        intake.reject(slug, f"{slug}.py in the zip is a symbolic link: zip the file itself")
    elif entry.file_size > MAX_SOURCE_BYTES:
        intake.reject(slug, f"{slug}.py is larger than {MAX_SOURCE_BYTES // 1024} KiB")
    else:
        try:
            data = _read_member(archive, entry)
        except Exception as exc:  # noqa: BLE001 - encrypted, unsupported or corrupt entries
            intake.reject(slug, f"{slug}.py in the zip cannot be read: {_why_unreadable(exc)}")
            return
        intake.add(slug, data)


def find_submissions(root: Path, problems: list[Problem]) -> tuple[list[Submission], list[str]]:
    """Every student's submission under `root`, and warnings about entries that were skipped."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder of submissions")
    found: dict[str, Submission] = {}
    warnings = []
    for entry in sorted(root.iterdir()):
        name = entry.stem if entry.suffix == ".zip" else entry.name
        shown = printable(entry.name)
        if entry.name.startswith("."):
            continue
        if not STUDENT_NAME.fullmatch(name) or name == "gradebook.csv":
            warnings.append(f"skipped {shown!r}: rename it to letters, digits and _.@+-")
            continue
        if entry.is_dir() and not entry.is_symlink():
            submission = _from_folder(entry, problems)
        elif entry.suffix == ".zip" and entry.is_file() and not entry.is_symlink():
            submission = _from_zip(entry, problems)
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
    """Write the files to grade into `folder`, with a ``.rejected`` note for each rejected one.

    The trusted side reads both; a sandboxed process gets a file's text over its pipe.
    """
    folder.mkdir(parents=True, exist_ok=True)
    for slug, data in submission.sources.items():
        (folder / f"{slug}.py").write_bytes(data)
    for slug, reason in submission.rejected.items():
        (folder / f"{slug}.py{REJECTED_SUFFIX}").write_text(reason + "\n", encoding="utf-8")
    return folder
