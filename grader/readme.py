"""Keep the README's learning path in step with the problems' metadata.

python -m grader.readme          rewrite the table between the markers
python -m grader.readme --check  exit 1 if the README is stale
"""

from __future__ import annotations

import sys

from grader.problems import KIT_ROOT, all_problems

README = KIT_ROOT / "README.md"
START, END = "<!-- problems:start -->", "<!-- problems:end -->"


def problem_table() -> str:
    rows = [
        "| # | problem | difficulty | runs | what it teaches |",
        "| --- | --- | --- | --- | --- |",
    ]
    for p in all_problems():
        where = (
            "browser + local" if p.runs_in_browser else "local, or its page under `grpo-kit serve`"
        )
        link = f"[{p.title}](problems/{p.slug}/README.md)"
        rows.append(f"| {p.order} | {link} `{p.slug}` | {p.difficulty} | {where} | {p.teaches} |")
    return "\n".join(rows)


def render(readme_text: str) -> str:
    head, start, rest = readme_text.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise ValueError(f"README.md must contain {START} and {END}")
    return f"{head}{START}\n{problem_table()}\n{END}{tail}"


def main(argv: list[str]) -> int:
    current = README.read_text(encoding="utf-8")
    wanted = render(current)
    if "--check" in argv:
        if current != wanted:
            print("README.md's problem list is stale: run `python -m grader.readme`")
            return 1
        return 0
    README.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
