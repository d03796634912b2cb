"""The problem format: metadata validation, points, the loader seam and the mistake catalogue."""

import ast
import textwrap
from pathlib import Path

import pytest

from grader.errors import SubmissionError
from grader.loader import ImplementationSpecError, load_implementation
from grader.mistakes import MistakeSpecError, load_catalogue
from grader.problems import ProblemSpecError, all_problems, load_problem
from grader.validate import input_check_problems

GOOD_META = """
title = "Toy"
order = 1
difficulty = "easy"
tags = ["toy"]
implement = ["double"]
runtime = "pyodide"
points_per_test = 1
time_limit_s = 5
teaches = "Nothing much."
"""


@pytest.fixture
def kit(tmp_path) -> Path:
    """A throwaway kit with one problem `toy` and its reference."""
    problem = tmp_path / "problems" / "toy"
    (problem / ".meta").mkdir(parents=True)
    (problem / "problem.toml").write_text(GOOD_META)
    (problem / "README.md").write_text("# Toy\n")
    (problem / "toy.py").write_text("def double(x):\n    raise NotImplementedError('todo')\n")
    (problem / "test_toy.py").write_text("def test_double(impl):\n    assert impl.double(2) == 4\n")
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / "__init__.py").write_text("")
    (tmp_path / "reference" / "toy.py").write_text("def double(x):\n    return 2 * x\n")
    return tmp_path


def test_every_shipped_problem_is_well_formed():
    problems = all_problems()
    assert problems, "no problems found"
    for problem in problems:
        assert problem.reference.is_file(), f"{problem.slug}: no reference solution"
        assert problem.statement.read_text().startswith("# ")


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_stub_and_reference_define_every_name_to_implement():
    for problem in all_problems():
        for path in (problem.stub, problem.reference):
            missing = set(problem.implement) - _functions(path)
            assert not missing, f"{path} lacks {sorted(missing)}"


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m.replace('runtime = "pyodide"', 'runtime = "browser"'), "runtime must be"),
        (lambda m: m.replace("order = 1\n", ""), "missing key 'order'"),
        (lambda m: m.replace("order = 1", 'order = "one"'), "'order' has the wrong type"),
        (lambda m: m.replace('implement = ["double"]', "implement = []"), "'implement' must"),
        (lambda m: m + "colour = 'red'\n", "unknown keys"),
        (lambda m: m + "title = [\n", "invalid TOML"),
        (lambda m: m + "input_checks = 3\n", "'input_checks' has the wrong type"),
        (lambda m: m + "builds_on = [1]\n", "'builds_on' must list names"),
        (lambda m: m + "hints = ['a', ' ']\n", "'hints' must list the hints"),
        (lambda m: m + "[points]\ntest_a = -1\n", "must be a number >= 0"),
    ],
    ids=[
        "runtime",
        "missing-key",
        "wrong-type",
        "empty-implement",
        "unknown-key",
        "bad-toml",
        "input-checks",
        "builds-on",
        "blank-hint",
        "negative-points",
    ],
)
def test_malformed_metadata_is_rejected_with_the_file_at_fault(kit, edit, message):
    meta = kit / "problems" / "toy" / "problem.toml"
    meta.write_text(edit(GOOD_META))
    with pytest.raises(ProblemSpecError, match=message) as info:
        load_problem(meta.parent)
    assert "toy" in str(info.value)


def test_problem_without_tests_is_rejected(kit):
    (kit / "problems" / "toy" / "test_toy.py").unlink()
    with pytest.raises(ProblemSpecError, match="no test_"):
        load_problem(kit / "problems" / "toy")


def test_a_test_functions_cases_share_its_points(kit):
    meta = kit / "problems" / "toy" / "problem.toml"
    meta.write_text(GOOD_META + 'input_checks = ["test_*_raises_*"]\n[points]\ntest_b = 3\n')
    problem = load_problem(meta.parent)
    points = problem.test_points(["test_a", "test_b[1]", "test_b[2]", "test_c_raises_x[2-3]"])
    assert points == {
        "test_a": 1.0,
        "test_b[1]": 1.5,
        "test_b[2]": 1.5,
        "test_c_raises_x[2-3]": 1.0,
    }
    assert problem.is_input_check("test_c_raises_x") and not problem.is_input_check("test_a")


@pytest.mark.parametrize(
    ("passed", "earned"),
    [
        (
            {"test_a", "test_b[1]", "test_b[2]", "test_c_raises_x[1]", "test_c_raises_x[2]"},
            {
                "test_a": 1,
                "test_b[1]": 1,
                "test_b[2]": 1,
                "test_c_raises_x[1]": 0.5,
                "test_c_raises_x[2]": 0.5,
            },
        ),  # fmt: skip
        # Raising on every call: the input checks pass and earn nothing.
        (
            {"test_c_raises_x[1]", "test_c_raises_x[2]"},
            {
                "test_a": 0,
                "test_b[1]": 0,
                "test_b[2]": 0,
                "test_c_raises_x[1]": 0,
                "test_c_raises_x[2]": 0,
            },
        ),  # fmt: skip
        # A third of the other points earned: a third of the input checks'.
        (
            {"test_a", "test_c_raises_x[1]"},
            {
                "test_a": 1,
                "test_b[1]": 0,
                "test_b[2]": 0,
                "test_c_raises_x[1]": 0.5 / 3,
                "test_c_raises_x[2]": 0,
            },
        ),  # fmt: skip
    ],
)
def test_input_checks_earn_in_proportion_to_the_other_tests(kit, passed, earned):
    meta = kit / "problems" / "toy" / "problem.toml"
    meta.write_text(GOOD_META + 'input_checks = ["test_*_raises_*"]\n[points]\ntest_b = 2\n')
    problem = load_problem(meta.parent)
    names = ["test_a", "test_b[1]", "test_b[2]", "test_c_raises_x[1]", "test_c_raises_x[2]"]
    assert problem.earned(problem.test_points(names), passed) == pytest.approx(earned)


def test_contract_checks_earn_in_proportion_too_and_with_input_checks_are_capped(kit):
    meta = kit / "problems" / "toy" / "problem.toml"
    meta.write_text(GOOD_META + 'input_checks = ["test_c_*"]\ncontract_checks = ["test_b"]\n')
    (meta.parent / "test_toy.py").write_text(
        "".join(
            f"def {name}(impl):\n    assert impl\n\n\n"
            for name in ("test_a", "test_b", "test_c_raises")
        )
    )
    problem = load_problem(meta.parent)
    points = problem.test_points(["test_a", "test_b", "test_c_raises"])
    # A do-nothing solution keeps test_b's promise: it earns nothing for it.
    assert problem.earned(points, {"test_b", "test_c_raises"}) == dict.fromkeys(points, 0.0)
    assert problem.earned(points, {"test_a", "test_b"}) == {
        "test_a": 1.0, "test_b": 1.0, "test_c_raises": 0.0}  # fmt: skip
    # Two of three points gated: more than half.
    assert "input and contract checks are worth 2 of 3 points" in " ".join(
        input_check_problems(problem)
    )


def test_a_problem_of_input_checks_only_earns_them_in_full(kit):
    meta = kit / "problems" / "toy" / "problem.toml"
    meta.write_text(GOOD_META + 'input_checks = ["test_*"]\n')
    problem = load_problem(meta.parent)
    points = problem.test_points(["test_a", "test_b"])
    assert problem.earned(points, {"test_a"}) == {"test_a": 1.0, "test_b": 0.0}


def test_loader_gives_starter_reference_and_any_file(kit, tmp_path):
    problem = kit / "problems" / "toy"
    with pytest.raises(NotImplementedError, match="todo"):
        load_implementation(problem, "starter").double(1)
    other = tmp_path / "mine.py"
    other.write_text("def double(x):\n    return x + x\n")
    assert load_implementation(problem, str(other)).double(4) == 8


def test_loader_turns_a_broken_file_into_failing_functions(kit, tmp_path):
    problem = kit / "problems" / "toy"
    broken = tmp_path / "broken.py"
    broken.write_text("def double(x)\n    return x\n")
    impl = load_implementation(problem, str(broken))
    with pytest.raises(SubmissionError, match="syntax error on line 1"):
        impl.double(1)
    exits = tmp_path / "exits.py"
    exits.write_text("import sys\nsys.exit(0)\n")
    with pytest.raises(SubmissionError, match="SystemExit while being imported"):
        load_implementation(problem, str(exits)).double(1)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"def double(x):\n    return '\xe9'\n", "is not UTF-8 text"),
        (b"from reference.toy import double\n", "imports reference.toy"),
        (b"import grader.loader\ndef double(x):\n    return 2 * x\n", "imports grader.loader"),
        (b"   \n", "is empty"),
    ],
    ids=["not-utf8", "imports-reference", "imports-grader", "empty"],
)
def test_a_local_run_refuses_what_the_grader_refuses_with_its_words(
    kit, tmp_path, content, message
):
    path = tmp_path / "toy.py"
    path.write_bytes(content)
    with pytest.raises(SubmissionError, match=message):
        load_implementation(kit / "problems" / "toy", str(path)).double(1)


def test_loader_reports_a_missing_name(kit, tmp_path):
    renamed = tmp_path / "renamed.py"
    renamed.write_text("def twice(x):\n    return 2 * x\n")
    impl = load_implementation(kit / "problems" / "toy", str(renamed))
    with pytest.raises(SubmissionError, match="defines no 'double'"):
        impl.double(1)


def test_loader_rejects_a_missing_file(kit):
    with pytest.raises(ImplementationSpecError, match="no such file"):
        load_implementation(kit / "problems" / "toy", "/nonexistent/solution.py")


def write_catalogue(kit: Path, body: str) -> Path:
    problem = kit / "problems" / "toy"
    (problem / ".meta" / "mistakes.toml").write_text(textwrap.dedent(body))
    return problem


def test_mistake_is_an_edit_of_the_reference(kit):
    problem = write_catalogue(
        kit,
        """
        [[mistake]]
        id = "triples"
        description = "Multiplies by three."
        edits = [{ find = "2 * x", replace = "3 * x" }]
        """,
    )
    assert [m.id for m in load_catalogue(problem)] == ["triples"]
    assert load_implementation(problem, "mistake:triples").double(2) == 6


@pytest.mark.parametrize(
    "body, message",
    [
        (
            '[[mistake]]\nid = "a"\ndescription = "d"\nedits = [{ find = "nowhere", replace = "x" }]',
            "occurs 0 times",
        ),
        ('[[mistake]]\nid = "a"\ndescription = "d"\n', "needs edits or source"),
        ('[[mistake]]\nid = "a b"\ndescription = "d"\nsource = "x = 1"\n', "unique identifier"),
        (
            '[[mistake]]\nid = "a"\ndescription = "d"\nedits = [{ find = "2", replace = "2" }]',
            "changes nothing",
        ),
        ('[[mistake]]\nid = "a"\nsource = "x = 1"\n', "has no description"),
    ],
    ids=["find-missing", "no-edits", "bad-id", "no-op", "no-description"],
)
def test_malformed_catalogue_is_rejected(kit, body, message):
    problem = write_catalogue(kit, body)
    with pytest.raises(MistakeSpecError, match=message):
        load_catalogue(problem)


def test_unknown_mistake_is_a_spec_error_not_a_failing_solution(kit):
    problem = write_catalogue(kit, "")
    with pytest.raises(ImplementationSpecError):
        load_implementation(problem, "mistake:nope")


def test_committed_case_tables_are_what_the_reference_gives_now():
    from grader.cli import main

    assert main(["cases", "--check"]) == 0, "run `grpo-kit cases` and commit the tables"


def test_a_stale_case_table_is_noticed():
    import json

    from grader.commands.cases import _same, table
    from grader.problems import get_problem

    fresh = table(get_problem("grpo_objective"))
    stale = json.loads(json.dumps(fresh))
    row = next(r for r in stale["cases"] if "expected" in r)
    row["expected"] = 12345.0
    assert _same(fresh, json.loads(json.dumps(fresh))) and not _same(fresh, stale)
