"""Turn a run's per-test results into what helps a learner most: readable test titles, one
banner per problem of the file as a whole, and printed output capped for the whole run.

Both places that run a learner's code for the page call `annotate`: the browser's worker
(through ``grader/webrun.py``) and the local server (``grader/localrun.py``), so the page
gets the same shape from each. Standard library only: this runs in Pyodide.

A *file problem* is one failure that several tests share and that no single test explains:
the file does not parse, raised while being imported or lacks a function (each a
`grader.errors.SubmissionError` with one same message), or a function still raises
NotImplementedError, as the starter does. The page shows it once, marks its line in the
editor, and lists the tests it holds up without repeating the message under each.
"""

from __future__ import annotations

import ast
import difflib
import re

from grader.errors import SubmissionError, TimeLimitError, type_name

SUBMISSION_ERROR = type_name(SubmissionError)
TIME_LIMIT_ERROR = type_name(TimeLimitError)
NOT_IMPLEMENTED = type_name(NotImplementedError)
# All the printed output one run sends to the page; failing tests get their share first.
TOTAL_OUTPUT_LIMIT = 20_000


def test_title(entry: dict) -> str:
    """The test's docstring if it has one, else its name as a sentence, parameters after."""
    function, _, params = entry["name"].partition("[")
    title = entry.get("doc") or function.removeprefix("test_").replace("_", " ").strip()
    title = title[:1].upper() + title[1:]
    params = params.removesuffix("]")
    return f"{title} ({params})" if params else title


def _parse(source: str) -> ast.Module | SyntaxError | None:
    """The file's tree, its syntax error, or None if it cannot be parsed at all."""
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        return exc
    except (ValueError, RecursionError, MemoryError):
        return None


def _raise_lines(tree: ast.Module) -> dict[str, int]:
    """Function name -> line of its ``raise NotImplementedError``."""
    found: dict[str, int] = {}
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(function):
            raised = node.exc if isinstance(node, ast.Raise) else None
            if isinstance(raised, ast.Call):
                raised = raised.func
            if isinstance(raised, ast.Name) and raised.id == "NotImplementedError":
                found.setdefault(function.name, node.lineno)
    return found


def misnamed(tree: ast.Module, names: list[str] | tuple[str, ...]) -> list[dict]:
    """Names the problem asks for that the file does not define, each with the defined
    function whose name is closest (a typo, most likely) and its line."""
    defined = {
        node.name: node.lineno
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    found = []
    for name in names:
        if name in defined:
            continue
        close = difflib.get_close_matches(name, list(defined), n=1, cutoff=0.6)
        found.append({
            "name": name,
            "closest": close[0] if close else None,
            "line": defined[close[0]] if close else None,
        })  # fmt: skip
    return found


def _line_of(kind: str, message: str, tests: list[dict], tree: ast.Module | None) -> int | None:
    frames = [frame for test in tests for frame in test.get("traceback") or []]
    if frames:
        return frames[-1]["line"] if kind == "not_implemented" else frames[0]["line"]
    if kind == "not_implemented" and tree is not None:
        # No frames (the code ran in another process): the raise in the function it names.
        raises = _raise_lines(tree)
        named = [
            line for name, line in raises.items() if re.search(rf"\b{re.escape(name)}\b", message)
        ]
        if len(named) == 1:
            return named[0]
        if len(raises) == 1:
            return next(iter(raises.values()))
    return None


def file_problems(tests: list[dict], source: str | None, names=()) -> list[dict]:
    """The failures that several tests share, each once: see the module docstring.

    `names`: the functions the problem asks for; one the file lacks but nearly has (a typo)
    is pointed at.

    Each is ``{"kind", "message", "line", "column", "tests"}``: kind is "syntax",
    "not_implemented" or "submission"; line and column (1-based) or None; tests, the ids.
    """
    groups: dict[tuple[str, str], list[dict]] = {}
    for test in tests:
        if test["outcome"] in ("failed", "error") and test.get("error_type") in (
            SUBMISSION_ERROR,
            TIME_LIMIT_ERROR,
            NOT_IMPLEMENTED,
        ):
            groups.setdefault((test["error_type"], test["message"]), []).append(test)
    parsed = _parse(source) if source else None
    syntax = parsed if isinstance(parsed, SyntaxError) else None
    tree = parsed if isinstance(parsed, ast.Module) else None
    missing_names = misnamed(tree, names) if tree is not None else []
    problems = []
    for (error_type, message), members in groups.items():
        if len(members) < 2:
            continue  # one test's own failure: it shows under that test
        kind = "not_implemented" if error_type == NOT_IMPLEMENTED else "submission"
        line = column = None
        if syntax is not None and kind == "submission":
            kind, line, column = "syntax", syntax.lineno, syntax.offset
        else:
            line = _line_of(kind, message, members, tree)
        for prefix in ("SubmissionError: ", "TimeLimitError: ", "NotImplementedError: "):
            message = message.removeprefix(prefix)
        for missing in missing_names if kind == "submission" else []:
            if f"'{missing['name']}'" in message and missing["closest"]:
                line = line or missing["line"]
                message += (
                    f" (line {missing['line']} defines '{missing['closest']}': "
                    f"did you mean '{missing['name']}'?)"
                )
        problems.append({
            "kind": kind,
            "message": message,
            "line": line,
            "column": column,
            "tests": [test["id"] for test in members],
        })  # fmt: skip
    return problems


def cap_total_output(tests: list[dict], limit: int = TOTAL_OUTPUT_LIMIT) -> None:
    """Cut the tests' printed output (in place) to `limit` characters for the whole run,
    failing tests first; each test's ``stdout_cut`` counts what it lost."""
    left = limit
    failing_first = sorted(tests, key=lambda test: test["outcome"] == "passed")
    for test in failing_first:
        text = test.get("stdout") or ""
        kept = text[: max(0, left)]
        left -= len(kept)
        test["stdout"] = kept
        test["stdout_cut"] = test.get("stdout_cut", 0) + len(text) - len(kept)


def annotate(report: dict, source: str | None, names=()) -> dict:
    """Add titles, file problems and the output cap to a run's report (and return it)."""
    for test in report["tests"]:
        test["title"] = test_title(test)
    cap_total_output(report["tests"])
    report["file_problems"] = file_problems(report["tests"], source, names)
    return report
