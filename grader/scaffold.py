"""The files of a new problem (`grpo-kit new SLUG`), each marked TODO where the author writes.

    problems/<slug>/README.md            the statement, in the kit's sections
    problems/<slug>/problem.toml         metadata (grader/problems.py documents every key)
    problems/<slug>/<slug>.py            the starter: signature, docstring, NotImplementedError
    problems/<slug>/test_<slug>.py       the hidden tests, through the `impl` fixture
    problems/<slug>/.meta/mistakes.toml  the catalogue of wrong solutions
    problems/<slug>/probes.py            with --probes: kit code run beside the solution
    problems/<slug>/.meta/cases.py       with --cases: the inputs of a table of cases
    reference/<slug>.py                  the reference solution

`grpo-kit validate SLUG` fails until every TODO is gone and every rule holds. A kit root
without problems/ yet (a course's own repository) gets the shared test support first.
"""

from __future__ import annotations

import keyword
import re
import shutil
from pathlib import Path

from grader.problems import KIT_ROOT, all_problems

SLUG = re.compile(r"[a-z][a-z0-9_]{1,40}")
SHARED = ("problems/__init__.py", "problems/conftest.py", "reference/__init__.py")

README = """# {title}

TODO: one paragraph: what this problem teaches, and where it sits in a GRPO trainer.

## Background

TODO: the idea, with the formula in LaTeX, e.g. $\\hat A_i = r_i - \\bar r$.

## Task

Implement `{slug}(x)` in `{slug}.py`. TODO: what it computes.

## Inputs

- `x`: TODO: type, shape and meaning.

## Output

TODO: type and shape of the result.

## Example

```python
>>> {slug}(TODO)
TODO
```

## Notes

TODO: the edge cases the tests check (empty input, NaN, dtypes, not modifying the inputs).
"""

META = """title = "{title}"
order = {order}
difficulty = "easy"
tags = ["TODO"]
implement = ["{slug}"]
runtime = "{runtime}"   # pyodide: also runs in the browser (numpy only); python: local only
points_per_test = 1
time_limit_s = 10
teaches = "TODO: one sentence: what a learner understands after solving it."
# Tests about input handling, worth at most a fifth of the points together, each earning in
# proportion to the points of the other tests earned:
input_checks = ["test_rejects_*", "test_does_not_modify_*"]
# Tests that a solution doing nothing passes too (the same seed gives the same result), earning
# the same way: contract_checks = ["test_same_seed_gives_the_same_result"]
"""

STARTER = '''"""Problem: {title}. Read README.md, then replace the body below."""

import numpy as np  # noqa: F401 - you will need it


def {slug}(x):
    """TODO: what it returns.

    Args:
        x: TODO.

    Returns:
        TODO.
    """
    raise NotImplementedError("{slug} is not implemented yet: write its body")
'''

TESTS = '''"""Hidden tests of {slug}. The solution arrives through the `impl` fixture: call
impl.{slug}(...) with plain values (numbers, lists, arrays); impl.{slug}.observe(...) also gives
the arguments as the call left them.{probes_note}"""

import numpy as np
import pytest

from problems.support.asserts import assert_array


def test_example_from_the_statement(impl):
    # TODO: the example of README.md, with its exact expected value.
    assert_array(impl.{slug}(np.array([1.0, 2.0])), np.array([1.0, 2.0]))


def test_rejects_an_empty_input(impl):
    with pytest.raises(ValueError):
        impl.{slug}(np.array([]))


def test_does_not_modify_its_input(impl):
    x = np.array([1.0, 2.0])
    call = impl.{slug}.observe(x)
    if call.error is not None:
        raise call.error
    assert np.array_equal(call.args[0], x), "{slug} changed its input"
'''

MISTAKES = '''# Plausible wrong solutions of {slug}, each an edit of reference/{slug}.py: every `find`
# must occur exactly once in the reference. A different approach altogether can be a whole
# `source = """..."""` instead of `edits`. `grpo-kit validate {slug}` proves that each one fails
# at least one hidden test; at least {minimum} are required.
#
# TODO: write them, one [[mistake]] each:
#
# [[mistake]]
# id = "forgets_the_mean"
# description = "One sentence: what the learner got wrong."
# edits = [{{ find = "text of the reference", replace = "the wrong text" }}]
'''

REFERENCE = '''"""Reference solution of {slug}: never handed to learners."""

import numpy as np


def {slug}(x):
    raise NotImplementedError("TODO: write the reference solution")
'''

PROBES = '''"""Probes of {slug}: kit code that runs beside the solution (in its sandbox when graded)
and returns plain data for a test to judge: impl.probe.<name>(...) calls <name>(solution, ...).
"""


def twice(solution, x):
    # TODO: replace with what a test cannot check from outside (a gradient, a trained weight).
    return solution.{slug}(solution.{slug}(x))
'''

CASES = '''"""The inputs of {slug}'s table of cases: `grpo-kit cases {slug}` runs each on the reference
and writes problems/{slug}/cases.json, which tests read with problems.support.cases.load."""


def cases():
    return [
        # TODO: one dict per case: a unique name, the function (or probe), args and kwargs.
        {{"name": "two_values", "function": "{slug}", "args": [[1.0, 2.0]], "kwargs": {{}}}},
    ]
'''


class ScaffoldError(ValueError):
    """The problem cannot be created; the message says why and what to do."""


def ensure_kit(root: Path) -> None:
    """Give a new kit root the shared files every problem's tests need."""
    for name in SHARED:
        target = root / name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(KIT_ROOT / name, target)
    support = root / "problems" / "support"
    if not support.exists():
        shutil.copytree(KIT_ROOT / "problems" / "support", support,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip


def create(slug: str, root: Path = KIT_ROOT, title: str | None = None, runtime: str = "pyodide",
           probes: bool = False, cases: bool = False) -> list[Path]:  # fmt: skip
    """Write the files of problem `slug` under `root`; the paths written."""
    from grader.validate import MIN_MISTAKES

    if not SLUG.fullmatch(slug) or keyword.iskeyword(slug):
        raise ScaffoldError(f"{slug!r} cannot name a problem: use lowercase letters, digits and _, "
                            "starting with a letter, e.g. reward_mean")  # fmt: skip
    folder = root / "problems" / slug
    reference = root / "reference" / f"{slug}.py"
    for path in (folder, reference):
        if path.exists():
            raise ScaffoldError(f"{path} exists already: pick another name, or edit it")
    ensure_kit(root)
    existing = all_problems(root / "problems")
    order = max((p.order for p in existing), default=0) + 1
    title = title or slug.replace("_", " ").capitalize()
    values = {"slug": slug, "title": title, "order": order, "runtime": runtime,
              "minimum": MIN_MISTAKES,
              "probes_note": " impl.probe.twice(x) runs probes.py's twice." if probes else ""}  # fmt: skip
    files = {folder / "README.md": README, folder / "problem.toml": META,
             folder / f"{slug}.py": STARTER, folder / f"test_{slug}.py": TESTS,
             folder / ".meta" / "mistakes.toml": MISTAKES, reference: REFERENCE}  # fmt: skip
    if probes:
        files[folder / "probes.py"] = PROBES
    if cases:
        files[folder / ".meta" / "cases.py"] = CASES
    for path, template in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**values), encoding="utf-8")
    return list(files)
