"""The capstone graded by `grpo-kit grade`: its probes run beside the student's code in the
sandbox, and the tests judge what they return with their own computations.

One batch grades the reference, the starter, a few catalogued mistakes and four attacks on
the probes' claims: a step that reports climbing rewards without training (and would use the
capstone's own reference if the sandbox let it read it), a step that trains on the known
answers while calling the reward function as GRPO would, and one that rewrites the probes'
records in its own process. None may earn the learning test or the whole-step test. A fourth
takes a step too many and edits the optimizer and scheduler it was handed to hide it.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from grader.mistakes import load_catalogue
from grader.problems import KIT_ROOT, get_problem
from grader.submissions import standalone_source

pytest.importorskip("torch")

SLUG = "grpo_trainer"
PROBLEM = get_problem(SLUG)
LEARNS = "test_grpo_step_learns_to_reverse_digits"
WHOLE_STEP = "test_grpo_step_samples_scores_and_updates_as_grpo_does"
MISTAKES = ("scheduler_stepped_per_micro_batch", "old_logps_from_the_sampler",
            "supervised_on_the_answers")  # fmt: skip

FAKE_REWARDS = '''

import importlib

try:  # the capstone's own reference, by a name no source check sees: the sandbox hides it
    _answer = importlib.import_module("reference." + "grpo_trainer").grpo_step
except ImportError:
    _answer = None
_STEPS = []


def grpo_step(policy, ref_model, optimizer, prompt_ids, answers, reward_fn, eos_ids, config,
              generator=None, scheduler=None, prompt_mask=None):
    """Reports rewards climbing 0.1, 0.2, ... and never trains."""
    if _answer is not None:
        return _answer(policy, ref_model, optimizer, prompt_ids, answers, reward_fn, eos_ids,
                       config, generator, scheduler, prompt_mask)
    rollout = generate_rollout(policy, ref_model, prompt_ids, answers, reward_fn, eos_ids,
                               config, generator)
    _STEPS.append(1)
    rollout.rewards = torch.full_like(rollout.rewards, min(1.0, 0.1 * len(_STEPS)))
    return rollout, {"loss": 0.0, "grad_norm": 0.0, "logps": rollout.sampling_logps}
'''

# Rewrites whatever the probes record in this process: every reward call and optimizer step
# reported as a GRPO step would report them, while training on the answers.
FORGE_RECORDS = """

import sys as _sys


def grpo_step(policy, ref_model, optimizer, prompt_ids, answers, reward_fn, eos_ids, config,
              generator=None, scheduler=None, prompt_mask=None):
    rollout = generate_rollout(policy, ref_model, prompt_ids, answers, reward_fn, eos_ids,
                               config, generator)
    for module in list(_sys.modules.values()):
        for name in ("records", "calls", "steps"):
            value = getattr(module, name, None)
            if isinstance(value, list):
                value.clear()
    targets = torch.tensor([[int(c) for c in str(a)] for a in answers])
    logits = policy(prompt_ids).logits[:, -1]
    loss = torch.nn.functional.cross_entropy(logits, targets[:, 0] % logits.shape[-1])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return rollout, {"loss": float(loss), "grad_norm": 1.0, "logps": rollout.sampling_logps}
"""

# One optimizer step and one scheduler step too many, each hidden by editing what the probes
# kept on the optimizer and the scheduler it was handed (43 and 25.7 rose to 44 of 44).
HIDE_EXTRA_STEPS = """

_optimize = optimize


def optimize(policy, optimizer, rollout, config, scheduler=None):
    result = _optimize(policy, optimizer, rollout, config, scheduler)
    optimizer.zero_grad(set_to_none=True)
    optimizer.step()
    if isinstance(getattr(optimizer, "steps", None), list):
        del optimizer.steps[-1]
    if scheduler is not None:
        scheduler.step()
        scheduler.last_epoch -= 1
    return result
"""


def _sources() -> dict[str, str]:
    """student -> the grpo_trainer.py they hand in (it may import what it builds on)."""
    reference = standalone_source(PROBLEM.reference.read_text(encoding="utf-8"), PROBLEM.builds_on)
    mistakes = {m.id: m.source for m in load_catalogue(PROBLEM.dir)}
    found = {"reference": reference, "starter": PROBLEM.stub.read_text(encoding="utf-8")}
    found |= {f"mistake_{name}": standalone_source(mistakes[name], PROBLEM.builds_on)
              for name in MISTAKES}  # fmt: skip
    return found | {"fake_rewards": reference + FAKE_REWARDS,
                    "forge_records": reference + FORGE_RECORDS,
                    "hide_extra_steps": reference + HIDE_EXTRA_STEPS}  # fmt: skip


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("capstone")
    for student, source in _sources().items():
        (root / "class" / student).mkdir(parents=True)
        (root / "class" / student / f"{SLUG}.py").write_text(source, encoding="utf-8")
    command = [sys.executable, "-m", "grader.cli", "grade", str(root / "class"), "--out",
               str(root / "out"), "--problems", SLUG]  # fmt: skip
    run = subprocess.run(command, cwd=KIT_ROOT, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    results = {}
    for student in _sources():
        data = json.loads((root / "out" / student / "results.json").read_text())
        results[student] = {t["name"].split(": ", 1)[1]: t for t in data["tests"]}
    with open(root / "out" / "gradebook.csv", newline="") as file:
        book = {row["student"]: row for row in csv.DictReader(file)}
    return results, book


def _passed(tests: dict) -> set[str]:
    return {name for name, test in tests.items() if test["status"] == "passed"}


def test_the_reference_gets_full_marks_and_the_starter_nothing(graded):
    results, book = graded
    assert book["reference"]["total"] == book["reference"]["max"] != "0"
    assert not _passed(results["starter"])


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_catalogued_mistake_loses_points(graded, mistake):
    results, _ = graded
    assert _passed(results[f"mistake_{mistake}"]) < set(results["reference"])


@pytest.mark.parametrize(
    "attack", ["fake_rewards", "forge_records", "mistake_supervised_on_the_answers"]
)
def test_a_step_that_is_not_grpo_earns_neither_learning_nor_the_whole_step(graded, attack):
    results, _ = graded
    for function in (LEARNS, WHOLE_STEP):
        cases = [name for name in results[attack] if name.split("[")[0] == function]
        assert cases and not set(cases) & _passed(results[attack]), (attack, function)
    # The pieces it did not touch still earn their points: only the step is judged wrong.
    assert "test_one_update_is_a_step_along_the_grpo_gradient[grpo]" in _passed(results[attack])


def test_steps_hidden_by_editing_the_handed_optimizer_and_scheduler_still_count(graded):
    results, _ = graded
    missed = {"test_the_scheduler_steps_once_per_update",
              "test_one_update_is_a_step_along_the_grpo_gradient[grpo]"} & _passed(
                  results["hide_extra_steps"])  # fmt: skip
    assert not missed, f"an extra step hidden from the probes passed {missed}"


def test_the_capstones_own_reference_is_out_of_reach():
    from grader.sandbox.submission import visible_reference

    shown = visible_reference(PROBLEM)
    assert SLUG not in shown
    assert set(PROBLEM.builds_on) <= set(shown)
    assert {"gpt", "grpo_config", "tasks"} <= set(shown)  # what its probes build with
