"""`grpo-kit export gradescope OUT.zip`: an autograder that grades the course on Gradescope."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HELP = "build a Gradescope autograder (setup.sh, run_autograder) that grades the course there"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", choices=("gradescope",), help="where the course is graded")
    parser.add_argument("out", type=Path, metavar="OUT.zip", help="the autograder zip to write")
    parser.add_argument("--course", type=Path, metavar="FILE",
                        help="course.toml (default: every problem, problem.toml's points)")  # fmt: skip
    parser.add_argument("--problems", nargs="+", metavar="SLUG",
                        help="only these problems of the course")  # fmt: skip
    parser.add_argument("--allow-exposed-solutions", action="store_true",
                        help="export even when a problem's sandbox shows the reference solution "
                        "of another problem of the course (the capstone's)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from grader.course import CourseError, course_for
    from grader.gradescope import build_autograder, needs_torch
    from grader.problems import ProblemSpecError, UnknownProblemError
    from grader.sandbox.submission import exposed_solutions, exposure_message

    if args.out.is_dir():
        print(f"error: {args.out} is a folder: give the zip to write, e.g. autograder.zip",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.out.suffix != ".zip":
        print(f"error: {args.out}: Gradescope takes a .zip: name it e.g. autograder.zip",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        course = course_for(args.course, args.problems)
        exposed = exposed_solutions(list(course.problems))
        if exposed and not args.allow_exposed_solutions:
            print(f"error: {exposure_message(exposed, course.slugs)} (or pass "
                  "--allow-exposed-solutions)", file=sys.stderr)  # fmt: skip
            return 2
        names = build_autograder(course, args.out)
    except (CourseError, UnknownProblemError, ProblemSpecError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write {args.out}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {len(names)} files, problems {', '.join(course.slugs)}")
    print("On Gradescope: a Programming Assignment > Configure Autograder > Zip file upload; "
          "base image Ubuntu 22.04 or later." + (" The image installs PyTorch (CPU): allow a "
                                                 "few minutes to build." if needs_torch(course)
                                                 else ""))  # fmt: skip
    return 0
