"""`grpo-kit grade SUBMISSIONS --out OUT`: grade a class against the hidden tests."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HELP = "grade a folder of student submissions in sandboxes (gradebook.csv + Gradescope results)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "submissions",
        type=Path,
        metavar="SUBMISSIONS",
        help="folder with <student>/<slug>.py files or <student>.zip files",
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for the results")
    parser.add_argument(
        "--problems", nargs="+", metavar="SLUG", help="problems to grade (default: all)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="trusted pytest runs at a time (default: number of cores)",
    )
    parser.add_argument(
        "--time-limit",
        type=float,
        metavar="S",
        help="seconds per call of a student function (default: problem.toml)",
    )
    parser.add_argument(
        "--submission-time-limit",
        type=float,
        metavar="S",
        help="seconds for all calls of one submission (default: 6x time limit)",
    )
    parser.add_argument(
        "--memory-limit",
        type=int,
        metavar="MIB",
        help="memory per submission in MiB (default: 1024)",
    )
    parser.add_argument(
        "--shard",
        default="1/1",
        metavar="K/N",
        help="grade only the K-th of N slices of the class (join with merge)",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help="students per trusted pytest run (default: chosen from class size)",
    )
    parser.add_argument("--force", action="store_true",
                        help="regrade students who already have results in OUT")  # fmt: skip


def _problems(slugs: list[str] | None) -> list:
    from grader.problems import all_problems, get_problem

    return [get_problem(s) for s in slugs] if slugs else all_problems()


def _summary(results: list, problems: list, failed: list[str], skipped: int, seconds: float) -> str:
    """The table per problem, then the counts; `failed` holds "<student>: <why>" lines."""
    lines = [f"{'problem':<24}{'graded':>8}{'full marks':>12}{'mean':>10}{'max':>8}"]
    for problem in problems:
        scores = [r.score(problem.slug) for r in results]
        full = sum(1 for got, most in scores if most and got == most)
        mean = sum(got for got, _ in scores) / len(scores) if scores else 0.0
        most = max((m for _, m in scores), default=0)
        lines.append(f"{problem.slug:<24}{len(scores):>8}{full:>12}{mean:>10.2f}{most:>8g}")
    rate = len(results) / seconds if seconds > 0 else 0.0
    lines.append(
        f"{len(results)} graded in {seconds:.1f} s ({rate:.2f} students/s), "
        f"{skipped} already graded (use --force to regrade), {len(failed)} could not be graded"
    )
    lines += [f"  NOT GRADED: {message.splitlines()[0]}" for message in failed]
    if failed:
        lines.append("  (the grader's failures, not the students': fix the cause and run the "
                     "same command again to grade them)")  # fmt: skip
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from grader import __version__
    from grader.batch import BatchOptions, grade_all, parse_shard, shard
    from grader.problems import ProblemSpecError, UnknownProblemError
    from grader.reports import finished_students, write_gradebook, write_student
    from grader.sandbox.bwrap import sandbox_mode, sandbox_warning
    from grader.submissions import find_submissions

    try:
        problems = _problems(args.problems)
        k, n = parse_shard(args.shard)
        everyone, warnings = find_submissions(args.submissions, problems)
    except (ValueError, UnknownProblemError, ProblemSpecError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    mine = shard(everyone, k, n)
    done = set() if args.force else finished_students(args.out)
    todo = [s for s in mine if s.student not in done]
    limits = {"call_s": args.time_limit, "total_s": args.submission_time_limit,
              "memory_mb": args.memory_limit}  # fmt: skip
    options = BatchOptions(problems, max(1, args.workers), args.batch_size,
                           {k: v for k, v in limits.items() if v is not None})  # fmt: skip
    warning = sandbox_warning()
    if warning:
        print(f"\n{'!' * 78}\n{warning}\n{'!' * 78}\n", file=sys.stderr)
    header = f"Graded by grpo-kit {__version__}; sandbox: {sandbox_mode()}."
    if warning:
        header += f"\n{warning}"
    print(
        f"grading {len(todo)} of {len(mine)} students (shard {k}/{n}) on "
        f"{', '.join(p.slug for p in problems)} with {options.workers} workers",
        file=sys.stderr,
    )

    args.out.mkdir(parents=True, exist_ok=True)
    results, failed = [], []
    started = time.monotonic()
    with tqdm(total=len(todo), unit="student", file=sys.stderr) as bar:

        def on_done(chunk: list) -> None:
            for item in chunk:
                if isinstance(item, str):  # nothing saved, so the next run tries again
                    failed.append(item)
                    bar.write(f"NOT GRADED: {item}", file=sys.stderr)
                else:
                    write_student(args.out, item, problems, header)
                    results.append(item)
            bar.update(len(chunk))

        interrupted = False
        try:
            grade_all(todo, options, sandbox_mode(), on_done)
        except KeyboardInterrupt:
            interrupted = True
    elapsed = time.monotonic() - started
    gradebook = write_gradebook(args.out, [p.slug for p in problems])
    print(_summary(results, problems, failed, len(mine) - len(todo), elapsed))
    print(f"gradebook: {gradebook}")
    if warning:
        print(warning, file=sys.stderr)
    if interrupted:
        print(f"interrupted: {len(results)} of {len(todo)} students graded and saved. Run the "
              "same command again to grade the rest (saved students are skipped).",
              file=sys.stderr)  # fmt: skip
        return 130
    return 1 if failed else 0
