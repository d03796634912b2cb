"""The one seam between a problem's tests and the code under test.

Tests never import a solution. They receive an ``impl`` fixture (see ``problems/conftest.py``)
whose attributes are the names the problem asks for, loaded from the implementation chosen with
``--impl``:

    starter           the learner's stub, problems/<slug>/<slug>.py (the default)
    reference         the reference solution, reference/<slug>.py
    mistake:<id>      a wrong solution from the problem's catalogue (.meta/mistakes.toml)
    sandbox:<path>    a file run in a sandboxed child process (batch grading)
    <path>            any Python file

This module uses only the standard library so that the same tests run unchanged in CPython,
in Pyodide and in the batch grader.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType, SimpleNamespace

# Schemes whose loaders live elsewhere, imported only when used.
SCHEMES = {
    "mistake": "grader.mistakes:load_mistake",
    "sandbox": "grader.sandbox.proxy:load_sandboxed",
}


class ImplementationSpecError(Exception):
    """The --impl value names nothing that exists (a missing file, an unknown mistake)."""


class Unavailable:
    """Stands in for a function that could not be loaded: calling it fails with the reason.

    Each test then fails with a message the learner can act on, instead of pytest reporting
    a collection or setup error.
    """

    def __init__(self, name: str, reason: str):
        self.__name__ = name
        self.reason = reason

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(self.reason)

    def __repr__(self) -> str:
        return f"<unavailable {self.__name__}: {self.reason}>"


def implemented_names(problem_dir: Path) -> list[str]:
    meta = tomllib.loads((Path(problem_dir) / "problem.toml").read_text(encoding="utf-8"))
    return list(meta["implement"])


def load_module_from_file(path: Path, module_name: str) -> ModuleType:
    """Import a single file as a fresh module (not cached in sys.modules)."""
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_module_from_source(source: str, module_name: str, filename: str) -> ModuleType:
    module = ModuleType(module_name)
    module.__file__ = filename
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


def _describe(exc: BaseException, origin: str) -> str:
    if isinstance(exc, SyntaxError):
        return f"{origin} has a syntax error on line {exc.lineno}: {exc.msg}. Fix it and run again."
    return f"{origin} failed to import: {type(exc).__name__}: {exc}"


def _load(problem_dir: Path, spec: str) -> ModuleType | SimpleNamespace:
    slug = problem_dir.name
    scheme, _, rest = spec.partition(":")
    if rest and scheme in SCHEMES:
        module_name, _, func_name = SCHEMES[scheme].partition(":")
        loader = getattr(importlib.import_module(module_name), func_name)
        return loader(problem_dir, rest)
    if spec == "reference":
        kit_root = str(problem_dir.parent.parent)
        if kit_root not in sys.path:
            sys.path.insert(0, kit_root)
        return importlib.import_module(f"reference.{slug}")
    path = problem_dir / f"{slug}.py" if spec == "starter" else Path(spec)
    if not path.is_file():
        raise ImplementationSpecError(f"no such file: {path}")
    return load_module_from_file(path, f"solution_{slug}")


def load_implementation(problem_dir: Path, spec: str = "starter") -> SimpleNamespace:
    """The names a problem asks for, taken from the implementation `spec`.

    Never raises for a broken implementation: a name that cannot be had becomes an
    `Unavailable` whose call explains why.
    """
    problem_dir = Path(problem_dir)
    names = implemented_names(problem_dir)
    try:
        module = _load(problem_dir, spec)
    except ImplementationSpecError:
        raise
    except BaseException as exc:  # noqa: BLE001 - a solution may raise anything, even SystemExit
        if isinstance(exc, KeyboardInterrupt):
            raise
        origin = {
            "starter": f"{problem_dir.name}.py",
            "reference": f"reference/{problem_dir.name}.py",
        }
        reason = _describe(exc, origin.get(spec, spec))
        return SimpleNamespace(**{name: Unavailable(name, reason) for name in names})
    found = {}
    for name in names:
        value = getattr(module, name, None)
        if value is None:
            value = Unavailable(
                name, f"{spec} defines no {name!r}: keep the name from the starter."
            )
        found[name] = value
    return SimpleNamespace(**found)
