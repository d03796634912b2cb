"""`grpo-kit grade SUBMISSIONS --out OUT`: grade a class against the hidden tests."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

HELP = "grade a class's submissions in sandboxes (an LMS download or one folder per student)"
LAYOUT_HELP = (
    "how SUBMISSIONS is laid out (default: auto, from its files): plain (<student>/ or "
    "<student>.zip), canvas, moodle or gradescope (their download layouts)"
)
SHOWN_REASONS = 30  # students listed by name with the reason they are graded again


def number(kind: type, low: float, high: float, unit: str, example: str) -> Callable[[str], float]:
    """An argparse type: a number from `low` to `high`, or an error that says what to write."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high or value != value:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a valid {unit}: give {'a whole number' if kind is int else 'a number'}"
                f" from {low:g} to {high:g}, e.g. {example}"
            )
        return value

    return parse


def shard_option(text: str) -> tuple[int, int]:
    from grader.batch import parse_shard

    try:
        return parse_shard(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--shard ")) from None


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("submissions", type=Path, metavar="SUBMISSIONS",
                        help="the class: a folder (or an LMS download's .zip)")  # fmt: skip
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for the results (outside SUBMISSIONS)")  # fmt: skip
    parser.add_argument("--course", type=Path, metavar="FILE",
                        help="course.toml: problems, points, due date, limits (see README)")  # fmt: skip
    parser.add_argument("--layout", default="auto",
                        choices=("auto", "plain", "canvas", "moodle", "gradescope"),
                        help=LAYOUT_HELP)  # fmt: skip
    parser.add_argument("--problems", nargs="+", metavar="SLUG",
                        help="grade only these problems (default: the course's, or all)")  # fmt: skip
    parser.add_argument("--student", action="append", metavar="NAME",
                        help="regrade only this student (by id or name; repeat for more)")  # fmt: skip
    parser.add_argument("--workers", type=number(int, 1, 256, "number of workers", "--workers 2"),
                        default=os.cpu_count() or 1,
                        help="trusted pytest runs at a time (default: number of cores)")  # fmt: skip
    parser.add_argument("--time-limit", metavar="S",
                        type=number(float, 0.01, 3600, "time limit in seconds", "--time-limit 10"),
                        help="seconds per call of a student function (default: problem.toml)")  # fmt: skip
    parser.add_argument("--submission-time-limit", metavar="S",
                        type=number(float, 0.01, 86400, "time limit in seconds",
                                    "--submission-time-limit 60"),
                        help="seconds for all calls of one submission (default: 6x time limit)")  # fmt: skip
    parser.add_argument("--memory-limit", metavar="MIB",
                        type=number(int, 128, 1 << 20, "memory limit in MiB", "--memory-limit 1024"),
                        help="memory per submission in MiB (default: 1024)")  # fmt: skip
    parser.add_argument("--shard", default=(1, 1), type=shard_option, metavar="K/N",
                        help="grade only the K-th of N slices of the class (join with merge)")  # fmt: skip
    parser.add_argument("--batch-size", metavar="N",
                        type=number(int, 1, 1000, "batch size", "--batch-size 25"),
                        help="students per trusted pytest run (default: chosen from class size)")  # fmt: skip
    parser.add_argument("--force", action="store_true",
                        help="regrade every student, changed or not")  # fmt: skip


def check_out(out: Path, submissions: Path) -> str | None:
    """Why --out cannot be used, or None."""
    if out.exists() and not out.is_dir():
        return f"--out {out} is a file: give a folder for the results (it is made if missing)"
    if submissions.is_dir() and out.resolve().is_relative_to(submissions.resolve()):
        return (f"--out {out} is inside the submissions folder {submissions}: its folders would "
                "be read as students next time. Put the results elsewhere, e.g. --out grades")  # fmt: skip
    return None


def pick_students(everyone: list, wanted: list[str]) -> tuple[list, list[str]]:
    """The submissions `wanted` names (by id, else by name), and the names matching none."""
    by_id = {s.student: s for s in everyone}
    by_name = {s.name.lower(): s for s in everyone if s.name}
    chosen, unknown = [], []
    for name in wanted:
        found = by_id.get(name) or by_name.get(name.lower())
        if found is None:
            close = difflib.get_close_matches(name, [*by_id, *(s.name for s in everyone if s.name)],
                                              n=3)  # fmt: skip
            unknown.append(f"{name!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
        elif found not in chosen:
            chosen.append(found)
    return chosen, unknown


def _summary(results: list[dict], course, failed: list[str], counts: dict, seconds: float) -> str:
    """The table per problem, then the counts; `failed` holds "<student>: <why>" lines."""
    lines = [f"{'problem':<24}{'graded':>8}{'full marks':>12}{'mean':>10}{'max':>8}"]
    for slug in course.slugs:
        scores = [r["extra_data"]["problems"].get(slug, {}) for r in results]
        scores = [(e["score"], e["max_score"]) for e in scores if e.get("graded")]
        full = sum(1 for got, most in scores if most and got == most)
        mean = sum(got for got, _ in scores) / len(scores) if scores else 0.0
        most = max((m for _, m in scores), default=0)
        lines.append(f"{slug:<24}{len(scores):>8}{full:>12}{mean:>10.2f}{most:>8g}")
    graded = counts["graded"]
    rate = graded / seconds if seconds > 0 else 0.0
    lines.append(
        f"{graded} graded in {seconds:.1f} s ({rate:.2f} students/s; {counts['new']} new, "
        f"{counts['changed']} changed), {counts['kept']} already graded and unchanged (use "
        f"--force or --student to regrade), {len(failed)} could not be graded"
    )
    if counts["rescored"]:
        lines.append(f"{counts['rescored']} rescored with the course's points or late policy")
    lines += [f"  NOT GRADED: {message.splitlines()[0]}" for message in failed]
    if failed:
        lines.append("  (the grader's failures, not the students': fix the cause and run the "
                     "same command again to grade them)")  # fmt: skip
    return "\n".join(lines)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _announce(plans: list) -> None:
    changed = [p for p in plans if p.problems and not p.new]
    new = sum(1 for p in plans if p.problems and p.new)
    if new:
        print(f"grading {_count(new, 'new student')}", file=sys.stderr)
    if changed:
        print(f"grading {_count(len(changed), 'student')} again, only what changed:",
              file=sys.stderr)  # fmt: skip
        for rerun in changed[:SHOWN_REASONS]:
            print(f"  {rerun.student}: {'; '.join(rerun.reasons)}", file=sys.stderr)
        if len(changed) > SHOWN_REASONS:
            print(f"  ... and {len(changed) - SHOWN_REASONS} more", file=sys.stderr)


@contextlib.contextmanager
def _stop_on_sigterm():
    """SIGTERM (a job scheduler's stop, `timeout`) stops the batch as Ctrl-C does: students
    already graded are saved, the pytest runs under way killed, the work folders removed."""

    def stop(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from grader import __version__
    from grader.batch import BatchOptions, grade_all, shard
    from grader.course import CourseError, course_for
    from grader.gradebook import write_gradebook
    from grader.layouts import LayoutError, read_download
    from grader.problems import ProblemSpecError, UnknownProblemError
    from grader.provenance import graded_from, plan, read_records
    from grader.reports import assemble, load_results, write_records, write_results
    from grader.sandbox.bwrap import sandbox_mode, sandbox_warning
    from grader.sandbox.submission import exposed_solutions, exposure_message

    problem = check_out(args.out, args.submissions)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        course = course_for(args.course, args.problems)
        course = course.with_limits(call_s=args.time_limit, total_s=args.submission_time_limit,
                                    memory_mb=args.memory_limit)  # fmt: skip
        limits = course.limits
        if limits.get("total_s", float("inf")) < limits.get("call_s", 0):
            raise CourseError("--submission-time-limit must be at least the time limit per call")
        download = read_download(args.submissions, list(course.problems), args.layout)
    except (CourseError, LayoutError, UnknownProblemError, ProblemSpecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for warning in download.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    k, n = args.shard
    mine = shard(download.submissions, k, n)
    if args.student:
        mine, unknown = pick_students(mine, args.student)
        if unknown:
            print(f"error: no student {', '.join(unknown)} in {args.submissions}"
                  + (f" (shard {k}/{n})" if n > 1 else ""), file=sys.stderr)  # fmt: skip
            return 2
    plans = plan(args.out, mine, list(course.problems), force=args.force or bool(args.student))
    todo = [p for p in plans if p.problems]
    warning = sandbox_warning()
    if warning:
        print(f"\n{'!' * 78}\n{warning}\n{'!' * 78}\n", file=sys.stderr)
    exposed = exposed_solutions(list(course.problems))
    if exposed:
        print(f"warning: {exposure_message(exposed, course.slugs)}", file=sys.stderr)
    print(f"{download.layout} layout: {len(download.submissions)} students; grading {len(todo)} "
          f"of {len(mine)} (shard {k}/{n}) on {', '.join(course.slugs)} with {args.workers} "
          "workers", file=sys.stderr)  # fmt: skip
    _announce(plans)

    args.out.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    graded: set[str] = set()
    by_student = {p.student: p.submission for p in plans}

    def save(student: str) -> bool:
        submission = by_student[student]
        # Only the records of the files handed in now, under the tests of now: a grade of an
        # earlier file (whose regrade failed or was stopped) is no grade of this one.
        records = {slug: record for slug, record in read_records(args.out / student).items()
                   if slug in course.slugs
                   and record["graded_from"] == graded_from(submission, course.problem(slug))}  # fmt: skip
        return write_results(args.out, student, assemble(records, course, submission, __version__))

    started = time.monotonic()
    interrupted = False
    groups: dict[tuple[str, ...], list] = {}
    for rerun in todo:
        groups.setdefault(tuple(p.slug for p in rerun.problems), []).append(rerun)
    with _stop_on_sigterm(), tqdm(total=len(todo), unit="student", file=sys.stderr,
                                  disable=not todo) as bar:  # fmt: skip

        def on_done(chunk: list) -> None:
            for item in chunk:
                if isinstance(item, str):  # nothing saved, so the next run tries again
                    failed.append(item)
                    bar.write(f"NOT GRADED: {item}", file=sys.stderr)
                    continue
                submission = by_student[item.student]
                stamps = {slug: graded_from(submission, course.problem(slug))
                          for slug in item.reports}  # fmt: skip
                write_records(args.out, item, submission, stamps)
                save(item.student)
                graded.add(item.student)
            bar.update(len(chunk))

        for slugs, reruns in groups.items():
            options = BatchOptions([course.problem(s) for s in slugs], args.workers,
                                   args.batch_size, dict(limits))  # fmt: skip
            try:
                grade_all([r.submission for r in reruns], options, sandbox_mode(), on_done)
            except KeyboardInterrupt:
                interrupted = True
                break
    for rerun in todo:  # not graded this time: their earlier grades of other files are void
        if rerun.student not in graded and (args.out / rerun.student).is_dir():
            save(rerun.student)
    elapsed = time.monotonic() - started
    kept = [p for p in plans if not p.problems]
    rescored = sum(1 for p in kept if save(p.student))
    gradebook = write_gradebook(args.out, course.slugs)
    everyone = load_results(args.out)
    counts = {"graded": len(graded), "kept": len(kept), "rescored": rescored,
              "new": sum(1 for p in todo if p.new and p.student in graded),
              "changed": sum(1 for p in todo if not p.new and p.student in graded)}  # fmt: skip
    print(_summary([everyone[p.student] for p in plans if p.student in everyone], course, failed,
                   counts, elapsed))  # fmt: skip
    print(f"gradebook: {gradebook}")
    if warning:
        print(warning, file=sys.stderr)
    if interrupted:
        print(f"interrupted: {len(graded)} of {len(todo)} students graded and saved. Run the "
              "same command again to grade the rest (saved students are skipped).",
              file=sys.stderr)  # fmt: skip
        return 130
    return 1 if failed else 0
