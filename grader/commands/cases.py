"""`grpo-kit cases [SLUG ...] [--check]`: write each problem's table of cases from the reference.

A problem's ``.meta/cases.py`` defines ``cases()``: a list of dicts, each naming a function
(``"function"``) or a probe (``"probe"``) of the problem, its ``"args"`` and ``"kwargs"``, a
unique ``"name"`` and, optionally, what it is ``"about"``. This command runs every case on the
reference solution, through the same seam as the tests, and writes inputs and results to
``problems/<slug>/cases.json`` (see ``problems/support/cases.py``). ``--check`` only compares
the committed tables with fresh ones.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from grader.problems import Problem, ProblemSpecError, UnknownProblemError

HELP = "generate the problems' tables of cases from the reference solutions (or --check them)"
SOURCE = "cases.py"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("slugs", nargs="*", metavar="SLUG", help="problems (default: all)")
    parser.add_argument("--check", action="store_true",
                        help="fail if a committed table differs from a fresh one")  # fmt: skip
    parser.add_argument("--root", type=Path, metavar="DIR",
                        help="the kit holding the problems (default: this kit)")  # fmt: skip


def _inputs(problem: Problem) -> list[dict]:
    path = problem.dir / ".meta" / SOURCE
    spec = importlib.util.spec_from_file_location(f"cases_{problem.slug}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = module.cases()
    names = [case["name"] for case in found]
    if len(set(names)) != len(names):
        raise ProblemSpecError(f"{path}: two cases share a name")
    for case in found:
        if ("function" in case) == ("probe" in case):
            raise ProblemSpecError(f"{path}: case {case['name']!r} needs a function or a probe")
        target = case.get("function")
        if target is not None and target not in problem.implement:
            raise ProblemSpecError(f"{path}: case {case['name']!r} calls unknown {target!r}")
    return found


def table(problem: Problem) -> dict:
    """The table of `problem`'s cases, its results computed by the reference solution."""
    from grader import values
    from grader.execution import reseed
    from grader.loader import load_implementation, next_test

    reference = load_implementation(problem.dir, "reference")
    rows = []
    for case in _inputs(problem):
        row = {"name": case["name"]}
        row |= {k: case[k] for k in ("function", "probe", "about") if k in case}
        args, kwargs = list(case.get("args", [])), dict(case.get("kwargs", {}))
        row |= {"args": values.encode(args), "kwargs": values.encode(kwargs)}
        next_test()
        reseed()
        target = (getattr(reference.probe, case["probe"]) if "probe" in case
                  else getattr(reference, case["function"]))  # fmt: skip
        try:
            row["expected"] = values.encode(target(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - an expected error is a result too
            row["raises"] = type(exc).__name__
        rows.append(row)
    reference.close()
    return {"problem": problem.slug, "generated_by": "grpo-kit cases", "cases": rows}


def dump(fresh: dict) -> str:
    """The table as JSON with one case per line, so that a change shows as a readable diff."""
    head = {k: v for k, v in fresh.items() if k != "cases"}
    rows = ",\n".join(json.dumps(row, separators=(",", ":")) for row in fresh["cases"])
    return json.dumps(head)[:-1] + ', "cases": [\n' + rows + "\n]}\n"


def _same(a, b) -> bool:
    """Equal tables, floats within rounding (another CPU may round the last bit otherwise)."""
    import numpy as np

    from grader import values

    if isinstance(a, dict) and isinstance(b, dict):
        if a.get("__t") in ("ndarray", "npscalar", "tensor") and a.get("__t") == b.get("__t"):
            x, y = values.decode(a), values.decode(b)
            x = np.asarray(x.double() if hasattr(x, "double") else x)
            y = np.asarray(y.double() if hasattr(y, "double") else y)
            if x.dtype.kind != "f":
                return x.dtype == y.dtype and np.array_equal(x, y)
            return x.shape == y.shape and np.allclose(x, y, rtol=1e-9, atol=1e-12, equal_nan=True)
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-12 + 1e-9 * abs(b)
    return a == b


def run(args: argparse.Namespace) -> int:
    from grader.problems import PROBLEMS_DIR, all_problems, get_problem

    problems_dir = args.root / "problems" if args.root else PROBLEMS_DIR
    try:
        problems = ([get_problem(s, problems_dir) for s in args.slugs] if args.slugs
                    else all_problems(problems_dir))  # fmt: skip
    except (UnknownProblemError, ProblemSpecError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stale = []
    for problem in problems:
        if not (problem.dir / ".meta" / SOURCE).is_file():
            if args.slugs:
                print(f"{problem.slug}: no .meta/{SOURCE}, nothing to generate")
            continue
        fresh = table(problem)
        if args.check:
            committed = (json.loads(problem.cases.read_text(encoding="utf-8"))
                         if problem.cases.is_file() else None)  # fmt: skip
            if committed is None or not _same(committed, fresh):
                stale.append(problem.slug)
            continue
        problem.cases.write_text(dump(fresh), encoding="utf-8")
        print(
            f"{problem.slug}: {len(fresh['cases'])} cases -> {problem.cases.relative_to(problem.dir.parent.parent)}"
        )
    if stale:
        print(f"out of date: {', '.join(stale)}: run `grpo-kit cases {' '.join(stale)}` and "
              "commit the tables", file=sys.stderr)  # fmt: skip
        return 1
    return 0
