"""`grpo-kit report GRADES --out REPORT`: how the class did, as one HTML page and CSV files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "a class report of graded results: score histograms, failing tests, late, similar files"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("grades", type=Path, metavar="GRADES",
                        help="the --out folder of `grpo-kit grade` (or of merge)")  # fmt: skip
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for index.html and the CSV files (outside GRADES)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from grader.classreport import write_report
    from grader.problems import UnknownProblemError, get_problem
    from grader.reports import load_results

    if not args.grades.is_dir() or not load_results(args.grades):
        print(f"error: {args.grades} holds no graded results: give the --out folder of "
              "`grpo-kit grade`", file=sys.stderr)  # fmt: skip
        return 2
    if args.out.exists() and not args.out.is_dir():
        print(f"error: --out {args.out} is a file: give a folder", file=sys.stderr)
        return 2
    if args.out.resolve().parent == args.grades.resolve():
        print(f"error: --out {args.out} would sit among the students' folders of "
              f"{args.grades}: put it elsewhere, e.g. --out report", file=sys.stderr)  # fmt: skip
        return 2
    starters = {}
    for results in load_results(args.grades).values():
        for slug in results.get("extra_data", {}).get("course", {}).get("problems", []):
            if slug not in starters:
                try:
                    starters[slug] = get_problem(slug).stub.read_text(encoding="utf-8")
                except (UnknownProblemError, OSError):
                    starters[slug] = ""
    report = write_report(args.grades, args.out, starters)
    groups = sum(len(g) for g in report.similar.values())
    reaching = len({(r["student"], r["problem"]) for r in report.tampering})
    print(
        f"{report.students} students, {len(report.problems)} problems, {len(report.late)} "
        f"late, {groups} groups of similar files, {reaching} files that reach into the grader "
        f"-> {args.out / 'index.html'}"
    )
    return 0
