"""Find, unpack and check a class's submissions before anything runs.

Layout::

    SUBMISSIONS/<student>/<slug>.py     one file per problem (any subset of the problems)
    SUBMISSIONS/<student>.zip           the same files, at the top of the zip or in one folder

Only ``<slug>.py`` files of known problems are taken; anything else a student ships
(``conftest.py``, ``pytest.ini``, ``sitecustomize.py``, ...) is ignored and never reaches the
sandbox. A file that cannot run (empty, not UTF-8, a syntax error, too large) and a zip that
cannot be read are not errors of the batch: they become a reason, reported on every test of
that problem.
"""

from __future__ import annotations

import ast
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

MAX_SOURCE_BYTES = 256 * 1024
MAX_ZIP_BYTES = 8 * 1024 * 1024
MAX_ZIP_ENTRIES = 200
STUDENT_NAME = re.compile(r"[A-Za-z0-9_@+][A-Za-z0-9_.@+-]{0,127}")
IMPORT_FROM_REFERENCE = re.compile(r"^from reference\.(\w+) import .*$", re.MULTILINE)


@dataclass
class Submission:
    """One student's files: the source of each problem, or why it cannot run."""

    student: str
    sources: dict[str, bytes] = field(default_factory=dict)  # slug -> file contents
    rejected: dict[str, str] = field(default_factory=dict)  # slug -> reason shown on each test
    ignored: list[str] = field(default_factory=list)  # entries that are not problem files


def check_source(slug: str, data: bytes) -> str | None:
    """Why `data` cannot be graded as `<slug>.py`, or None if it can."""
    name = f"{slug}.py"
    if len(data) > MAX_SOURCE_BYTES:
        return f"{name} is larger than {MAX_SOURCE_BYTES // 1024} KiB"
    if not data.strip():
        return f"{name} is empty: submit your solution file, not a blank one"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"{name} is not UTF-8 text (byte {exc.start}): save it as UTF-8"
    if "\x00" in text:
        return f"{name} contains NUL bytes: it is not a Python source file"
    try:
        ast.parse(text, filename=name)  # parsing only: nothing of the student's runs here
    except SyntaxError as exc:
        return f"{name} has a syntax error on line {exc.lineno}: {exc.msg}. Fix it."
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"{name} could not be parsed: {type(exc).__name__}"
    return None


def _add(submission: Submission, slug: str, data: bytes) -> None:
    reason = check_source(slug, data)
    if reason:
        submission.rejected[slug] = reason
    else:
        submission.sources[slug] = data


def _from_folder(folder: Path, slugs: list[str]) -> Submission:
    submission = Submission(folder.name)
    for path in sorted(folder.iterdir()):
        slug = path.stem
        if path.suffix != ".py" or slug not in slugs or not path.is_file() or path.is_symlink():
            submission.ignored.append(path.name)
            continue
        if path.stat().st_size > MAX_SOURCE_BYTES:
            submission.rejected[slug] = f"{path.name} is larger than {MAX_SOURCE_BYTES // 1024} KiB"
            continue
        _add(submission, slug, path.read_bytes())
    return submission


def _zip_problem_slug(name: str, slugs: list[str]) -> str | None:
    path = PurePosixPath(name)
    if len(path.parts) > 2 or path.suffix != ".py" or path.parts[0] == "__MACOSX":
        return None
    return path.stem if path.stem in slugs else None


def _from_zip(path: Path, slugs: list[str]) -> Submission:
    submission = Submission(path.stem)

    def reject_all(reason: str) -> Submission:
        submission.rejected = {slug: reason for slug in slugs}
        return submission

    if path.stat().st_size > MAX_ZIP_BYTES:
        return reject_all(f"{path.name} is larger than {MAX_ZIP_BYTES // (1024 * 1024)} MiB")
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
            if len(entries) > MAX_ZIP_ENTRIES:
                return reject_all(f"{path.name} holds more than {MAX_ZIP_ENTRIES} files")
            for entry in entries:
                name = entry.filename
                if name.startswith("/") or ".." in PurePosixPath(name).parts or "\\" in name:
                    return reject_all(f"{path.name} holds an unsafe path {name!r}")
            for entry in entries:
                slug = _zip_problem_slug(entry.filename, slugs)
                if slug is None or entry.is_dir():
                    submission.ignored.append(entry.filename)
                elif entry.file_size > MAX_SOURCE_BYTES:
                    limit = MAX_SOURCE_BYTES // 1024
                    submission.rejected[slug] = f"{slug}.py is larger than {limit} KiB"
                elif slug in submission.sources or slug in submission.rejected:
                    submission.rejected[slug] = f"{path.name} holds {slug}.py more than once"
                    submission.sources.pop(slug, None)
                else:
                    with archive.open(entry) as member:  # read at most the cap, whatever it claims
                        _add(submission, slug, member.read(MAX_SOURCE_BYTES + 1))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as exc:
        return reject_all(f"{path.name} cannot be read as a zip file ({exc}): upload it again")
    return submission


def find_submissions(root: Path, slugs: list[str]) -> tuple[list[Submission], list[str]]:
    """Every student's submission under `root`, and warnings about entries that were skipped."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder of submissions")
    found: dict[str, Submission] = {}
    warnings = []
    for entry in sorted(root.iterdir()):
        name = entry.stem if entry.suffix == ".zip" else entry.name
        if entry.name.startswith("."):
            continue
        if not STUDENT_NAME.fullmatch(name) or name == "gradebook.csv":
            warnings.append(f"skipped {entry.name!r}: rename it to letters, digits and _.@+-")
            continue
        if entry.is_dir():
            submission = _from_folder(entry, slugs)
        elif entry.suffix == ".zip":
            submission = _from_zip(entry, slugs)
        else:
            warnings.append(f"skipped {entry.name!r}: expected a folder or a .zip per student")
            continue
        if name in found:
            warnings.append(f"skipped {entry.name!r}: {name} already has a submission")
            continue
        found[name] = submission
    return list(found.values()), warnings


def standalone_source(source: str) -> str:
    """A reference-derived solution (or catalogued mistake) as a student would hand it in.

    The sandbox shows a submission no other kit module, so ``from reference.x import ...``
    lines are replaced by the source of ``reference/x.py`` (benchmarks and tests use this).
    """
    from grader.problems import REFERENCE_DIR

    def inline(match: re.Match) -> str:
        module = (REFERENCE_DIR / f"{match.group(1)}.py").read_text(encoding="utf-8")
        return standalone_source(module.replace("from __future__ import annotations\n", ""))

    return IMPORT_FROM_REFERENCE.sub(inline, source)


def stage(submission: Submission, folder: Path) -> Path:
    """Write the files to grade into `folder`, with a ``.rejected`` note for each rejected one.

    The sandbox sees only the staged ``<slug>.py``; the notes are read by the trusted side.
    """
    from grader.sandbox.proxy import REJECTED_SUFFIX

    folder.mkdir(parents=True, exist_ok=True)
    for slug, data in submission.sources.items():
        (folder / f"{slug}.py").write_bytes(data)
    for slug, reason in submission.rejected.items():
        (folder / f"{slug}.py{REJECTED_SUFFIX}").write_text(reason + "\n", encoding="utf-8")
    return folder
