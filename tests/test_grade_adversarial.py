"""The adversarial suite: every attack in tests/adversarial/ graded in one batch with honest work.

Each student must get exactly the points it deserves. The attacks deserve nothing, except the
few that return a (wrong) value: those earn the tests that accept any value of that kind.

Without a working sandbox (bubblewrap missing, or unable to start one here) the attacks that
would harm this machine are not run at all, and those that only the sandbox stops are not
judged: the grader says loudly that it ran unsandboxed, and the suite skips them saying why.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from grader.problems import KIT_ROOT, get_problem
from grader.sandbox.launch import NO_BWRAP_ENV, SANDBOX_UID_BASE, bwrap_command

ATTACKS = Path(__file__).parent / "adversarial"
SLUG = "grpo_objective"
PROBLEM = get_problem(SLUG)
REFERENCE = PROBLEM.reference
# Tests of grpo_objective that any returned float passes, or any value at all.
ANY_FLOAT = {"test_returns_a_python_float"}
ANY_VALUE = {"test_does_not_modify_its_inputs"}
# (patch_numpy_builtins would deserve ANY_FLOAT | ANY_VALUE for its NaN, but patching builtins
# breaks its own process: it crashes and earns nothing.)
DESERVED_TESTS = {"nan_result": ANY_FLOAT | ANY_VALUE, "broadcasting_array": ANY_VALUE}
SHIPPED_EXTRAS = {
    "conftest.py": "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n",
    "pytest.ini": "[pytest]\naddopts = -p no:python\n",
    "sitecustomize.py": "import builtins\nbuiltins.isinstance = lambda *a: True\n",
}
# Unsandboxed, these harm the machine the suite runs on, so they run only in the sandbox.
UNSAFE_UNSANDBOXED = {
    "write_outside": "overwrite test, report and results files all over the disk",
    "kill_the_grader": "kill every process it may signal (all of them, as root)",
    "atexit_hook": "rewrite every JSON file under /tmp",
    "fork_bomb": "fork thousands of processes",
    "leftover_processes": "leave a daemon running for ten minutes",
}
# Harmless unsandboxed, but then they find the answer: only the sandbox earns them their zero.
NEED_THE_SANDBOX = {
    "read_hidden_tests": "read the reference solution from disk",
    "network_access": "download the reference solution",
}


def _sandbox_problem() -> str | None:
    """Why submissions would run unsandboxed here, or None. bwrap_command probes once."""
    if os.environ.get(NO_BWRAP_ENV) == "1":
        return f"bubblewrap is turned off ({NO_BWRAP_ENV}=1)"
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed"
    if bwrap_command() is None:
        return "bwrap is installed but cannot start a sandbox here"
    return None


SANDBOX_PROBLEM = _sandbox_problem()


def _points(names) -> int:
    return sum(PROBLEM.points_for(name) for name in names)


def _attacks() -> list[Path]:
    attacks = sorted(ATTACKS.glob("*.py"))
    return [a for a in attacks if SANDBOX_PROBLEM is None or a.stem not in UNSAFE_UNSANDBOXED]


def _judged(name: str):
    """The attack as a test parameter, skipped with the reason when it cannot be judged here."""
    why = UNSAFE_UNSANDBOXED.get(name) or NEED_THE_SANDBOX.get(name)
    if SANDBOX_PROBLEM is None or why is None:
        return name
    ran = "not run" if name in UNSAFE_UNSANDBOXED else "not judged"
    reason = f"{ran}: {SANDBOX_PROBLEM}, and unsandboxed it would {why}"
    return pytest.param(name, marks=pytest.mark.skip(reason=reason))


class _AnswerServer:
    """A localhost server that hands the reference solution to whoever connects."""

    def __init__(self):
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.connections = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.connections += 1
            with connection:
                connection.sendall(REFERENCE.read_bytes())


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sandbox_processes() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and entry.stat().st_uid >= SANDBOX_UID_BASE:
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def grade(submissions: Path, out: Path, *extra: str, env: dict | None = None):
    command = [sys.executable, "-m", "grader.cli", "grade", str(submissions), "--out", str(out)]
    command += ["--problems", SLUG, "--time-limit", "3", "--memory-limit", "256", *extra]
    return subprocess.run(command, cwd=KIT_ROOT, capture_output=True, text=True, timeout=600,
                          env=env)  # fmt: skip


def gradebook(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "gradebook.csv", newline="") as file:
        return {row["student"]: row for row in csv.DictReader(file)}


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("adversarial")
    submissions = root / "submissions"
    server = _AnswerServer()
    for attack in _attacks():
        folder = submissions / attack.stem
        folder.mkdir(parents=True)
        source = attack.read_text().replace("PORT = 0 ", f"PORT = {server.port} ")
        (folder / f"{SLUG}.py").write_text(source)
    shipped = submissions / "shipped_config"
    shipped.mkdir()
    (shipped / f"{SLUG}.py").write_text("def grpo_objective(*a, **k):\n    raise RuntimeError\n")
    for name, text in SHIPPED_EXTRAS.items():
        (shipped / name).write_text(text)
    for honest in ("honest_a", "honest_z"):  # graded among the attacks, in the same chunks
        (submissions / honest).mkdir()
        shutil.copy(REFERENCE, submissions / honest / f"{SLUG}.py")
    with zipfile.ZipFile(submissions / "honest_zip.zip", "w") as archive:
        archive.write(REFERENCE, f"honest_zip/{SLUG}.py")
    protected = [PROBLEM.test_files[0], REFERENCE]
    before = {path: _digest(path) for path in protected}
    out = root / "out"
    # Sandboxed children of this very pytest process (earlier tests' warm ones) are not the
    # batch's: only processes that appear during the batch may not outlive it.
    sandboxed_before = set(_sandbox_processes())
    run = grade(submissions, out, "--workers", "2")
    after = {path: _digest(path) for path in protected}
    return dict(out=out, run=run, server=server, changed=[p for p in protected if
                before[p] != after[p]], students=sorted(p.name for p in submissions.iterdir()),
                sandboxed_before=sandboxed_before)  # fmt: skip


def test_the_batch_completes(batch):
    assert batch["run"].returncode == 0, batch["run"].stderr[-3000:]


def test_every_student_has_a_result(batch):
    expected = {Path(name).stem for name in batch["students"]}
    assert set(gradebook(batch["out"])) == expected
    for student in expected:
        results = json.loads((batch["out"] / student / "results.json").read_text())
        assert results["tests"], student
        assert (batch["out"] / student / f"{SLUG}.pytest.json").is_file()


def test_honest_students_get_full_marks(batch):
    book = gradebook(batch["out"])
    maximum = book["honest_a"]["max"]
    assert int(maximum) == _points(_test_names(batch["out"]))
    for honest in ("honest_a", "honest_z", "honest_zip"):
        assert book[honest]["total"] == maximum, honest


@pytest.mark.parametrize(
    "attack", [_judged(a.stem) for a in sorted(ATTACKS.glob("*.py"))] + ["shipped_config"]
)
def test_attack_gets_exactly_what_it_deserves(batch, attack):
    row = gradebook(batch["out"])[attack]
    results = json.loads((batch["out"] / attack / "results.json").read_text())
    passed = {t["name"].split(": ", 1)[1] for t in results["tests"] if t["status"] == "passed"}
    deserved = DESERVED_TESTS.get(attack, set())
    assert passed == deserved, results["tests"][0]["output"]
    assert float(row["total"]) == _points(deserved)
    assert row["max"] == gradebook(batch["out"])["honest_a"]["max"]


def test_hidden_tests_and_reference_are_untouched(batch):
    assert batch["changed"] == []


def test_network_is_unreachable(batch):
    if SANDBOX_PROBLEM:
        pytest.skip(f"{SANDBOX_PROBLEM}: unsandboxed the network is not cut off")
    assert batch["server"].connections == 0


def test_no_sandboxed_process_outlives_the_batch(batch):
    if SANDBOX_PROBLEM:
        pytest.skip(f"{SANDBOX_PROBLEM}: unsandboxed a detached daemon can escape")
    assert set(_sandbox_processes()) - batch["sandboxed_before"] == set()


@pytest.mark.parametrize(
    ("attack", "status"),
    [
        ("infinite_loop", "timed out after 3 s"),
        ("long_sleep", "timed out after 3 s"),
        ("catch_interrupts", "timed out after 3 s"),
        ("memory_bomb", "memory limit exceeded"),
        ("exit_at_import", "raised SystemExit while being imported"),
        ("os_exit_in_function", "exited with status 0"),
        ("keyboard_interrupt", "raised KeyboardInterrupt"),
        ("pytest_skip", "raised Skipped"),
        ("lying_eq", "cannot cross the sandbox"),
    ],
)
def test_failures_are_explained_to_the_student(batch, attack, status):
    results = json.loads((batch["out"] / attack / "results.json").read_text())
    assert status in results["tests"][0]["output"]


def test_shipped_config_files_are_ignored_and_reported(batch):
    results = json.loads((batch["out"] / "shipped_config" / "results.json").read_text())
    for name in SHIPPED_EXTRAS:
        assert name in results["output"]


def _test_names(out: Path) -> list[str]:
    results = json.loads((out / "honest_a" / "results.json").read_text())
    return [t["name"].split(": ", 1)[1] for t in results["tests"]]


def test_without_bubblewrap_the_report_says_so_loudly(tmp_path):
    submissions = tmp_path / "submissions"
    for name, source in {
        "honest": REFERENCE.read_text(),
        "exits": "import os\nos._exit(0)\n",
        "loops": "def grpo_objective(*a, **k):\n    while True:\n        pass\n",
    }.items():
        (submissions / name).mkdir(parents=True)
        (submissions / name / f"{SLUG}.py").write_text(source)
    run = grade(submissions, tmp_path / "out", env=dict(os.environ, GRPO_KIT_NO_BWRAP="1"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert "WARNING: bubblewrap is not available" in run.stderr
    book = gradebook(tmp_path / "out")
    assert book["honest"]["total"] == book["honest"]["max"] != "0"
    assert book["exits"]["total"] == book["loops"]["total"] == "0"
    results = json.loads((tmp_path / "out" / "honest" / "results.json").read_text())
    assert "rlimits only" in results["output"]
