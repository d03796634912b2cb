"""The course file, ``course.toml``: what an assignment holds and how it is scored.

    title = "GRPO, spring term"                     # shown in reports and in the LMS column
    problems = ["grpo_objective", "group_advantages"]   # default: every problem, in path order

    [points]                 # points of each whole problem; its tests share them in the
    grpo_objective = 10      # proportions problem.toml gives (default: problem.toml's points)

    [limits]                 # default: each problem.toml, and the grader's memory limit
    time_limit_s = 10        # per call of a student function
    submission_time_limit_s = 60
    memory_mb = 1024

    [late]
    due = 2026-03-14T23:59:00+01:00   # with its time zone
    grace_minutes = 15                # later than due by at most this: on time
    penalty_per_day = 0.1             # share of the score lost per started day late
    max_days = 5                      # later still: no points (leave out: no limit)
    marked_late_days = 1              # days counted for a submission the LMS marks late
                                      # without a time (Canvas)

    [gradescope]
    visibility = "visible"            # of each test: visible, after_due_date, after_published

Every key is checked when the file is read; a mistake is a `CourseError` naming the key and
saying what to write instead. Without a course file the course is every gradable problem at
its problem.toml points, with no due date.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from grader.problems import (
    Problem,
    ProblemSpecError,
    UnknownProblemError,
    all_problems,
    get_problem,
)

VISIBILITIES = ("visible", "after_due_date", "after_published", "hidden")
KEYS = {"title": str, "problems": list, "points": dict, "limits": dict, "late": dict,
        "gradescope": dict}  # fmt: skip
LIMIT_KEYS = {"time_limit_s": (1e-3, 3600.0), "submission_time_limit_s": (1e-3, 86400.0),
              "memory_mb": (128, 1 << 20)}  # fmt: skip
LATE_KEYS = ("due", "grace_minutes", "penalty_per_day", "max_days", "marked_late_days")
GRADESCOPE_KEYS = ("visibility",)


class CourseError(ValueError):
    """The course file is malformed; the message names the key and what to write."""


@dataclass(frozen=True)
class Late:
    """How late one submission was, and what it costs."""

    days: float | None  # None: the LMS marked it late without a time
    penalty: float  # share of the score taken off, 0..1

    def describe(self) -> str:
        when = "marked late (no time given)" if self.days is None else f"{self.days:.2f} days late"
        return f"{when}: {self.penalty:.0%} of the score taken off"


@dataclass(frozen=True)
class LatePolicy:
    due: datetime
    grace: timedelta = timedelta(0)
    penalty_per_day: float = 0.0
    max_days: float | None = None
    marked_late_days: int = 1

    def apply(self, submitted_at: datetime | None, marked_late: bool = False) -> Late | None:
        """None when on time (or when nothing says when it came)."""
        if submitted_at is not None:
            if submitted_at.tzinfo is None:
                raise ValueError("a submission time needs its time zone")
            late = submitted_at - self.due
            if late <= self.grace:
                return None
            days = late / timedelta(days=1)
            return Late(days, self._penalty(math.ceil(days - 1e-9), days))
        if marked_late:
            return Late(None, self._penalty(self.marked_late_days, self.marked_late_days))
        return None

    def _penalty(self, started_days: int, days: float) -> float:
        if self.max_days is not None and days > self.max_days:
            return 1.0
        return min(1.0, started_days * self.penalty_per_day)


@dataclass(frozen=True)
class Course:
    problems: tuple[Problem, ...]
    title: str = "grpo-kit"
    points: dict[str, float] = field(default_factory=dict)  # slug -> points of the problem
    limits: dict[str, float] = field(default_factory=dict)  # call_s, total_s, memory_mb
    late: LatePolicy | None = None
    visibility: str = "visible"
    path: Path | None = None

    @property
    def slugs(self) -> list[str]:
        return [p.slug for p in self.problems]

    def problem(self, slug: str) -> Problem:
        return next(p for p in self.problems if p.slug == slug)

    def test_points(self, problem: Problem, names: list[str]) -> dict[str, float]:
        """Points of each test: problem.toml's, scaled so the problem is worth its course points."""
        own = problem.test_points(names)
        wanted = self.points.get(problem.slug)
        total = sum(own.values())
        if wanted is None or total == 0:
            return own
        return {name: value * wanted / total for name, value in own.items()}

    def restricted(self, slugs: list[str]) -> Course:
        """The same course with only `slugs` (which must be in it), in the course's order."""
        unknown = [s for s in slugs if s not in self.slugs]
        if unknown:
            raise CourseError(
                f"--problems {' '.join(unknown)}: not in the course"
                + (f" {self.path}" if self.path else "")
                + f" (it holds {', '.join(self.slugs)})"
            )
        return Course(tuple(p for p in self.problems if p.slug in slugs), self.title, self.points,
                      self.limits, self.late, self.visibility, self.path)  # fmt: skip

    def with_limits(self, **limits: float | None) -> Course:
        """Command-line limits override the course file's."""
        merged = self.limits | {k: v for k, v in limits.items() if v is not None}
        return Course(self.problems, self.title, self.points, merged, self.late, self.visibility,
                      self.path)  # fmt: skip

    def to_toml(self) -> str:
        """This course as a course file (the Gradescope autograder ships one)."""
        names = {"call_s": "time_limit_s", "total_s": "submission_time_limit_s",
                 "memory_mb": "memory_mb"}  # fmt: skip
        lines = [f"title = {_toml(self.title)}", f"problems = {_toml(self.slugs)}", ""]
        points = {slug: value for slug, value in self.points.items() if slug in self.slugs}
        if points:
            lines += ["[points]", *(f"{slug} = {value!r}" for slug, value in points.items()), ""]
        if self.limits:
            lines += ["[limits]", *(f"{names[k]} = {v!r}" for k, v in self.limits.items()), ""]
        if self.late is not None:
            late = self.late
            lines += ["[late]", f"due = {late.due.isoformat()}",
                      f"grace_minutes = {late.grace / timedelta(minutes=1)!r}",
                      f"penalty_per_day = {late.penalty_per_day!r}",
                      f"marked_late_days = {late.marked_late_days}"]  # fmt: skip
            lines += [f"max_days = {late.max_days!r}"] if late.max_days is not None else []
            lines.append("")
        lines += ["[gradescope]", f"visibility = {_toml(self.visibility)}"]
        return "\n".join(lines) + "\n"

    def describe(self) -> dict:
        """The course as plain data, kept in every result (so a merge needs no course file)."""
        return {"title": self.title, "problems": self.slugs}


def _toml(value) -> str:
    import json

    return json.dumps(value)  # a JSON string or list of strings is valid TOML


def default_course(problems: list[Problem] | None = None) -> Course:
    return Course(tuple(problems if problems is not None else all_problems()))


def course_for(path: Path | None, slugs: list[str] | None = None) -> Course:
    """What the commands' `--course` and `--problems` ask for: the course file's problems (only
    `slugs` among them, if given), or without a file every problem (or `slugs`)."""
    if path is not None:
        course = load_course(path)
        return course.restricted(slugs) if slugs else course
    return default_course([get_problem(s) for s in slugs] if slugs else None)


def _close(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _number(where: str, value, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise CourseError(f"{where} must be a number from {low:g} to {high:g}, not {value!r}")
    return float(value)


def _unknown(where: str, table: dict, known) -> None:
    for key in table:
        if key not in known:
            raise CourseError(f"{where}: unknown key {key!r}{_close(key, known)}; "
                              f"the keys are {', '.join(known)}")  # fmt: skip


def _problems(where: str, meta: dict, problems_dir: Path | None) -> tuple[Problem, ...]:
    kwargs = {"problems_dir": problems_dir} if problems_dir else {}
    if "problems" not in meta:
        return tuple(all_problems(**kwargs))
    slugs = meta["problems"]
    if not slugs or not all(isinstance(s, str) for s in slugs):
        raise CourseError(f"{where}: 'problems' must list problem names, e.g. "
                          'problems = ["grpo_objective"]')  # fmt: skip
    if len(set(slugs)) != len(slugs):
        raise CourseError(f"{where}: 'problems' names a problem twice")
    try:
        return tuple(get_problem(s, **kwargs) for s in slugs)
    except (UnknownProblemError, ProblemSpecError) as exc:
        raise CourseError(f"{where}: problems: {exc}") from None


def _points(where: str, meta: dict, slugs: list[str]) -> dict[str, float]:
    points = meta.get("points", {})
    for slug, value in points.items():
        if slug not in slugs:
            raise CourseError(f"{where}: [points] {slug!r} is not a problem of the course"
                              f"{_close(slug, slugs)}")  # fmt: skip
        _number(f"{where}: [points] {slug}", value, 0, 1e6)
    return {slug: float(value) for slug, value in points.items()}


def _limits(where: str, meta: dict) -> dict[str, float]:
    table = meta.get("limits", {})
    _unknown(f"{where}: [limits]", table, LIMIT_KEYS)
    names = {"time_limit_s": "call_s", "submission_time_limit_s": "total_s",
             "memory_mb": "memory_mb"}  # fmt: skip
    limits = {names[k]: _number(f"{where}: [limits] {k}", v, *LIMIT_KEYS[k])
              for k, v in table.items()}  # fmt: skip
    if "call_s" in limits and limits.get("total_s", math.inf) < limits["call_s"]:
        raise CourseError(f"{where}: [limits] submission_time_limit_s must be at least "
                          "time_limit_s")  # fmt: skip
    return limits


def _late(where: str, meta: dict) -> LatePolicy | None:
    if "late" not in meta:
        return None
    table = meta["late"]
    _unknown(f"{where}: [late]", table, LATE_KEYS)
    due = table.get("due")
    if not isinstance(due, datetime):
        raise CourseError(f"{where}: [late] due must be a date and time, unquoted, e.g. "
                          "due = 2026-03-14T23:59:00+01:00")  # fmt: skip
    if due.tzinfo is None:
        raise CourseError(f"{where}: [late] due = {due.isoformat()} has no time zone: add it, "
                          f"e.g. due = {due.isoformat()}+01:00 (or Z for UTC)")  # fmt: skip
    max_days = table.get("max_days")
    return LatePolicy(
        due=due,
        grace=timedelta(minutes=_number(f"{where}: [late] grace_minutes",
                                        table.get("grace_minutes", 0), 0, 10080)),
        penalty_per_day=_number(f"{where}: [late] penalty_per_day",
                                table.get("penalty_per_day", 0), 0, 1),
        max_days=None if max_days is None else _number(f"{where}: [late] max_days", max_days,
                                                       0, 3650),
        marked_late_days=int(_number(f"{where}: [late] marked_late_days",
                                     table.get("marked_late_days", 1), 0, 3650)),
    )  # fmt: skip


def load_course(path: Path, problems_dir: Path | None = None) -> Course:
    """Read and check a course file; CourseError says what is wrong and what to write."""
    path = Path(path)
    where = str(path)
    try:
        meta = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CourseError(f"no course file {path}: check the path, or leave out --course "
                          "to grade every problem") from None  # fmt: skip
    except IsADirectoryError:
        raise CourseError(f"{path} is a folder: give the course file, e.g. course.toml") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CourseError(f"{path} cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise CourseError(f"{where} is not valid TOML: {exc}") from None
    _unknown(where, meta, KEYS)
    for key, kind in KEYS.items():
        if key in meta and not isinstance(meta[key], kind):
            shape = {str: "a quoted string", list: "a list", dict: f"a table [{key}]"}[kind]
            raise CourseError(f"{where}: {key!r} must be {shape}, not {meta[key]!r}")
    problems = _problems(where, meta, problems_dir)
    gradescope = meta.get("gradescope", {})
    _unknown(f"{where}: [gradescope]", gradescope, GRADESCOPE_KEYS)
    visibility = gradescope.get("visibility", "visible")
    if visibility not in VISIBILITIES:
        raise CourseError(f"{where}: [gradescope] visibility must be one of "
                          f"{', '.join(VISIBILITIES)}, not {visibility!r}")  # fmt: skip
    return Course(
        problems=problems,
        title=meta.get("title", path.stem),
        points=_points(where, meta, [p.slug for p in problems]),
        limits=_limits(where, meta),
        late=_late(where, meta),
        visibility=visibility,
        path=path,
    )
