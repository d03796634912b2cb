"""The layouts an LMS downloads a class's submissions in, each mapped to one `Submission` per
student, filed under the identifier that LMS needs back in a gradebook.

    plain        SUBMISSIONS/<student>/ or SUBMISSIONS/<student>.zip      id: the folder's name
    canvas       "Download Submissions": loose files named
                 <name>_[LATE_]<user id>_<submission id>_<file name>     id: the Canvas user id
    moodle       "Download all submissions", in folders (the default):
                 <Full Name>_<participant id>_assignsubmission_file_/...
                 or, without folders, <Full Name>_<participant id>_assignsubmission_file_<file>
                                                                          id: the participant id
    gradescope   "Export Submissions": submission_metadata.yml and one
                 submission_<id>/ folder per submission (a group's shared by its members)
                                                                          id: e-mail (else SID)

`read_class` detects the layout unless told, and reads the whole class before anything runs.
A download can be given as its zip: it is unpacked into a temporary folder first, with limits
on size and paths. Submission times come from the LMS where it records them (Gradescope's
``:created_at:``); Canvas only marks late files (``LATE``), which the course's late policy
counts as `marked_late_days` late.
"""

from __future__ import annotations

import os
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePosixPath

from grader.problems import Problem
from grader.submissions import (
    JUNK_PARTS,
    Submission,
    find_submissions,
    from_files,
    from_folder,
    printable,
    valid_student,
)

LAYOUTS = ("plain", "canvas", "moodle", "gradescope")
CANVAS_FILE = re.compile(r"(?P<name>[^_]+)_(?P<late>LATE_)?(?P<uid>\d+)_(?P<sub>\d+)_(?P<file>.+)")
# Moodle appends "_<id>_assignsubmission_<plugin>_" to a full name the student may choose: the
# folder's id is the last such suffix. A loose file's name also ends in the student's own file
# name, so one that holds the pattern twice is ambiguous and is not filed under either id.
MOODLE_FOLDER = re.compile(r"(?P<name>.+)_(?P<pid>\d+)_assign(?:submission|feedback)_[a-z]+_?")
MOODLE_MARK = re.compile(r"_(?P<pid>\d+)_assignsubmission_(?:file|onlinetext)_")
MOODLE_FILE = re.compile(rf"(?P<name>.+?){MOODLE_MARK.pattern}(?P<file>.+)")
GRADESCOPE_METADATA = "submission_metadata.yml"
MAX_DOWNLOAD_BYTES = 4 << 30  # a class's zip, unpacked
MAX_DOWNLOAD_ENTRIES = 100_000


class LayoutError(ValueError):
    """The submissions cannot be read in the layout asked for; the message says what to do."""


@dataclass
class ClassDownload:
    layout: str
    submissions: list[Submission] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def detect(root: Path) -> str:
    """The layout `root` is in: an LMS's when its files say so, else plain."""
    if _gradescope_root(root) is not None:
        return "gradescope"
    entries = [e for e in root.iterdir() if not e.name.startswith(".")]
    canvas = sum(1 for e in entries if e.is_file() and CANVAS_FILE.fullmatch(e.name))
    moodle = sum(1 for e in entries if (e.is_dir() and MOODLE_FOLDER.fullmatch(e.name))
                 or (e.is_file() and MOODLE_FILE.fullmatch(e.name)))  # fmt: skip
    if moodle and moodle >= canvas:
        return "moodle"
    if canvas and canvas * 2 >= len(entries):
        return "canvas"
    return "plain"


def _gradescope_root(root: Path) -> Path | None:
    """Where submission_metadata.yml is: `root`, or the one folder the export zip holds."""
    if (root / GRADESCOPE_METADATA).is_file():
        return root
    folders = [e for e in root.iterdir() if e.is_dir() and e.name not in JUNK_PARTS
               and not e.name.startswith(".")]  # fmt: skip
    if len(folders) == 1 and (folders[0] / GRADESCOPE_METADATA).is_file():
        return folders[0]
    return None


def read_class(root: Path, problems: list[Problem], layout: str = "auto") -> ClassDownload:
    """Every student's submission under `root` (a folder), in `layout` (or the detected one)."""
    root = Path(root)
    if not root.is_dir():
        raise LayoutError(f"{root} is not a folder of submissions: give the folder you unpacked "
                          "the LMS download into, or the download's .zip")  # fmt: skip
    if layout == "auto":
        layout = detect(root)
    elif layout not in LAYOUTS:
        raise LayoutError(f"--layout must be one of auto, {', '.join(LAYOUTS)}, not {layout!r}")
    reader = {"plain": _plain, "canvas": _canvas, "moodle": _moodle, "gradescope": _gradescope}
    download = reader[layout](root, problems)
    download.layout = layout
    if not download.submissions:
        found = detect(root)
        hint = (f"it looks like the {found} layout: try --layout {found}" if found != layout
                else "see `grpo-kit grade --help` for the layouts it reads")  # fmt: skip
        raise LayoutError(f"no submissions found in {root} (read as the {layout} layout): {hint}")
    return download


def read_download(path: Path, problems: list[Problem], layout: str = "auto") -> ClassDownload:
    """`read_class` of a folder, or of an LMS download's zip (unpacked for the time it takes)."""
    import tempfile

    path = Path(path)
    if path.is_file() and path.suffix.lower() == ".zip":
        with tempfile.TemporaryDirectory(prefix="grpo-kit-download-") as folder:
            return read_class(unpack_download(path, Path(folder)), problems, layout)
    if not path.exists():
        raise LayoutError(f"{path} does not exist: give the folder of submissions (or the LMS "
                          "download's .zip)")  # fmt: skip
    return read_class(path, problems, layout)


def _plain(root: Path, problems: list[Problem]) -> ClassDownload:
    found, warnings = find_submissions(root, problems)
    return ClassDownload("plain", found, warnings)


def _canvas(root: Path, problems: list[Problem]) -> ClassDownload:
    download = ClassDownload("canvas")
    students: dict[str, dict] = {}
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") or entry.name in JUNK_PARTS:
            continue
        match = CANVAS_FILE.fullmatch(entry.name)
        if not match or not entry.is_file():
            download.warnings.append(f"skipped {printable(entry.name)!r}: not a Canvas "
                                     "submission file (name_userid_submissionid_file)")  # fmt: skip
            continue
        student = students.setdefault(match["uid"], {"name": match["name"], "files": [],
                                                     "late": False})  # fmt: skip
        student["files"].append((match["file"], entry))
        student["late"] |= bool(match["late"])
    for uid, student in students.items():
        download.submissions.append(from_files(
            student["files"], problems, uid, name=student["name"], sid=uid, layout="canvas",
            marked_late=student["late"]))  # fmt: skip
    return download


def _moodle(root: Path, problems: list[Problem]) -> ClassDownload:
    download = ClassDownload("moodle")
    folders: dict[str, dict] = {}
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") or entry.name in JUNK_PARTS:
            continue
        folder = MOODLE_FOLDER.fullmatch(entry.name) if entry.is_dir() else None
        loose = MOODLE_FILE.fullmatch(entry.name) if entry.is_file() else None
        if loose and len(MOODLE_MARK.findall(entry.name)) > 1:
            download.warnings.append(f"skipped {printable(entry.name)!r}: its name reads as "
                                     "more than one participant's; put it in the student's "
                                     "folder (Full Name_id_assignsubmission_file_)")  # fmt: skip
            continue
        match = folder or loose
        if not match:
            download.warnings.append(f"skipped {printable(entry.name)!r}: not a Moodle "
                                     "submission (Full Name_id_assignsubmission_file_)")  # fmt: skip
            continue
        student = folders.setdefault(match["pid"], {"name": match["name"], "folders": [],
                                                    "files": []})  # fmt: skip
        if folder:
            student["folders"].append(entry)
        else:
            student["files"].append((loose["file"], entry))
    for pid, student in folders.items():
        files = list(student["files"])
        for folder in student["folders"]:  # the file plugin's folder, the online text's, ...
            for top, dirs, names in os.walk(folder):  # never into a linked folder
                dirs.sort()
                for name in sorted(names + [d for d in dirs if Path(top, d).is_symlink()]):
                    path = Path(top, name)
                    files.append((path.relative_to(folder).as_posix(), path))
        download.submissions.append(from_files(
            files, problems, pid, name=student["name"], sid=pid, layout="moodle"))  # fmt: skip
    return download


def _value(record: dict, key: str):
    """A field of submission_metadata.yml: Ruby symbol keys (":name") or plain ones."""
    return record.get(f":{key}", record.get(key))


def _when(value) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else None
    if isinstance(value, str):
        text = re.sub(r"(\.\d{6})\d+", r"\1", value.strip())  # nanoseconds
        text = re.sub(r" ([+-]\d\d):?(\d\d)$", r"\1:\2", text)
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            return None
        return when if when.tzinfo else None
    return None


def _gradescope(root: Path, problems: list[Problem]) -> ClassDownload:
    import yaml

    download = ClassDownload("gradescope")
    base = _gradescope_root(root)
    if base is None:
        raise LayoutError(f"no {GRADESCOPE_METADATA} in {root}: give the folder Gradescope's "
                          "export unpacks into (or its zip)")  # fmt: skip
    try:
        metadata = yaml.safe_load((base / GRADESCOPE_METADATA).read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise LayoutError(f"{base / GRADESCOPE_METADATA} cannot be read: {exc}") from None
    if not isinstance(metadata, dict):
        raise LayoutError(f"{base / GRADESCOPE_METADATA} does not map submissions to students")
    seen: set[str] = set()
    for key, record in sorted(metadata.items(), key=lambda item: str(item[0])):
        folder = base / str(key)
        if (not isinstance(record, dict) or not folder.is_dir() or "/" in str(key)
                or str(key) in (".", "..")):  # fmt: skip
            download.warnings.append(f"skipped {printable(str(key))!r}: listed in "
                                     f"{GRADESCOPE_METADATA} but no such folder")  # fmt: skip
            continue
        when = _when(_value(record, "created_at"))
        for submitter in _value(record, "submitters") or []:
            if not isinstance(submitter, dict):
                continue
            email = str(_value(submitter, "email") or "")
            sid = str(_value(submitter, "sid") or "")
            name = str(_value(submitter, "name") or "")
            student = email or sid
            if not valid_student(student) or student in seen:
                download.warnings.append(f"skipped a submitter of {key}: no usable e-mail or "
                                         f"SID ({printable(student)!r})")  # fmt: skip
                continue
            seen.add(student)
            download.submissions.append(from_folder(
                folder, problems, student, name=name, email=email, sid=sid,
                layout="gradescope", submitted_at=when))  # fmt: skip
    listed = {str(k) for k in metadata}
    for entry in sorted(base.iterdir()):
        if entry.is_dir() and entry.name not in listed and not entry.name.startswith("."):
            download.warnings.append(f"skipped {printable(entry.name)!r}: not listed in "
                                     f"{GRADESCOPE_METADATA}")  # fmt: skip
    return download


def unpack_download(archive: Path, into: Path) -> Path:
    """Unpack an LMS download's zip into `into`, refusing paths that leave it and bombs."""
    try:
        with zipfile.ZipFile(archive) as download:
            infos = download.infolist()
            if len(infos) > MAX_DOWNLOAD_ENTRIES:
                raise LayoutError(f"{archive} holds more than {MAX_DOWNLOAD_ENTRIES} files")
            if sum(i.file_size for i in infos) > MAX_DOWNLOAD_BYTES:
                raise LayoutError(f"{archive} unpacks to more than {MAX_DOWNLOAD_BYTES >> 30} GiB")
            for info in infos:
                parts = PurePosixPath(info.filename).parts
                if (info.filename.startswith("/") or ".." in parts or "\\" in info.filename
                        or not parts):  # fmt: skip
                    continue  # never written: it would land outside `into`
                target = into.joinpath(*parts)
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with download.open(info) as source, target.open("wb") as sink:
                    shutil.copyfileobj(source, sink, 1 << 20)
    except (zipfile.BadZipFile, OSError, RuntimeError, NotImplementedError) as exc:
        raise LayoutError(f"{archive} cannot be unpacked ({type(exc).__name__}: {exc}): "
                          "download it again, or unpack it yourself and give the folder") from None  # fmt: skip
    return into
