"""Drive the problem site in headless Chromium: shared by the end-to-end tests and the benchmark.

Uses Debian's ``chromium`` through the Python ``playwright`` package (a dev dependency); never
``playwright install``, which downloads a browser of its own. The page is driven through its
``data-testid`` attributes, as a learner's clicks would, plus ``window.grpoKit`` to paste code.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from grader.problems import REFERENCE_DIR

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
BOOT_TIMEOUT_MS = 90_000  # Pyodide's first boot on a busy 2-core machine


def find_chromium() -> str | None:
    """Path of Debian's chromium, or None when it is not installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def launch_options() -> dict:
    path = find_chromium()
    if path is None:
        raise RuntimeError("chromium is not installed: run `make system-deps` (Debian package)")
    return {"executable_path": path, "args": CHROMIUM_ARGS}


def standalone(path: Path) -> str:
    """A reference solution as a learner would paste it: the browser ships no `reference`
    package, so the reference modules it imports are inlined."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        imported = re.match(r"from reference\.(\w+) import ", line)
        if imported:
            module = standalone(REFERENCE_DIR / f"{imported[1]}.py").splitlines()
            lines += [text for text in module if text != "from __future__ import annotations"]
        else:
            lines.append(line)
    return "\n".join(lines) + "\n"


@dataclass
class RunMark:
    """Taken just before a run is started: `wait_verdict` waits for a later run's verdict."""

    started: float  # time.perf_counter() at the click (or key press)
    runs: int  # runs the page had numbered before (the summary's data-run)


@dataclass
class Verdict:
    """What the page showed after a run."""

    verdict: str  # "passed", "failed", "stopped" or "error" (the summary's data-verdict)
    summary: str
    statuses: list[str]  # data-status of each result, in order
    seconds: float  # from the click (or key press) to the verdict


class ProblemPage:
    """One problem page in a Playwright `page`."""

    def __init__(self, page, base_url: str, slug: str):
        self.page = page
        self.url = f"{base_url}p/{slug}/"

    def open(self) -> ProblemPage:
        self.page.goto(self.url)
        return self

    def wait_ready(self, timeout_ms: int = BOOT_TIMEOUT_MS) -> None:
        self.page.wait_for_selector('[data-testid=status][data-state="ready"]', timeout=timeout_ms)

    def code(self) -> str:
        return self.page.evaluate("window.grpoKit.getCode()")

    def set_code(self, code: str) -> None:
        self.page.evaluate("code => window.grpoKit.setCode(code)", code)

    def mark(self) -> RunMark:
        """Call before starting a run by other means than `start_run` (a key press, say)."""
        runs = self.page.get_attribute("[data-testid=summary]", "data-run")
        return RunMark(time.perf_counter(), int(runs or 0))

    def start_run(self) -> RunMark:
        """Click Run without waiting; returns the mark for `wait_verdict`."""
        mark = self.mark()
        self.page.click("[data-testid=run]")
        return mark

    def wait_verdict(self, mark: RunMark, timeout_ms: int = BOOT_TIMEOUT_MS) -> Verdict:
        """The verdict of the first run started after `mark` (never an earlier run's)."""
        self.page.wait_for_function(
            """runs => {
                const summary = document.querySelector("[data-testid=summary]");
                return Number(summary.dataset.run ?? 0) > runs && summary.dataset.status === "done";
            }""",
            arg=mark.runs,
            timeout=timeout_ms,
        )
        seconds = time.perf_counter() - mark.started
        summary = self.page.locator("[data-testid=summary]")
        statuses = self.page.locator("[data-testid=result]").evaluate_all(
            "items => items.map(item => item.dataset.status)"
        )
        return Verdict(
            summary.get_attribute("data-verdict"), summary.inner_text(), statuses, seconds
        )

    def run(self, code: str | None = None, timeout_ms: int = BOOT_TIMEOUT_MS) -> Verdict:
        if code is not None:
            self.set_code(code)
        return self.wait_verdict(self.start_run(), timeout_ms)


def open_ready(context, base_url: str, slug: str) -> ProblemPage:
    """A new page on problem `slug`, once its Python is ready."""
    page = ProblemPage(context.new_page(), base_url, slug).open()
    page.wait_ready()
    return page
