"""`grpo-kit release OUT`: the student bundle of a course, without any solution."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "write the bundle students get: statements, starters, tests, local runner and site"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", type=Path, metavar="OUT", help="a new folder for the bundle")
    parser.add_argument("--course", type=Path, metavar="FILE",
                        help="course.toml (default: every problem)")  # fmt: skip
    parser.add_argument("--problems", nargs="+", metavar="SLUG",
                        help="only these problems of the course")  # fmt: skip
    parser.add_argument("--tests", choices=("full", "names"), default="full",
                        help="hand out the hidden tests (full, the default) or only their names")  # fmt: skip
    parser.add_argument("--no-site", action="store_true",
                        help="leave out the browser site (it needs Node.js to build)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from grader.course import CourseError, course_for
    from grader.problems import ProblemSpecError, UnknownProblemError
    from grader.release import ReleaseError, write_release

    try:
        course = course_for(args.course, args.problems)
        files = write_release(course, args.out, args.tests, not args.no_site)
    except (CourseError, ReleaseError, UnknownProblemError, ProblemSpecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(files)} files to {args.out} for {', '.join(course.slugs)}; checked: no "
          "reference solution and no mistake catalogue of these problems is in it")  # fmt: skip
    if args.tests == "names" and not args.no_site:
        print("(no site: it would ship the tests)")
    return 0
