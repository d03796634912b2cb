"""Build the static problem site, ``web/dist/``, from ``problems/``.

The steps, each skipped when its inputs have not changed:

1. the pinned Pyodide runtime (grader/assets.py), assembled in ``.cache/``;
2. ``npm ci`` in ``web/`` (CodeMirror, markdown-it, KaTeX, esbuild, pinned by the lock file);
3. per browser problem, ``p/<slug>/kit.json``: the files a local run of its tests uses, which
   the Web Worker writes into Pyodide's file system. Never the reference solution nor the
   mistake catalogue: whatever the site ships, anyone can read;
4. ``web/build.mjs``: bundles the scripts and renders the pages from a manifest.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from grader import assets
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


def page_data(problem: Problem) -> dict:
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
        "commands": {
            "test": f"pytest problems/{problem.slug}",
            "check": f"grpo-kit check {problem.slug} problems/{problem.slug}/{problem.slug}.py",
        },
    }


def _input_files() -> list[Path]:
    web_inputs = [WEB_DIR / "build.mjs", WEB_DIR / "precompile.mjs", WEB_DIR / "package-lock.json"]
    web_inputs += sorted((WEB_DIR / "src").rglob("*"))
    problem_inputs = sorted(
        p for p in (KIT_ROOT / "problems").rglob("*") if "__pycache__" not in p.parts
    )
    code = [KIT_ROOT / "grader" / name for name in ("site.py", "assets.py", "problems.py")]
    code += [KIT_ROOT / name for name in RUNTIME_FILES]
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


def build_site(out: Path = DIST_DIR, problems: list[Problem] | None = None) -> Path:
    """Build the whole site into `out` (replacing what was there) and return `out`."""
    problems = all_problems() if problems is None else problems
    digest = inputs_digest()
    runtime = assets.ensure_assets()
    ensure_node_modules()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    assets.copy_runtime(out / "pyodide", runtime)
    for problem in problems:
        if problem.runs_in_browser:
            folder = out / "p" / problem.slug
            folder.mkdir(parents=True)
            (folder / "kit.json").write_text(json.dumps(kit_files(problem)), encoding="utf-8")
    manifest = {"out": str(out.resolve()), "problems": [page_data(p) for p in problems]}
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
