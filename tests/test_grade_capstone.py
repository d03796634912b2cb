"""The capstone graded by `grpo-kit grade`: a model, its optimizer and the test's reward
functions cross the sandbox, and the learning test judges the weights the child trained.

One batch grades the reference, the starter, catalogued mistakes and two attacks: one that
reports climbing rewards without training (and would use the capstone's own reference if the
sandbox let it read it), and one that calls the test's reward function with garbage and then
writes malformed callback frames.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grader.batch import split_report
from grader.mistakes import load_catalogue
from grader.problems import KIT_ROOT, get_problem

pytest.importorskip("torch")

SLUG = "grpo_trainer"
PROBLEM = get_problem(SLUG)
LEARNS = "test_grpo_step_learns_to_reverse_digits"
# Each fails a different part: scoring, rewards (a callback), a Rollout field set by the
# student, the scheduler's counters, and the weights an optimizer step leaves.
MISTAKES = ("no_temperature", "answers_tiled_not_repeated", "old_logps_never_kept",
            "forgets_the_scheduler", "no_gradient_clipping")  # fmt: skip

FAKE_REWARDS = '''

try:  # the capstone's own reference solution: the sandbox must keep it out of reach
    from reference.grpo_trainer import grpo_step as _answer
except ImportError:
    _answer = None
_STEPS = []


def grpo_step(policy, ref_model, optimizer, prompt_ids, answers, reward_fn, eos_ids, config,
              generator=None, scheduler=None, prompt_mask=None):
    """Reports rewards climbing 0.1, 0.2, ... on full batches, and never trains."""
    if _answer is not None:
        return _answer(policy, ref_model, optimizer, prompt_ids, answers, reward_fn, eos_ids,
                       config, generator, scheduler, prompt_mask)
    rollout = generate_rollout(policy, ref_model, prompt_ids, answers, reward_fn, eos_ids,
                               config, generator)
    if len(answers) == 32:
        _STEPS.append(1)
        rollout.rewards = torch.full_like(rollout.rewards, min(1.0, 0.1 * len(_STEPS)))
    return rollout, {"loss": 0.0, "grad_norm": 0.0, "logps": rollout.sampling_logps}
'''

GARBAGE_CALLBACKS = """
import fcntl
import os
import time

from grader.sandbox.protocol import write_frame

_generate_rollout = generate_rollout


def generate_rollout(policy, ref_model, prompt_ids, answers, reward_fn, *args, **kwargs):
    for junk in (("junk", None), (float("nan"),), ([[1, [2.0, {"x": b"\\0"}]]],), ()):
        try:
            reward_fn(*junk)
        except Exception:
            pass
    return _generate_rollout(policy, ref_model, prompt_ids, answers, reward_fn, *args, **kwargs)


def grpo_step(*args, **kwargs):
    for fd in range(3, 32):  # the protocol's pipe to the grader
        try:
            writes = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
        except OSError:
            continue
        if writes and os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
            write_frame(fd, {"callback": {"a": 1}, "args": {"__t": "ndarray"}, "kwargs": 3})
    time.sleep(60)
"""


def _sources() -> dict[str, str]:
    """student -> the grpo_trainer.py they hand in (the capstone's child sees reference/)."""
    reference = PROBLEM.reference.read_text(encoding="utf-8")
    mistakes = {m.id: m.source for m in load_catalogue(PROBLEM.dir)}
    found = {"reference": reference, "starter": (PROBLEM.dir / f"{SLUG}.py").read_text()}
    found |= {f"mistake_{name}": mistakes[name] for name in MISTAKES}
    return found | {"fake_rewards": reference + FAKE_REWARDS,
                    "garbage_callbacks": reference + GARBAGE_CALLBACKS}  # fmt: skip


def _run_locally(report) -> subprocess.Popen:
    """The catalogued mistakes run locally with --impl (beside the batch: it takes a while)."""
    command = [sys.executable, "-m", "pytest", str(PROBLEM.dir), "-q", "-p", "no:cacheprovider",
               "--json-report", f"--json-report-file={report}",
               *(f"--impl=mistake:{name}" for name in MISTAKES)]  # fmt: skip
    return subprocess.Popen(command, cwd=KIT_ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip


def _local_verdicts(report) -> dict[str, set[str]]:
    """student -> the tests that mistake passes locally."""
    specs = [f"mistake:{name}" for name in MISTAKES]
    split = split_report(json.loads(report.read_text()), specs)
    return {f"mistake_{spec.split(':')[1]}": _names(split[spec][SLUG], "outcome") for spec in specs}


def _names(tests: list[dict], key: str, value: str = "passed") -> set[str]:
    return {t.get("nodeid", t.get("name", "")).split("::", 1)[-1].split(": ", 1)[-1]
            for t in tests if t[key] == value}  # fmt: skip


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("capstone")
    for student, source in _sources().items():
        (root / "class" / student).mkdir(parents=True)
        (root / "class" / student / f"{SLUG}.py").write_text(source, encoding="utf-8")
    local = _run_locally(root / "local.json")
    command = [sys.executable, "-m", "grader.cli", "grade", str(root / "class"), "--out",
               str(root / "out"), "--problems", SLUG, "--workers", "2"]  # fmt: skip
    try:
        run = subprocess.run(command, cwd=KIT_ROOT, capture_output=True, text=True, timeout=1200)
        local.wait(timeout=900)
    finally:
        local.kill()
    assert run.returncode == 0, run.stderr[-3000:]
    results = {student: json.loads((root / "out" / student / "results.json").read_text())
               for student in _sources()}  # fmt: skip
    return results, _local_verdicts(root / "local.json")


def _tests(results: dict) -> dict[str, dict]:
    return {t["name"].split(": ", 1)[1]: t for t in results["tests"]}


def test_the_reference_passes_every_hidden_test(graded):
    results, _ = graded
    tests = _tests(results["reference"])
    assert len(tests) >= 20 and all(t["status"] == "passed" for t in tests.values()), [
        (name, t["output"][:300]) for name, t in tests.items() if t["status"] != "passed"
    ]
    assert results["reference"]["score"] == sum(t["max_score"] for t in tests.values())


def test_the_starter_fails_every_test(graded):
    results, _ = graded
    tests = _tests(results["starter"])
    assert tests and all(t["status"] == "failed" for t in tests.values())
    assert results["starter"]["score"] == 0


@pytest.mark.parametrize("mistake", MISTAKES)
def test_catalogued_mistakes_get_their_local_verdicts(graded, mistake):
    results, local = graded
    student = f"mistake_{mistake}"
    passed = _names(results[student]["tests"], "status")
    assert passed == local[student]
    assert len(passed) < len(results[student]["tests"]), "a mistake must fail some test"


def test_rewards_reported_without_training_earn_nothing(graded):
    results, _ = graded
    learning = _tests(results["fake_rewards"])[LEARNS]
    assert learning["status"] == "failed" and learning["score"] == 0
    # The rewards it reported passed the first check: the weights the test judged did not.
    assert "greedy completions score only 0.000" in learning["output"], learning["output"]


def test_garbage_callbacks_fail_that_student_alone(graded):
    results, _ = graded
    tests = _tests(results["garbage_callbacks"])
    assert tests["test_rollout_has_a_group_per_prompt_in_order"]["status"] == "passed"
    for name in (LEARNS, "test_grpo_step_returns_the_rollout_and_changes_the_policy"):
        assert tests[name]["status"] == "failed"
        assert "sent malformed data" in tests[name]["output"], tests[name]["output"]
