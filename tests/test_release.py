"""The student bundle: what learners need to solve the problems, and, read file by file, no
reference solution and no mistake catalogue of the problems it releases."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.cli import main
from grader.mistakes import load_catalogue
from grader.problems import get_problem
from grader.release import find_leaks

RELEASED = ("grpo_objective", "group_stats")


def bodies(source: str) -> set[str]:
    """Each function body of `source` as a normalised AST, docstrings left out."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):
            body = node.body[1:] if ast.get_docstring(node) else node.body
            found.add(ast.dump(ast.Module(body=body, type_ignores=[])))
    return found


def texts(folder: Path) -> dict[str, str]:
    found = {}
    for path in folder.rglob("*"):
        if path.is_file():
            try:
                found[path.relative_to(folder).as_posix()] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
    return found


def assert_no_solution(folder: Path, slugs) -> None:
    files = texts(folder)
    for slug in slugs:
        problem = get_problem(slug)
        secret = bodies(problem.reference.read_text())
        for name, text in files.items():
            assert f"reference/{slug}.py" != name
            assert not name.endswith("mistakes.toml") and "/.meta/" not in f"/{name}"
            if name.endswith(".py"):
                assert not secret & bodies(text), f"{name} holds a function of the reference"
            for mistake in load_catalogue(problem.dir):
                assert mistake.description not in text, f"{name}: {mistake.id}"
                assert mistake.source not in text


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("release") / "hw1"
    assert main(["release", str(out), "--problems", *RELEASED, "--no-site"]) == 0
    return out


def test_the_bundle_holds_what_learners_need(bundle):
    for slug in RELEASED:
        folder = bundle / "problems" / slug
        assert {p.name for p in folder.iterdir()} >= {"README.md", "problem.toml", f"{slug}.py",
                                                      f"test_{slug}.py"}  # fmt: skip
    assert (bundle / "problems" / "conftest.py").is_file()
    assert "pytest problems/<slug>" in (bundle / "README.md").read_text()
    assert not (bundle / "site").exists() and not (bundle / "reference").exists()


def test_the_bundle_holds_no_solution_by_content(bundle):
    assert_no_solution(bundle, RELEASED)
    assert find_leaks(bundle, [get_problem(s) for s in RELEASED]) == []


def test_the_bundle_runs_the_tests_on_its_own(bundle, tmp_path):
    copy = tmp_path / "learner"
    shutil.copytree(bundle, copy)
    slug = RELEASED[0]
    reference = get_problem(slug).reference
    checked = subprocess.run([sys.executable, "check.py", slug, str(reference)], cwd=copy,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
    starter = subprocess.run([sys.executable, "-m", "pytest", f"problems/{slug}", "-q",
                              "-p", "no:cacheprovider"], cwd=copy, capture_output=True, text=True,
                             timeout=300)  # fmt: skip
    assert starter.returncode == 1 and " passed" not in starter.stdout.splitlines()[-1]


def test_a_planted_solution_is_found_and_nothing_is_released(bundle, tmp_path):
    leaky = tmp_path / "leaky"
    shutil.copytree(bundle, leaky)
    source = get_problem("grpo_objective").reference.read_text()
    (leaky / "problems" / "grpo_objective" / "hint.py").write_text(
        source.replace("def grpo_objective(", "def helper(")
    )  # renamed: found by its body
    lines = [ln for ln in source.splitlines() if len(ln.strip()) > 30 and "def " not in ln]
    (leaky / "data.json").write_text(json.dumps({"file": "\n".join(lines)}))  # as the site does
    description = load_catalogue(get_problem("group_stats").dir)[0].description
    (leaky / "notes.md").write_text(f"Watch out: {description}\n")
    found = find_leaks(leaky, [get_problem(s) for s in RELEASED])
    assert any(f.startswith("problems/grpo_objective/hint.py: helper is the body") for f in found)
    assert any(f.startswith("data.json: a line of reference/grpo_objective.py") for f in found)
    assert any(f.startswith("notes.md: a catalogued mistake of group_stats") for f in found)


def test_only_test_names_and_the_capstone_alone(tmp_path, capsys):
    names = tmp_path / "names"
    assert main(["release", str(names), "--problems", "grpo_objective", "--tests", "names"]) == 0
    folder = names / "problems" / "grpo_objective"
    assert not list(folder.glob("test_*.py")) and not (names / "site").exists()
    assert "`test_reference_example`" in (folder / "TESTS.md").read_text()
    assert main(["release", str(tmp_path / "both"), "--problems", "sample_group",
                 "grpo_trainer", "--no-site"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "grpo_trainer build(s) on the reference solutions of sample_group" in err
    assert "--problems sample_group" in err and "--problems grpo_trainer" in err
    # kl_estimators is no `builds_on` of the capstone's, only imported by one of those.
    assert main(["release", str(tmp_path / "kl"), "--problems", "kl_estimators",
                 "grpo_trainer", "--no-site"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "grpo_trainer build(s) on the reference solutions of kl_estimators" in err
    assert "now --problems kl_estimators, and once those are closed --problems grpo_trainer" in err
    capstone = tmp_path / "capstone"
    assert main(["release", str(capstone), "--problems", "grpo_trainer", "--no-site"]) == 0
    assert (capstone / "reference" / "sample_group.py").is_file()  # closed problems it builds on
    assert_no_solution(capstone, ["grpo_trainer"])
    assert main(["release", str(capstone), "--problems", "grpo_trainer"]) == 2
    assert "not an empty folder" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("npm") is None, reason="the site needs Node.js and npm")
def test_the_site_of_a_release_holds_no_solution(tmp_path):
    out = tmp_path / "with-site"
    assert main(["release", str(out), "--problems", *RELEASED]) == 0
    assert (out / "site" / "index.html").is_file()
    kit = json.loads((out / "site" / "p" / "grpo_objective" / "kit.json").read_text())
    assert "problems/grpo_objective/test_grpo_objective.py" in kit
    assert_no_solution(out, RELEASED)
    secret = bodies(get_problem("grpo_objective").reference.read_text())
    for name, text in kit.items():  # the files the browser writes, read one by one
        if name.endswith(".py"):
            assert not secret & bodies(text), name
