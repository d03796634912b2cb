"""The adversarial suite: every attack in tests/adversarial/ graded in one batch with honest work.

All the students are graded in ONE trusted pytest run, in name order, honest ones before and
after the attacks: nothing an attack does may change anyone else's grade. Each attack must
earn exactly what a plainly wrong but well-behaved solution earns (its control: one that
raises, one that returns NaN, one that returns an array of the wrong shape), and an attack
that breaks its own process may earn less, never more.

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
import time
import zipfile
from pathlib import Path

import pytest

from grader.problems import KIT_ROOT, get_problem
from grader.sandbox.bwrap import NO_BWRAP_ENV, bwrap_command
from grader.sandbox.forkserver import SANDBOX_UID_BASE
from grader.submissions import standalone_source

ATTACKS = Path(__file__).parent / "adversarial"
SLUG = "grpo_objective"
PROBLEM = get_problem(SLUG)
REFERENCE = PROBLEM.reference
# Plainly wrong, well-behaved solutions: what an attack deserves is what its control earns.
CONTROLS = {
    "control_raises": "def grpo_objective(*args, **kwargs):\n    raise RuntimeError('no answer')\n",
    "control_nan": "def grpo_objective(*args, **kwargs):\n    return float('nan')\n",
    "control_wrong_array": "import numpy as np\n\n\ndef grpo_objective(*args, **kwargs):\n"
    "    return np.ones((3, 1))\n",
}
CONTROL_OF = {"nan_result": "control_nan", "broadcasting_array": "control_wrong_array",
              "huge_repr": "control_nan"}  # fmt: skip
# These keep their process working, so they must earn exactly their control's points; the
# others may break their own process and earn less.
WELL_BEHAVED = {"nan_result", "broadcasting_array", "lying_eq", "poison_inputs", "forge_protocol",
                "print_fake_results", "reach_other_students", "kill_the_grader", "deep_folders",
                "shared_memory_hog", "unwritable_text"}  # fmt: skip
# Graded after everyone else (names sort last): says what earlier students left in its sandbox,
# in /tmp and in System V and POSIX IPC, where it would take room and memory from later students.
WITNESS = "zz_witness"
# A kit kept under /tmp is bound into the sandbox at its own path: that entry is the kit's.
KIT_IN_TMP = KIT_ROOT.resolve().parts[2] if KIT_ROOT.resolve().parts[1:2] == ("tmp",) else ""
WITNESS_SOURCE = f"""import ctypes
import os


def grpo_objective(*args, **kwargs):
    mine = os.path.basename(os.getcwd())
    left = [name for name in os.listdir("/tmp") if name not in (mine, {KIT_IN_TMP!r})]
    for kind in ("shm", "msg", "sem"):
        with open(f"/proc/sysvipc/{{kind}}") as table:
            left += [f"{{kind}} {{row.split()[1]}}" for row in list(table)[1:]]
    # A POSIX message queue shows in no table: the one shared_memory_hog leaves, by name.
    if ctypes.CDLL(None, use_errno=True).mq_open(b"/grpo-kit-leftover", os.O_RDONLY) >= 0:
        left.append("POSIX message queue /grpo-kit-leftover")
    # Nor does a key in another uid's kernel keyring, which outlives the sandbox: /proc/keys.
    if os.path.exists("/proc/keys"):  # a kernel with keyrings
        with open("/proc/keys") as keys:
            left += [line.strip() for line in keys if "grpo-kit-leftover" in line]
    raise RuntimeError(f"left behind: {{left}}")
"""
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
    "reach_other_students": "kill every process it may signal",
    "shared_memory_hog": "leave shared memory behind on this machine",
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
    for name, source in CONTROLS.items():
        (submissions / name).mkdir()
        (submissions / name / f"{SLUG}.py").write_text(source)
    shipped = submissions / "shipped_config"
    shipped.mkdir()
    (shipped / f"{SLUG}.py").write_text("def grpo_objective(*a, **k):\n    raise RuntimeError\n")
    for name, text in SHIPPED_EXTRAS.items():
        (shipped / name).write_text(text)
    (submissions / WITNESS).mkdir()
    (submissions / WITNESS / f"{SLUG}.py").write_text(WITNESS_SOURCE)
    for honest in ("honest_a", "honest_z"):  # graded before and after the attacks, in one run
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
    started = time.monotonic()
    run = grade(submissions, out, "--workers", "1", "--batch-size", "1000")  # one pytest run
    seconds = time.monotonic() - started
    after = {path: _digest(path) for path in protected}
    return dict(out=out, run=run, server=server, changed=[p for p in protected if
                before[p] != after[p]], students=sorted(p.name for p in submissions.iterdir()),
                sandboxed_before=sandboxed_before, seconds=seconds)  # fmt: skip


def passed(out: Path, student: str) -> set[str]:
    results = json.loads((out / student / "results.json").read_text())
    return {t["name"].split(": ", 1)[1] for t in results["tests"] if t["status"] == "passed"}


def test_the_batch_completes(batch):
    assert batch["run"].returncode == 0, batch["run"].stderr[-3000:]


def test_every_student_has_a_result(batch):
    expected = {Path(name).stem for name in batch["students"]}
    assert set(gradebook(batch["out"])) == expected
    for student in expected:
        results = json.loads((batch["out"] / student / "results.json").read_text())
        assert results["tests"], student
        assert (batch["out"] / student / f"{SLUG}.pytest.json").is_file()


def test_honest_students_get_full_marks_before_and_after_every_attack(batch):
    book = gradebook(batch["out"])
    maximum = book["honest_a"]["max"]
    assert float(maximum) > 0
    for honest in ("honest_a", "honest_z", "honest_zip"):
        assert book[honest]["total"] == maximum, honest


def test_the_controls_earn_little(batch):
    book = gradebook(batch["out"])
    for control in CONTROLS:
        assert float(book[control]["total"]) < float(book[control]["max"]) / 2, control


@pytest.mark.parametrize(
    "attack", [_judged(a.stem) for a in sorted(ATTACKS.glob("*.py"))] + ["shipped_config"]
)
def test_attack_gets_what_its_control_gets(batch, attack):
    out = batch["out"]
    control = CONTROL_OF.get(attack, "control_raises")
    got, deserved = passed(out, attack), passed(out, control)
    results = json.loads((out / attack / "results.json").read_text())
    assert got <= deserved, f"{attack} passed more than {control}: {sorted(got - deserved)}"
    if attack in WELL_BEHAVED:
        assert got == deserved, results["tests"][0]["output"]
    book = gradebook(out)
    assert float(book[attack]["total"]) <= float(book[control]["total"])
    assert book[attack]["max"] == book["honest_a"]["max"]


def test_the_class_report_is_written(batch, tmp_path):
    # unwritable_text's message holds lone surrogates: they reach no file as such.
    command = [sys.executable, "-m", "grader.cli", "report", str(batch["out"]),
               "--out", str(tmp_path / "report")]  # fmt: skip
    run = subprocess.run(command, cwd=KIT_ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "report" / "index.html").is_file()
    results = json.loads((batch["out"] / "unwritable_text" / "results.json").read_text())
    assert "no answer \ufffd \ufffd" in results["tests"][0]["output"]


def test_hidden_tests_and_reference_are_untouched(batch):
    assert batch["changed"] == []


def test_network_is_unreachable(batch):
    if SANDBOX_PROBLEM:
        pytest.skip(f"{SANDBOX_PROBLEM}: unsandboxed the network is not cut off")
    assert batch["server"].connections == 0


def test_no_attack_leaves_files_or_shared_memory_to_later_students(batch):
    if SANDBOX_PROBLEM:
        pytest.skip(f"{SANDBOX_PROBLEM}: unsandboxed /tmp and IPC are the machine's")
    results = json.loads((batch["out"] / WITNESS / "results.json").read_text())
    assert "left behind: []" in results["tests"][0]["output"], results["tests"][0]["output"]


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
        ("flood_frames", "sent malformed data"),
        ("slow_import", "timed out while being imported"),
        ("memory_bomb", "memory"),
        ("exit_at_import", "raised SystemExit while being imported"),
        ("os_exit_in_function", "exited with status 0"),
        ("keyboard_interrupt", "raised KeyboardInterrupt"),
        ("pytest_skip", "raised Skipped"),
        ("lying_eq", "which is not plain data"),
        ("empty_but_huge", "cannot be graded"),
    ],
)
def test_failures_are_explained_to_the_student(batch, attack, status):
    results = json.loads((batch["out"] / attack / "results.json").read_text())
    assert status in results["tests"][0]["output"]


def test_stalling_children_cost_the_batch_their_time_limit_only(batch):
    # Four attacks run into the 3 s limit once each (a failed problem fails its later tests
    # at once), one into its import: a batch of ~40 students must not take minutes.
    assert batch["seconds"] < 120, f"the batch took {batch['seconds']:.0f} s"


def test_a_returned_value_cannot_swell_the_records(batch):
    record = batch["out"] / "huge_repr" / f"{SLUG}.pytest.json"
    assert record.stat().st_size < 1_000_000, f"{record.stat().st_size:,} bytes"
    assert "bytes" in json.loads((batch["out"] / "huge_repr" / "results.json").read_text())[
        "tests"][0]["output"]  # fmt: skip


def test_shipped_config_files_are_ignored_and_reported(batch):
    results = json.loads((batch["out"] / "shipped_config" / "results.json").read_text())
    for name in SHIPPED_EXTRAS:
        assert name in results["output"]


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


# A torch problem's tests judge what its probes claim: hostile values must not make the grader
# allocate by them.
TORCH_SLUG = "sample_group"
CONSTANT_IDS = """from types import SimpleNamespace

import torch


def sample_group(model, prompt_ids, num_generations, max_new_tokens, eos_ids, **kwargs):
    rows = prompt_ids.shape[0] * num_generations
    ids = torch.zeros((rows, max_new_tokens), dtype=torch.long)
    return SimpleNamespace(completion_ids=ids, completion_mask=torch.ones_like(ids),
                           logprobs=torch.zeros(rows, max_new_tokens))
"""


def grade_one_problem(tmp_path: Path, slug: str, sources: dict[str, str]) -> Path:
    """Grade one student per source on `slug` alone, in one worker; the results folder."""
    submissions = tmp_path / "submissions"
    for name, source in sources.items():
        (submissions / name).mkdir(parents=True)
        (submissions / name / f"{slug}.py").write_text(source)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "grader.cli", "grade", str(submissions), "--out", str(out),
               "--problems", slug, "--workers", "1"]  # fmt: skip
    run = subprocess.run(command, cwd=KIT_ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def test_hostile_token_ids_fail_without_the_grader_making_room_for_them(tmp_path):
    if SANDBOX_PROBLEM:
        pytest.skip(f"{SANDBOX_PROBLEM}: the attack patches the sandbox's own modules")
    out = grade_one_problem(tmp_path, TORCH_SLUG, {
        "control_constant": CONSTANT_IDS,
        "honest": standalone_source(get_problem(TORCH_SLUG).reference.read_text()),
        "huge_token_ids": (ATTACKS / TORCH_SLUG / "huge_token_ids.py").read_text(),
    })  # fmt: skip
    book = gradebook(out)
    assert book["honest"]["total"] == book["honest"]["max"] != "0"
    assert passed(out, "huge_token_ids") <= passed(out, "control_constant")
    results = json.loads((out / "huge_token_ids" / "results.json").read_text())
    counted = next(t for t in results["tests"] if "keeps_everything" in t["name"])
    # Its patch of the sandbox's probe loader reaches nothing where the sandbox forgets the
    # kit's modules before importing a file: the probe's own look at the ids fails first.
    assert (
        "tokens outside the vocabulary were sampled" in counted["output"]
        or "Storage size calculation overflowed" in counted["output"]
    ), counted["output"]


# sample_group's reference behind a model wrapper that hides the KV cache (or turns autograd
# on), appended to the honest solution: the control. The attacks then rewrite the toy model's
# record of its calls to claim what a correct solution's calls look like.
_SAMPLE_WRAPPER = """

import torch as _torch

_honest_sample_group = sample_group


class _Hidden(_torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.inner = model

    def forward(self, input_ids, attention_mask=None):
        with _torch.enable_grad() if GRAD else _torch.no_grad():
            out = self.inner(input_ids, attention_mask=attention_mask)
        logits = out.logits if hasattr(out, "logits") else out
        return logits.detach()


def sample_group(model, prompt_ids, *args, **kwargs):
    cached = "past_key_values" in str(getattr(type(model).forward, "__code__").co_varnames)
    wrap = cached or GRAD
    result = _honest_sample_group(_Hidden(model) if wrap else model, prompt_ids, *args, **kwargs)
    if FORGE and wrap and hasattr(model, "calls"):
        ids = result.completion_ids
        rows, prompt_length = ids.shape[0], prompt_ids.shape[1]
        sequences = _torch.cat([prompt_ids.repeat_interleave(rows // prompt_ids.shape[0], 0),
                                ids], 1)
        for k, call in enumerate(model.calls):
            call["grad_enabled"] = call["inference_mode"] = False
            if cached and k > 0:  # the first call reads the prompts either way
                call["cached"], call["past_length"] = True, prompt_length + k - 1
                call["input_ids"] = sequences[:, prompt_length + k - 1 : prompt_length + k]
    return result
"""


def _sample_group_forging(grad: bool, forge: bool) -> str:
    honest = standalone_source(get_problem("sample_group").reference.read_text())
    return honest + f"\nGRAD, FORGE = {grad}, {forge}\n" + _SAMPLE_WRAPPER


# sample_group's reference with autograd left on while sampling; the attack then replaces what
# torch says of autograd (its functions and the tensors' flag) so the toy model cannot tell.
_GRAD_LIES = """
import torch as _torch

for _name in ("is_grad_enabled", "is_inference_mode_enabled"):
    setattr(_torch, _name, lambda: False)
    setattr(_torch._C, _name, lambda: False)
_torch.Tensor.requires_grad = property(lambda self: False)
_torch.Tensor.is_inference = lambda self: False
"""


def _sample_group_with_autograd(lie: bool) -> str:
    honest = standalone_source(get_problem("sample_group").reference.read_text())
    assert "with torch.no_grad():" in honest
    sampling_with_autograd = honest.replace("with torch.no_grad():", "with torch.enable_grad():")
    return sampling_with_autograd + (_GRAD_LIES if lie else "")


# ... and the same, with a module written to the student's own folder and imported: code that
# no scan reads, which finds a toy model's records through gc and turns its strictness off.
_HIDDEN_HELPER = """
import os as _os
import sys as _sys

try:
    with open("hidden_helper.py", "w") as _file:
        _file.write(
            "import gc\\n"
            "def disarm(model):\\n"
            "    for held in gc.get_referrers(model):\\n"
            "        if type(held) is tuple and len(held) == 2 and held[0] is model:\\n"
            "            held[1]['strict'] = False\\n"
        )
    _sys.path.insert(0, _os.getcwd())
    import hidden_helper
except OSError:  # refused: sample as the control does
    hidden_helper = None
_sample_unhelped = sample_group


def sample_group(model, *args, **kwargs):
    if hidden_helper is not None:
        hidden_helper.disarm(model)
    return _sample_unhelped(model, *args, **kwargs)
"""


def _sample_group_rereading(cache: str | None) -> str:
    """sample_group's reference that drops the KV cache the model returns, so every call
    rereads the whole sequence; `cache` hands the model a cache of its own making instead:
    an empty one ("empty"), or the tokens so far with only the newest fed ("forged")."""
    honest = standalone_source(get_problem("sample_group").reference.read_text())
    kept = "        if use_cache:\n            past = output.past_key_values\n"
    given = 'extra = {"past_key_values": past, "use_cache": True} if use_cache else {}'
    fed = "inputs = sequences[:, end - 1 : end] if past is not None else sequences[:, :end]"
    assert kept in honest and given in honest and fed in honest
    source = honest.replace(kept, "")
    made = {"empty": "(inputs[fed, :0],)", "forged": "(sequences[fed, : end - 1],)"}.get(cache)
    if made:
        given_now = f'{{"past_key_values": {made} if step else None, "use_cache": True}}'
        source = source.replace(given, f"extra = {given_now} if use_cache else {{}}")
    if cache == "forged":
        newest = (
            "inputs = sequences[:, end - 1 : end] if use_cache and step else sequences[:, :end]"
        )
        source = source.replace(fed, newest)
    return source


def _capstone(attack: str, forge: bool = True, base: str = "stub") -> str:
    """The capstone's starter (or reference) with the functions of
    tests/adversarial/grpo_trainer/<attack>.py appended (they replace its own); `forge=False`
    keeps the bug and drops the forgery."""
    source = (ATTACKS / "grpo_trainer" / f"{attack}.py").read_text()
    if not forge:
        source = source.replace("FORGE = True", "FORGE = False")
    problem = get_problem("grpo_trainer")
    start = (
        problem.stub.read_text()
        if base == "stub"
        else standalone_source(problem.reference.read_text())
    )
    return start + "\n\n" + source


# A probe runs in the student's process, so a submission can replace it or rewrite what it
# records: what it returns is a claim. A test may trust a claim only when a working solution is
# needed to make it come out right; an attack must earn nothing over the same code without it.
PROBE_ATTACKS = {
    "fake_probes": ("grpo_loss_torch", (ATTACKS / "grpo_loss_torch" / "fake_probes.py").read_text(),
                    "import torch\n\n\ndef grpo_loss(logp, logp_old, logp_ref, advantages, "
                    "mask, **kwargs):\n    return (logp * 0).sum()\n"),
    "forged_cached_calls": ("sample_group", _sample_group_forging(False, True),
                            _sample_group_forging(False, False)),
    "forged_no_grad_calls": ("sample_group", _sample_group_forging(True, True),
                             _sample_group_forging(True, False)),
    "patched_grad_mode": ("sample_group", _sample_group_with_autograd(True),
                          _sample_group_with_autograd(False)),
    "empty_cache": ("sample_group", _sample_group_rereading("empty"), _sample_group_rereading(None)),
    "forged_cache": ("sample_group", _sample_group_rereading("forged"),
                     _sample_group_rereading(None)),
    "hidden_module": ("sample_group", _sample_group_with_autograd(False) + _HIDDEN_HELPER,
                      _sample_group_with_autograd(False)),
    "empty_tensors": ("grpo_trainer", _capstone("empty_tensors"),
                      _capstone("empty_tensors", forge=False)),
    "train_outside_grpo": ("grpo_trainer", _capstone("train_outside_grpo"),
                           get_problem("grpo_trainer").stub.read_text()),
    "hidden_extra_step": ("grpo_trainer", _capstone("hidden_extra_step", base="reference"),
                          _capstone("hidden_extra_step", forge=False, base="reference")),
    "unbound_extra_steps": ("grpo_trainer", _capstone("unbound_extra_steps", base="reference"),
                            _capstone("unbound_extra_steps", forge=False, base="reference")),
    "merged_reward_calls": ("grpo_trainer", _capstone("reward_per_group", base="reference"),
                            _capstone("reward_per_group", forge=False, base="reference")),
    "missed_last_schedule": ("grpo_trainer", _capstone("missed_last_schedule", base="reference"),
                             _capstone("missed_last_schedule", forge=False, base="reference")),
}  # fmt: skip


@pytest.mark.parametrize("attack", PROBE_ATTACKS)
def test_fabricated_probe_results_earn_no_more_than_the_same_code_without_them(tmp_path, attack):
    if SANDBOX_PROBLEM:
        pytest.skip(f"{SANDBOX_PROBLEM}: the attack patches the sandbox's own modules")
    slug, source, control = PROBE_ATTACKS[attack]
    out = grade_one_problem(tmp_path, slug, {"control": control, attack: source})
    book = gradebook(out)
    got, deserved = passed(out, attack), passed(out, "control")
    assert got <= deserved, f"{attack} passed more than its control: {sorted(got - deserved)}"
    assert float(book[attack]["total"]) <= float(book["control"]["total"])
    assert float(book["control"]["total"]) < float(book["control"]["max"]), "nothing to forge"
