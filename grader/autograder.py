"""Grade one Gradescope submission: what ``run_autograder`` runs inside Gradescope's container.

    python -I -m grader.autograder --course C --submission DIR --metadata FILE --results FILE

The submission folder is read like one student's folder in ``grpo-kit grade`` (problem files
at any depth, near-miss names matched with a note, zips opened), graded by the same batch code
with the same hidden tests and sandbox, and scored with the course file's points and late
policy, the submission time taken from Gradescope's ``submission_metadata.json``. The results
go to RESULTS in Gradescope's format; stdout, which only instructors see, says how it went.
When the grader itself cannot grade (the sandbox did not start), nothing is written and the
exit status is 1: Gradescope then shows that the autograder failed, never a wrong score.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from pathlib import Path


def _identity(metadata: Path) -> dict:
    """Who submitted, and when, from submission_metadata.json (empty when absent)."""
    try:
        data = json.loads(metadata.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    users = data.get("users") or [{}]
    first = users[0] if isinstance(users[0], dict) else {}
    identity = {"name": str(first.get("name") or ""), "email": str(first.get("email") or ""),
                "sid": str(first.get("sid") or "")}  # fmt: skip
    try:
        when = datetime.fromisoformat(str(data.get("created_at")))
        identity["submitted_at"] = when if when.tzinfo else None
    except ValueError:
        pass
    return identity


def grade(course, folder: Path, identity: dict) -> dict | str:
    """The results of one submission, or why it could not be graded."""
    from grader import __version__
    from grader.batch import BatchOptions, grade_all
    from grader.reports import assemble
    from grader.sandbox.bwrap import sandbox_mode
    from grader.submissions import Intake, from_folder

    problems = list(course.problems)
    if folder.is_dir():
        submission = from_folder(folder, problems, "submission", layout="gradescope", **identity)
    else:
        submission = Intake("submission", problems, layout="gradescope", **identity).finish()
    done: list = []
    options = BatchOptions(problems, 1, 1, dict(course.limits))
    grade_all([submission], options, sandbox_mode(), done.extend)
    (result,) = done
    if isinstance(result, str):
        return result
    records = {slug: report | {"submitted": submission.submitted(slug)}
               for slug, report in result.reports.items()}  # fmt: skip
    return assemble(records, course, submission, __version__)


def main(argv: list[str] | None = None) -> int:
    from grader.course import CourseError, load_course
    from grader.gradescope import check_results
    from grader.reports import write_atomically
    from grader.sandbox.bwrap import sandbox_mode, sandbox_warning

    parser = argparse.ArgumentParser(prog="python -m grader.autograder", description=__doc__)
    parser.add_argument("--course", type=Path, required=True)
    parser.add_argument("--submission", type=Path, default=Path("/autograder/submission"))
    parser.add_argument("--metadata", type=Path,
                        default=Path("/autograder/submission_metadata.json"))  # fmt: skip
    parser.add_argument("--results", type=Path,
                        default=Path("/autograder/results/results.json"))  # fmt: skip
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        course = load_course(args.course)
    except CourseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"grpo-kit autograder: {course.title}; problems {', '.join(course.slugs)}; "
          f"sandbox: {sandbox_mode()}")  # fmt: skip
    warning = sandbox_warning()
    if warning:
        print(warning)
    outcome = grade(course, args.submission, _identity(args.metadata))
    if isinstance(outcome, str):
        print(f"NOT GRADED: {outcome}\nThis is the grader's failure, not the student's: fix the "
              "cause and regrade the submission.")  # fmt: skip
        return 1
    outcome["execution_time"] = round(time.monotonic() - started)
    problems = check_results(outcome)
    if problems:  # a bug of the kit's: say so rather than upload what Gradescope would refuse
        print("the results break Gradescope's format:\n  " + "\n  ".join(problems))
        return 1
    args.results.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(args.results, json.dumps(outcome, indent=1))
    for slug, entry in outcome["extra_data"]["problems"].items():
        print(f"  {slug:<24}{entry['score']:>8g} / {entry['max_score']:g}")
    print(f"score {outcome['score']:g} in {outcome['execution_time']} s -> {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
