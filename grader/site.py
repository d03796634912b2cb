"""Build the static problem site, ``web/dist/``, from ``problems/``.

The steps, each skipped when its inputs have not changed:

1. the pinned Pyodide runtime (grader/assets.py) and the files the page's Python starts from
   (grader/webruntime.py: a site-packages image and a memory snapshot), cached in ``.cache/``
   and served as ``/pyodide-<digest>/``;
2. ``npm ci`` in ``web/`` (CodeMirror, markdown-it, KaTeX, esbuild, pinned by the lock file);
3. per browser problem, ``p/<slug>/kit.json``: the files a local run of its tests uses, which
   the Web Worker writes into Pyodide's file system. Never the reference solution nor the
   mistake catalogue: whatever the site ships, anyone can read;
4. the list of every problem's hidden tests, as pytest collects them (the page shows it
   before the first run), and the statements' figures (grader/figures.py);
5. ``web/build.mjs``: bundles the scripts under content-hashed names, renders the pages from a
   manifest and precompresses what it wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from grader import assets, feedback, figures, webruntime
from grader.problems import KIT_ROOT, Problem, all_problems

WEB_DIR = KIT_ROOT / "web"
DIST_DIR = WEB_DIR / "dist"
STAMP_NAME = ".build-stamp"

# The kit's own files every run of a problem's tests needs, as in the repository.
RUNTIME_FILES = (
    "problems/__init__.py",
    "problems/conftest.py",
    "problems/support/__init__.py",
    "problems/support/asserts.py",
    "problems/support/cases.py",
    "grader/__init__.py",
    "grader/collect.py",
    "grader/errors.py",
    "grader/execution.py",
    "grader/feedback.py",
    "grader/loader.py",
    "grader/problems.py",
    "grader/sources.py",
    "grader/values.py",
    "grader/webrun.py",
)


class BuildError(RuntimeError):
    """The site could not be built; the message says what to do."""


def kit_files(problem: Problem) -> dict[str, str]:
    """Path (relative to the kit root) -> text of every file a browser run writes."""
    paths = [KIT_ROOT / name for name in RUNTIME_FILES]
    paths += [problem.dir / "problem.toml", problem.stub, *problem.test_files]
    paths += [path for path in (problem.probes, problem.cases) if path.is_file()]
    return {p.relative_to(KIT_ROOT).as_posix(): p.read_text(encoding="utf-8") for p in paths}


def runtime_files() -> dict[str, str]:
    """The kit's files every page's Python imports (the memory snapshot holds them)."""
    return {name: (KIT_ROOT / name).read_text(encoding="utf-8") for name in RUNTIME_FILES}


def collect_tests(problems: list[Problem]) -> dict[str, list[dict]]:
    """slug -> the problem's hidden tests as pytest collects them: id, title and points."""
    if not problems:
        return {}
    root = problems[0].dir.parent.parent
    with tempfile.TemporaryDirectory(prefix="grpo-kit-") as tmp:
        report = Path(tmp) / "collected.json"
        command = [sys.executable, "-m", "pytest", *(str(p.dir) for p in problems),
                   "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "grader.collect",
                   f"--collect-file={report}", "--rootdir", str(root)]  # fmt: skip
        done = subprocess.run(command, cwd=root, capture_output=True, text=True)
        if done.returncode != 0 or not report.is_file():
            raise BuildError(f"pytest could not collect the hidden tests:\n{done.stdout[-3000:]}")
        collected = json.loads(report.read_text(encoding="utf-8"))["tests"]
    tests: dict[str, list[dict]] = {p.slug: [] for p in problems}
    for problem in problems:
        mine = [t for t in collected if t["id"].startswith(f"problems/{problem.slug}/")]
        points = problem.test_points([t["name"] for t in mine])
        tests[problem.slug] = [
            {"id": t["id"], "title": feedback.test_title(t), "points": round(points[t["name"]], 2)}
            for t in mine
        ]
    return tests


def page_data(problem: Problem, tests: list[dict] | None = None) -> dict:
    """What build.mjs needs to render one problem's page."""
    return {
        "slug": problem.slug,
        "title": problem.title,
        "order": problem.order,
        "difficulty": problem.difficulty,
        "tags": list(problem.tags),
        "runtime": problem.runtime,
        "teaches": problem.teaches,
        "statement": problem.statement.read_text(encoding="utf-8"),
        "starter": problem.stub.read_text(encoding="utf-8"),
        "hints": list(problem.hints),
        "tests": tests or [],
        "commands": {
            "test": f"pytest problems/{problem.slug}",
            "check": f"grpo-kit check {problem.slug} problems/{problem.slug}/{problem.slug}.py",
        },
    }


def _input_files() -> list[Path]:
    web_inputs = [WEB_DIR / name for name in ("build.mjs", "precompile.mjs", "package-lock.json")]
    web_inputs += [WEB_DIR / name for name in webruntime.SCRIPTS]
    web_inputs += sorted((WEB_DIR / "src").rglob("*"))
    problem_inputs = sorted(
        p for p in (KIT_ROOT / "problems").rglob("*") if "__pycache__" not in p.parts
    )
    code = [KIT_ROOT / "grader" / f"{name}.py"
            for name in ("site", "assets", "problems", "webruntime", "figures", "collect")]  # fmt: skip
    code += [KIT_ROOT / name for name in RUNTIME_FILES]
    code += sorted((KIT_ROOT / "reference").glob("*.py"))  # the figures are drawn from it
    return [p for p in [*web_inputs, *problem_inputs, *code] if p.is_file()]


def inputs_digest() -> str:
    """One hash of everything the site is built from: a changed file means a rebuild."""
    digest = hashlib.sha256()
    for path in _input_files():
        digest.update(path.relative_to(KIT_ROOT).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def is_stale(out: Path = DIST_DIR) -> bool:
    stamp = out / STAMP_NAME
    return not stamp.is_file() or stamp.read_text().strip() != inputs_digest()


def _run(command: list[str], cwd: Path, what: str) -> None:
    try:
        subprocess.run(command, cwd=cwd, check=True)
    except FileNotFoundError:
        raise BuildError(
            f"{what}: {command[0]} is not installed (the site needs Node.js 20.19+ and npm)"
        ) from None
    except subprocess.CalledProcessError as exc:
        raise BuildError(f"{what} failed (exit {exc.returncode}): see the output above") from None


def ensure_node_modules() -> None:
    """`npm ci` in web/, once per version of package-lock.json."""
    lock = WEB_DIR / "package-lock.json"
    marker = WEB_DIR / "node_modules" / ".grpo-kit-lock-sha256"
    wanted = assets.sha256_of(lock)
    if marker.is_file() and marker.read_text().strip() == wanted:
        return
    print("installing the site's JavaScript packages (npm ci)", file=sys.stderr)
    _run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], WEB_DIR, "npm ci")
    marker.write_text(wanted + "\n")


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)  # the runtime is large and never changes in place
    except OSError:
        shutil.copy2(source, target)


def build_site(out: Path = DIST_DIR, problems: list[Problem] | None = None) -> Path:
    """Build the whole site into `out` (replacing what was there) and return `out`."""
    problems = all_problems() if problems is None else problems
    digest = inputs_digest()
    boot = webruntime.boot_folder(runtime_files())
    ensure_node_modules()
    tests = collect_tests(problems)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copytree(boot, out / boot.name, copy_function=_link_or_copy)
    for problem in problems:
        folder = out / "p" / problem.slug
        folder.mkdir(parents=True)
        if problem.runs_in_browser:
            (folder / "kit.json").write_text(json.dumps(kit_files(problem)), encoding="utf-8")
        statement = problem.statement.read_text(encoding="utf-8")
        try:
            figures.write_figures(problem.slug, statement, folder / "figures")
        except KeyError as exc:
            raise BuildError(f"{problem.statement} shows figures/{exc.args[0][1]}.svg, which "
                             "no function in grader/figures.py draws: add it to FIGURES") from None  # fmt: skip
    manifest = {
        "out": str(out.resolve()),
        "runtime": f"/{boot.name}/",
        "problems": [page_data(p, tests[p.slug]) for p in problems],
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(manifest, f)
    try:
        _run(["node", str(WEB_DIR / "build.mjs"), f.name], WEB_DIR, "web/build.mjs")
    finally:
        Path(f.name).unlink()
    (out / STAMP_NAME).write_text(digest + "\n")
    return out


def ensure_site(out: Path = DIST_DIR) -> Path:
    """Build the site unless `out` already holds a build of the current sources."""
    return build_site(out) if is_stale(out) else out
