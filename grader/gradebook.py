"""The gradebook, built from every results.json under OUT (so resumed and merged runs count).

    OUT/gradebook.csv          student, name, points per problem, [late_penalty], total, max
    OUT/canvas-import.csv      for a Canvas download: Canvas's gradebook columns, the total
    OUT/moodle-import.csv      for a Moodle download: Moodle's grading worksheet columns
    OUT/gradescope-import.csv  for a Gradescope export: name, SID, e-mail, score

A problem the student did not hand in is blank in its column (an LMS reads blank as "no
submission", 0 as a grade) and counts 0 in the total. ``student`` is the identifier the
student's LMS matches on: the Canvas user id, the Moodle participant id, the e-mail address
in a Gradescope export, the folder or zip name otherwise.
"""

from __future__ import annotations

from pathlib import Path

from grader.reports import _number, csv_text, load_results, write_atomically

GRADEBOOK = "gradebook.csv"
IMPORTS = {"canvas": "canvas-import.csv", "moodle": "moodle-import.csv",
           "gradescope": "gradescope-import.csv"}  # fmt: skip


def rows(out: Path, slugs: list[str]) -> tuple[list[str], list[dict]]:
    """The gradebook's header and one dict per student (the values as written)."""
    everyone = load_results(out)
    maxima = {slug: 0.0 for slug in slugs}
    late_column = False
    for results in everyone.values():
        extra = results.get("extra_data", {})
        late_column |= bool(extra.get("late_policy"))
        for slug in slugs:
            entry = extra.get("problems", {}).get(slug, {})
            maxima[slug] = max(maxima[slug], float(entry.get("max_score") or 0))
    header = ["student", "name", *slugs, *(["late_penalty"] if late_column else []), "total",
              "max"]  # fmt: skip
    table = []
    for student, results in everyone.items():
        extra = results.get("extra_data", {})
        row = {"student": student, "name": extra.get("student", {}).get("name", "")}
        total = 0.0
        for slug in slugs:
            entry = extra.get("problems", {}).get(slug)
            if entry and entry.get("submitted", True) and entry.get("graded", True):
                row[slug] = _number(entry["score"])
                total += float(entry["score"])
            else:
                row[slug] = ""
        penalty = (extra.get("late") or {}).get("points", 0)
        if late_column:
            row["late_penalty"] = _number(penalty)
        row["total"] = _number(max(0.0, total - penalty))
        row["max"] = _number(sum(maxima.values()))
        row["_layout"] = extra.get("student", {}).get("layout", "plain")
        row["_identity"] = extra.get("student", {})
        row["_title"] = extra.get("course", {}).get("title", "grpo-kit")
        table.append(row)
    return header, table


def write_gradebook(out: Path, slugs: list[str]) -> Path:
    header, table = rows(out, slugs)
    path = out / GRADEBOOK
    write_atomically(path, csv_text([header, *([row[k] for k in header] for row in table)]))
    for layout, name in IMPORTS.items():
        mine = [row for row in table if row["_layout"] == layout]
        if mine:
            write_atomically(out / name, csv_text(_import_rows(layout, mine)))
    return path


def _import_rows(layout: str, table: list[dict]) -> list[list]:
    title = table[0]["_title"]
    if layout == "canvas":
        # Canvas's own export columns; it matches rows on ID (the Canvas user id).
        head = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", title]
        return [head, *([r["name"], r["student"], "", "", "", r["total"]] for r in table)]
    if layout == "moodle":
        # The grading worksheet's columns; Moodle matches rows on Identifier.
        head = ["Identifier", "Full name", "Grade", "Maximum grade"]
        return [head, *([f"Participant {r['student']}", r["name"], r["total"], r["max"]]
                        for r in table)]  # fmt: skip
    head = ["Name", "SID", "Email", "Score"]
    return [head, *([r["name"], r["_identity"].get("sid", ""), r["_identity"].get("email", ""),
                     r["total"]] for r in table)]  # fmt: skip
