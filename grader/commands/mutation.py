"""`grpo-kit mutation [SLUG ...]`: how many wrong versions of each reference its tests catch.

mutmut (pinned in the ``dev`` extra) makes small changes to ``reference/<slug>.py``, one at a
time (``<`` for ``<=``, ``0.2`` for ``1.2``, a dropped argument...), and runs the problem's hidden
tests against each. A mutant that passes every test "survived": either the tests miss a real
mistake, or the change makes no difference the statement cares about (an equivalent mutant).
Equivalent mutants are listed, each with a one-line reason, in ``.meta/mutants.toml``::

    [[equivalent]]
    function = "grpo_objective"
    before = "rhos = np.asarray(rhos, dtype=np.float64)"
    after = "rhos = np.asarray(rhos, dtype=None)"
    reason = "every input is converted again by the arithmetic below"

The score is killed / (mutants - equivalent), over every function of the reference (helpers
included: a learner writes them too, in their own way). Each
problem runs in a copy of the kit in a temporary folder, so the working tree is never touched.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from grader.problems import KIT_ROOT, Problem, ProblemSpecError, UnknownProblemError

HELP = "mutation-test the hidden tests: the share of mutants of each reference they catch"
TARGET = 0.95
KILLED = ("killed", "timeout", "caught by type check")
MUTANT = re.compile(r"^\s*(?P<name>[\w.]+__mutmut_\d+): (?P<status>.+)$")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("slugs", nargs="*", metavar="SLUG", help="problems (default: all)")
    parser.add_argument("--workers", type=int, default=2, help="mutants tested at a time")
    parser.add_argument("--show", action="store_true", help="print the diff of every survivor")


@dataclass
class Score:
    slug: str
    mutants: int = 0
    killed: int = 0
    equivalent: int = 0
    survivors: list[str] = field(default_factory=list)  # diffs of the non-equivalent survivors
    unused: list[dict] = field(default_factory=list)  # listed equivalents no mutant matched
    seconds: float = 0.0

    @property
    def score(self) -> float:
        counted = self.mutants - self.equivalent
        return self.killed / counted if counted else 1.0


def _function(mutant: str) -> str:
    """reference.slug.x_function__mutmut_3 -> function (methods: x_Class_method -> method)."""
    mangled = mutant.rsplit(".", 1)[-1].split("__mutmut_")[0]
    return mangled.removeprefix("x_").rsplit("ǁ", 1)[-1]


def _changed(diff: str) -> tuple[str, str]:
    """The removed and the added lines of a unified diff, each stripped, joined by newlines."""
    lines = diff.splitlines()
    before = [ln[1:].strip() for ln in lines if ln.startswith("-") and not ln.startswith("---")]
    after = [ln[1:].strip() for ln in lines if ln.startswith("+") and not ln.startswith("+++")]
    return "\n".join(before), "\n".join(after)


def equivalents(problem: Problem) -> list[dict]:
    path = problem.dir / ".meta" / "mutants.toml"
    if not path.is_file():
        return []
    entries = tomllib.loads(path.read_text(encoding="utf-8")).get("equivalent", [])
    for entry in entries:
        if not {"function", "before", "after", "reason"} <= set(entry) or not entry["reason"]:
            raise ProblemSpecError(f"{path}: each equivalent needs function, before, after, reason")
    return entries


def _matches(entry: dict, function: str, change: tuple[str, str]) -> bool:
    normal = lambda text: "\n".join(line.strip() for line in text.strip().splitlines())  # noqa: E731
    return (entry["function"] == function and normal(entry["before"]) == change[0]
            and normal(entry["after"]) == change[1])  # fmt: skip


def _workspace(problem: Problem, folder: Path) -> None:
    """A copy of what the problem's tests need, and mutmut's settings for this problem."""
    ignore = shutil.ignore_patterns("__pycache__", "mutants", "node_modules", "dist")
    kit = problem.dir.parent.parent  # this kit, or a course's own (grpo-kit new --root)
    shutil.copytree(KIT_ROOT / "grader", folder / "grader", ignore=ignore)
    shutil.copytree(kit / "reference", folder / "reference", ignore=ignore)
    (folder / "problems").mkdir()
    for name in ("__init__.py", "conftest.py"):
        shutil.copy(kit / "problems" / name, folder / "problems" / name)
    shutil.copytree(kit / "problems" / "support", folder / "problems" / "support", ignore=ignore)
    shutil.copytree(problem.dir, folder / "problems" / problem.slug, ignore=ignore)
    (folder / "pyproject.toml").write_text(
        "[tool.mutmut]\n"
        f'source_paths = ["reference/{problem.slug}.py"]\n'
        'also_copy = ["grader", "problems", "reference"]\n'
        f'pytest_add_cli_args_test_selection = ["problems/{problem.slug}"]\n'
        'pytest_add_cli_args = ["--impl", "reference", "-p", "no:cacheprovider", "-q", '
        '"-p", "no:hypothesispytest", "-p", "no:anyio"]\n',
        encoding="utf-8",
    )


def _mutmut(folder: Path, *args: str) -> str:
    # One thread per mutant: mutmut forks its test runs, and torch's thread pool spinning
    # after a fork would turn mutants into timeouts, which count as killed.
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    completed = subprocess.run([sys.executable, "-m", "mutmut", *args], cwd=folder,
                               capture_output=True, text=True, env=env)  # fmt: skip
    if completed.returncode != 0:
        raise RuntimeError(f"mutmut {' '.join(args)} failed:\n{completed.stderr[-3000:]}")
    return completed.stdout


def mutate(problem: Problem, workers: int) -> Score:
    """Run mutmut on one problem's reference and score its tests."""
    started = time.monotonic()
    score = Score(problem.slug)
    listed = equivalents(problem)
    used: set[int] = set()
    with tempfile.TemporaryDirectory(prefix=f"grpo-kit-mutation-{problem.slug}-") as tmp:
        folder = Path(tmp)
        _workspace(problem, folder)
        _mutmut(folder, "run", "--max-children", str(workers))
        for line in _mutmut(folder, "results", "--all", "true").splitlines():
            found = MUTANT.match(line)
            if not found:
                continue
            score.mutants += 1
            if found["status"].strip() in KILLED:
                score.killed += 1
                continue
            diff = _mutmut(folder, "show", found["name"])
            change = _changed(diff)
            match = next((i for i, e in enumerate(listed)
                          if _matches(e, _function(found["name"]), change)), None)  # fmt: skip
            if match is None:
                score.survivors.append(f"{found['name']} ({found['status'].strip()})\n{diff}")
            else:
                score.equivalent += 1
                used.add(match)
    score.unused = [e for i, e in enumerate(listed) if i not in used]
    score.seconds = time.monotonic() - started
    return score


def run(args: argparse.Namespace) -> int:
    from grader.problems import all_problems, get_problem

    if shutil.which("mutmut") is None and not _has_mutmut():
        print("error: mutmut is not installed: pip install -c constraints.txt -e '.[dev]'",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        problems = [get_problem(s) for s in args.slugs] if args.slugs else all_problems()
    except (UnknownProblemError, ProblemSpecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{'problem':<20}{'mutants':>9}{'killed':>8}{'equiv.':>8}{'survived':>10}{'score':>8}")
    below = []
    for problem in problems:
        result = mutate(problem, max(1, args.workers))
        print(f"{problem.slug:<20}{result.mutants:>9}{result.killed:>8}{result.equivalent:>8}"
              f"{len(result.survivors):>10}{result.score:>8.1%}   ({result.seconds:.0f} s)",
              flush=True)  # fmt: skip
        if result.score < TARGET:
            below.append(problem.slug)
        for survivor in result.survivors if args.show else []:
            print("    " + survivor.replace("\n", "\n    "))
        for entry in result.unused:
            print(
                f"    listed as equivalent but no such mutant: {entry['function']}: "
                f"{entry['before']!r} -> {entry['after']!r}"
            )
    if below:
        print(f"below {TARGET:.0%}: {', '.join(below)} (run with --show to see the survivors)")
        return 1
    return 0


def _has_mutmut() -> bool:
    import importlib.util

    return importlib.util.find_spec("mutmut") is not None
