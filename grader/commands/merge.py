"""`grpo-kit merge OUT1 OUT2 ... --out OUT`: join the outputs of `grade --shard` runs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "join the outputs of several `grpo-kit grade --shard K/N` runs into one gradebook"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sources", nargs="+", type=Path, metavar="OUTDIR",
                        help="output folders of grade runs")  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, help="folder for the merged results")


def run(args: argparse.Namespace) -> int:
    from grader.gradebook import GRADEBOOK
    from grader.reports import merge

    missing = [str(s) for s in args.sources if not s.is_dir()]
    if missing:
        print(f"error: not a folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    count, conflicts = merge(args.sources, args.out)
    for conflict in conflicts:
        print(f"warning: {conflict}; kept the first", file=sys.stderr)
    print(f"merged {count} students into {args.out / GRADEBOOK}")
    return 1 if conflicts else 0
