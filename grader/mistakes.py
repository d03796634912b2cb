"""The catalogue of wrong solutions kept in each problem's ``.meta/mistakes.toml``.

A mistake is the reference solution with a few textual edits, each of which must match the
reference exactly once (so a mistake can never silently turn back into the reference), or a
whole ``source`` when the mistake is a different approach altogether::

    [[mistake]]
    id = "no_clip"
    description = "Uses rho * A without clipping the ratio."
    edits = [{ find = "np.minimum(unclipped, clipped)", replace = "unclipped" }]
"""

from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from grader.execution import load_source
from grader.loader import ImplementationSpecError, LocalRunner
from grader.problems import Problem


class MistakeSpecError(ImplementationSpecError, ValueError):
    """A catalogue entry is malformed or no longer matches the reference."""


@dataclass(frozen=True)
class Mistake:
    id: str
    description: str
    source: str


def _reference_path(problem_dir: Path) -> Path:
    return problem_dir.parent.parent / "reference" / f"{problem_dir.name}.py"


def load_catalogue(problem_dir: Path) -> list[Mistake]:
    problem_dir = Path(problem_dir)
    path = problem_dir / ".meta" / "mistakes.toml"
    if not path.exists():
        return []
    try:
        entries = tomllib.loads(path.read_text(encoding="utf-8")).get("mistake", [])
    except tomllib.TOMLDecodeError as exc:
        raise MistakeSpecError(f"{path}: invalid TOML: {exc}") from None
    reference = _reference_path(problem_dir).read_text(encoding="utf-8")
    mistakes, seen = [], set()
    for entry in entries:
        mistake_id = entry.get("id", "")
        if not mistake_id.isidentifier() or mistake_id in seen:
            raise MistakeSpecError(f"{path}: each mistake needs a unique identifier id")
        seen.add(mistake_id)
        if not entry.get("description"):
            raise MistakeSpecError(f"{path}: mistake {mistake_id!r} has no description")
        if ("source" in entry) == ("edits" in entry):
            raise MistakeSpecError(f"{path}: mistake {mistake_id!r} needs edits or source")
        source = entry.get("source", reference)
        for edit in entry.get("edits", []):
            count = source.count(edit["find"])
            if count != 1:
                raise MistakeSpecError(
                    f"{path}: mistake {mistake_id!r}: {edit['find']!r} occurs {count} times "
                    "in the reference (it must occur exactly once)"
                )
            source = source.replace(edit["find"], edit["replace"])
        if source == reference:
            raise MistakeSpecError(f"{path}: mistake {mistake_id!r} changes nothing")
        mistakes.append(Mistake(mistake_id, entry["description"], source))
    return mistakes


def load_mistake(problem: Problem, mistake_id: str) -> LocalRunner:
    """One catalogued mistake, run in this process (the ``mistake:<id>`` implementation)."""
    by_id = {m.id: m for m in load_catalogue(problem.dir)}
    if mistake_id not in by_id:
        raise MistakeSpecError(f"{problem.slug} has no mistake {mistake_id!r}")
    kit_root = str(problem.dir.parent.parent)
    if kit_root not in sys.path:  # mistakes import other reference modules like the reference does
        sys.path.insert(0, kit_root)
    filename = f"<mistake {problem.slug}:{mistake_id}>"
    module = load_source(by_id[mistake_id].source, f"mistake_{problem.slug}_{mistake_id}", filename)
    return LocalRunner(problem, module, f"{problem.slug}.py")
