"""`grpo-kit new SLUG`: the files of a new problem, ready to fill in."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "scaffold a new problem: statement, metadata, starter, tests, catalogue, reference"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("slug", metavar="SLUG", help="the problem's name, e.g. reward_mean")
    parser.add_argument("--title", help="the problem's title (default: from SLUG)")
    parser.add_argument("--runtime", choices=("pyodide", "python"), default="pyodide",
                        help="pyodide: numpy only, runs in the browser too; python: local "
                        "(torch)")  # fmt: skip
    parser.add_argument("--probes", action="store_true",
                        help="add probes.py: kit code run beside the solution")  # fmt: skip
    parser.add_argument("--cases", action="store_true",
                        help="add .meta/cases.py: the inputs of a table of cases (cases.json)")  # fmt: skip
    parser.add_argument("--root", type=Path, metavar="DIR",
                        help="the kit (or a course's own repository) to add it to "
                        "(default: this kit)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from grader.problems import KIT_ROOT, ProblemSpecError
    from grader.scaffold import ScaffoldError, create

    root = (args.root or KIT_ROOT).resolve()
    try:
        paths = create(args.slug, root, args.title, args.runtime, args.probes, args.cases)
    except (ScaffoldError, ProblemSpecError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path in paths:
        print(f"  wrote {path.relative_to(root)}")
    where = f" --root {args.root}" if args.root else ""
    print(
        f"Fill in every TODO, then run `grpo-kit validate {args.slug}{where}` until every "
        "check passes (README.md, 'Writing your own problem', walks through it)."
    )
    return 0
