"""The layouts LMSs download a class in, built here from their documented naming, each read
into one submission per student under the identifier the LMS needs back; near-miss file names."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from grader.layouts import LayoutError, detect, read_class, read_download
from grader.problems import KIT_ROOT, get_problem
from grader.submissions import find_submissions

SLUG = "grpo_objective"
PROBLEMS = [get_problem(SLUG), get_problem("group_stats")]
REFERENCE = get_problem(SLUG).reference.read_text()
WRONG = "def grpo_objective(*args, **kwargs):\n    return 0.0\n"


def write(path: Path, text: str = WRONG) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def by_id(download) -> dict:
    return {s.student: s for s in download.submissions}


# ------------------------------------------------------------------ Canvas


def canvas_class(root: Path) -> Path:
    """Canvas's "Download Submissions": <name>_[LATE_]<user id>_<submission id>_<file>."""
    write(root / f"lovelaceada_12345_678901_{SLUG}.py", REFERENCE)
    write(root / "lovelaceada_12345_678901_notes.txt", "hello")
    write(root / f"hoppergrace_LATE_23456_678902_{SLUG}-1.py")  # Canvas renamed a resubmission
    with zipfile.ZipFile(root / "turingalan_34567_678903_submission.zip", "w") as archive:
        archive.writestr(f"hw/src/{SLUG}.py", WRONG)  # two folders down in the zip
    write(root / "index.html", "not a submission")
    return root


def test_canvas_files_are_grouped_by_user_id(tmp_path):
    root = canvas_class(tmp_path)
    assert detect(root) == "canvas"
    download = read_class(root, PROBLEMS)
    students = by_id(download)
    assert set(students) == {"12345", "23456", "34567"}
    ada = students["12345"]
    assert ada.name == "lovelaceada" and ada.layout == "canvas" and not ada.marked_late
    assert ada.sources[SLUG] == REFERENCE.encode() and ada.ignored == ["notes.txt"]
    grace = students["23456"]
    assert grace.marked_late and SLUG in grace.sources
    assert any(f"took '{SLUG}-1.py' as {SLUG}.py" in note for note in grace.notes)
    alan = students["34567"]
    assert SLUG in alan.sources and any("folders down" in note for note in alan.notes)
    assert any("'index.html': not a Canvas submission file" in w for w in download.warnings)


# ------------------------------------------------------------------ Moodle


def moodle_class(root: Path) -> Path:
    """Moodle's "Download all submissions": a folder per student and plugin, or loose files."""
    write(root / "Ada Lovelace_101_assignsubmission_file_" / f"{SLUG}.py", REFERENCE)
    write(root / "Grace Hopper_102_assignsubmission_file_" / "work" / "src" / "Grpo_Objective.py")
    write(root / "Grace Hopper_102_assignsubmission_onlinetext_" / "onlinetext.html", "<p>hi</p>")
    write(root / f"Alan Turing_103_assignsubmission_file_{SLUG}.py")  # without folders
    write(root / "Edsger Dijkstra_104_assignsubmission_file_" / "grpo_objectiv.py")
    return root


def test_moodle_folders_are_read_by_participant_id(tmp_path):
    root = moodle_class(tmp_path)
    assert detect(root) == "moodle"
    students = by_id(read_class(root, PROBLEMS))
    assert set(students) == {"101", "102", "103", "104"}
    assert students["101"].name == "Ada Lovelace"
    grace = students["102"]
    assert SLUG in grace.sources and "onlinetext.html" in grace.ignored
    assert any("took 'work/src/Grpo_Objective.py'" in note for note in grace.notes)
    assert SLUG in students["103"].sources
    edsger = students["104"]
    assert not edsger.submitted(SLUG)
    assert f"did you mean {SLUG}.py?" in edsger.hints[SLUG]


def test_a_full_name_cannot_file_work_under_another_participant(tmp_path):
    # A student named "Eve_101_assignsubmission_file_" (id 105) must not become participant 101.
    write(tmp_path / "Ada Lovelace_101_assignsubmission_file_" / f"{SLUG}.py", REFERENCE)
    write(tmp_path / "Eve_101_assignsubmission_file__105_assignsubmission_file_" / f"{SLUG}.py")
    # A loose file whose own name holds the pattern again could be 106's or 101's: neither.
    write(tmp_path / f"Mallory_106_assignsubmission_file_x_101_assignsubmission_file_{SLUG}.py")
    download = read_class(tmp_path, PROBLEMS)
    students = by_id(download)
    assert set(students) == {"101", "105"}
    assert students["101"].sources == {SLUG: REFERENCE.encode()}
    assert students["105"].name == "Eve_101_assignsubmission_file_"
    assert students["105"].sources == {SLUG: WRONG.encode()}
    assert any("Mallory_106" in w and "more than one participant" in w for w in download.warnings)


# ------------------------------------------------------------------ Gradescope


METADATA = """\
submission_1001:
  :submitters:
  - :name: Ada Lovelace
    :sid: '101'
    :email: ada@example.edu
  - :name: Grace Hopper
    :sid: '102'
    :email: grace@example.edu
  :created_at: 2026-03-14 22:10:00.123456000 +01:00
  :score: 0.0
submission_1002:
  :submitters:
  - :name: Alan Turing
    :sid: '103'
    :email: alan@example.edu
  :created_at: 2026-03-16 09:00:00.000000000 +01:00
"""


def gradescope_class(root: Path) -> Path:
    """Gradescope's "Export Submissions": submission_metadata.yml and a folder per submission."""
    export = root / "assignment_77_export"
    write(export / "submission_metadata.yml", METADATA)
    write(export / "submission_1001" / f"{SLUG}.py", REFERENCE)
    write(
        export / "submission_1002" / "group_stats (1).py",
        "def group_stats(*a, **k):\n    return {}\n",
    )
    write(export / "submission_1002" / f"{SLUG}.py")
    return root


def test_gradescope_export_maps_every_group_member(tmp_path):
    root = gradescope_class(tmp_path)
    assert detect(root) == "gradescope"
    students = by_id(read_class(root, PROBLEMS))
    assert set(students) == {"ada@example.edu", "grace@example.edu", "alan@example.edu"}
    ada = students["ada@example.edu"]
    assert ada.name == "Ada Lovelace" and ada.sid == "101"
    assert ada.submitted_at == datetime(2026, 3, 14, 21, 10, 0, 123456, tzinfo=UTC)
    assert students["grace@example.edu"].sources == ada.sources  # a group shares its files
    alan = students["alan@example.edu"]
    assert alan.submitted_at.utcoffset() == timedelta(hours=1)
    assert "group_stats" in alan.sources
    assert any("took 'group_stats (1).py' as group_stats.py" in n for n in alan.notes)


# ------------------------------------------------------------------ plain, zips, names


def test_plain_layout_takes_names_with_spaces_and_other_scripts(tmp_path):
    write(tmp_path / "Ada Lovelace" / f"{SLUG}.py")
    write(tmp_path / "José Martí" / f"{SLUG}.py")
    write(tmp_path / ".hidden" / f"{SLUG}.py")
    write(tmp_path / "bad:name" / f"{SLUG}.py")
    write(tmp_path / "results.csv" / f"{SLUG}.py")  # would clash with the grader's own files
    found, warnings = find_submissions(tmp_path, PROBLEMS)
    assert {s.student for s in found} == {"Ada Lovelace", "José Martí"}
    assert any("'bad:name'" in w for w in warnings) and any("'results.csv'" in w for w in warnings)


@pytest.mark.parametrize(
    ("name", "taken"),
    [(f"{SLUG}.py", None), ("Grpo_Objective.py", "as"), ("grpo_objective (2).py", "as"),
     ("grpo-objective.py", "as"), ("grpo_objective - Copy.py", "as"), ("grpo_objectives.py", None)],
)  # fmt: skip
def test_near_miss_names_are_taken_with_a_note(tmp_path, name, taken):
    write(tmp_path / "ada" / name)
    (ada,), _ = find_submissions(tmp_path, PROBLEMS)
    if name == "grpo_objectives.py":  # too far from the name: not graded, "did you mean"
        assert not ada.submitted(SLUG) and "did you mean grpo_objective.py" in ada.hints[SLUG]
        return
    assert SLUG in ada.sources
    assert bool(ada.notes) == bool(taken)


def test_two_candidates_for_one_problem_are_refused(tmp_path):
    write(tmp_path / "ada" / f"{SLUG}.py")
    write(tmp_path / "ada" / "Grpo_Objective (1).py")
    (ada,), _ = find_submissions(tmp_path, PROBLEMS)
    assert "more than once" in ada.rejected[SLUG] and "keep one" in ada.rejected[SLUG]


def test_an_lms_download_zip_is_read_as_it_is(tmp_path):
    root = canvas_class(tmp_path / "unpacked")
    download = tmp_path / "submissions.zip"
    with zipfile.ZipFile(download, "w") as archive:
        for path in root.iterdir():
            archive.write(path, path.name)
        archive.writestr("../escape.py", WRONG)  # never written outside the folder
    found = read_download(download, PROBLEMS)
    assert found.layout == "canvas" and len(found.submissions) == 3
    assert not (tmp_path / "escape.py").exists()


def test_an_empty_or_wrong_layout_says_what_to_do(tmp_path):
    with pytest.raises(LayoutError, match="no submissions found"):
        read_class(tmp_path, PROBLEMS)
    canvas_class(tmp_path)
    with pytest.raises(LayoutError, match="try --layout canvas"):
        read_class(tmp_path, PROBLEMS, "moodle")
    with pytest.raises(LayoutError, match="does not exist"):
        read_download(tmp_path / "nope", PROBLEMS)


# ------------------------------------------------------------------ graded, end to end


def test_a_canvas_download_graded_with_a_course_file(tmp_path):
    submissions = canvas_class(tmp_path / "download")
    course = tmp_path / "course.toml"
    course.write_text(f'title = "HW 1"\nproblems = ["{SLUG}", "group_stats"]\n\n[points]\n'
                      f"{SLUG} = 10\ngroup_stats = 5\n\n[late]\n"
                      "due = 2026-03-14T23:59:00Z\npenalty_per_day = 0.25\n")  # fmt: skip
    out = tmp_path / "grades"
    run = subprocess.run([sys.executable, "-m", "grader.cli", "grade", str(submissions), "--out",
                          str(out), "--course", str(course), "--time-limit", "3"],
                         cwd=KIT_ROOT, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "canvas layout: 3 students" in run.stderr
    with open(out / "gradebook.csv", newline="") as file:
        book = {row["student"]: row for row in csv.DictReader(file)}
    ada, grace = book["12345"], book["23456"]
    assert ada["name"] == "lovelaceada"
    assert ada[SLUG] == "10" and ada["group_stats"] == ""  # not handed in: blank, 0 in the total
    assert ada["total"] == "10" and ada["max"] == "15" and ada["late_penalty"] == "0"
    earned = float(grace[SLUG])  # marked LATE: one day, 25% of the score taken off
    assert float(grace["late_penalty"]) == pytest.approx(earned / 4, abs=1e-3)
    assert float(grace["total"]) == pytest.approx(earned * 3 / 4, abs=1e-3)
    results = json.loads((out / "23456" / "results.json").read_text())
    assert "marked late (no time given)" in results["output"]
    assert results["extra_data"]["late"]["penalty"] == 0.25
    with open(out / "canvas-import.csv", newline="") as file:
        rows = list(csv.reader(file))
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "HW 1"]
    assert ["lovelaceada", "12345", "", "", "", "10"] in rows


def test_each_lms_gets_its_own_import_file(tmp_path):
    from grader.gradebook import write_gradebook

    people = {"101": ("moodle", "Ada Lovelace", "", "101"),
              "ada@example.edu": ("gradescope", "Ada", "ada@example.edu", "7")}  # fmt: skip
    for student, (layout, name, email, sid) in people.items():
        write(tmp_path / student / "results.json", json.dumps({"score": 4, "tests": [],
              "extra_data": {"problems": {SLUG: {"score": 4, "max_score": 8, "submitted": True}},
                             "student": {"layout": layout, "name": name, "email": email,
                                         "sid": sid}, "course": {"title": "HW"}}}))  # fmt: skip
    write_gradebook(tmp_path, [SLUG])
    moodle = list(csv.reader((tmp_path / "moodle-import.csv").open()))
    assert moodle == [["Identifier", "Full name", "Grade", "Maximum grade"],
                      ["Participant 101", "Ada Lovelace", "4", "8"]]  # fmt: skip
    gradescope = list(csv.reader((tmp_path / "gradescope-import.csv").open()))
    assert gradescope == [["Name", "SID", "Email", "Score"], ["Ada", "7", "ada@example.edu", "4"]]
    assert not (tmp_path / "canvas-import.csv").exists()
