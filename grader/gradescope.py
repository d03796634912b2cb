"""Gradescope: its results format, checked, and an autograder zip for a course.

Gradescope runs an autograder as a zip holding ``setup.sh`` (run once, as root, when the
image is built, in ``/autograder/source`` where the zip is unpacked) and ``run_autograder``
(run for each submission, which is in ``/autograder/submission``; it must write
``/autograder/results/results.json``). The zip built here holds the course's problems (hidden
tests, probes, case tables), the grader and the few reference modules the tests or the
capstone build on (which only the capstone's sandbox shows, as in batch grading); no mistake
catalogue and no other reference solution.
``run_autograder`` grades with the same code, tests and sandbox as ``grpo-kit grade``
(``grader/autograder.py``).

`check_results` holds a results file to Gradescope's published specification (the keys it
documents, their types and allowed values), so a test can prove what the autograder writes.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from grader.course import Course
from grader.problems import KIT_ROOT
from grader.provenance import tests_files

FORMATS = ("text", "html", "simple_format", "md", "ansi")
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
NUMBER = (int, float)
TOP = {"score": NUMBER, "execution_time": NUMBER, "output": str, "output_format": FORMATS,
       "test_output_format": FORMATS, "test_name_format": FORMATS, "visibility": VISIBILITIES,
       "stdout_visibility": VISIBILITIES, "extra_data": dict, "tests": list,
       "leaderboard": list}  # fmt: skip
TEST = {"score": NUMBER, "max_score": NUMBER, "status": ("passed", "failed"), "name": str,
        "name_format": FORMATS, "number": str, "output": str, "output_format": FORMATS,
        "tags": list, "visibility": VISIBILITIES, "extra_data": dict}  # fmt: skip
LEADERBOARD = {"name": str, "value": (int, float, str), "order": ("asc", "desc")}
# What the autograder installs, pinned to the versions the kit is tested with.
RUNTIME_PACKAGES = ("numpy", "array-api-compat", "pytest", "tqdm")
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
VENV = "/autograder/venv"
SKIP = ("__pycache__", ".meta", "mutants")


def _check(where: str, value, kind) -> list[str]:
    if isinstance(kind, tuple) and kind and isinstance(kind[0], str):
        return [] if value in kind else [f"{where}: {value!r} is not one of {', '.join(kind)}"]
    if isinstance(value, bool) or not isinstance(value, kind):
        return [f"{where}: {value!r} has the wrong type"]
    return []


def check_results(results) -> list[str]:
    """What in `results` breaks Gradescope's results specification (empty: nothing)."""
    if not isinstance(results, dict):
        return ["results: not a JSON object"]
    problems = [f"unknown key {key!r}" for key in results if key not in TOP]
    for key, kind in TOP.items():
        if key in results:
            problems += _check(key, results[key], kind)
    tests = results.get("tests", [])
    if "score" not in results and (not tests or any("score" not in t for t in tests
                                                    if isinstance(t, dict))):  # fmt: skip
        problems.append("a score is needed: at the top, or on every test")
    for index, test in enumerate(tests if isinstance(tests, list) else []):
        where = f"tests[{index}]"
        if not isinstance(test, dict):
            problems.append(f"{where}: not a JSON object")
            continue
        problems += [f"{where}: unknown key {key!r}" for key in test if key not in TEST]
        for key, kind in TEST.items():
            if key in test:
                problems += _check(f"{where}.{key}", test[key], kind)
        if not all(isinstance(tag, str) for tag in test.get("tags", [])):
            problems.append(f"{where}.tags: every tag must be a string")
    for index, entry in enumerate(results.get("leaderboard", []) or []):
        where = f"leaderboard[{index}]"
        if not isinstance(entry, dict) or "name" not in entry or "value" not in entry:
            problems.append(f"{where}: needs a name and a value")
            continue
        for key, kind in LEADERBOARD.items():
            if key in entry:
                problems += _check(f"{where}.{key}", entry[key], kind)
    return problems


# ------------------------------------------------------------------ the autograder zip

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder's image: it installs
# Python 3.11+, bubblewrap (the sandbox) and the pinned packages of requirements.txt into
# {venv}, and makes the grader in /autograder/source importable there.
set -euo pipefail
cd /autograder/source
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends bubblewrap ca-certificates python3 python3-venv
PYTHON=python3
if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    # Ubuntu 22.04's python3 is 3.10: its 3.11 package is in the universe component.
    apt-get install -y -qq --no-install-recommends python3.11 python3.11-venv
    PYTHON=python3.11
fi
"$PYTHON" -m venv {venv}
{venv}/bin/pip install -q --no-cache-dir --upgrade pip=={pip}
{torch}{venv}/bin/pip install -q --no-cache-dir -r requirements.txt
SITE=$({venv}/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo /autograder/source > "$SITE/grpo_kit_autograder.pth"
# Fail the build now, not at the first submission, if anything is missing.
{venv}/bin/python -I -c 'import grader.autograder, numpy, pytest'
bwrap --version
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this for every submission: grade /autograder/submission with the course's
# hidden tests, each file in the sandbox, and write /autograder/results/results.json.
set -uo pipefail
PYTHON="${{GRPO_KIT_PYTHON:-{venv}/bin/python}}"
mkdir -p /autograder/results
exec "$PYTHON" -I -m grader.autograder \\
    --course /autograder/source/course.toml \\
    --submission /autograder/submission \\
    --metadata /autograder/submission_metadata.json \\
    --results /autograder/results/results.json
"""


def pins(constraints: Path = KIT_ROOT / "constraints.txt") -> dict[str, str]:
    """package (lower case) -> "package==version" from constraints.txt."""
    found = {}
    for line in constraints.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            found[line.split("==")[0].strip().lower()] = line
    return found


def requirements(course: Course) -> str:
    pinned = pins()
    missing = [name for name in RUNTIME_PACKAGES if name not in pinned]
    if missing:
        raise ValueError(f"constraints.txt pins no version of {', '.join(missing)}")
    return "\n".join(pinned[name] for name in RUNTIME_PACKAGES) + "\n"


def needs_torch(course: Course) -> bool:
    return any(p.runtime == "python" for p in course.problems)


def autograder_files(course: Course) -> dict[str, Path]:
    """Path in the zip -> file of the kit, for everything the course's grading reads."""
    files: dict[str, Path] = {}

    def add(path: Path) -> None:
        relative = path.relative_to(KIT_ROOT)
        if not any(part in SKIP for part in relative.parts):
            files[relative.as_posix()] = path

    for path in sorted((KIT_ROOT / "grader").rglob("*.py")):
        add(path)
    add(KIT_ROOT / "problems" / "__init__.py")
    add(KIT_ROOT / "reference" / "__init__.py")
    for problem in course.problems:
        for path in sorted(problem.dir.iterdir()):
            if path.is_file() and path.name not in SKIP:
                add(path)  # statement, metadata, starter, tests, probes, cases
        for path in tests_files(problem):
            add(path)  # test support and the reference modules the tests build on
    return files


def build_autograder(course: Course, out: Path) -> list[str]:
    """Write the autograder zip for `course` to `out`; the names it holds."""
    pinned = pins()
    torch = ""
    if needs_torch(course):
        torch = (f"{VENV}/bin/pip install -q --no-cache-dir --index-url {TORCH_INDEX} "
                 f"{pinned['torch']}\n")  # fmt: skip
    setup = SETUP.format(venv=VENV, pip=pinned["pip"].split("==")[1], torch=torch)
    texts = {
        "setup.sh": setup,
        "run_autograder": RUN.format(venv=VENV),
        "requirements.txt": requirements(course),
        "course.toml": course.to_toml(),
    }
    files = autograder_files(course)
    temporary = out.with_name(f".{out.name}.tmp")
    with zipfile.ZipFile(temporary, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in texts.items():
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            mode = 0o755 if name in ("setup.sh", "run_autograder") else 0o644
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, text)
        for name, path in sorted(files.items()):
            archive.write(path, name)
    temporary.replace(out)
    return [*texts, *sorted(files)]
