"""The rules a problem must meet, checked one by one with a readable verdict each.

`grpo-kit validate [SLUG ...]` and the kit's own tests (tests/test_curriculum.py) hold every
problem to the same rules:

1. problem.toml is valid and the statement, starter, tests and reference exist;
2. the reference solution passes every hidden test;
3. the starter fails every hidden test, each with NotImplementedError (never a collection
   error or a crash of the tests themselves);
4. the mistake catalogue (.meta/mistakes.toml) holds at least MIN_MISTAKES mistakes;
5. every catalogued mistake fails at least one test, and no test errors on it;
6. tests about input handling (named like INPUT_CHECK_WORDS) are listed in problem.toml's
   `input_checks`, and together are worth at most MAX_INPUT_CHECK_SHARE of the points; with
   the `contract_checks`, at most MAX_GATED_SHARE;
7. the table of cases (cases.json), when the problem has .meta/cases.py, is what the reference
   gives today (`grpo-kit cases` rewrites it);
8. no TODO of the scaffold (`grpo-kit new`) is left in any of the problem's files;
9. the mutation score of the hidden tests reaches the target (`grpo-kit mutation`), when
   mutmut is installed and the check is not skipped.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from grader.problems import (
    KIT_ROOT,
    MAX_GATED_SHARE,
    MAX_INPUT_CHECK_SHARE,
    Problem,
    ProblemSpecError,
    load_problem,
)

MIN_MISTAKES = 10
# Test names that say a test is about input handling rather than the computation itself.
INPUT_CHECK_WORDS = re.compile(
    r"raises|raise_|modif|dtype|returns_a_|accepts_|rejects_|_type_error"
)
TODO = "TODO"


@dataclass
class Check:
    rule: str
    ok: bool | None  # None: skipped
    details: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        mark = {True: "ok  ", False: "FAIL", None: "skip"}[self.ok]
        return [f"  {mark} {self.rule}", *(f"         {d}" for d in self.details[:12])] + (
            [f"         ... and {len(self.details) - 12} more"] if len(self.details) > 12 else []
        )


def hidden_test_functions(problem: Problem) -> list[str]:
    names = []
    for path in problem.test_files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names += [node.name for node in tree.body
                  if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]  # fmt: skip
    return names


def input_check_problems(problem: Problem) -> list[str]:
    """Why the problem's input checks break rule 6 (empty: they do not)."""
    functions = hidden_test_functions(problem)
    unlisted = [
        f for f in functions if INPUT_CHECK_WORDS.search(f) and not problem.is_input_check(f)
    ]
    found = [f"list {name} in input_checks (it tests input handling)" for name in unlisted]
    total = sum(problem.function_points(f) for f in functions)
    checks = sum(problem.function_points(f) for f in functions if problem.is_input_check(f))
    gated = sum(problem.function_points(f) for f in functions if problem.is_gated(f))
    if total <= 0:
        return [*found, "the tests are worth no points"]
    if checks > MAX_INPUT_CHECK_SHARE * total + 1e-9:
        found.append(f"input checks are worth {checks:g} of {total:g} points: at most "
                     f"{MAX_INPUT_CHECK_SHARE:.0%} is allowed")  # fmt: skip
    if gated > MAX_GATED_SHARE * total + 1e-9:
        found.append(f"input and contract checks are worth {gated:g} of {total:g} points: at "
                     f"most {MAX_GATED_SHARE:.0%} is allowed")  # fmt: skip
    return found


def _describe(outcome) -> str:
    return f"{outcome.name}: {outcome.outcome}" + (
        f" ({outcome.message.splitlines()[0][:120]})" if outcome.message else ""
    )


def _todos(problem: Problem) -> list[str]:
    paths = [problem.statement, problem.dir / "problem.toml", problem.stub, *problem.test_files,
             problem.reference, problem.mistakes_file, problem.probes]  # fmt: skip
    found = []
    for path in paths:
        if path.is_file():
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if TODO in line:
                    found.append(f"{path.name}:{number}: {line.strip()[:100]}")
    return found


def validate(problem_dir: Path, mutation: bool = True, mutation_workers: int = 2) -> list[Check]:
    """Every rule, checked on the problem in `problem_dir` (see the module docstring)."""
    from grader.mistakes import MistakeSpecError, load_catalogue
    from grader.runner import run_tests

    try:
        problem = load_problem(problem_dir)
        if not problem.reference.is_file():
            raise ProblemSpecError(f"no reference solution {problem.reference}")
    except ProblemSpecError as exc:
        return [Check("problem.toml and the problem's files are in order", False, [str(exc)])]
    checks = [Check("problem.toml and the problem's files are in order", True)]
    try:
        mistakes = load_catalogue(problem.dir)
        catalogue_error = None
    except MistakeSpecError as exc:
        mistakes, catalogue_error = [], str(exc)
    root = problem.dir.parent.parent
    impls = ["reference", "starter", *(f"mistake:{m.id}" for m in mistakes)]
    try:
        outcomes = run_tests(problem, impls, root=None if root == KIT_ROOT else root)
    except RuntimeError as exc:
        checks.append(Check("the hidden tests run", False, str(exc).splitlines()[-12:]))
        return checks
    by_impl: dict[str, list] = {spec: [] for spec in impls}
    for outcome in outcomes:
        by_impl[outcome.impl].append(outcome)

    reference = by_impl["reference"]
    failing = [_describe(o) for o in reference if o.outcome != "passed"]
    checks.append(Check(f"the reference passes every hidden test ({len(reference)})",
                        bool(reference) and not failing,
                        failing or ([] if reference else ["no test ran"])))  # fmt: skip
    wrong = [_describe(o) for o in by_impl["starter"]
             if o.outcome != "failed" or "NotImplementedError" not in o.message]  # fmt: skip
    checks.append(Check("the starter fails every test as not implemented (NotImplementedError)",
                        not wrong, wrong))  # fmt: skip
    count = Check(f"the catalogue holds at least {MIN_MISTAKES} mistakes ({len(mistakes)})",
                  len(mistakes) >= MIN_MISTAKES and catalogue_error is None,
                  [catalogue_error] if catalogue_error else [])  # fmt: skip
    if len(mistakes) < MIN_MISTAKES and not catalogue_error:
        count.details.append(f"add {MIN_MISTAKES - len(mistakes)} more to "
                             f"{problem.mistakes_file.relative_to(root)}")  # fmt: skip
    checks.append(count)
    caught = []
    for mistake in mistakes:
        results = by_impl[f"mistake:{mistake.id}"]
        errors = [o for o in results if o.outcome == "error"]
        if errors:
            caught.append(f"{mistake.id}: a test errors instead of failing: {_describe(errors[0])}")
        elif not any(o.outcome == "failed" for o in results):
            caught.append(f"{mistake.id}: every test passes ({mistake.description})")
    checks.append(Check("every catalogued mistake fails at least one test, none errors",
                        not caught and not catalogue_error, caught))  # fmt: skip
    found = input_check_problems(problem)
    checks.append(Check(f"input checks are listed and worth at most {MAX_INPUT_CHECK_SHARE:.0%}",
                        not found, found))  # fmt: skip
    checks.append(_cases(problem))
    todos = _todos(problem)
    checks.append(Check("no TODO of the scaffold is left", not todos, todos))
    checks.append(_mutation(problem, mutation, mutation_workers))
    return checks


def _cases(problem: Problem) -> Check:
    rule = "the table of cases (cases.json) matches the reference"
    if not (problem.dir / ".meta" / "cases.py").is_file():
        return Check(rule + ": no .meta/cases.py", None)
    from grader.commands.cases import _same, table

    try:
        fresh = table(problem)
    except Exception as exc:  # noqa: BLE001 - an author's cases.py may raise anything
        return Check(rule, False, [f".meta/cases.py failed: {type(exc).__name__}: {exc}"])
    import json

    committed = json.loads(problem.cases.read_text(encoding="utf-8")) if problem.cases.is_file() \
        else None  # fmt: skip
    same = committed is not None and _same(committed, fresh)
    return Check(rule, same, [] if same else [f"run `grpo-kit cases {problem.slug}`"])


def _mutation(problem: Problem, wanted: bool, workers: int) -> Check:
    import importlib.util

    from grader.commands.mutation import TARGET, _changed, mutate

    rule = f"mutation score of the tests at least {TARGET:.0%}"
    if not wanted:
        return Check(rule + " (skipped: --no-mutation)", None)
    if importlib.util.find_spec("mutmut") is None:
        return Check(rule + " (skipped: mutmut is not installed)", None)
    try:
        score = mutate(problem, workers)
    except RuntimeError as exc:
        return Check(rule, False, str(exc).splitlines()[-8:])
    details = []
    for survivor in score.survivors:  # "<name> (survived)\n<diff>"
        name, _, diff = survivor.partition("\n")
        before, after = _changed(diff)
        details.append(f"{name}: {before!r} -> {after!r} passes every test (a missing test, or "
                       "an equivalent mutant to list in .meta/mutants.toml)")  # fmt: skip
    return Check(f"{rule}: {score.score:.1%} ({score.killed} of "
                 f"{score.mutants - score.equivalent} mutants killed)", score.score >= TARGET,
                 details)  # fmt: skip
