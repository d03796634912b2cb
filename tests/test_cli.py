"""`grpo-kit list` and `grpo-kit check` as a learner uses them."""

import re
import shutil
import subprocess
import sys

import pytest

from grader.cli import main
from grader.problems import all_problems, get_problem


def test_list_shows_every_problem_in_path_order(capsys):
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:]
    slugs = [line.split()[1] for line in lines]
    assert slugs == [p.slug for p in all_problems()]
    orders = [int(line.split()[0]) for line in lines]
    assert orders == sorted(orders)


def test_list_filters_by_runtime(capsys):
    assert main(["list", "--runtime", "pyodide"]) == 0
    shown = {line.split()[1] for line in capsys.readouterr().out.splitlines()[1:]}
    assert shown == {p.slug for p in all_problems() if p.runtime == "pyodide"}


def test_check_passes_the_reference(capsys):
    problem = get_problem("grpo_objective")
    assert main(["check", "grpo_objective", str(problem.reference)]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out
    assert out.rstrip().endswith("points")


def test_check_reports_each_failing_test_of_the_stub(capsys):
    assert main(["check", "grpo_objective"]) == 1
    out = capsys.readouterr().out
    assert "0/" in out.splitlines()[-1]
    assert re.search(r"FAIL +0\.00/\d+\.\d\d +test_reference_example", out), out
    assert "not implemented yet" in out


def test_check_scores_a_partly_right_solution(tmp_path, capsys):
    source = get_problem("grpo_objective").reference.read_text()
    wrong = tmp_path / "solution.py"
    wrong.write_text(source.replace("surrogate - beta * kl", "surrogate + beta * kl"))
    assert main(["check", "grpo_objective", str(wrong)]) == 1
    verdict = capsys.readouterr().out.splitlines()[-1]
    passed, total = verdict.split()[0].split("/")
    assert 0 < int(passed) < int(total)


def test_check_gives_input_checks_no_points_for_a_file_that_only_raises(tmp_path, capsys):
    raises = tmp_path / "solution.py"
    raises.write_text("def grpo_objective(*args, **kwargs):\n    raise ValueError('no')\n")
    assert main(["check", "grpo_objective", str(raises)]) == 1
    out = capsys.readouterr().out
    assert re.search(r"PASS +0\.00/0\.\d\d +test_", out), out  # it passes input checks...
    assert "times the share of the other points" in out
    assert re.fullmatch(r"[1-9]\d*/\d+ tests passed, 0/\d+ points", out.splitlines()[-1]), out


def test_check_unknown_slug_suggests_the_closest(capsys):
    assert main(["check", "grpo_objectve", "x.py"]) == 2
    err = capsys.readouterr().err
    assert "no problem named 'grpo_objectve'" in err
    assert "Did you mean grpo_objective" in err


def test_check_missing_file(tmp_path, capsys):
    assert main(["check", "grpo_objective", str(tmp_path / "nope.py")]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "content, message",
    [
        (b"def grpo_objective(:\n", "line 1: syntax error"),
        (b"", "is empty"),
        (b"x = '\xff\xfe'\n", "not UTF-8"),
    ],
    ids=["syntax-error", "empty", "not-utf8"],
)
def test_check_rejects_a_broken_file_with_a_clear_message(tmp_path, capsys, content, message):
    path = tmp_path / "solution.py"
    path.write_bytes(content)
    assert main(["check", "grpo_objective", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_console_script_is_installed():
    exe = shutil.which("grpo-kit") or str(
        __import__("pathlib").Path(sys.executable).with_name("grpo-kit")
    )
    result = subprocess.run([exe, "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    assert "list" in result.stdout and "check" in result.stdout


def test_readme_problem_list_is_generated_from_the_metadata():
    from grader import readme

    assert readme.main(["--check"]) == 0, "run `python -m grader.readme` to refresh README.md"


# -- train and ablate, short runs of what the README shows ------------------------------------

TRAIN = ["train", "--device", "cpu", "--prompts-per-step", "8", "--num-generations", "4",
         "--eval-size", "20"]  # fmt: skip


@pytest.mark.usefixtures("one_torch_thread")
def test_train_writes_metrics_plot_checkpoint_and_the_evaluation_table(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*TRAIN, "--max-steps", "2", "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "untrained (start)" in printed and "trained" in printed and "exact match" in printed
    assert (out / "training.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "checkpoint.pt").is_file()
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 2

    assert main([*TRAIN, "--max-steps", "3", "--output-dir", str(out), "--resume"]) == 0
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--loss-type", "ppo"], "loss_type must be one of"),
        (["--prompts-per-step", "6", "--gradient-accumulation-steps", "4"], "micro-batches"),
        (["--resume"], "without --resume"),
    ],
)
def test_train_rejects_bad_options_with_a_clear_message(tmp_path, capsys, flags, message):
    code = main([*TRAIN, "--max-steps", "1", "--output-dir", str(tmp_path), *flags])
    assert code == 2
    assert message in capsys.readouterr().err


@pytest.mark.usefixtures("one_torch_thread")
def test_ablate_plots_one_reward_curve_per_group_size(tmp_path, capsys):
    out = tmp_path / "ablation"
    assert main(["ablate", "--group-sizes", "2", "4", "--max-steps", "2", "--device", "cpu",
                 "--output-dir", str(out)]) == 0  # fmt: skip
    assert (out / "group_size_ablation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for group_size in (2, 4):
        assert len((out / f"G{group_size}" / "metrics.jsonl").read_text().splitlines()) == 2
    assert "G = 4" in capsys.readouterr().out
