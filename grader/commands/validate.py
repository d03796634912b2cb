"""`grpo-kit validate [SLUG ...]`: prove that a problem's tests mean something."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "check a problem against every rule: reference passes, starter and mistakes fail, ..."


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("slugs", nargs="*", metavar="SLUG", help="problems (default: all)")
    parser.add_argument("--root", type=Path, metavar="DIR",
                        help="the kit holding them (default: this kit)")  # fmt: skip
    parser.add_argument("--no-mutation", action="store_true",
                        help="skip mutation testing (minutes per problem)")  # fmt: skip
    parser.add_argument("--workers", type=int, default=2, help="mutants tested at a time")


def run(args: argparse.Namespace) -> int:
    from grader.problems import (
        KIT_ROOT,
        ProblemSpecError,
        UnknownProblemError,
        all_problems,
        get_problem,
    )
    from grader.validate import validate

    problems_dir = (args.root or KIT_ROOT).resolve() / "problems"
    try:
        if args.slugs:
            folders = [get_problem(slug, problems_dir).dir for slug in args.slugs]
        else:
            folders = [p.dir for p in all_problems(problems_dir)]
    except (UnknownProblemError, ProblemSpecError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    failed = []
    for folder in folders:
        print(f"{folder.name}:", flush=True)
        checks = validate(folder, mutation=not args.no_mutation, mutation_workers=args.workers)
        for check in checks:
            print("\n".join(check.lines()), flush=True)
        bad = sum(1 for c in checks if c.ok is False)
        print(f"  {folder.name}: " + (f"{bad} of {len(checks)} checks failed" if bad
                                      else "every check passed"))  # fmt: skip
        if bad:
            failed.append(folder.name)
    return 1 if failed else 0
