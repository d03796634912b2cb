"""How a class did, from the results under a grading folder: numbers, then one HTML page.

    REPORT/index.html     a histogram of the scores of each problem, the tests most students
                          fail (with the message they get), late submissions, groups of
                          suspiciously similar files, and code that reaches into the grader
    REPORT/problems.csv   per problem: students, handed in, mean, median, full marks, histogram
    REPORT/tests.csv      per test: how many of those who handed the problem in failed it, the
                          most common message
    REPORT/late.csv       per late student: when, how late, the share and points taken off
    REPORT/similar.csv    per group of similar files: the problem, the students, the similarity
    REPORT/tampering.csv  per line of a file that reaches into the grader or out of its process
                          (grader.tampering): the student, the problem, the line, what it does

Everything comes from ``results.json`` and the copies of the graded files
(``<student>/submitted/<slug>.py``); nothing is graded or run again.
"""

from __future__ import annotations

import html
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from grader.reports import SOURCES, csv_text, load_results
from grader.similarity import Group, similar_groups
from grader.tampering import leads

BINS = 10  # histogram bins of the score share, plus one for full marks


@dataclass
class ProblemStats:
    slug: str
    students: int = 0
    submitted: int = 0
    scores: list[float] = field(default_factory=list)  # share of the points, of those who handed in
    max_score: float = 0.0
    histogram: list[int] = field(default_factory=lambda: [0] * (BINS + 1))

    @property
    def mean(self) -> float:
        return statistics.fmean(self.scores) if self.scores else 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.scores) if self.scores else 0.0

    @property
    def full(self) -> int:
        return self.histogram[-1]


@dataclass
class TestStats:
    problem: str
    test: str
    failed: int = 0
    out_of: int = 0
    messages: Counter = field(default_factory=Counter)

    @property
    def rate(self) -> float:
        return self.failed / self.out_of if self.out_of else 0.0

    def top_message(self) -> tuple[str, int]:
        if not self.messages:
            return "", 0
        return self.messages.most_common(1)[0]


@dataclass
class ClassReport:
    title: str
    students: int
    problems: list[ProblemStats]
    tests: list[TestStats]
    late: list[dict]
    similar: dict[str, list[Group]]
    tampering: list[dict]  # student, problem, line, what


def _message(output: str) -> str:
    """A failure's first line, numbers replaced, so that the same mistake counts once."""
    first = output.strip().splitlines()[0] if output.strip() else "(no message)"
    return re.sub(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", "#", first)[:200]


def build(grades: Path, starters: dict[str, str] | None = None) -> ClassReport:
    """The numbers of the class graded into `grades`."""
    everyone = load_results(grades)
    order: dict[str, None] = {}
    title = "grpo-kit"
    for results in everyone.values():
        course = results.get("extra_data", {}).get("course", {})
        order.update(dict.fromkeys(course.get("problems", [])))
        title = course.get("title", title)
    problems = {slug: ProblemStats(slug) for slug in order}
    tests: dict[tuple[str, str], TestStats] = {}
    late = []
    for student, results in everyone.items():
        extra = results.get("extra_data", {})
        for slug, entry in extra.get("problems", {}).items():
            stats = problems.setdefault(slug, ProblemStats(slug))
            stats.students += 1
            if not entry.get("submitted", True) or not entry.get("graded", True):
                continue
            stats.submitted += 1
            stats.max_score = max(stats.max_score, float(entry["max_score"]))
            share = entry["score"] / entry["max_score"] if entry["max_score"] else 0.0
            stats.scores.append(share)
            stats.histogram[BINS if share >= 1 - 1e-9 else min(BINS - 1, int(share * BINS))] += 1
        submitted = {s for s, e in extra.get("problems", {}).items() if e.get("submitted", True)}
        for test in results.get("tests", []):
            slug, _, name = test["name"].partition(": ")
            if slug not in submitted:
                continue
            stats = tests.setdefault((slug, name), TestStats(slug, name))
            stats.out_of += 1
            if test["status"] != "passed":
                stats.failed += 1
                stats.messages[_message(test.get("output", ""))] += 1
        if extra.get("late"):
            who = extra.get("student", {})
            late.append({"student": student, "name": who.get("name", ""),
                         "submitted_at": who.get("submitted_at") or "(marked late)",
                         "days": extra["late"]["days"], "penalty": extra["late"]["penalty"],
                         "points": extra["late"]["points"]})  # fmt: skip
    similar, tampering = {}, []
    for slug in problems:
        sources = {}
        for student in everyone:
            path = grades / student / SOURCES / f"{slug}.py"
            if path.is_file():
                sources[student] = path.read_text(encoding="utf-8", errors="replace")
        groups = similar_groups(sources, (starters or {}).get(slug, ""))
        if groups:
            similar[slug] = groups
        tampering += [{"student": student, "problem": slug, "line": lead.line, "what": lead.what}
                      for student, source in sources.items() for lead in leads(source)]  # fmt: skip
    ranked = sorted(tests.values(), key=lambda t: (-t.rate, -t.failed, t.problem, t.test))
    tampering.sort(key=lambda r: (r["student"], r["problem"], r["line"]))
    return ClassReport(title, len(everyone), list(problems.values()), ranked,
                       sorted(late, key=lambda r: r["student"]), similar, tampering)  # fmt: skip


def _bin_label(index: int) -> str:
    step = 100 // BINS
    return "100%" if index == BINS else f"{index * step}-{index * step + step - 1}%"


def csv_files(report: ClassReport) -> dict[str, str]:
    problems = [["problem", "students", "handed_in", "mean_share", "median_share", "full_marks",
                 "max_points", *(_bin_label(i) for i in range(BINS + 1))]]  # fmt: skip
    problems += [[p.slug, p.students, p.submitted, round(p.mean, 4), round(p.median, 4), p.full,
                  p.max_score, *p.histogram] for p in report.problems]  # fmt: skip
    tests = [["problem", "test", "failed", "out_of", "failure_rate", "most_common_message",
              "students_with_that_message"]]  # fmt: skip
    tests += [[t.problem, t.test, t.failed, t.out_of, round(t.rate, 4), *t.top_message()]
              for t in report.tests]  # fmt: skip
    late = [["student", "name", "submitted_at", "days_late", "penalty_share", "points_lost"]]
    late += [[r["student"], r["name"], r["submitted_at"], "" if r["days"] is None else
              round(r["days"], 3), r["penalty"], r["points"]] for r in report.late]  # fmt: skip
    similar = [["problem", "group", "students", "similarity"]]
    for slug, groups in report.similar.items():
        similar += [[slug, i, " ".join(g.students), g.similarity] for i, g in enumerate(groups, 1)]
    tampering = [["student", "problem", "line", "what"]]
    tampering += [[r["student"], r["problem"], r["line"], r["what"]] for r in report.tampering]
    return {"problems.csv": csv_text(problems), "tests.csv": csv_text(tests), "late.csv": csv_text(late),
            "similar.csv": csv_text(similar), "tampering.csv": csv_text(tampering)}  # fmt: skip


STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 62em; color: #222; }
h1 { font-size: 1.6em; } h2 { margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: .5em 0; } td, th { padding: .2em .6em; text-align: left;
  border-bottom: 1px solid #eee; vertical-align: top; } th { background: #f4f4f4; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
.problem { display: inline-block; margin: 0 1.5em 1.5em 0; } svg text { font-size: 10px; }
code { background: #f4f4f4; padding: 0 .2em; }
"""


def _histogram(stats: ProblemStats) -> str:
    width, height, bar = 260, 110, 260 / (BINS + 1)
    tallest = max(stats.histogram) or 1
    parts = [f'<svg width="{width}" height="{height + 28}" role="img" '
             f'aria-label="scores of {html.escape(stats.slug)}">']  # fmt: skip
    for i, count in enumerate(stats.histogram):
        h = round(height * count / tallest)
        x = i * bar
        colour = "#2a7" if i == BINS else "#58c"
        parts.append(f'<rect x="{x + 1:.1f}" y="{height - h}" width="{bar - 2:.1f}" height="{h}" '
                     f'fill="{colour}"><title>{_bin_label(i)}: {count}</title></rect>')  # fmt: skip
        if count:
            parts.append(f'<text x="{x + bar / 2:.1f}" y="{height - h - 2}" '
                         f'text-anchor="middle">{count}</text>')  # fmt: skip
    parts.append(f'<text x="0" y="{height + 12}">0%</text><text x="{width - 26}" '
                 f'y="{height + 12}">100%</text></svg>')  # fmt: skip
    return "".join(parts)


def page(report: ClassReport, tests_shown: int = 40) -> str:
    e = html.escape
    out = ["<!doctype html><html lang='en'><head><meta charset='utf-8'>",
           f"<title>{e(report.title)}: class report</title><style>{STYLE}</style></head><body>",
           f"<h1>{e(report.title)}: class report</h1>",
           f"<p>{report.students} students. The numbers are in problems.csv, tests.csv, late.csv, "
           "similar.csv and tampering.csv beside this page.</p>",
           "<h2>Scores per problem</h2>"]  # fmt: skip
    for stats in report.problems:
        out.append(f"<div class='problem'><h3><code>{e(stats.slug)}</code></h3>"
                   f"{_histogram(stats)}<br>{stats.submitted} of {stats.students} handed in; "
                   f"mean {stats.mean:.0%}, median {stats.median:.0%}, full marks "
                   f"{stats.full}</div>")  # fmt: skip
    out += ["<h2>Tests most students fail</h2>",
            "<table><tr><th>problem</th><th>test</th><th class='num'>failed</th>"
            "<th>the most common message (numbers as #)</th></tr>"]  # fmt: skip
    for test in [t for t in report.tests if t.failed][:tests_shown]:
        message, count = test.top_message()
        out.append(f"<tr><td><code>{e(test.problem)}</code></td><td><code>{e(test.test)}</code>"
                   f"</td><td class='num'>{test.failed}/{test.out_of} ({test.rate:.0%})</td>"
                   f"<td>{e(message)} <small>({count})</small></td></tr>")  # fmt: skip
    out.append("</table>")
    out.append("<h2>Late submissions</h2>")
    if report.late:
        out.append("<table><tr><th>student</th><th>name</th><th>submitted</th>"
                   "<th class='num'>days late</th><th class='num'>taken off</th></tr>")  # fmt: skip
        for row in report.late:
            days = "?" if row["days"] is None else f"{row['days']:.2f}"
            out.append(f"<tr><td>{e(row['student'])}</td><td>{e(row['name'])}</td>"
                       f"<td>{e(str(row['submitted_at']))}</td><td class='num'>{days}</td>"
                       f"<td class='num'>{row['penalty']:.0%} ({row['points']:g} "
                       "points)</td></tr>")  # fmt: skip
        out.append("</table>")
    else:
        out.append("<p>None.</p>")
    out += ["<h2>Suspiciously similar files</h2>",
            "<p>Compared by normalised syntax tree (names, layout, comments and docstrings do "
            "not count; code most of the class shares is left out). A lead to read, not "
            "proof.</p>"]  # fmt: skip
    if report.similar:
        out.append("<table><tr><th>problem</th><th>students</th><th class='num'>similarity"
                   "</th></tr>")  # fmt: skip
        for slug, groups in report.similar.items():
            for group in groups:
                out.append(f"<tr><td><code>{e(slug)}</code></td><td>"
                           f"{e(', '.join(group.students))}</td><td class='num'>"
                           f"{group.similarity:.0%}</td></tr>")  # fmt: skip
        out.append("</table>")
    else:
        out.append("<p>None found.</p>")
    out += ["<h2>Code that reaches into the grader</h2>",
            "<p>Lines that import the grader or the test runner, edit what a probe recorded "
            "in the student's process (a toy model's calls, its strictness), walk up to other "
            "frames, or leave the process. Tests that rest on such records then pass whatever "
            "the code does: read these files. A lead, not proof; the kit's own solutions give "
            "none.</p>"]  # fmt: skip
    if report.tampering:
        out.append("<table><tr><th>student</th><th>problem</th><th class='num'>line</th>"
                   "<th>what it does</th></tr>")  # fmt: skip
        for row in report.tampering:
            out.append(
                f"<tr><td>{e(row['student'])}</td><td><code>{e(row['problem'])}</code>"
                f"</td><td class='num'>{row['line']}</td><td>{e(row['what'])}</td></tr>"
            )
        out.append("</table>")
    else:
        out.append("<p>None found.</p>")
    out.append("</body></html>\n")
    return "\n".join(out)


def write_report(grades: Path, out: Path, starters: dict[str, str] | None = None) -> ClassReport:
    report = build(grades, starters)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in csv_files(report).items():
        (out / name).write_text(text, encoding="utf-8")
    (out / "index.html").write_text(page(report), encoding="utf-8")
    return report
