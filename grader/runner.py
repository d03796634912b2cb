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
    name: str  # test function name with its parameters, without the [impl] part
    impl: str  # the --impl spec the test ran against
    outcome: str  # "passed", "failed", "error" or "skipped"
    message: str  # one line saying why it failed; empty when it passed
    duration_s: float


def _impl_of(nodeid: str, impls: list[str]) -> tuple[str, str]:
    """Split 'file::test[params-impl]' into (test name with its own params, impl)."""
    name = nodeid.split("::", 1)[-1]
    if len(impls) == 1:
        return name, impls[0]
    base, _, params = name.partition("[")
    params = params[:-1]
    for spec in sorted(impls, key=len, reverse=True):  # the impl id comes first: test[spec-own]
        if params == spec:
            return base, spec
        if params.startswith(spec + "-"):
            return f"{base}[{params[len(spec) + 1 :]}]", spec
    return name, "?"


def _message(test: dict) -> str:
    for stage in ("setup", "call", "teardown"):
        info = test.get(stage, {})
        if info.get("outcome") in ("failed", "error") or "crash" in info:
            crash = info.get("crash") or {}
            text = crash.get("message") or info.get("longrepr") or ""
            return text.strip()
    return ""


def parse_report(report: dict, impls: list[str]) -> list[TestOutcome]:
    outcomes = []
    for test in report.get("tests", []):
        name, spec = _impl_of(test["nodeid"], impls)
        duration = sum(test.get(s, {}).get("duration", 0.0) for s in ("setup", "call", "teardown"))
        outcome = test["outcome"]
        if outcome == "failed" and test.get("setup", {}).get("outcome") == "failed":
            outcome = "error"
        message = "" if outcome == "passed" else _message(test)
        outcomes.append(TestOutcome(name, spec, outcome, message, duration))
    return outcomes


def run_tests(
    problem: Problem,
    impls: list[str],
    *,
    timeout_s: float | None = None,
    extra_args: list[str] | None = None,
) -> list[TestOutcome]:
    """Run every hidden test of `problem` once per implementation spec, in one pytest process."""
    with tempfile.TemporaryDirectory(prefix="grpo-kit-") as tmp:
        report_path = Path(tmp) / "report.json"
        command = [
            sys.executable, "-m", "pytest", str(problem.dir),
            "-p", "no:cacheprovider", "-q", "--no-header",
            "--json-report", f"--json-report-file={report_path}",
            *(f"--impl={spec}" for spec in impls),
            *(extra_args or []),
        ]  # fmt: skip
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        completed = subprocess.run(
            command, cwd=KIT_ROOT, capture_output=True, text=True, timeout=timeout_s, env=env
        )
        if not report_path.exists():
            raise RuntimeError(
                f"pytest produced no report for {problem.slug} (exit code {completed.returncode}):\n"
                f"{completed.stdout[-2000:]}{completed.stderr[-2000:]}"
            )
        report = json.loads(report_path.read_text(encoding="utf-8"))
    if report.get("exitcode", 0) not in (0, 1):  # 2+ is an internal or usage error
        raise RuntimeError(f"pytest failed to run {problem.slug}:\n{completed.stdout[-3000:]}")
    return parse_report(report, impls)
