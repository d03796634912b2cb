"""Groups of suspiciously similar submissions of one problem, by normalised-AST comparison.

Each submission is parsed (never run) and walked into a sequence of tokens in which what a
copier changes cheaply is gone: identifiers become their order of first use (v1, v2, ...),
constants their type, docstrings, comments and layout vanish; names of attributes, modules and
builtins stay (they say what the code does). Runs of K tokens are hashed (k-grams); the
starter's k-grams, and those most of the class shares (the obvious way to write it), are left
out; two submissions are similar when the Jaccard index of what remains is high. Pairs join
into groups (union-find). A group is a lead for a person to read, not proof of copying.

Why not a tool from PyPI: pycode-similar (AST-based too) has had no release since 2020, and
copydetect (winnowing over pygments tokens, for any language) would add a dependency and a
tokenizer that knows less of Python than its own parser; the comparison here is short, has
no dependency, and is tested on the kit's own problems.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
from dataclasses import dataclass

K = 8  # tokens per k-gram
THRESHOLD = 0.75  # Jaccard index of distinctive k-grams that makes two submissions similar
MIN_KGRAMS = 12  # distinctive k-grams a submission needs to be compared at all
BUILTINS = frozenset(dir(builtins))


def _walk_tokens(tree: ast.Module) -> list[str]:
    """Node by node in source order, without recursion: a long enough expression (1 + 1 + ...,
    a thousand terms) parses but nests deeper than Python's recursion limit."""
    tokens: list[str] = []
    names: dict[str, str] = {}

    def name(identifier: str) -> str:
        if identifier in BUILTINS:
            return identifier
        return names.setdefault(identifier, f"v{len(names) + 1}")

    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        tokens.append(type(node).__name__)
        if isinstance(node, ast.Name):
            tokens.append(name(node.id))
        elif isinstance(node, ast.arg):
            tokens.append(name(node.arg))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            tokens.append(name(node.name))
            node.body = _without_docstring(node.body)
        elif isinstance(node, ast.Attribute):
            tokens.append(node.attr)
        elif isinstance(node, ast.Constant):
            tokens.append(type(node.value).__name__)
        elif isinstance(node, ast.alias):
            tokens.append(node.name)
        elif isinstance(node, ast.keyword):
            tokens.append(str(node.arg))
        pending.extend(reversed(list(ast.iter_child_nodes(node))))
    return tokens


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        return body[1:] or [ast.Pass()]
    return body


def tokens(source: str) -> list[str]:
    """The normalised token sequence of `source` (empty if it does not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    tree.body = _without_docstring(tree.body)
    return _walk_tokens(tree)


def kgrams(source: str) -> set[int]:
    seq = tokens(source)
    return {int.from_bytes(hashlib.blake2b("\x1f".join(seq[i:i + K]).encode(), digest_size=8)
                           .digest(), "big") for i in range(len(seq) - K + 1)}  # fmt: skip


@dataclass(frozen=True)
class Group:
    students: tuple[str, ...]
    similarity: float  # the highest Jaccard index between two of its members


def similar_groups(sources: dict[str, str], starter: str = "",
                   threshold: float = THRESHOLD) -> list[Group]:  # fmt: skip
    """Groups of students whose files of one problem are suspiciously alike."""
    prints = {student: kgrams(source) for student, source in sources.items()}
    common = kgrams(starter)
    counts: dict[int, int] = {}
    for found in prints.values():
        for gram in found:
            counts[gram] = counts.get(gram, 0) + 1
    shared_by = max(2, len(prints) // 2)  # k-grams this many share are the obvious code
    distinctive = {s: {g for g in found if g not in common and counts[g] <= shared_by}
                   for s, found in prints.items()}  # fmt: skip
    compared = sorted(s for s, found in distinctive.items() if len(found) >= MIN_KGRAMS)
    parent = {s: s for s in compared}

    def root(student: str) -> str:
        while parent[student] != student:
            parent[student] = parent[parent[student]]
            student = parent[student]
        return student

    best: dict[str, float] = {}
    for i, a in enumerate(compared):
        for b in compared[i + 1 :]:
            union = len(distinctive[a] | distinctive[b])
            score = len(distinctive[a] & distinctive[b]) / union if union else 0.0
            if score >= threshold:
                parent[root(a)] = root(b)
                for student in (a, b):
                    best[student] = max(best.get(student, 0.0), score)
    groups: dict[str, list[str]] = {}
    for student in compared:
        groups.setdefault(root(student), []).append(student)
    return sorted((Group(tuple(members), round(max(best[m] for m in members), 3))
                   for members in groups.values() if len(members) > 1),
                  key=lambda g: (-g.similarity, g.students))  # fmt: skip
