"""Reruns grade exactly what changed and say so; --student regrades one student; bad options
are refused with a message that says what to do, before anything is graded."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from grader import provenance
from grader.cli import main
from grader.problems import KIT_ROOT, get_problem
from grader.provenance import plan
from grader.submissions import Submission

SLUG, OTHER = "grpo_objective", "group_stats"
REFERENCE = get_problem(SLUG).reference.read_text()
WRONG = "def grpo_objective(*args, **kwargs):\n    return 0.0\n"


def grade(submissions: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "grader.cli", "grade", str(submissions), "--out", str(out),
               "--time-limit", "3", *extra]  # fmt: skip
    run = subprocess.run(command, cwd=KIT_ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def stamps(out: Path) -> dict[str, int]:
    return {p.relative_to(out).as_posix(): p.stat().st_mtime_ns for p in out.glob("*/*.json")}


def gradebook(out: Path) -> dict[str, dict]:
    with open(out / "gradebook.csv", newline="") as file:
        return {row["student"]: row for row in csv.DictReader(file)}


def test_a_rerun_grades_exactly_what_changed(tmp_path):
    submissions, out = tmp_path / "submissions", tmp_path / "out"
    for name, source in (("ada", REFERENCE), ("bob", WRONG), ("cy", REFERENCE)):
        (submissions / name).mkdir(parents=True)
        (submissions / name / f"{SLUG}.py").write_text(source)
    first = grade(submissions, out, "--problems", SLUG)
    assert "3 graded" in first.stdout and "3 new" in first.stdout
    before = stamps(out)

    (submissions / "bob" / f"{SLUG}.py").write_text(REFERENCE)  # bob fixed his file
    second = grade(submissions, out, "--problems", SLUG)
    assert "bob: grpo_objective.py changed" in second.stderr
    assert "1 graded" in second.stdout and "2 already graded" in second.stdout
    after = stamps(out)
    assert {k for k in after if after[k] != before.get(k)} == {
        "bob/grpo_objective.pytest.json", "bob/results.json"}  # fmt: skip
    assert gradebook(out)["bob"]["total"] == gradebook(out)["ada"]["total"]

    # Another problem joins: only it is graded, and blank for those who did not hand it in.
    third = grade(submissions, out, "--problems", SLUG, OTHER)
    assert f"ada: {OTHER} not graded before" in third.stderr
    after_third = stamps(out)
    assert all(after_third[f"{s}/{SLUG}.pytest.json"] == after[f"{s}/{SLUG}.pytest.json"]
               for s in ("ada", "bob", "cy"))  # fmt: skip
    assert gradebook(out)["ada"][OTHER] == ""

    # One student again, changed or not.
    fourth = grade(submissions, out, "--problems", SLUG, OTHER, "--student", "cy")
    assert "cy: asked to regrade" in fourth.stderr and "1 graded" in fourth.stdout
    assert stamps(out)["ada/results.json"] == after_third["ada/results.json"]

    # New points in a course file: every result is scored again, nothing is graded again.
    course = tmp_path / "course.toml"
    course.write_text(f'problems = ["{SLUG}", "{OTHER}"]\n[points]\n{SLUG} = 50\n')
    fifth = grade(submissions, out, "--course", str(course))
    assert "0 graded" in fifth.stdout and "3 rescored" in fifth.stdout
    assert gradebook(out)["ada"][SLUG] == "50"
    results = json.loads((out / "ada" / "results.json").read_text())
    assert results["extra_data"]["problems"][SLUG]["max_score"] == 50


def test_changed_tests_or_files_are_named_in_the_plan(tmp_path):
    problem = get_problem(SLUG)
    ada = Submission("ada", sources={SLUG: b"x = 1\n"})
    folder = tmp_path / "ada"
    folder.mkdir()
    record = {"tests": [], "graded_from": {"submission": ada.fingerprint(SLUG), "tests": "old"}}
    (folder / f"{SLUG}.pytest.json").write_text(json.dumps(record))
    (rerun,) = plan(tmp_path, [ada], [problem])
    assert rerun.reasons == [f"the tests of {SLUG} changed"] and not rerun.new
    record["graded_from"]["tests"] = provenance.tests_version(problem)
    (folder / f"{SLUG}.pytest.json").write_text(json.dumps(record))
    assert plan(tmp_path, [ada], [problem])[0].problems == []
    gone = Submission("ada")
    assert plan(tmp_path, [gone], [problem])[0].reasons == [f"{SLUG}.py removed"]


@pytest.fixture
def one_student(tmp_path) -> Path:
    (tmp_path / "subs" / "ada").mkdir(parents=True)
    (tmp_path / "subs" / "ada" / f"{SLUG}.py").write_text(WRONG)
    return tmp_path


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--time-limit", "0"], "'0' is not a valid time limit in seconds: give a number from"),
        (["--time-limit", "ten"], "is not a valid time limit"),
        (["--workers", "0"], "--workers: '0' is not a valid number of workers"),
        (["--batch-size", "0"], "--batch-size: '0' is not a valid batch size"),
        (["--memory-limit", "10"], "give a whole number from 128"),
        (["--submission-time-limit", "-1"], "not a valid time limit"),
        (["--shard", "3/2"], "K must be between 1 and N"),
        (["--layout", "blackboard"], "invalid choice: 'blackboard'"),
    ],
)
def test_bad_options_say_what_to_do(one_student, capsys, extra, message):
    with pytest.raises(SystemExit) as stopped:
        main(["grade", str(one_student / "subs"), "--out", str(one_student / "out"), *extra])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err
    assert not (one_student / "out").exists()


@pytest.mark.parametrize(
    ("out", "extra", "message"),
    [
        ("subs/results", [], "is inside the submissions folder"),
        ("file", [], "is a file: give a folder"),
        ("out", ["--student", "bobby"], "no student 'bobby'"),
        ("out", ["--problems", "grpo_objectve"], "Did you mean grpo_objective"),
        ("out", ["--course", "missing.toml"], "no course file"),
        ("out", ["--submission-time-limit", "1", "--time-limit", "5"], "must be at least"),
    ],
)
def test_refused_before_anything_is_graded(one_student, capsys, out, extra, message):
    (one_student / "file").write_text("")
    extra = [str(one_student / e) if e.endswith(".toml") else e for e in extra]
    code = main(["grade", str(one_student / "subs"), "--out", str(one_student / out), *extra])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not list(one_student.glob("**/results.json"))
