"""`grpo-kit list`: the problems in learning-path order."""

from __future__ import annotations

import argparse

from grader.problems import all_problems

HELP = "list the problems in learning-path order"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runtime", choices=("pyodide", "python"), help="only problems of this runtime"
    )


def run(args: argparse.Namespace) -> int:
    problems = [p for p in all_problems() if args.runtime in (None, p.runtime)]
    width = max((len(p.slug) for p in problems), default=4)
    print(f"{'#':>2}  {'problem':<{width}}  {'difficulty':<10}  {'runs in':<8}  teaches")
    for p in problems:
        where = "browser" if p.runs_in_browser else "local"
        print(f"{p.order:>2}  {p.slug:<{width}}  {p.difficulty:<10}  {where:<8}  {p.teaches}")
    return 0
