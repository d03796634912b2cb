"""What grading writes: per-student results (Gradescope format), the gradebook, and merging.

    OUT/gradebook.csv                    one row per student: points per problem, total, max
    OUT/<student>/results.json           Gradescope autograder results (written last, atomically)
    OUT/<student>/<slug>.pytest.json     every test of that problem: outcome, message, output

A student counts as graded once ``results.json`` exists, which is what lets a rerun resume.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from grader.problems import Problem

RESULTS = "results.json"
GRADEBOOK = "gradebook.csv"


@dataclass
class TestResult:
    problem: str
    name: str  # test id within the problem, the implementation parameter removed
    status: str  # passed / failed
    score: float
    max_score: float
    output: str = ""


@dataclass
class StudentResult:
    student: str
    tests: list[TestResult] = field(default_factory=list)
    reports: dict[str, dict] = field(default_factory=dict)  # slug -> pytest-json-report
    notes: list[str] = field(default_factory=list)

    def score(self, slug: str | None = None) -> tuple[float, float]:
        chosen = [t for t in self.tests if slug is None or t.problem == slug]
        return sum(t.score for t in chosen), sum(t.max_score for t in chosen)


def write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except BaseException:  # Ctrl-C included: leave no half-written file behind
        temporary.unlink(missing_ok=True)
        raise


def gradescope_results(result: StudentResult, problems: list[Problem], header: str) -> dict:
    per_problem = {p.slug: dict(zip(("score", "max_score"), result.score(p.slug), strict=True))
                   for p in problems}  # fmt: skip
    score, _ = result.score()
    return {
        "score": score,
        "output": "\n".join([header, *result.notes]).strip(),
        "tests": [
            {
                "name": f"{t.problem}: {t.name}",
                "score": t.score,
                "max_score": t.max_score,
                "status": t.status,
                "output": t.output,
            }
            for t in result.tests
        ],
        "extra_data": {"problems": per_problem},
    }


def write_student(out: Path, result: StudentResult, problems: list[Problem], header: str) -> None:
    folder = out / result.student
    folder.mkdir(parents=True, exist_ok=True)
    for slug, report in result.reports.items():
        # Compact: json's indenting encoder is pure Python, and slow for reports this size.
        write_atomically(folder / f"{slug}.pytest.json", json.dumps(report))
    body = json.dumps(gradescope_results(result, problems, header), indent=1)
    write_atomically(folder / RESULTS, body)  # last: its presence marks the student as done


def finished_students(out: Path) -> set[str]:
    if not out.is_dir():
        return set()
    return {p.parent.name for p in out.glob(f"*/{RESULTS}")}


def write_gradebook(out: Path, slugs: list[str]) -> Path:
    """gradebook.csv from every results.json under `out` (so resumed and merged runs count)."""
    rows = []
    for path in sorted(out.glob(f"*/{RESULTS}")):
        results = json.loads(path.read_text(encoding="utf-8"))
        per_problem = results.get("extra_data", {}).get("problems", {})
        row = [path.parent.name]
        total = maximum = 0.0
        for slug in slugs:
            entry = per_problem.get(slug, {"score": 0, "max_score": 0})
            row.append(_number(entry["score"]))
            total += entry["score"]
            maximum += entry["max_score"]
        rows.append([*row, _number(total), _number(maximum)])
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["student", *slugs, "total", "max"])
    writer.writerows(rows)
    path = out / GRADEBOOK
    write_atomically(path, buffer.getvalue())
    return path


def _number(value: float) -> int | float:
    value = round(float(value), 4)  # points shared by a test's cases add up to near-integers
    return int(value) if value.is_integer() else value


def graded_slugs(out: Path) -> list[str]:
    """The problems the results under `out` were graded on, in the order first seen."""
    slugs: dict[str, None] = {}
    for path in sorted(out.glob(f"*/{RESULTS}")):
        extra = json.loads(path.read_text(encoding="utf-8")).get("extra_data", {})
        slugs.update(dict.fromkeys(extra.get("problems", {})))
    return list(slugs)


def merge(sources: list[Path], out: Path) -> tuple[int, list[str]]:
    """Copy every graded student of `sources` into `out` and rebuild its gradebook.

    A student graded in two sources is a mistake in the sharding: it is reported, and the
    first copy kept.
    """
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
    order = {}
    for source in sources:
        order.update(dict.fromkeys(graded_slugs(source)))
    write_gradebook(out, list(order))
    return len(seen), conflicts
