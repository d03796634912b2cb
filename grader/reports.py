"""What grading writes for each student, built from one record per problem.

    OUT/<student>/<slug>.pytest.json     the record of one problem: every test's outcome,
                                         message and output, and what it was graded from
    OUT/<student>/submitted/<slug>.py    the file that was graded
    OUT/<student>/results.json           the student's results in Gradescope's results format
                                         (written last, atomically), assembled from the
                                         records, the course's points and its late policy

A student counts as graded once ``results.json`` exists, which is what lets a rerun resume;
a record whose ``graded_from`` no longer matches is graded again (``grader/provenance.py``).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from grader.course import Course
from grader.provenance import RECORD_SUFFIX
from grader.submissions import Submission

RESULTS = "results.json"
SOURCES = "submitted"
OUTPUT_LIMIT = 2000  # characters of a failed test's printed output shown with its message
SANDBOXED = "bubblewrap"
PARTLY_EARNED = (
    "Passed, for {share:.0%} of its points: a test of input handling, or of a promise a "
    "do-nothing solution keeps too, earns its points times the share of the problem's other "
    "points earned."
)


@dataclass
class StudentResult:
    student: str
    reports: dict[str, dict] = field(default_factory=dict)  # slug -> record of the problem


# A spreadsheet runs a cell that starts with one of these as a formula: a student's name or
# a test's message must never become one. (Line feeds and the full-width forms too: some
# spreadsheets trim the first or fold the second to ASCII.)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")


# Control characters other than tab and line feed: a terminal that shows the file (cat, less -R,
# head) runs ESC and CSI sequences, so a student's exception message or LMS name could clear
# the screen or rewrite the rows printed before it. Each becomes U+FFFD.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _cell(value: object) -> object:
    if not isinstance(value, str):
        return value
    # The writer quotes a field holding "\n" (its line end) but not a lone "\r", which readers
    # take for the end of a row: a name holding one would start a row of its own.
    value = _CONTROLS.sub("\ufffd", value.replace("\r\n", "\n").replace("\r", "\n"))
    # Behind leading blanks too (" =1+1", a no-break or ideographic space, U+2028): a spreadsheet
    # that trims a cell on import (Google Sheets' "trim whitespace", LibreOffice's "trim
    # spaces") would then read the formula.
    formula = value.startswith(FORMULA_STARTS) or value.lstrip().startswith(FORMULA_STARTS)
    return "'" + value if formula else value


def csv_text(rows: list[list]) -> str:
    """Rows as CSV, every text cell safe to open in a spreadsheet (numbers stay numbers)."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerows([[_cell(v) for v in row] for row in rows])
    return buffer.getvalue()


def write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        # "replace": a stray surrogate in a student's text must not lose the whole report.
        temporary.write_text(text, encoding="utf-8", errors="replace")
        os.replace(temporary, path)
    except BaseException:  # Ctrl-C included: leave no half-written file behind
        temporary.unlink(missing_ok=True)
        raise


def write_records(out: Path, result: StudentResult, submission: Submission,
                  graded_from: dict[str, dict]) -> None:  # fmt: skip
    """Save each graded problem's record, and a copy of each file that was graded."""
    folder = out / result.student
    folder.mkdir(parents=True, exist_ok=True)
    sources = folder / SOURCES
    for slug, report in result.reports.items():
        if slug in submission.sources:
            sources.mkdir(parents=True, exist_ok=True)
            (sources / f"{slug}.py").write_bytes(submission.sources[slug])
        else:
            (sources / f"{slug}.py").unlink(missing_ok=True)
        record = report | {
            "graded_from": graded_from[slug],
            "submitted": submission.submitted(slug),
        }
        # Compact: json's indenting encoder is pure Python, and slow for records this size.
        write_atomically(folder / f"{slug}{RECORD_SUFFIX}", json.dumps(record))


def _output(test: dict, earned: float, worth: float) -> str:
    if test["outcome"] == "passed":
        if _number(earned) == _number(worth):
            return ""
        return PARTLY_EARNED.format(share=earned / worth)
    text = test.get("output", test.get("message", ""))
    printed = (test.get("stdout") or "").strip()
    if printed:
        text += f"\n--- what your code printed ---\n{printed[:OUTPUT_LIMIT]}"
        if len(printed) > OUTPUT_LIMIT or test.get("stdout_cut"):
            text += "\n[... the rest was left out]"
    return text


def _number(value: float) -> int | float:
    value = round(float(value), 4)  # points shared by a test's cases add up to near-integers
    return int(value) if value.is_integer() else value


def header(records: dict[str, dict], version: str) -> str:
    """The first lines of a student's output: the grader and the sandbox each record had."""
    modes = sorted({r.get("sandbox", "") for r in records.values()} - {""})
    text = f"Graded by grpo-kit {version}; sandbox: {', '.join(modes) or 'unknown'}."
    if any(mode != SANDBOXED for mode in modes):
        text += ("\nWARNING: graded without the bubblewrap sandbox (resource limits only): do "
                 "not use these results for a real class.")  # fmt: skip
    if any(r.get("graded_alone") for r in records.values()):
        text += ("\nGraded again, alone: a test ran out of time while other students were "
                 "graded beside it.")  # fmt: skip
    return text


def assemble(records: dict[str, dict], course: Course, submission: Submission,
             version: str) -> dict:  # fmt: skip
    """The student's results.json (Gradescope's results format) from the problem records.

    Tests are numbered <problem>.<test> and tagged with their problem, so Gradescope groups
    them; the score is after the late penalty, the raw score kept in extra_data.
    """
    tests, problems, seconds = [], {}, 0.0
    for index, problem in enumerate(course.problems, 1):
        record = records.get(problem.slug)
        if record is None:
            problems[problem.slug] = {"score": 0, "max_score": 0, "submitted": False,
                                      "graded": False}  # fmt: skip
            continue
        names = [t["test"] for t in record["tests"]]
        points = course.test_points(problem, names)
        earned = problem.earned(points, {t["test"] for t in record["tests"]
                                         if t["outcome"] == "passed"})  # fmt: skip
        for number, test in enumerate(record["tests"], 1):
            passed = test["outcome"] == "passed"
            seconds += test.get("duration", 0.0)
            tests.append({
                "name": f"{problem.slug}: {test['test']}",
                "number": f"{index}.{number}",
                "tags": [problem.slug],
                "score": _number(earned[test["test"]]),
                "max_score": _number(points[test["test"]]),
                "status": "passed" if passed else "failed",
                "output": _output(test, earned[test["test"]], points[test["test"]]),
                "output_format": "text",
                "visibility": course.visibility,
                "extra_data": {"execution_time": round(test.get("duration", 0.0), 4)},
            })  # fmt: skip
        problems[problem.slug] = {"score": _number(sum(earned.values())),
                                  "max_score": _number(sum(points.values())),
                                  "submitted": bool(record.get("submitted", True)),
                                  "graded": True}  # fmt: skip
    raw = sum(p["score"] for p in problems.values())
    late = None
    lines = [header(records, version)]
    if course.late is not None:
        late = course.late.apply(submission.submitted_at, submission.marked_late)
    if late is not None:
        lines.append(f"Late: {late.describe()} (due {course.late.due.isoformat()}).")
    lines += [f"Note: {note}" for note in submission.notes]
    if submission.ignored:
        lines.append(f"Ignored files: {', '.join(submission.ignored[:20])}")
    penalty = late.penalty if late else 0.0
    return {
        "score": _number(raw * (1 - penalty)),
        "execution_time": round(seconds),
        "output": "\n".join(lines),
        "output_format": "text",
        "test_output_format": "text",
        "tests": tests,
        "extra_data": {
            "problems": problems,
            "raw_score": _number(raw),
            "late": None if late is None else {"days": late.days, "penalty": late.penalty,
                                               "points": _number(raw * penalty)},
            "late_policy": course.late is not None,
            "student": submission.identity(),
            "course": course.describe(),
        },
    }  # fmt: skip


def write_results(out: Path, student: str, results: dict) -> bool:
    """Write results.json unless it already holds exactly this; whether it was written."""
    path = out / student / RESULTS
    body = json.dumps(results, indent=1)
    try:
        if path.read_text(encoding="utf-8") == body:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, body)  # last: its presence marks the student as done
    return True


def load_results(out: Path) -> dict[str, dict]:
    """student -> results.json of every graded student under `out`."""
    found = {}
    if not out.is_dir():
        return found
    for path in sorted(out.glob(f"*/{RESULTS}")):
        try:
            found[path.parent.name] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
    return found


def finished_students(out: Path) -> set[str]:
    return set(load_results(out))


def graded_slugs(out: Path) -> list[str]:
    """The problems the results under `out` were graded on, in the order first seen."""
    slugs: dict[str, None] = {}
    for results in load_results(out).values():
        extra = results.get("extra_data", {})
        slugs.update(dict.fromkeys(extra.get("course", {}).get("problems", [])))
        slugs.update(dict.fromkeys(extra.get("problems", {})))
    return list(slugs)


def merge(sources: list[Path], out: Path) -> tuple[int, list[str]]:
    """Copy every graded student of `sources` into `out` and rebuild its gradebook.

    A student graded in two sources is a mistake in the sharding: it is reported, and the
    first copy kept.
    """
    from grader.gradebook import write_gradebook

    out.mkdir(parents=True, exist_ok=True)
    seen: dict[str, Path] = {}
    conflicts = []
    for source in sources:
        for student in sorted(finished_students(source)):
            if student in seen:
                conflicts.append(f"{student} is in both {seen[student]} and {source}")
                continue
            seen[student] = source
            if source.resolve() != out.resolve():
                shutil.copytree(source / student, out / student, dirs_exist_ok=True)
    order: dict[str, None] = {}
    for source in sources:
        order.update(dict.fromkeys(graded_slugs(source)))
    write_gradebook(out, list(order))
    return len(seen), conflicts


def submitted_at(results: dict) -> datetime | None:
    text = results.get("extra_data", {}).get("student", {}).get("submitted_at")
    return datetime.fromisoformat(text) if text else None
