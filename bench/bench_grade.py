"""Benchmark: batch grading against the naive one-pytest-per-student-and-problem baseline.

Generates a class (correct, wrong and crashing submissions of the three core problems), grades
it with `grpo-kit grade` (sandbox on), then grades a sample of the same students the naive
way: one fresh ``pytest --json-report`` process per student and problem, as many at a time as
the grader has workers. Prints students per second for each and two ratios:

- fair: the baseline gets the same cheap pytest options as the grader (plugins it does not
  need left out), so the ratio measures the batching and the fork server alone;
- literal: the baseline is plain ``pytest --json-report``, as a course would run it.

Then the cost of a torch problem (grpo_loss_torch) per student in a class, and the wall time
of grading one capstone submission alone (what an instructor waits for one late student).

    python bench/bench_grade.py                  # 200 students
    python bench/bench_grade.py --students 40    # a quick run
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from grader.batch import PYTEST_SPEEDUPS
from grader.mistakes import load_catalogue
from grader.problems import KIT_ROOT, get_problem
from grader.sandbox.bwrap import sandbox_mode
from grader.submissions import standalone_source

CORE = ("grpo_objective", "group_advantages", "masked_token_loss")
CRASHES = (
    "import not_a_real_module\n",
    "def {name}(*args, **kwargs):\n    return 1 / 0\n",
    "def {name}(*args, **kwargs)\n    pass\n",
)


def generate_class(root: Path, students: int, seed: int = 0) -> dict[str, int]:
    """Write the class; returns how many submissions of each kind it holds."""
    rng = random.Random(seed)
    kinds = {"correct": 0, "wrong": 0, "crashing": 0}
    for slug in CORE:
        problem = get_problem(slug)
        reference = standalone_source(problem.reference.read_text(encoding="utf-8"))
        mistakes = [standalone_source(m.source) for m in load_catalogue(problem.dir)]
        for i in range(students):
            kind = rng.choices(list(kinds), weights=(5, 3, 2))[0]
            if kind == "wrong" and not mistakes:
                kind = "correct"
            if kind == "correct":
                source = reference
            elif kind == "wrong":
                source = rng.choice(mistakes)
            else:
                source = rng.choice(CRASHES).format(name=problem.implement[0])
            folder = root / f"student{i:04d}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{slug}.py").write_text(source, encoding="utf-8")
            kinds[kind] += 1
    return kinds


def time_grader(submissions: Path, out: Path, workers: int, problems=CORE, show=True) -> float:
    command = [sys.executable, "-m", "grader.cli", "grade", str(submissions), "--out", str(out),
               "--problems", *problems, "--workers", str(workers)]  # fmt: skip
    started = time.perf_counter()
    run = subprocess.run(command, cwd=KIT_ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if run.returncode != 0:
        sys.exit(f"grading failed:\n{run.stdout}\n{run.stderr[-3000:]}")
    if show:
        print(run.stdout.strip())
    return elapsed


def reference_class(root: Path, slug: str, students: int) -> Path:
    """`students` copies of the reference of `slug`, as students would hand it in."""
    problem = get_problem(slug)
    source = standalone_source(problem.reference.read_text(encoding="utf-8"), problem.builds_on)
    for i in range(students):
        folder = root / f"student{i:04d}"
        folder.mkdir(parents=True)
        (folder / f"{slug}.py").write_text(source, encoding="utf-8")
    return root


def _naive_one(submission: Path, slug: str, report: Path, extra: list[str]) -> None:
    command = [sys.executable, "-m", "pytest", str(get_problem(slug).dir), "-q", "-p",
               "no:cacheprovider", f"--impl={submission}", "--json-report",
               f"--json-report-file={report}", *extra]  # fmt: skip
    subprocess.run(command, cwd=KIT_ROOT, capture_output=True)


def time_naive(submissions: Path, reports: Path, students: list[str], workers: int,
               extra: list[str]) -> float:  # fmt: skip
    reports.mkdir()
    jobs = [(submissions / s / f"{slug}.py", slug, reports / f"{s}-{slug}.json", extra)
            for s in students for slug in CORE]  # fmt: skip
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(lambda job: _naive_one(*job), jobs))
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=200)
    parser.add_argument(
        "--baseline-students",
        type=int,
        default=40,
        help="students graded the naive way (its rate does not depend on N)",
    )
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--torch-students", type=int, default=20)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-grade-") as work:
        work = Path(work)
        kinds = generate_class(work / "class", args.students)
        print(f"class: {args.students} students x {len(CORE)} problems {kinds}; "
              f"sandbox: {sandbox_mode()}; workers: {args.workers}")  # fmt: skip
        grader_s = time_grader(work / "class", work / "out", args.workers)
        sample = sorted(p.name for p in (work / "class").iterdir())[: args.baseline_students]
        baselines = {
            "fair": (list(PYTEST_SPEEDUPS), "with the grader's pytest options"),
            "literal": ([], "plain"),
        }
        naive_s = {name: time_naive(work / "class", work / name, sample, args.workers, extra)
                   for name, (extra, _) in baselines.items()}  # fmt: skip
        torch_class = reference_class(work / "torch", "grpo_loss_torch", args.torch_students)
        torch_s = time_grader(torch_class, work / "torch-out", args.workers,
                              ("grpo_loss_torch",), show=False)  # fmt: skip
        capstone = reference_class(work / "capstone", "grpo_trainer", 1)
        capstone_s = time_grader(capstone, work / "capstone-out", 1, ("grpo_trainer",), False)
    grader_rate = args.students / grader_s
    print(f"load average: {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end "
          f"({os.cpu_count()} cores)")  # fmt: skip
    print(f"grader       : {args.students} students in {grader_s:6.1f} s = "
          f"{grader_rate:.2f} students/s")  # fmt: skip
    rates = {name: len(sample) / seconds for name, seconds in naive_s.items()}
    for name, rate in rates.items():
        print(f"naive {name:<7}: {len(sample)} students in {naive_s[name]:6.1f} s = "
              f"{rate:.2f} students/s (one pytest --json-report process per student and "
              f"problem, {baselines[name][1]})")  # fmt: skip
    for name, rate in rates.items():
        print(f"ratio {name:<7}: {grader_rate / rate:.2f}x")
    print(
        f"torch problem: {args.torch_students} students of grpo_loss_torch in {torch_s:.1f} s "
        f"= {torch_s / args.torch_students:.2f} s per student ({args.workers} workers)"
    )
    print(f"capstone     : one grpo_trainer submission graded in {capstone_s:.1f} s "
          "(grpo-kit grade from start to end, one worker)")  # fmt: skip


if __name__ == "__main__":
    main()
