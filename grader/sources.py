"""Whether a solution file can be run at all, decided from its bytes before any of it runs.

The local runner, the browser and the batch grader all ask `check_source`, so a file that one
of them refuses, the others refuse with the same words. Standard library only (Pyodide).
"""

from __future__ import annotations

import ast

MAX_SOURCE_BYTES = 256 * 1024
KIT_PACKAGES = ("reference", "grader", "problems")


def check_source(slug: str, data: bytes, builds_on: tuple[str, ...] = ()) -> str | None:
    """Why `data` cannot be run as ``<slug>.py``, or None if it can.

    `builds_on` lists the reference modules the problem lets a solution import (the
    capstone's); any other import of the kit's own packages is refused.
    """
    name = f"{slug}.py"
    if len(data) > MAX_SOURCE_BYTES:
        return f"{name} is larger than {MAX_SOURCE_BYTES // 1024} KiB"
    if not data.strip():
        return f"{name} is empty: start from the problem's starter file"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"{name} is not UTF-8 text (byte {exc.start}): save it as UTF-8"
    if "\x00" in text:
        return f"{name} contains NUL bytes: it is not a Python source file"
    try:
        tree = ast.parse(text, filename=name)  # parsing only: nothing of the file runs here
    except SyntaxError as exc:
        return f"{name} has a syntax error on line {exc.lineno}: {exc.msg}. Fix it and run again."
    except (ValueError, RecursionError, MemoryError) as exc:
        return f"{name} could not be parsed: {type(exc).__name__}"
    return _forbidden_import(name, tree, builds_on)


# Where statements nest: an import is a statement, so the expressions (most of a file's nodes)
# need no search.
_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _import_statements(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of the file, at any depth, in the order of the source."""
    found, pending = [], list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for field in _BODIES:
            pending.extend(getattr(node, field, ()))
    return sorted(found, key=lambda node: (node.lineno, node.col_offset))


def _imported_modules(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The absolute modules an import statement names (relative imports name none)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level or not node.module:
        return []
    if node.module == "reference":  # from reference import sample_group
        return [f"reference.{alias.name}" for alias in node.names]
    return [node.module]


def reference_modules(tree: ast.Module) -> frozenset[str]:
    """The reference modules a parsed file imports: ``{"kl_estimators"}`` for any of
    ``import reference.kl_estimators``, ``from reference.kl_estimators import kl_k3`` and
    ``from reference import kl_estimators``, at any depth."""
    return frozenset(
        module.split(".")[1]
        for node in _import_statements(tree)
        for module in _imported_modules(node)
        if module.startswith("reference.")
    )


def _forbidden_import(name: str, tree: ast.Module, builds_on: tuple[str, ...]) -> str | None:
    for node in _import_statements(tree):
        for module in _imported_modules(node):
            package, _, rest = module.partition(".")
            if package not in KIT_PACKAGES:
                continue
            if package == "reference" and rest.partition(".")[0] in builds_on:
                continue
            allowed = ", ".join(f"reference.{m}" for m in builds_on)
            hint = f" (it may import {allowed})" if allowed else ""
            return (
                f"{name} imports {module} (line {node.lineno}): a solution may not use the "
                f"kit's own code{hint}. Write it yourself."
            )
    return None
