"""How fast the browser gives a verdict, beside a local pytest run of the same problem.

Measured in headless Chromium, in one run, on the reference solution of one problem:

* cold: a fresh browser profile opens the page and presses Run as soon as it can; time from
  navigation to the verdict (Pyodide, numpy and pytest downloaded and compiled);
* warm: the same profile opens the page again (the HTTP cache, the compiled-code cache and the
  worker's own cache of the runtime's files warm; median of several loads);
* repeat: Run pressed again on the loaded page (median of several);
* local: ``python -m pytest problems/<slug> --impl reference`` in a fresh process (median).

Targets: warm no slower than the local run, cold at most twice it, repeat under 0.2 s. It also
prints the bytes a cold load transfers (as sent: compressed) and, per load, where the
worker's start-up went.

    python bench/bench_browser.py [--problem SLUG] [--repeats N] [--loads N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

from grader import browser, site
from grader.problems import KIT_ROOT, get_problem
from grader.serve import serve_in_thread

REPEAT_TARGET_S = 0.2
# Each measure's target as a multiple of the local pytest run (None: an absolute one).
TARGET_X_LOCAL = {"cold": 2.0, "warm": 1.0, "repeat": None}


def local_pytest_seconds(slug: str, repeats: int) -> float:
    command = [sys.executable, "-m", "pytest", f"problems/{slug}", "--impl", "reference", "-q"]
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(command, cwd=KIT_ROOT, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def load_to_verdict(context, base_url: str, slug: str, code: str) -> tuple[float, dict, object]:
    """Open the page, paste `code`, press Run at once; seconds from navigation to verdict."""
    page = browser.ProblemPage(context.new_page(), base_url, slug)
    started = time.perf_counter()
    page.page.goto(page.url, wait_until="domcontentloaded")
    page.set_code(code)
    verdict = page.wait_verdict(page.start_run())
    if verdict.verdict != "passed":
        raise SystemExit(f"the reference did not pass in the browser: {verdict.summary}")
    phases = page.page.evaluate("window.grpoKit.bootPhases()")
    if phases:  # when the worker began, on the page's clock
        origin = page.page.evaluate("performance.timeOrigin")
        phases = {"waiting": phases.pop("startedAt") - origin, **phases}
    return time.perf_counter() - started, phases, page


def transferred_bytes(requests) -> int:
    """Bytes of the responses' bodies as they crossed the network (compressed)."""
    return sum(max(0, request.sizes()["responseBodySize"]) for request in requests)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="grpo_objective", help="a browser problem's slug")
    parser.add_argument("--repeats", type=int, default=5, help="runs for the medians")
    parser.add_argument("--loads", type=int, default=3, help="warm page loads for the median")
    args = parser.parse_args()
    problem = get_problem(args.problem)
    if not problem.runs_in_browser:
        parser.error(f"{problem.slug} runs locally (PyTorch), not in the browser")
    from playwright.sync_api import sync_playwright

    code = browser.standalone(problem.reference)
    server, base_url = serve_in_thread(site.ensure_site())
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(profile, **browser.launch_options())
        requests = []  # the worker's too
        context.on("requestfinished", lambda request: requests.append(request))
        cold, cold_phases, page = load_to_verdict(context, base_url, problem.slug, code)
        cold_bytes = transferred_bytes(requests)
        # A learner reads the first verdict while the worker keeps the runtime's files.
        page.page.wait_for_function("window.grpoKit.runtimeKept()", timeout=60_000)
        warm_loads = []
        for _ in range(args.loads):
            page.page.close()
            seconds, phases, page = load_to_verdict(context, base_url, problem.slug, code)
            warm_loads.append((seconds, phases))
        warm, warm_phases = sorted(warm_loads, key=lambda load: load[0])[len(warm_loads) // 2]
        repeats = [page.run().seconds for _ in range(args.repeats)]  # on the last page loaded
        context.close()
    server.shutdown()
    local = local_pytest_seconds(problem.slug, args.repeats)
    figures = {"cold": cold, "warm": warm, "repeat": statistics.median(repeats)}

    print(
        f"problem {problem.slug}: reference solution; {args.loads} warm loads, {args.repeats} repeats"
    )
    print(f"{'measure':<36}{'seconds':>9}{'x local':>9}  target")
    for name, label in [
        ("cold", "page load -> first verdict, cold"),
        ("warm", "page load -> first verdict, warm"),
        ("repeat", "Run again on a loaded page (median)"),
    ]:
        ratio = figures[name] / local
        factor = TARGET_X_LOCAL[name]
        if factor is None:
            met, target = figures[name] < REPEAT_TARGET_S, f"< {REPEAT_TARGET_S} s"
        else:
            met, target = ratio <= factor, f"<= {factor:g} x local"
        print(
            f"{label:<36}{figures[name]:>9.2f}{ratio:>9.2f}  {target} {'ok' if met else 'MISSED'}"
        )
    print(f"{'local pytest run (median)':<36}{local:>9.2f}{1.0:>9.2f}")
    print(f"bytes transferred by the cold load: {cold_bytes:,} ({cold_bytes / 2**20:.1f} MiB)")
    for name, phases in [("cold", cold_phases), ("warm", warm_phases)]:
        phases = dict(phases or {})
        cached = phases.pop("cached", False)
        parts = ", ".join(f"{key} {value / 1000:.2f} s" for key, value in phases.items())
        parts += "; runtime files from the worker's cache" if cached else ""
        print(f"worker start-up, {name}: {parts}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
