"""Load and validate problem folders.

A problem is one folder ``problems/<slug>/``::

    README.md            the statement (Markdown with LaTeX math)
    problem.toml         metadata (see REQUIRED_KEYS below)
    <slug>.py            the starter stub the learner edits
    test_<slug>.py       the hidden tests (plain pytest, reached through the ``impl`` fixture)
    .meta/mistakes.toml  the catalogue of plausible wrong solutions

The reference solution is ``reference/<slug>.py``.
"""

from __future__ import annotations

import difflib
import tomllib
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
    "points_per_test": int,
    "time_limit_s": (int, float),
    "teaches": str,
}


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
    points_per_test: int
    time_limit_s: float
    teaches: str
    points: dict[str, int] = field(default_factory=dict)  # per-test overrides, by test name

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
        return REFERENCE_DIR / f"{self.slug}.py"

    @property
    def mistakes_file(self) -> Path:
        return self.dir / ".meta" / "mistakes.toml"

    @property
    def runs_in_browser(self) -> bool:
        return self.runtime == "pyodide"

    def points_for(self, test_name: str) -> int:
        """Points for one test, by its function name (parameters stripped)."""
        return self.points.get(test_name.split("[", 1)[0], self.points_per_test)


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
    unknown = set(meta) - set(REQUIRED_KEYS) - {"points"}
    if unknown:
        raise ProblemSpecError(f"{where}: unknown keys {sorted(unknown)}")


def load_problem(directory: Path) -> Problem:
    """Read one problem folder, raising ProblemSpecError with the file at fault."""
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
    )
    for required in (problem.statement, problem.stub):
        if not required.is_file():
            raise ProblemSpecError(f"{directory}: missing {required.name}")
    if not problem.test_files:
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
