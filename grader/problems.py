"""Load and validate problem folders.

A problem is one folder ``problems/<slug>/``::

    README.md            the statement (Markdown with LaTeX math)
    problem.toml         metadata (see REQUIRED_KEYS and OPTIONAL_KEYS below)
    <slug>.py            the starter stub the learner edits
    test_<slug>.py       the hidden tests (plain pytest, reached through the ``impl`` fixture)
    probes.py            optional: kit code that runs beside the solution and returns plain
                         data for the tests to judge (see grader/loader.py)
    cases.json           optional: a table of inputs and expected outputs (grpo-kit cases)
    .meta/mistakes.toml  the catalogue of plausible wrong solutions
    .meta/cases.py       optional: the inputs of cases.json
    .meta/mutants.toml   optional: surviving mutants that are equivalent, with a reason

Points: every test function is worth `points_per_test`, or what ``[points]`` gives it by
name; a parametrized test's cases share their function's points equally. `input_checks` names
the test functions about input handling (errors raised, types, not modifying the inputs),
which together may be worth at most `MAX_INPUT_CHECK_SHARE` of the problem. `contract_checks`
names tests of promises that a solution ignoring its inputs can keep too (the same seed gives
the same samples, the model is left in its mode). Both kinds earn in proportion to the rest of
the problem (``Problem.earned``), and together may be worth at most `MAX_GATED_SHARE` of it.

The reference solution is ``reference/<slug>.py``.
"""

from __future__ import annotations

import difflib
import fnmatch
import tomllib
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

KIT_ROOT = Path(__file__).resolve().parents[1]
PROBLEMS_DIR = KIT_ROOT / "problems"
REFERENCE_DIR = KIT_ROOT / "reference"

RUNTIMES = ("pyodide", "python")
DIFFICULTIES = ("easy", "medium", "hard")
REQUIRED_KEYS = {
    "title": str,
    "order": int,
    "difficulty": str,
    "tags": list,
    "implement": list,
    "runtime": str,
    "points_per_test": (int, float),
    "time_limit_s": (int, float),
    "teaches": str,
}
OPTIONAL_KEYS = {
    "points": dict,  # test function name -> points
    "input_checks": list,  # test function names (fnmatch patterns) about input handling
    "contract_checks": list,  # test function names (fnmatch patterns) a do-nothing solution can pass
    "builds_on": list,  # reference modules a solution may import (the capstone's)
    "hints": list,  # progressive hints (Markdown), offered one at a time after failed runs
}
MAX_INPUT_CHECK_SHARE = 0.2
MAX_GATED_SHARE = 0.5  # input and contract checks together: the rest must outweigh them


class ProblemSpecError(ValueError):
    """A problem folder or its metadata is malformed."""


class UnknownProblemError(LookupError):
    """No problem has the slug that was asked for."""


@dataclass(frozen=True)
class Problem:
    slug: str
    dir: Path
    title: str
    order: int
    difficulty: str
    tags: tuple[str, ...]
    implement: tuple[str, ...]
    runtime: str
    points_per_test: float
    time_limit_s: float
    teaches: str
    points: dict[str, float] = field(default_factory=dict)  # per test function, by name
    input_checks: tuple[str, ...] = ()
    contract_checks: tuple[str, ...] = ()
    builds_on: tuple[str, ...] = ()
    hints: tuple[str, ...] = ()

    @property
    def statement(self) -> Path:
        return self.dir / "README.md"

    @property
    def stub(self) -> Path:
        return self.dir / f"{self.slug}.py"

    @property
    def test_files(self) -> list[Path]:
        return sorted(self.dir.glob("test_*.py"))

    @property
    def reference(self) -> Path:
        """reference/<slug>.py of the kit the problem is in (this one, or a course's own)."""
        return self.dir.parent.parent / "reference" / f"{self.slug}.py"

    @property
    def probes(self) -> Path:
        return self.dir / "probes.py"

    @property
    def cases(self) -> Path:
        return self.dir / "cases.json"

    @property
    def mistakes_file(self) -> Path:
        return self.dir / ".meta" / "mistakes.toml"

    @property
    def runs_in_browser(self) -> bool:
        return self.runtime == "pyodide"

    def function_points(self, function: str) -> float:
        """Points of one test function, all its parametrized cases together."""
        return float(self.points.get(function, self.points_per_test))

    def is_input_check(self, function: str) -> bool:
        return _matches(function, self.input_checks)

    def is_gated(self, function: str) -> bool:
        """Whether the test function earns in proportion to the rest (see ``earned``)."""
        return _matches(function, self.input_checks + self.contract_checks)

    def test_points(self, test_names: list[str]) -> dict[str, float]:
        """Points of each test (``function[params]``): a function's points shared by its cases."""
        functions = [name.split("[", 1)[0] for name in test_names]
        cases = Counter(functions)
        return {
            name: self.function_points(function) / cases[function]
            for name, function in zip(test_names, functions, strict=True)
        }

    def earned(self, points: dict[str, float], passed: Collection[str]) -> dict[str, float]:
        """Points each test earned, given what each is worth and the names of those passed.

        An input or contract check is worth what it guards: it earns its points times the share
        of the problem's other points earned. A solution that raises ValueError on every call
        passes the tests of rejecting bad input, one that never calls the model leaves it in
        its mode, and neither earns anything for it.
        """
        checks = {name for name in points if self.is_gated(name.split("[", 1)[0])}
        others = [name for name in points if name not in checks]
        worth = sum(points[name] for name in others)
        share = sum(points[name] for name in others if name in passed) / worth if worth else 1.0
        return {
            name: 0.0 if name not in passed else value * share if name in checks else value
            for name, value in points.items()
        }


def _matches(function: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(function, pattern) for pattern in patterns)


def _check_metadata(meta: dict, where: Path) -> None:
    for key, kind in REQUIRED_KEYS.items():
        if key not in meta:
            raise ProblemSpecError(f"{where}: missing key {key!r}")
        if not isinstance(meta[key], kind) or isinstance(meta[key], bool):
            raise ProblemSpecError(f"{where}: {key!r} has the wrong type ({meta[key]!r})")
    if meta["runtime"] not in RUNTIMES:
        raise ProblemSpecError(
            f"{where}: runtime must be one of {RUNTIMES}, not {meta['runtime']!r}"
        )
    if meta["difficulty"] not in DIFFICULTIES:
        raise ProblemSpecError(
            f"{where}: difficulty must be one of {DIFFICULTIES}, not {meta['difficulty']!r}"
        )
    if not meta["implement"] or not all(isinstance(n, str) for n in meta["implement"]):
        raise ProblemSpecError(f"{where}: 'implement' must list the names to implement")
    if meta["points_per_test"] < 0 or meta["time_limit_s"] <= 0:
        raise ProblemSpecError(f"{where}: points_per_test must be >= 0 and time_limit_s > 0")
    for key, kind in OPTIONAL_KEYS.items():
        if key in meta and not isinstance(meta[key], kind):
            raise ProblemSpecError(f"{where}: {key!r} has the wrong type ({meta[key]!r})")
    points = meta.get("points", {})
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
               for v in points.values()):  # fmt: skip
        raise ProblemSpecError(f"{where}: every value of [points] must be a number >= 0")
    for key in ("input_checks", "contract_checks", "builds_on"):
        if not all(isinstance(item, str) and item for item in meta.get(key, [])):
            raise ProblemSpecError(f"{where}: {key!r} must list names")
    if not all(isinstance(hint, str) and hint.strip() for hint in meta.get("hints", [])):
        raise ProblemSpecError(f"{where}: 'hints' must list the hints as non-empty strings")
    unknown = set(meta) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS)
    if unknown:
        raise ProblemSpecError(f"{where}: unknown keys {sorted(unknown)}")


def load_problem(directory: Path, whole: bool = True) -> Problem:
    """Read one problem folder, raising ProblemSpecError with the file at fault.

    With `whole` false only the metadata is read (the browser has no statement file).
    """
    directory = Path(directory)
    meta_path = directory / "problem.toml"
    try:
        meta = tomllib.loads(meta_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProblemSpecError(f"{directory}: no problem.toml") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProblemSpecError(f"{meta_path}: invalid TOML: {exc}") from None
    _check_metadata(meta, meta_path)
    problem = Problem(
        slug=directory.name,
        dir=directory,
        title=meta["title"],
        order=meta["order"],
        difficulty=meta["difficulty"],
        tags=tuple(meta["tags"]),
        implement=tuple(meta["implement"]),
        runtime=meta["runtime"],
        points_per_test=meta["points_per_test"],
        time_limit_s=float(meta["time_limit_s"]),
        teaches=meta["teaches"],
        points=dict(meta.get("points", {})),
        input_checks=tuple(meta.get("input_checks", ())),
        contract_checks=tuple(meta.get("contract_checks", ())),
        builds_on=tuple(meta.get("builds_on", ())),
        hints=tuple(meta.get("hints", ())),
    )
    for required in (problem.statement, problem.stub) if whole else ():
        if not required.is_file():
            raise ProblemSpecError(f"{directory}: missing {required.name}")
    if whole and not problem.test_files:
        raise ProblemSpecError(f"{directory}: no test_*.py file")
    return problem


def all_problems(problems_dir: Path = PROBLEMS_DIR) -> list[Problem]:
    """Every problem, in learning-path order."""
    problems = [
        load_problem(d)
        for d in sorted(problems_dir.iterdir())
        if d.is_dir() and (d / "problem.toml").exists()
    ]
    orders = [p.order for p in problems]
    if len(set(orders)) != len(orders):
        raise ProblemSpecError(f"{problems_dir}: two problems share an 'order' value")
    return sorted(problems, key=lambda p: p.order)


def get_problem(slug: str, problems_dir: Path = PROBLEMS_DIR) -> Problem:
    """The problem named `slug`, or UnknownProblemError that suggests the closest slugs."""
    directory = problems_dir / slug
    if slug and "/" not in slug and (directory / "problem.toml").exists():
        return load_problem(directory)
    known = [p.slug for p in all_problems(problems_dir)]
    close = difflib.get_close_matches(slug, known, n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise UnknownProblemError(
        f"no problem named {slug!r}.{hint} Run `grpo-kit list` to see them all."
    )
