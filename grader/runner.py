"""Run a problem's hidden tests in a fresh pytest process and collect per-test outcomes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.problems import KIT_ROOT, Problem


@dataclass(frozen=True)
class TestOutcome:
    name: str  # test function name with its parameters, without the implementation's
    impl: str  # the --impl spec the test ran against
    outcome: str  # "passed", "failed", "error", "skipped" or "notrun"
    message: str  # one line saying why it failed; empty when it passed
    duration_s: float


def test_name(entry: dict, impls: list[str]) -> str:
    """'test[own-params]' from a collected test, its implementation parameter removed."""
    function, _, params = entry["name"].partition("[")
    params = params.removesuffix("]")
    if len(impls) > 1 and entry.get("impl") is not None:
        params = params.removeprefix(str(entry["impl"])).removeprefix("-")
    return f"{function}[{params}]" if params else function


def parse_collected(collected: dict, impls: list[str]) -> list[TestOutcome]:
    """The outcomes in a `grader.collect` report."""
    return [
        TestOutcome(test_name(entry, impls), entry.get("impl") or impls[0], entry["outcome"],
                    "" if entry["outcome"] == "passed" else entry["message"], entry["duration"])
        for entry in collected["tests"]
    ]  # fmt: skip


def run_tests(
    problem: Problem,
    impls: list[str],
    *,
    timeout_s: float | None = None,
    extra_args: list[str] | None = None,
    root: Path | None = None,
) -> list[TestOutcome]:
    """Run every hidden test of `problem` once per implementation spec, in one pytest process.

    `root` is the kit the problem belongs to (default: this one; another for a course's own
    problems, see ``grpo-kit new --root``).
    """
    with tempfile.TemporaryDirectory(prefix="grpo-kit-") as tmp:
        report_path = Path(tmp) / "collected.json"
        command = [
            sys.executable, "-m", "pytest", str(problem.dir),
            "-p", "no:cacheprovider", "-q", "--no-header", "-p", "grader.collect",
            f"--collect-file={report_path}",
            *(f"--impl={spec}" for spec in impls),
            *([f"--rootdir={root}", f"--confcutdir={root}"] if root else []),
            *(extra_args or []),
        ]  # fmt: skip
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        completed = subprocess.run(
            command,
            cwd=root or KIT_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
        )
        if not report_path.exists():
            raise RuntimeError(
                f"pytest produced no report for {problem.slug} (exit code {completed.returncode}):\n"
                f"{completed.stdout[-2000:]}{completed.stderr[-2000:]}"
            )
        collected = json.loads(report_path.read_text(encoding="utf-8"))
    if collected.get("exit_code") not in (0, 1) or collected.get("errors"):
        raise RuntimeError(f"pytest failed to run {problem.slug}:\n{completed.stdout[-3000:]}")
    return parse_collected(collected, impls)
