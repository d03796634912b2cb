"""Bad input, resume after a crash, and shards joined by merge.

Whatever is wrong with one student's files (broken, encrypted or bomb zips, symbolic links,
folders where files should be, names that are not UTF-8) is reported to that student, and
everybody else is graded.
"""

from __future__ import annotations

import ast
import contextlib
import csv
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader import batch, reports
from grader import submissions as subs
from grader.batch import (
    TIME_LIMIT_ERROR,
    BatchOptions,
    PytestRuns,
    parse_shard,
    results_from_collected,
    shard,
    split_collected,
)
from grader.problems import KIT_ROOT, get_problem
from grader.reports import StudentResult
from grader.sources import MAX_SOURCE_BYTES, check_source, reference_modules

SLUG = "grpo_objective"
PROBLEM = get_problem(SLUG)
REFERENCE = PROBLEM.reference
WRONG = "def grpo_objective(rhos, A, pi_theta_old, pi_theta_ref, epsilon=0.2, beta=0.01):\n" \
        "    return 0.0\n"  # fmt: skip


def grpo_kit(*args: str, **kwargs) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "grader.cli", *args]
    return subprocess.run(command, cwd=KIT_ROOT, capture_output=True, text=True, timeout=600,
                          **kwargs)  # fmt: skip


def grade(submissions: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return grpo_kit("grade", str(submissions), "--out", str(out), "--problems", SLUG,
                    "--time-limit", "3", *extra)  # fmt: skip


def gradebook(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "gradebook.csv", newline="") as file:
        return {row["student"]: row for row in csv.DictReader(file)}


def write(folder: Path, name: str, data: str | bytes) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(data) if isinstance(data, bytes) else path.write_text(data)


def make_zip(path: Path, members: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)


# ------------------------------------------------------------------ checks before running


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "is empty"),
        (b"  \n\n", "is empty"),
        (b"def f():\n    return '\xff\xfe'\n", "is not UTF-8"),
        (b"def grpo_objective(:\n", "syntax error on line 1"),
        (b"x = 1\x00\n", "NUL bytes"),
        (b"#" * (MAX_SOURCE_BYTES + 1), "larger than"),
        (b"from reference.grpo_objective import grpo_objective\n", "imports reference"),
    ],
)
def test_check_source_explains_what_is_wrong(data, reason):
    assert reason in check_source(SLUG, data)


@pytest.mark.parametrize(
    ("source", "line"),
    [
        ("import os, grader\n", 1),
        ("def f():\n    try:\n        pass\n    except Exception:\n        if x:\n"
         "            import grader.x\n", 6),
        ("match x:\n    case 1:\n        from reference import grpo_objective\n", 3),
        ("class A:\n    def f(self):\n        with a:\n            for i in b:\n"
         "                while c:\n                    pass\n            else:\n"
         "                import problems\n", 8),
        ("try:\n    pass\nexcept* ValueError:\n    pass\nelse:\n    pass\n"
         "finally:\n    import reference.x\n", 8),
        ("async def f():\n    async with a:\n        async for b in c:\n"
         "            from grader import cli\n", 4),
        ("import os\ndef f():\n    import grader.b\nimport grader.a\n", 3),  # the first line
    ],
)  # fmt: skip
def test_an_import_of_the_kit_is_found_at_any_depth(source, line):
    assert f"(line {line})" in check_source(SLUG, source.encode())


def test_reference_modules_names_every_form_of_import_at_any_depth():
    # What the sandbox shows a problem and what a rerun hashes both come from this.
    source = (
        "import numpy, reference.kl_estimators as kl\n"
        "from reference.masked_token_loss import per_token_loss\n"
        "from reference import group_stats, token_logprobs as tl\n"
        "from . import reference\n"  # relative: not the kit's package
        "from .reference.gpt import GPT\n"
        "import referencex.y\n"
        "def f():\n    if x:\n        pass\n    else:\n        import reference.tasks\n"
    )
    assert reference_modules(ast.parse(source)) == {
        "kl_estimators", "masked_token_loss", "group_stats", "token_logprobs", "tasks",
    }  # fmt: skip


def test_check_source_accepts_the_reference():
    assert check_source(SLUG, REFERENCE.read_bytes()) is None


def test_zips_are_read_and_checked(tmp_path):
    make_zip(tmp_path / "nested.zip", {f"nested/{SLUG}.py": WRONG, "nested/notes.txt": "hi"})
    make_zip(tmp_path / "slip.zip", {f"../{SLUG}.py": WRONG})
    make_zip(tmp_path / "twice.zip", {f"{SLUG}.py": WRONG, f"x/{SLUG}.py": WRONG})
    (tmp_path / "corrupt.zip").write_bytes(b"PK\x03\x04 this is not a zip")
    write(tmp_path / "folder", f"{SLUG}.py", WRONG)
    make_zip(tmp_path / "folder.zip", {f"{SLUG}.py": WRONG})
    write(tmp_path, "bad name!", "")
    found, warnings = subs.find_submissions(tmp_path, [PROBLEM])
    by_name = {s.student: s for s in found}
    assert by_name["nested"].sources == {SLUG: WRONG.encode()}
    assert by_name["nested"].ignored == ["nested/notes.txt"]
    assert "unsafe path" in by_name["slip"].rejected[SLUG]
    assert "more than once" in by_name["twice"].rejected[SLUG]
    assert "cannot be read as a zip" in by_name["corrupt"].rejected[SLUG]
    assert any("folder already has a submission" in w for w in warnings)
    assert any("'bad name!'" in w for w in warnings)


def test_oversized_zip_is_rejected(tmp_path, monkeypatch):
    monkeypatch.setattr(subs, "MAX_ZIP_BYTES", 100)
    make_zip(tmp_path / "big.zip", {f"{SLUG}.py": WRONG * 10})
    (found,), _ = subs.find_submissions(tmp_path, [PROBLEM])
    assert "larger than" in found.rejected[SLUG]


def _patch(data: bytes, old: bytes, new: bytes, count: int = 2) -> bytes:
    """Change a field in a zip's local header and its central directory entry."""
    assert data.count(old) >= count, "the zip does not look as expected"
    return data.replace(old, new, count)


def encrypted_zip(path: Path) -> None:
    """A zip whose entry claims to be encrypted (general purpose flag bit 0)."""
    make_zip(path, {f"{SLUG}.py": WRONG})
    data = path.read_bytes()
    local = data.index(b"PK\x03\x04") + 6
    central = data.index(b"PK\x01\x02") + 8
    data = bytearray(data)
    data[local] |= 1
    data[central] |= 1
    path.write_bytes(bytes(data))


def unsupported_zip(path: Path) -> None:
    """A zip whose entry uses a compression method zipfile cannot read (99: AES)."""
    make_zip(path, {f"{SLUG}.py": WRONG})
    data = bytearray(path.read_bytes())
    for offset in (data.index(b"PK\x03\x04") + 8, data.index(b"PK\x01\x02") + 10):
        data[offset : offset + 2] = (99).to_bytes(2, "little")
    path.write_bytes(bytes(data))


def corrupt_stream_zip(path: Path) -> None:
    """A deflated entry whose compressed bytes were damaged in transfer."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{SLUG}.py", REFERENCE.read_text() * 3)
    data = bytearray(path.read_bytes())
    start = data.index(b"PK\x03\x04") + 30 + len(f"{SLUG}.py")
    for offset in range(start + 5, start + 60):
        data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def bomb_zip(path: Path) -> None:
    """A small zip that unpacks to a gigabyte, its header lying about the size."""
    with (
        zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive,
        archive.open(f"{SLUG}.py", "w", force_zip64=True) as member,
    ):
        chunk = b"#" * (1 << 20)
        for _ in range(1024):
            member.write(chunk)


def symlink_zip(path: Path) -> None:
    info = zipfile.ZipInfo(f"{SLUG}.py")
    info.external_attr = 0o120777 << 16  # a symbolic link to /etc/passwd
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(info, "/etc/passwd")


def folder_named_like_the_file_zip(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{SLUG}.py/", "")
        archive.writestr(f"{SLUG}.py/inside.py", WRONG)


@pytest.mark.parametrize(
    "build, reason",
    [
        (encrypted_zip, "is encrypted"),
        (unsupported_zip, "compression method"),
        (corrupt_stream_zip, "damaged"),
        (bomb_zip, "larger than"),
        (symlink_zip, "symbolic link"),
        (folder_named_like_the_file_zip, "is a folder"),
    ],
    ids=["encrypted", "unsupported", "corrupt-stream", "bomb", "symlink", "folder"],
)
def test_a_damaged_zip_rejects_its_file_and_stops_nothing(tmp_path, build, reason):
    build(tmp_path / "damaged.zip")
    write(tmp_path / "honest", f"{SLUG}.py", REFERENCE.read_text())
    found, warnings = subs.find_submissions(tmp_path, [PROBLEM])
    by_name = {s.student: s for s in found}
    assert reason in by_name["damaged"].rejected[SLUG], by_name["damaged"]
    assert not by_name["damaged"].sources
    assert by_name["honest"].sources and not warnings


def test_a_folder_with_odd_entries_is_read_safely(tmp_path):
    student = tmp_path / "ada"
    student.mkdir()
    (student / "grpo_objective.py").mkdir()  # a folder named like the file
    os.symlink(REFERENCE, student / "group_advantages.py")  # a link to the answer
    (student / b"notes-\xff.txt".decode("utf-8", "surrogateescape")).write_text("x")
    problems = [PROBLEM, get_problem("group_advantages")]
    (found,), _ = subs.find_submissions(tmp_path, problems)
    assert "not a file" in found.rejected[SLUG]
    assert "symbolic link" in found.rejected["group_advantages"]
    assert found.ignored == ["notes-\ufffd.txt"]
    json.dumps(found.ignored).encode("utf-8")  # reports can be written


def test_every_problem_is_graded_by_default_the_capstone_too():
    from grader.course import course_for
    from grader.problems import all_problems

    slugs = [p.slug for p in course_for(None).problems]
    assert "grpo_trainer" in slugs and slugs == [p.slug for p in all_problems()]


def test_shards_are_disjoint_and_cover_the_class():
    class_list = [subs.Submission(f"s{i:02d}") for i in range(10)]
    slices = [shard(class_list, k, 3) for k in (1, 2, 3)]
    names = [s.student for part in slices for s in part]
    assert sorted(names) == [s.student for s in class_list]
    assert parse_shard("2/3") == (2, 3)
    for bad in ("0/3", "4/3", "x", "1/2/3"):
        with pytest.raises(ValueError, match="--shard"):
            parse_shard(bad)


def _collected(test_id: str, impl: str | None, outcome: str = "passed", **extra) -> dict:
    name = test_id.split("::")[1]
    return {"id": test_id, "name": name, "function": name.split("[")[0], "impl": impl,
            "outcome": outcome, "message": "", "error_type": None, "duration": 0.0,
            "stdout": "", "stdout_cut": 0} | extra  # fmt: skip


CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
SHOW_CPUS = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]


def _cpus_seen(runs: PytestRuns, workers: int) -> list[list[str]]:
    """What each of `workers` threads' runs were allowed, two runs per thread."""
    together = threading.Barrier(workers)  # every thread a worker of its own

    def worker(_) -> list[str]:
        together.wait()
        return [runs.run(SHOW_CPUS, dict(os.environ), 60)[1].strip() for _ in range(2)]

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(worker, range(workers)))


@pytest.mark.skipif(len(CPUS) < 2, reason="needs two cores")
def test_each_worker_keeps_its_runs_on_a_core_of_its_own():
    seen = _cpus_seen(PytestRuns(workers=2), 2)
    for first, second in seen:
        assert first == second and len(json.loads(first)) == 1, seen
    assert seen[0][0] != seen[1][0], "two workers on one core"
    # More workers than cores, or one alone: the scheduler places them.
    for workers in (1, len(CPUS) + 1):
        everything = str(CPUS)
        assert all(cpus == everything for runs in _cpus_seen(PytestRuns(workers), workers)
                   for cpus in runs)  # fmt: skip


def test_collected_tests_belong_to_the_implementation_they_ran():
    specs = ["sandbox:/w/s1", "sandbox:/w/s10"]
    collected = {"tests": [
        _collected("problems/p/test_p.py::test_a[sandbox:/w/s1]", specs[0]),
        _collected("problems/p/test_p.py::test_b[sandbox:/w/s10-(1, 2)]", specs[1], "failed"),
    ]}  # fmt: skip
    split = split_collected(collected, specs)
    assert [t["name"] for t in split[specs[0]]["p"]] == ["test_a[sandbox:/w/s1]"]
    assert [t["name"] for t in split[specs[1]]["p"]] == ["test_b[sandbox:/w/s10-(1, 2)]"]
    # With one student pytest adds no parameter: every test is that student's.
    alone = split_collected(
        {"tests": [_collected("problems/p/test_p.py::test_c", None)]}, specs[:1]
    )
    assert [t["name"] for t in alone[specs[0]]["p"]] == ["test_c"]


def test_a_sandbox_that_did_not_start_is_not_a_grade_whatever_its_message():
    specs = ["sandbox:/w/s0", "sandbox:/w/s1", "sandbox:/w/s2"]
    test = f"problems/{SLUG}/test_{SLUG}.py::test_reference_example"
    reason = "the sandbox did not start: timed out after 30 s"
    collected = {"tests": [
        _collected(f"{test}[{specs[0]}]", specs[0]),
        _collected(f"{test}[{specs[1]}]", specs[1], "failed", error_type="grader.errors.GraderError",
                   message=f"GraderError: {reason}"),
        # A student's own message saying the same is just a failure.
        _collected(f"{test}[{specs[2]}]", specs[2], "failed", message=f"GraderError: {reason}",
                   error_type="grader.errors.SubmissionError"),
    ]}  # fmt: skip
    students = [subs.Submission("ada"), subs.Submission("bob"), subs.Submission("eve")]
    options = BatchOptions([PROBLEM])
    graded, failed, forged = results_from_collected(collected, students, specs, options, "bwrap")
    outcomes = [[t["outcome"] for t in r.reports[SLUG]["tests"]] for r in (graded, forged)]
    assert graded.student == "ada" and outcomes[0] == ["passed"]
    assert failed == f"bob: could not be graded: {reason}"
    assert forged.student == "eve" and outcomes[1] == ["failed"]


def _graded(student: str, error_type: str | None) -> StudentResult:
    result = StudentResult(student)
    result.reports[SLUG] = {"tests": [{"error_type": error_type}]}
    return result


@pytest.mark.parametrize("workers, chunk_size", [(1, 1), (2, 4), (2, 1)])
def test_a_student_out_of_time_beside_others_is_graded_again_alone(monkeypatch, workers,
                                                                   chunk_size):  # fmt: skip
    """Time limits are wall-clock time, and one student's processes can take another's CPU:
    with several workers, a timeout is graded again after everyone else, and that grade counts."""
    calls = []

    def grade_chunk(chunk, options, sandbox, runs):  # "slow" runs out of time the first time
        calls.append([s.student for s in chunk])
        first = sum(call.count("slow") for call in calls) == 1
        return [_graded(s.student, TIME_LIMIT_ERROR if s.student == "slow" and first else None)
                for s in chunk]  # fmt: skip

    monkeypatch.setattr(batch, "grade_chunk", grade_chunk)
    students = [subs.Submission(name) for name in ("ada", "bob", "slow", "zoe")]
    done = []
    options = BatchOptions([PROBLEM], workers=workers, chunk_size=chunk_size)
    batch.grade_all(students, options, "bwrap", done.extend)
    outcomes = [(r.student, r.reports[SLUG]["tests"][0]["error_type"],
                 r.reports[SLUG].get("graded_alone", False)) for r in done]  # fmt: skip
    if workers == 1 or chunk_size == 4:  # nothing ran beside it: the timeout is its own
        assert sorted(outcomes) == [("ada", None, False), ("bob", None, False),
                                    ("slow", TIME_LIMIT_ERROR, False), ("zoe", None, False)]  # fmt: skip
        return
    assert calls[-1] == ["slow"] and len(calls) == 5  # after all the others, alone
    assert sorted(outcomes[:3]) == [("ada", None, False), ("bob", None, False),
                                    ("zoe", None, False)]  # fmt: skip
    assert outcomes[3] == ("slow", None, True)
    # ... and the student's results say so, on every later run too (it is in the records).
    assert "Graded again, alone" in reports.header(done[3].reports, "0")
    assert "Graded again, alone" not in reports.header(done[0].reports, "0")


# ------------------------------------------------------------------ a batch of bad input

BAD = {
    "empty": b"",
    "not_utf8": b"def grpo_objective():\n    return '\xff'\n",
    "syntax_error": b"def grpo_objective(:\n    pass\n",
    "missing_function": b"def grpo_objectiv(*args, **kwargs):\n    return 1.0\n",
    "wrong_signature": b"def grpo_objective(rhos):\n    return 1.0\n",
    "not_a_function": b"grpo_objective = 3\n",
}
EXPECTED_STATUS = {
    "empty": "is empty",
    "not_utf8": "is not UTF-8",
    "syntax_error": "syntax error on line 1",
    "missing_function": "defines no 'grpo_objective'",
    "wrong_signature": "TypeError",
    "not_a_function": "defines 'grpo_objective', but not as a function",
    "nothing_submitted": "no grpo_objective.py was submitted",
    "corrupt_zip": "cannot be read as a zip file",
    "zip_slip": "unsafe path",
    "encrypted_zip": "is encrypted",
    "bomb_zip": "larger than",
}


# A student a spreadsheet would read as the formula +2+3 when the gradebook is opened.
FORMULA = "+2+3"


def test_no_csv_cell_starts_a_formula():
    from grader.reports import FORMULA_STARTS, csv_text

    for start in ("=", "+", "-", "@", "\t", "\n", "\uff1d", "\uff0b"):
        assert start in FORMULA_STARTS
        (row,) = csv.reader(io.StringIO(csv_text([[f"{start}1+1", 3, "fine"]]), newline=""))
        assert row == [f"'{start}1+1", "3", "fine"]
    # Behind blanks a spreadsheet may trim on import (a space, a no-break or ideographic space, a
    # Unicode line separator): an LMS name " =HYPERLINK(...)" reached the gradebook as it was.
    for blanks in (" ", "  \u00a0", "\u3000", "\u2028", "\u2029 "):
        (row,) = csv.reader(io.StringIO(csv_text([[f"{blanks}=1+1", "a =b"]]), newline=""))
        assert row == [f"'{blanks}=1+1", "a =b"]
    # A carriage return, first or inside, must not end the row: it becomes a quoted line feed.
    rows = list(csv.reader(io.StringIO(csv_text([["\r=1", "Eve\r101,x", 1]]), newline="")))
    assert rows == [["'\n=1", "Eve\n101,x", "1"]]
    # Terminal escapes (a student's exception message, an LMS name) never reach the file: cat
    # would clear the screen, retitle the window or hide the rows after them.
    escapes = "\x1b[2J\x1b]0;x\x07\x9b8m\x00ok\tand\x7f"
    (row,) = csv.reader(io.StringIO(csv_text([[escapes, "x"]]), newline=""))
    assert row == ["\ufffd[2J\ufffd]0;x\ufffd\ufffd8m\ufffdok\tand\ufffd", "x"]


@pytest.fixture(scope="module")
def bad_batch(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    submissions = root / "submissions"
    for name, data in BAD.items():
        write(submissions / name, f"{SLUG}.py", data)
    write(submissions / "nothing_submitted", "solution.py", WRONG)
    make_zip(submissions / "corrupt_zip.zip", {f"{SLUG}.py": REFERENCE.read_text()})
    data = (submissions / "corrupt_zip.zip").read_bytes()
    (submissions / "corrupt_zip.zip").write_bytes(data[: len(data) // 2])  # cut off in transfer
    make_zip(submissions / "zip_slip.zip", {f"../../{SLUG}.py": WRONG})
    encrypted_zip(submissions / "encrypted_zip.zip")
    bomb_zip(submissions / "bomb_zip.zip")
    write(submissions / "honest", f"{SLUG}.py", REFERENCE.read_text())
    write(submissions / FORMULA, f"{SLUG}.py", REFERENCE.read_text())
    out = root / "out"
    return out, grade(submissions, out)


def test_bad_input_never_breaks_the_batch(bad_batch):
    out, run = bad_batch
    assert run.returncode == 0, run.stderr[-3000:]
    book = gradebook(out)
    assert set(book) == set(EXPECTED_STATUS) | {"honest", "'" + FORMULA}
    assert book["honest"]["total"] == book["honest"]["max"] != "0"
    assert book["'" + FORMULA]["total"] == book["honest"]["total"], "written as text, graded"


@pytest.mark.parametrize("student", sorted(EXPECTED_STATUS))
def test_bad_input_gets_zero_and_a_clear_status(bad_batch, student):
    out, _ = bad_batch
    results = json.loads((out / student / "results.json").read_text())
    assert results["score"] == 0
    assert results["tests"] and all(t["status"] == "failed" for t in results["tests"])
    assert EXPECTED_STATUS[student] in results["tests"][0]["output"]
    assert not results["tests"][0]["output"].startswith(("NotImplementedError", "SubmissionError"))


# ------------------------------------------------------------------ resume, shards, merge


def _class(folder: Path, size: int) -> None:
    for i in range(size):
        source = REFERENCE.read_text() if i % 2 == 0 else WRONG
        write(folder / f"student{i:02d}", f"{SLUG}.py", source)


def test_a_killed_batch_resumes_where_it_stopped(tmp_path):
    submissions, out = tmp_path / "submissions", tmp_path / "out"
    _class(submissions, 6)
    command = [sys.executable, "-m", "grader.cli", "grade", str(submissions), "--out", str(out),
               "--problems", SLUG, "--workers", "1", "--batch-size", "1"]  # fmt: skip
    work = tmp_path / "tmp"  # what a SIGKILL leaves of the work folders stays in here
    work.mkdir()
    process = subprocess.Popen(command, cwd=KIT_ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True,
                               env=dict(os.environ, TMPDIR=str(work)))  # fmt: skip
    deadline = time.monotonic() + 300
    while not list(out.glob("*/results.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)  # the grader and every pytest it started
    process.wait()
    finished = {p.parent.name: p.stat().st_mtime_ns for p in out.glob("*/results.json")}
    assert 1 <= len(finished) < 6, "the kill came too late to test resuming"

    run = grade(submissions, out)
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"{len(finished)} already graded" in run.stdout
    for student, mtime in finished.items():
        assert (out / student / "results.json").stat().st_mtime_ns == mtime, student
    book = gradebook(out)
    assert sorted(book) == [f"student{i:02d}" for i in range(6)]
    for i in range(6):
        row = book[f"student{i:02d}"]
        assert (row["total"] == row["max"]) == (i % 2 == 0)
    assert not list(out.glob("*/.*.tmp")), "a half-written file was left behind"

    forced = grade(submissions, out, "--force")
    assert "0 already graded" in forced.stdout


def test_shards_merge_into_one_gradebook(tmp_path):
    submissions = tmp_path / "submissions"
    _class(submissions, 5)
    for k in (1, 2):
        run = grade(submissions, tmp_path / f"shard{k}", "--shard", f"{k}/2")
        assert run.returncode == 0, run.stderr[-3000:]
    parts = [set(gradebook(tmp_path / f"shard{k}")) for k in (1, 2)]
    assert parts[0].isdisjoint(parts[1]) and parts[0] and parts[1]
    merged = tmp_path / "merged"
    run = grpo_kit(
        "merge", str(tmp_path / "shard1"), str(tmp_path / "shard2"), "--out", str(merged)
    )
    assert run.returncode == 0, run.stderr
    book = gradebook(merged)
    assert sorted(book) == [f"student{i:02d}" for i in range(5)]
    assert all((merged / s / "results.json").is_file() for s in book)
    assert book["student00"]["total"] == book["student00"]["max"] != "0"
    assert book == gradebook(tmp_path / "shard1") | gradebook(tmp_path / "shard2")

    shutil.copytree(tmp_path / "shard1", tmp_path / "again")
    clash = grpo_kit("merge", str(tmp_path / "shard1"), str(tmp_path / "again"), "--out",
                     str(tmp_path / "clash"))  # fmt: skip
    assert clash.returncode == 1 and "kept the first" in clash.stderr


# ------------------------------------------------------------------ stopping the grader

# Its first call runs into the time limit (30 s below) without a word of pytest output: a
# pytest run that outlives the grader is not ended by writing to the grader's closed pipe.
SLOW = "import time\n\ndef grpo_objective(*args, **kwargs):\n    time.sleep(60)\n"


def _slow_class(folder: Path) -> list[str]:
    """Two quick students graded first, then slow ones (minutes each)."""
    fast = ["a_fast0", "a_fast1"]
    for name in fast:
        write(folder / name, f"{SLUG}.py", REFERENCE.read_text())
    for i in range(6):
        write(folder / f"slow{i}", f"{SLUG}.py", SLOW)
    return fast


def _start_grading(submissions: Path, out: Path) -> subprocess.Popen:
    """The grader in a session of its own, its work folders under `out`'s sibling `tmp/`."""
    command = [sys.executable, "-m", "grader.cli", "grade", str(submissions), "--out", str(out),
               "--problems", SLUG, "--time-limit", "30", "--workers", "1", "--batch-size", "1"]  # fmt: skip
    work = out.parent / "tmp"
    work.mkdir()
    return subprocess.Popen(command, cwd=KIT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=_ctrl_c_as_in_a_terminal,
                            env=dict(os.environ, TMPDIR=str(work)))  # fmt: skip


def _ctrl_c_as_in_a_terminal() -> None:
    """A job started in the background (`nohup make test &`) inherits SIGINT ignored, and so
    would the grader, which then rightly ignores the test's Ctrl-C: start it as a terminal
    would."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _session(leader: int) -> dict[int, str]:
    """pid -> command line of the processes in `leader`'s session (the grader and its pytests)."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit():
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == leader and fields[0] != "Z":  # a zombie is dead already
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError, ValueError):
            continue
    return {pid: line.decode(errors="replace") for pid, line in found.items()}


def _pytest_running(grader: subprocess.Popen) -> bool:
    return any("grader.collect" in line for line in _session(grader.pid).values())


def _wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@contextlib.contextmanager
def _grading_a_slow_student(tmp_path):
    """(grader process, output folder, fast students) once the fast students are graded and a
    slow student's pytest run is under way; the grader's whole process group is killed after."""
    submissions, out = tmp_path / "submissions", tmp_path / "out"
    fast = _slow_class(submissions)
    process = _start_grading(submissions, out)
    try:
        assert _wait_for(lambda: all((out / s / "results.json").exists() for s in fast), 300)
        assert _wait_for(lambda: _pytest_running(process), 30)
        time.sleep(1)  # well inside a slow student's run, which writes nothing for 30 s
        yield process, out, fast
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctrl_c_stops_the_batch_and_keeps_what_is_done(tmp_path, stop):
    with _grading_a_slow_student(tmp_path) as (process, out, fast):
        kept = {s: (out / s / "results.json").stat().st_mtime_ns for s in fast}
        stopped = time.monotonic()
        process.send_signal(stop)  # to the grader alone, as a terminal's Ctrl-C is
        stdout, stderr = process.communicate(timeout=60)
        took = time.monotonic() - stopped
    assert process.returncode == 130, stderr[-3000:]
    assert took < 10, f"took {took:.1f} s to stop"
    assert "Run the same command again" in stderr
    assert {p.parent.name for p in out.glob("*/results.json")} == set(fast)
    for student, mtime in kept.items():
        assert (out / student / "results.json").stat().st_mtime_ns == mtime
    assert _wait_for(lambda: not _session(process.pid), 5), _session(process.pid)
    assert set(gradebook(out)) == set(fast)
    assert not list((tmp_path / "tmp").iterdir()), "the grader's work folders were left behind"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux's")
def test_pytest_runs_die_with_the_grader(tmp_path):
    with _grading_a_slow_student(tmp_path) as (process, _, _):
        process.kill()  # the grader alone, not its process group
        process.communicate()
        assert _wait_for(lambda: not _session(process.pid), 10), _session(process.pid)


def _grade_where_no_sandbox_starts(submissions: Path, out: Path, hooks: Path):
    """A grade run in which every sandbox times out starting up."""
    write(hooks, "sitecustomize.py", "import grader.sandbox.forkserver as forkserver\n\n"
          "forkserver.STARTUP_GRACE_S = 0.0\n")  # fmt: skip
    return grpo_kit("grade", str(submissions), "--out", str(out), "--problems", SLUG,
                    env=dict(os.environ, PYTHONPATH=str(hooks)))  # fmt: skip


def test_a_sandbox_that_cannot_start_grades_no_one_and_says_so(tmp_path):
    submissions, out = tmp_path / "submissions", tmp_path / "out"
    _class(submissions, 3)
    broken = _grade_where_no_sandbox_starts(submissions, out, tmp_path / "hooks")
    assert broken.returncode == 1, broken.stderr[-3000:]
    for i in range(3):
        line = f"NOT GRADED: student{i:02d}: could not be graded: the sandbox"
        assert line in broken.stdout and line in broken.stderr
    assert "3 could not be graded" in broken.stdout
    assert not list(out.glob("*/results.json")), "a failure of the grader was saved as a grade"

    run = grade(submissions, out)  # a rerun tries them again
    assert run.returncode == 0, run.stderr[-3000:]
    assert "0 already graded" in run.stdout
    assert sorted(gradebook(out)) == [f"student{i:02d}" for i in range(3)]


def test_a_changed_file_that_cannot_be_graded_keeps_no_grade_of_the_earlier_file(tmp_path):
    # A file that made the grader fail (or a run stopped before it) left the grade of the
    # student's earlier file in the gradebook: 45.5 stood for a file that was never graded.
    submissions, out = tmp_path / "submissions", tmp_path / "out"
    _class(submissions, 2)
    assert grade(submissions, out).returncode == 0
    full = gradebook(out)["student00"][SLUG]
    assert float(full) > 0
    write(submissions / "student00", f"{SLUG}.py", REFERENCE.read_text() + "\n# changed\n")
    write(submissions / "student01", f"{SLUG}.py", WRONG + "\n# changed\n")
    broken = _grade_where_no_sandbox_starts(submissions, out, tmp_path / "hooks")
    assert broken.returncode == 1, broken.stderr[-3000:]
    assert "2 could not be graded" in broken.stdout
    assert {row[SLUG] for row in gradebook(out).values()} == {""}, "an earlier file's grade"
    run = grade(submissions, out)  # the next run grades them
    assert run.returncode == 0, run.stderr[-3000:]
    assert gradebook(out)["student00"][SLUG] == full


def test_standalone_source_inlines_a_parenthesized_import():
    source = (
        "from reference.kl_estimators import (\n    kl_k1,\n    kl_k3,\n)\n\nestimate = kl_k3\n"
    )
    inlined = subs.standalone_source(source)
    assert "from reference" not in inlined and "def kl_k3" in inlined
    namespace: dict = {}
    exec(compile(inlined, "inlined.py", "exec"), namespace)
    assert namespace["estimate"] is namespace["kl_k3"]
    kept = subs.standalone_source(source, keep=("kl_estimators",))
    assert kept == source
