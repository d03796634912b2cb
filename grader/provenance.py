"""What each result was graded from, and what a rerun must grade again.

Every problem's record (``OUT/<student>/<slug>.pytest.json``) keeps ``graded_from``: the
fingerprint of the student's file (its sha256, or the reason there was none that could run)
and the version of the hidden tests (a hash of every file the tests read: test files,
problem.toml, probes, case tables, the shared test support and the reference modules they
import). A rerun compares them with the submissions and tests of now and grades exactly the
problems whose fingerprint changed; everything else is kept.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from grader.problems import Problem
from grader.sources import reference_modules
from grader.submissions import Submission

RECORD_SUFFIX = ".pytest.json"


def _reference_imports(path: Path) -> frozenset[str]:
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return frozenset()
    return _parsed_imports(path, stamp)


# Every student's every problem asks: parse each file once per version of it, not each time.
@functools.cache
def _parsed_imports(path: Path, stamp: int) -> frozenset[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return frozenset()
    return reference_modules(tree)


def tests_files(problem: Problem) -> list[Path]:
    """Every file a run of `problem`'s hidden tests reads, besides the submission."""
    kit = problem.dir.parent.parent
    files = [*problem.test_files, problem.dir / "problem.toml"]
    files += [path for path in (problem.probes, problem.cases) if path.is_file()]
    files += [kit / "problems" / "conftest.py"]
    files += sorted((kit / "problems" / "support").glob("*.py"))
    modules = set(problem.builds_on)
    for path in files:
        modules |= _reference_imports(path)
    seen: set[str] = set()
    while modules - seen:  # and what those reference modules import in turn
        name = sorted(modules - seen)[0]
        seen.add(name)
        modules |= _reference_imports(kit / "reference" / f"{name}.py")
    files += [kit / "reference" / f"{name}.py" for name in sorted(seen)]
    return [path for path in files if path.is_file()]


@functools.cache
def _version(problem_dir: Path, stamp: tuple) -> str:
    from grader.problems import load_problem

    digest = hashlib.sha256()
    kit = problem_dir.parent.parent
    for path in tests_files(load_problem(problem_dir)):
        digest.update(path.relative_to(kit).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def tests_version(problem: Problem) -> str:
    """A short hash of `problem`'s hidden tests as they are now."""
    stamp = tuple(p.stat().st_mtime_ns for p in tests_files(problem))
    return _version(problem.dir, stamp)


def graded_from(submission: Submission, problem: Problem) -> dict:
    return {"submission": submission.fingerprint(problem.slug), "tests": tests_version(problem)}


def read_records(folder: Path) -> dict[str, dict]:
    """slug -> the record of each problem graded for one student (unreadable ones left out)."""
    records = {}
    for path in sorted(folder.glob(f"*{RECORD_SUFFIX}")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and "graded_from" in record and "tests" in record:
            records[path.name.removesuffix(RECORD_SUFFIX)] = record
    return records


@dataclass
class Rerun:
    """One student of this run: which problems to grade and why (nothing: all kept)."""

    submission: Submission
    problems: list[Problem] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    new: bool = False

    @property
    def student(self) -> str:
        return self.submission.student


def plan(out: Path, submissions: list[Submission], problems: list[Problem],
         force: bool = False) -> list[Rerun]:  # fmt: skip
    """For each student, the problems whose submission or tests changed since they were graded."""
    plans = []
    for submission in submissions:
        folder = out / submission.student
        records = read_records(folder) if folder.is_dir() else {}
        rerun = Rerun(submission, new=not records)
        for problem in problems:
            record = records.get(problem.slug)
            wanted = graded_from(submission, problem)
            if force or record is None:
                rerun.problems.append(problem)
                if record is None and records:
                    rerun.reasons.append(f"{problem.slug} not graded before")
                continue
            before = record["graded_from"]
            if before.get("submission") != wanted["submission"]:
                rerun.problems.append(problem)
                change = ("removed" if wanted["submission"] == "missing"
                          else "handed in" if before.get("submission") == "missing"
                          else "changed")  # fmt: skip
                rerun.reasons.append(f"{problem.slug}.py {change}")
            elif before.get("tests") != wanted["tests"]:
                rerun.problems.append(problem)
                rerun.reasons.append(f"the tests of {problem.slug} changed")
        if force and not rerun.new:
            rerun.reasons = ["asked to regrade"]
        plans.append(rerun)
    return plans
