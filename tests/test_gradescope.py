"""The Gradescope autograder: the zip `grpo-kit export gradescope` builds, and its
run_autograder run end to end with /autograder mapped to a temporary folder (bubblewrap), its
results held to Gradescope's published results format."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from grader.cli import main
from grader.gradescope import check_results, pins
from grader.problems import get_problem

SLUG, OTHER = "grpo_objective", "group_stats"
REFERENCE = get_problem(SLUG).reference.read_text()


@pytest.mark.parametrize(
    ("results", "problem"),
    [
        ({"tests": [{"name": "a", "max_score": 1}]}, "a score is needed"),
        ({"score": "3"}, "score: '3' has the wrong type"),
        ({"score": 1, "visibility": "later"}, "'later' is not one of"),
        ({"score": 1, "tests": [{"status": "ok"}]}, "tests[0].status: 'ok' is not one of"),
        ({"score": 1, "tests": [{"output_format": "rtf"}]}, "tests[0].output_format"),
        ({"score": 1, "tests": [{"tags": [1]}]}, "every tag must be a string"),
        ({"score": 1, "tests": [{"number": 1.1}]}, "tests[0].number: 1.1 has the wrong type"),
        ({"score": 1, "colour": "red"}, "unknown key 'colour'"),
        ({"score": 1, "leaderboard": [{"name": "x"}]}, "needs a name and a value"),
    ],
)
def test_the_results_format_is_checked(results, problem):
    assert any(problem in found for found in check_results(results)), check_results(results)


def test_a_complete_results_file_passes():
    assert check_results({
        "score": 1.5, "execution_time": 3, "output": "hi", "output_format": "text",
        "test_output_format": "md", "visibility": "visible", "stdout_visibility": "hidden",
        "extra_data": {}, "leaderboard": [{"name": "Time", "value": 1.5, "order": "asc"}],
        "tests": [{"name": "t", "score": 1.5, "max_score": 2, "status": "failed", "output": "o",
                   "output_format": "text", "number": "1.1", "tags": ["p"],
                   "visibility": "after_due_date", "extra_data": {"execution_time": 0.1}}],
    }) == []  # fmt: skip


def export(tmp_path: Path, *slugs: str, course: Path | None = None) -> Path:
    out = tmp_path / "autograder.zip"
    extra = ["--course", str(course)] if course else []
    assert main(["export", "gradescope", str(out), "--problems", *slugs, *extra]) == 0
    return out


def test_the_zip_holds_setup_run_autograder_and_no_solution(tmp_path, capsys):
    archive = export(tmp_path, SLUG, "grpo_trainer")
    with zipfile.ZipFile(archive) as opened:
        names = set(opened.namelist())
        setup = opened.read("setup.sh").decode()
        run_mode = opened.getinfo("run_autograder").external_attr >> 16
        requirements = opened.read("requirements.txt").decode().split()
    assert {"setup.sh", "run_autograder", "course.toml", "requirements.txt"} <= names
    assert run_mode & stat.S_IXUSR and run_mode & 0o777 == 0o755
    assert f"problems/{SLUG}/test_{SLUG}.py" in names and "problems/conftest.py" in names
    assert "reference/gpt.py" in names and "reference/sample_group.py" in names  # built on
    assert f"reference/{SLUG}.py" not in names and "reference/grpo_trainer.py" not in names
    assert not [n for n in names if ".meta" in n or n.endswith("mistakes.toml")]
    assert not [n for n in names if n.startswith(("tests/", "web/", "bench/"))]
    pinned = pins()
    assert all(line in pinned.values() for line in requirements)
    assert pinned["torch"] in setup and "--index-url" in setup and "bubblewrap" in setup
    assert subprocess.run(["bash", "-n", "-c", setup]).returncode == 0
    assert "grpo_objective, grpo_trainer" in capsys.readouterr().out


def test_export_refuses_what_gradescope_cannot_take(tmp_path, capsys):
    assert main(["export", "gradescope", str(tmp_path / "autograder.tar")]) == 2
    assert "takes a .zip" in capsys.readouterr().err
    assert main(["export", "gradescope", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_export_refuses_a_capstone_beside_the_problems_whose_solutions_its_sandbox_shows(
    tmp_path, capsys
):
    # The capstone's sandbox shows reference/sample_group.py (it builds on it): graded in one
    # assignment with sample_group, a grpo_trainer.py could print that solution into its
    # feedback, and the student hand it in as sample_group.py.
    from grader.problems import all_problems
    from grader.sandbox.submission import exposed_solutions

    out = tmp_path / "autograder.zip"
    assert main(["export", "gradescope", str(out), "--problems", "sample_group",
                 "grpo_trainer"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "grpo_trainer shows sample_group" in err and not out.exists()
    assert "now --problems sample_group, and once those are closed --problems grpo_trainer" in err
    assert main(["export", "gradescope", str(out), "--problems", "sample_group", "grpo_trainer",
                 "--allow-exposed-solutions"]) == 0  # fmt: skip
    exposed = exposed_solutions(all_problems())
    assert set(exposed) == {"grpo_trainer"} and "kl_estimators" in exposed["grpo_trainer"]


# ------------------------------------------------------------------ run in a mapped /autograder


def _installed_kit() -> Path | None:
    """The kit `python -I` imports grader from (the one setup.sh would have installed)."""
    found = subprocess.run([sys.executable, "-I", "-c", "import grader; print(grader.__file__)"],
                           capture_output=True, text=True)  # fmt: skip
    return Path(found.stdout.strip()).resolve().parents[1] if found.returncode == 0 else None


def _container(autograder: Path, kit: Path) -> list[str] | None:
    """bwrap arguments for a filesystem like Gradescope's: this machine, /autograder mapped to
    `autograder`, and the installed kit replaced by the zip's (as setup.sh installs it)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    args = [bwrap, "--die-with-parent", "--unshare-pid"]
    args += ["--cap-add", "ALL"] if os.geteuid() == 0 else ["--unshare-user", "--uid", "0"]
    for entry in sorted(Path("/").iterdir()):
        if entry.name in ("proc", "dev", "sys", "tmp", "autograder"):
            continue
        if entry.is_symlink():
            args += ["--symlink", os.readlink(entry), str(entry)]
        elif entry.is_dir():
            args += ["--bind", str(entry), str(entry)]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    if kit.is_relative_to("/tmp"):  # a kit kept under /tmp (with its environment) stays seen
        args += ["--bind", str(kit), str(kit)]
    args += ["--bind", str(autograder), "/autograder"]
    for folder in ("grader", "problems", "reference"):
        args += ["--ro-bind", str(autograder / "source" / folder), str(kit / folder)]
    probe = subprocess.run([*args, "true"], capture_output=True)
    return args + ["--chdir", "/autograder"] if probe.returncode == 0 else None


def test_run_autograder_grades_a_submission_in_a_mapped_autograder(tmp_path):
    course = tmp_path / "course.toml"
    course.write_text(f'title = "HW 1"\nproblems = ["{SLUG}", "{OTHER}"]\n[points]\n{SLUG} = 10\n'
                      "[late]\ndue = 2026-03-14T23:59:00+01:00\npenalty_per_day = 0.5\n")  # fmt: skip
    archive = export(tmp_path, SLUG, OTHER, course=course)
    autograder = tmp_path / "autograder"
    with zipfile.ZipFile(archive) as opened:
        opened.extractall(autograder / "source")
    for name in ("setup.sh", "run_autograder"):
        (autograder / "source" / name).chmod(0o755)
    (autograder / "submission" / "hw").mkdir(parents=True)
    (autograder / "submission" / "hw" / f"{SLUG}.py").write_text(REFERENCE)  # in a folder
    (autograder / "submission" / "group_stat.py").write_text("x = 1\n")  # a near miss
    (autograder / "results").mkdir()
    (autograder / "submission_metadata.json").write_text(json.dumps({
        "id": 1, "created_at": "2026-03-15T10:00:00.000000+01:00",
        "users": [{"email": "ada@example.edu", "id": 9, "name": "Ada Lovelace"}],
        "assignment": {"due_date": "2026-03-14T23:59:00.000000+01:00"},
    }))  # fmt: skip
    kit = _installed_kit()
    args = _container(autograder, kit) if kit else None
    if args is None:
        pytest.skip("bubblewrap cannot build the mapped /autograder here")
    run = subprocess.run([*args, "--setenv", "GRPO_KIT_PYTHON", sys.executable, "bash",
                          "/autograder/source/run_autograder"],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    results = json.loads((autograder / "results" / "results.json").read_text())
    assert check_results(results) == []
    if os.geteuid() == 0:  # the sandbox nests under this container only with root's capabilities
        assert "sandbox: bubblewrap" in run.stdout and "sandbox: bubblewrap" in results["output"]
    by_problem = results["extra_data"]["problems"]
    assert by_problem[SLUG] == {"score": 10, "max_score": 10, "submitted": True, "graded": True}
    assert by_problem[OTHER]["submitted"] is False and by_problem[OTHER]["score"] == 0
    assert results["score"] == 5  # 10 points, half taken off: submitted 10 hours late
    assert "Late: 0.42 days late: 50% of the score taken off" in results["output"]
    tests = results["tests"]
    assert {t["tags"][0] for t in tests} == {SLUG, OTHER}
    assert all(t["number"].startswith("1.") for t in tests if t["tags"] == [SLUG])
    other = next(t for t in tests if t["tags"] == [OTHER])
    assert "did you mean group_stats.py?" in other["output"] and other["status"] == "failed"
    assert isinstance(results["execution_time"], int)
    assert results["extra_data"]["student"]["email"] == "ada@example.edu"
