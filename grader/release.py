"""The student bundle of a course: what learners get, and never what they must not.

    OUT/README.md                 how to run the tests locally and open the site
    OUT/requirements.txt          the pinned packages the tests need
    OUT/check.py, OUT/serve.py    a verdict per test for your file; the site on localhost
    OUT/problems/<slug>/          statement, metadata, starter, hidden tests (or TESTS.md
                                  with only their names), probes, case table
    OUT/problems/support/, conftest.py   the test support the tests import
    OUT/grader/                   the local runner: the loader, the value codec, the collector
    OUT/reference/                only modules a problem builds on that are not the solution
                                  of a released problem (the capstone's GPT, tasks, config)
    OUT/site/                     the browser site of these problems (not with tests=names)

Never a problem's ``.meta/`` (the mistake catalogue) and never the reference solution of a
released problem: `find_leaks` reads every file of the bundle for their content (each line of
a reference solution that no public file of its problem holds, each function body of it, each
catalogued mistake's description) and the release is refused if one shows up.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

from grader.course import Course
from grader.mistakes import load_catalogue
from grader.problems import KIT_ROOT, Problem
from grader.provenance import tests_files
from grader.site import RUNTIME_FILES

# The kit's files a local run of the tests needs: the browser's, and the checker's instead of
# the browser's runner (test support is copied whole, toy models included).
RUNNER_FILES = tuple(
    name for name in RUNTIME_FILES if name != "grader/webrun.py" and "/support/" not in name
) + (
    "grader/runner.py",
    "grader/serve.py",
    "grader/commands/__init__.py",
    "grader/commands/check.py",
)
MIN_SECRET_LINE = 24  # characters: shorter lines (return x, imports) say nothing
CHECK = '''"""python check.py SLUG [FILE]: run one problem's tests against your file, a verdict per test."""

import argparse
import sys

from grader.commands import check

parser = argparse.ArgumentParser(prog="python check.py", description=check.HELP)
check.configure(parser)
sys.exit(check.run(parser.parse_args()))
'''
SERVE = '''"""python serve.py [PORT]: serve the problem site on http://127.0.0.1:PORT (default 8000)."""

import sys
from pathlib import Path

from grader.serve import make_server

port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
with make_server(Path(__file__).parent / "site", port=port) as server:
    print(f"Serving the problems at http://127.0.0.1:{server.server_address[1]}/ (Ctrl+C stops)")
    server.serve_forever()
'''


class ReleaseError(ValueError):
    """The bundle cannot be released as asked; the message says what to do."""


def needed_reference(problems: list[Problem]) -> list[str]:
    """Reference modules the released problems' tests or starters import."""
    needs = {
        problem.slug: {p.stem for p in tests_files(problem) if p.parent.name == "reference"}
        | set(problem.builds_on)
        for problem in problems
    }
    names = set().union(*needs.values())
    released = {p.slug for p in problems}
    clash = sorted(names & released)
    if clash:
        users = [slug for slug, needed in needs.items() if needed & released]
        others = [p.slug for p in problems if p.slug not in users]
        raise ReleaseError(
            f"{', '.join(users)} build(s) on the reference solutions of {', '.join(clash)}, which "
            "this release hands out as problems too. Release them apart: now "
            f"--problems {' '.join(others)}, and once those are closed --problems {' '.join(users)}"
        )
    return sorted(names)


def _test_names(problem: Problem) -> str:
    lines = [f"# The tests of {problem.title}", "",
             "Only their names: your instructor grades with the tests themselves.", ""]  # fmt: skip
    for path in problem.test_files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                doc = ast.get_docstring(node)
                lines.append(f"- `{node.name}`" + (f": {doc.splitlines()[0]}" if doc else ""))
    return "\n".join(lines) + "\n"


def _readme(course: Course, with_tests: bool, with_site: bool) -> str:
    torch = any(p.runtime == "python" for p in course.problems)
    lines = [f"# {course.title}", "", "The problems of this assignment:", ""]
    for problem in course.problems:
        points = course.points.get(problem.slug)
        worth = f" ({points:g} points)" if points is not None else ""
        lines.append(f"- [{problem.title}](problems/{problem.slug}/README.md) "
                     f"`{problem.slug}`{worth}")  # fmt: skip
    lines += ["", "## Set up", "", "Python 3.11 or later:", "", "```sh",
              "python3 -m venv .venv && . .venv/bin/activate",
              "pip install -r requirements.txt" + ("   # PyTorch too (CPU)" if torch else ""),
              "```", "", "Edit `problems/<slug>/<slug>.py`, the starter of each problem."]  # fmt: skip
    if with_tests:
        lines += ["", "## Run the tests", "", "```sh", "pytest problems/<slug>        "
                  "# the hidden tests, against your file",
                  "python check.py <slug>         # the same, a verdict and the points per test",
                  "python check.py <slug> my.py   # ... against any file", "```"]  # fmt: skip
    else:
        lines += ["", "## Tests", "", "Each problem's `TESTS.md` names the tests your file is "
                  "graded with; the tests themselves are not handed out."]  # fmt: skip
    if with_site:
        lines += ["", "## In the browser", "", "```sh", "python serve.py    "
                  "# then open http://127.0.0.1:8000/", "```", "",
                  "Problems that need PyTorch run locally only."]  # fmt: skip
    lines += ["", "Hand in `<slug>.py` for each problem, as your course says."]
    return "\n".join(lines) + "\n"


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)


def write_release(course: Course, out: Path, tests: str = "full", site: bool = True,
                  build_site=None) -> list[Path]:  # fmt: skip
    """Write the bundle into `out` (which must be empty or absent); the files written."""
    from grader.gradescope import pins, requirements

    problems = list(course.problems)
    reference = needed_reference(problems)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ReleaseError(f"{out} is not an empty folder: give a new one")
    with_tests = tests == "full"
    site = site and with_tests
    for name in RUNNER_FILES:
        _copy(KIT_ROOT / name, out / name)
    for path in sorted((KIT_ROOT / "problems" / "support").glob("*.py")):
        _copy(path, out / "problems" / "support" / path.name)
    for problem in problems:
        folder = out / "problems" / problem.slug
        public = [problem.statement, problem.dir / "problem.toml", problem.stub]
        public += [p for p in (problem.probes, problem.cases) if p.is_file()]
        public += problem.test_files if with_tests else []
        for path in public:
            _copy(path, folder / path.name)
        if not with_tests:
            (folder / "TESTS.md").write_text(_test_names(problem), encoding="utf-8")
    if reference:
        _copy(KIT_ROOT / "reference" / "__init__.py", out / "reference" / "__init__.py")
        for name in reference:
            _copy(KIT_ROOT / "reference" / f"{name}.py", out / "reference" / f"{name}.py")
    requirement = requirements(course)
    if any(p.runtime == "python" for p in problems):
        requirement += ("--extra-index-url https://download.pytorch.org/whl/cpu\n"
                        f"{pins()['torch']}\n")  # fmt: skip
    (out / "requirements.txt").write_text(requirement, encoding="utf-8")
    (out / "check.py").write_text(CHECK, encoding="utf-8")
    if site:
        (out / "serve.py").write_text(SERVE, encoding="utf-8")
        (build_site or _build_site)(out / "site", problems)
    (out / "README.md").write_text(_readme(course, with_tests, site), encoding="utf-8")
    leaks = find_leaks(out, problems)
    if leaks:
        shutil.rmtree(out)
        raise ReleaseError("the bundle would give away solutions, so nothing was released:\n  "
                           + "\n  ".join(leaks[:20]))  # fmt: skip
    return sorted(p for p in out.rglob("*") if p.is_file())


def _build_site(folder: Path, problems: list[Problem]) -> None:
    from grader import assets, site

    try:
        site.build_site(folder, problems)
    except (assets.AssetError, site.BuildError) as exc:
        raise ReleaseError(f"the site could not be built ({exc}): fix that, or release without "
                           "it (--no-site)") from None  # fmt: skip


# ------------------------------------------------------------------ proof by content


def _bodies(tree: ast.AST) -> dict[str, str]:
    """Each function's body as a normalised AST (docstring left out) -> its name."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]
            dump = ast.dump(ast.Module(body=body, type_ignores=[]))
            if len(body) >= 2 or (body and len(dump) > 300):  # a stub's raise is not a body
                found[dump] = node.name
    return found


def _lines(text: str) -> set[str]:
    return {line.strip() for line in text.splitlines()}


def common_lines(problems: list[Problem]) -> set[str]:
    """Lines some file of the kit holds that is no solution of `problems` (nor a catalogue):
    code anybody may see (imports, signatures, the grader's own code)."""
    kit = problems[0].dir.parent.parent if problems else KIT_ROOT
    secret = {p.reference.resolve() for p in problems}
    found: set[str] = set()
    for folder, patterns in (("grader", ("*.py",)), ("reference", ("*.py",)),
                             ("problems", ("*.py", "*.md", "*.toml", "*.json"))):  # fmt: skip
        for pattern in patterns:
            for path in (kit / folder).rglob(pattern):
                if path.resolve() not in secret and ".meta" not in path.parts:
                    found |= _lines(path.read_text(encoding="utf-8", errors="replace"))
    return found


def secrets(problem: Problem, common: set[str] = frozenset()) -> tuple[set[str], dict, list]:
    """What would give `problem` away: lines and function bodies of its reference solution
    that no public file holds, and its mistakes' descriptions."""
    reference = problem.reference.read_text(encoding="utf-8")
    lines = {line for line in _lines(reference) - common
             if len(line) >= MIN_SECRET_LINE and not line.startswith("#")}  # fmt: skip
    bodies = _bodies(ast.parse(reference))
    described = [m.description for m in load_catalogue(problem.dir) if len(m.description) >= 20]
    return lines, bodies, described


def _strings(text: str) -> list[str]:
    import json

    try:
        stack, found = [json.loads(text)], []
    except ValueError:
        return []
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            stack += [*value.keys(), *value.values()]
        elif isinstance(value, list):
            stack += value
    return found


def find_leaks(folder: Path, problems: list[Problem]) -> list[str]:
    """Every place in `folder` where a released problem's solution or mistakes show."""
    found = []
    common = common_lines(problems)
    wanted = [(p.slug, *secrets(p, common)) for p in problems]
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        shown = path.relative_to(folder).as_posix()
        if path.name == "mistakes.toml" or ".meta" in path.parts:
            found.append(f"{shown}: a mistake catalogue")
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary: the Pyodide runtime, fonts
        if path.suffix == ".json":  # the site's kit.json holds files as JSON strings
            text += "\n" + "\n".join(_strings(text))
        here = _lines(text)
        tree = None
        if path.suffix == ".py":
            try:
                tree = ast.parse(text)
            except SyntaxError:
                tree = None
        for slug, lines, bodies, described in wanted:
            for line in sorted(lines & here)[:3]:
                found.append(f"{shown}: a line of reference/{slug}.py: {line[:80]!r}")
            if tree is not None:
                for dump, name in _bodies(tree).items():
                    if dump in bodies:
                        found.append(f"{shown}: {name} is the body of reference/{slug}.py's "
                                     f"{bodies[dump]}")  # fmt: skip
            for description in described:
                if description in text:
                    found.append(f"{shown}: a catalogued mistake of {slug}: {description[:60]!r}")
    return found
