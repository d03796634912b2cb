"""`grpo-kit check SLUG [FILE]`: run one problem's hidden tests against one file."""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

from grader.problems import ProblemSpecError, UnknownProblemError, get_problem
from grader.runner import run_tests

HELP = "run one problem's tests against your solution file and print a verdict per test"

MARKS = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "skipped": "SKIP"}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("slug", help="the problem, as `grpo-kit list` names it")
    parser.add_argument(
        "file", nargs="?", type=Path, help="your solution (default: the problem's stub you edit)"
    )


def _ensure_testable(path: Path) -> None:
    """Raise ValueError saying why `path` cannot be tested, if it cannot."""
    if not path.is_file():
        raise ValueError(f"no such file: {path}")
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text: save it as UTF-8 and try again") from None
    if not source.strip():
        raise ValueError(f"{path} is empty: start from the problem's stub")
    try:
        ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise ValueError(f"{path}, line {exc.lineno}: syntax error: {exc.msg}") from None


def run(args: argparse.Namespace) -> int:
    try:
        problem = get_problem(args.slug)
    except (UnknownProblemError, ProblemSpecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    path = (args.file or problem.stub).resolve()
    try:
        _ensure_testable(path)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    print(f"{problem.title}: testing {path}")
    outcomes = run_tests(problem, [str(path)])
    points = problem.test_points([o.name for o in outcomes])
    earned = problem.earned(points, {o.name for o in outcomes if o.outcome == "passed"})
    total = sum(points.values())
    for o in outcomes:
        print(
            f"  {MARKS.get(o.outcome, o.outcome.upper()):5} {earned[o.name]:5.2f}"
            f"/{points[o.name]:<5.2f} {o.name}"
        )
        if o.outcome != "passed" and o.message:
            first_lines = o.message.splitlines()[:4]
            print("\n".join(f"        {line}" for line in first_lines))
    passed = sum(o.outcome == "passed" for o in outcomes)
    if any(o.outcome == "passed" and earned[o.name] < points[o.name] for o in outcomes):
        print(
            "Tests of input handling and of promises a do-nothing solution keeps too (listed "
            "in problem.toml) earn their points times the share of the other points earned: "
            "make the computation right to earn them all."
        )
    print(f"{passed}/{len(outcomes)} tests passed, {sum(earned.values()):.4g}/{total:g} points")
    return 0 if outcomes and passed == len(outcomes) else 1
