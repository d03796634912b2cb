"""End to end: the problem pages in headless Chromium, with the hidden tests run by Pyodide.

Each test opens its pages in a fresh browser context: an empty localStorage, like a newcomer
(fixtures in conftest.py).
"""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import pytest

from grader import browser
from grader.problems import all_problems
from grader.runner import run_tests

PROBLEMS = all_problems()
BROWSER_PROBLEMS = [p for p in PROBLEMS if p.runs_in_browser]
LOCAL_PROBLEMS = [p for p in PROBLEMS if not p.runs_in_browser]
FIRST = BROWSER_PROBLEMS[0]  # grpo_objective: the problem a newcomer starts with
FIRST_NAME = FIRST.implement[0]

# The learner's code says when its loop runs (the worker's console reaches the test), so that
# a Stop is only pressed once there is a loop to stop, never during pytest's start-up.
LOOP_STARTED = "grpo-kit e2e: the loop is running"
INFINITE_LOOP = f"""import js

def {FIRST_NAME}(*args, **kwargs):
    js.console.log("{LOOP_STARTED}")
    while True:
        pass
"""
# Swallows the interrupt, so only terminating the worker can stop it.
STUBBORN_LOOP = f"""import js

def {FIRST_NAME}(*args, **kwargs):
    js.console.log("{LOOP_STARTED}")
    while True:
        try:
            while True:
                pass
        except KeyboardInterrupt:
            pass
"""
# Reads outside WebAssembly's memory: a fatal error, after which this Python can run nothing.
CRASH = f"""import ctypes

def {FIRST_NAME}(*args, **kwargs):
    return ctypes.string_at(2**32 - 16, 8)
"""
# KeyboardInterrupt as grader.webrun.run_problem returns, pytest done: what a Stop that lands
# just after the last test looks like. Once only, so the next run works.
LATE_INTERRUPT = f"""import sys

def _stop_as_pytest_returns(frame, event, arg):
    if event == "return" and frame.f_code.co_name == "run_problem":
        sys.setprofile(None)
        raise KeyboardInterrupt

sys.setprofile(_stop_as_pytest_returns)

def {FIRST_NAME}(*args, **kwargs):
    return 0.0
"""
FOCUSED = "document.activeElement.closest('[data-testid]')?.dataset.testid"


@pytest.mark.parametrize("problem", BROWSER_PROBLEMS, ids=lambda p: p.slug)
def test_reference_passes_every_test_and_starter_fails_them_all(problem, context, base_url):
    hidden_tests = len(run_tests(problem, ["reference"]))
    page = browser.open_ready(context, base_url, problem.slug)

    starter = page.run()  # the editor starts with the starter
    assert starter.verdict == "failed", starter.summary
    assert starter.statuses == ["failed"] * hidden_tests

    solved = page.run(browser.standalone(problem.reference))
    assert solved.verdict == "passed", solved.summary
    assert solved.statuses == ["passed"] * hidden_tests

    page.page.goto(base_url)  # the list remembers the problem as solved
    row = page.page.locator(f'[data-testid=problem-row][data-slug="{problem.slug}"]')
    assert row.get_attribute("data-solved") == "true"


def test_a_failing_test_says_what_went_wrong(context, base_url):
    page = browser.open_ready(context, base_url, FIRST.slug)
    code = (
        f"def {FIRST_NAME}(*args, **kwargs):\n    print('hello from my code')\n    return 1 / 0\n"
    )
    result = page.run(code)
    assert result.verdict == "failed"
    first = page.page.locator("[data-testid=result]").first
    assert "ZeroDivisionError" in first.locator("[data-testid=result-message]").inner_text()
    # Only the learner's frame, with the editor's line number.
    assert first.locator("[data-testid=traceback]").inner_text().splitlines() == [
        f"{FIRST.slug}.py, line 3, in {FIRST_NAME}",
        "    return 1 / 0",
    ]
    assert "hello from my code" in first.locator("[data-testid=result-stdout]").inner_text()


@pytest.mark.parametrize("loop", [INFINITE_LOOP, STUBBORN_LOOP], ids=["interrupt", "terminate"])
def test_stop_ends_an_infinite_loop_and_the_next_run_works(loop, context, base_url):
    page = browser.open_ready(context, base_url, FIRST.slug)
    page.set_code(loop)
    with page.page.expect_console_message(lambda message: message.text == LOOP_STARTED):
        mark = page.start_run()
    # Run pressed again during the run does nothing, and says so.
    page.page.click("[data-testid=run]")
    assert "Already running" in page.page.inner_text("[data-testid=summary]")

    stop_clicked = time.perf_counter()
    page.page.click("[data-testid=stop]")
    stopped = page.wait_verdict(mark)
    assert stopped.verdict == "stopped", stopped.summary
    assert time.perf_counter() - stop_clicked < 2.0
    # Which test was running; the interrupt also says where in the learner's code.
    assert "Stopped while running “" in stopped.summary
    if loop is INFINITE_LOOP:
        assert "on line 5 of your code" in stopped.summary or "on line 6" in stopped.summary
    # The interrupt keeps the same Python; only the stubborn loop needs a fresh one.
    state = page.page.get_attribute("[data-testid=status]", "data-state")
    assert state == ("ready" if loop is INFINITE_LOOP else "starting")
    # Stop is disabled again: the focus moves on to Run rather than falling to the page.
    assert page.page.evaluate(FOCUSED) == "run"

    after = page.run(browser.standalone(FIRST.reference))
    assert after.verdict == "passed", after.summary


def test_a_stop_just_after_the_last_test_shows_as_stopped(context, base_url):
    page = browser.open_ready(context, base_url, FIRST.slug)
    late = page.run(LATE_INTERRUPT)
    assert late.verdict == "stopped", late.summary
    assert page.run(browser.standalone(FIRST.reference)).verdict == "passed"


def test_a_python_crash_brings_up_a_fresh_python(context, base_url):
    page = browser.open_ready(context, base_url, FIRST.slug)
    crashed = page.run(CRASH)
    assert crashed.verdict == "error", crashed.summary
    assert "Python crashed" in crashed.summary and "press Run again" in crashed.summary
    page.wait_ready()
    after = page.run(browser.standalone(FIRST.reference))
    assert after.verdict == "passed", after.summary


def test_the_next_page_starts_from_the_runtime_the_first_one_kept(context, base_url):
    """After its first run a worker keeps the snapshot and the image; the next page's worker
    reads them from there instead of the HTTP cache, and still passes the reference."""
    first = browser.open_ready(context, base_url, FIRST.slug)
    assert first.page.evaluate("window.grpoKit.bootPhases().cached") is False  # a new profile
    assert first.run(browser.standalone(FIRST.reference)).verdict == "passed"
    first.page.wait_for_function("window.grpoKit.runtimeKept()", timeout=60_000)
    first.page.close()
    other = BROWSER_PROBLEMS[1]
    second = browser.open_ready(context, base_url, other.slug)
    assert second.page.evaluate("window.grpoKit.bootPhases().cached") is True
    assert second.run(browser.standalone(other.reference)).verdict == "passed"


def test_draft_survives_a_reload_and_reset_asks_before_restoring_the_starter(context, base_url):
    # The editor and its storage work before Python has started: no need to wait for it.
    page = browser.ProblemPage(context.new_page(), base_url, FIRST.slug).open()
    starter = page.code()
    page.page.click(".cm-content")
    page.page.keyboard.press("Control+End")
    page.page.keyboard.type("\n# my draft 42\n")
    page.page.reload()
    assert "# my draft 42" in page.code()

    dialogs = []

    def answer(dialog):  # the first question is dismissed, the second accepted
        dialogs.append(dialog.type)
        if len(dialogs) == 1:
            dialog.dismiss()
        else:
            dialog.accept()

    page.page.on("dialog", answer)
    page.page.click("[data-testid=reset]")
    assert dialogs == ["confirm"]
    assert "# my draft 42" in page.code()  # dismissed: the draft stays
    page.page.click("[data-testid=reset]")
    assert dialogs == ["confirm", "confirm"]
    assert page.code() == starter
    page.page.reload()
    assert page.code() == starter


def test_run_works_from_the_keyboard_alone(context, base_url):
    page = browser.open_ready(context, base_url, FIRST.slug)
    keyboard = page.page.keyboard
    for _ in range(40):  # Tab through the page until the editor has the focus
        keyboard.press("Tab")
        if page.page.evaluate(FOCUSED) == "editor":
            break
    else:
        pytest.fail("Tab never reached the editor")

    keyboard.press("Control+End")
    keyboard.type("\nprint('typed')\n")
    typed = page.code()
    mark = page.mark()
    keyboard.press("Control+Enter")
    assert page.wait_verdict(mark).verdict == "failed"  # the starter, run from the editor
    assert page.code() == typed  # Ctrl+Enter ran the code and inserted nothing

    keyboard.press("Escape")  # Esc then Tab leaves the editor for the buttons right after it
    keyboard.press("Tab")
    assert page.page.evaluate(FOCUSED) == "run"
    keyboard.press("Tab")  # Stop is disabled between runs: the next stop is Reset
    assert page.page.evaluate(FOCUSED) == "reset"
    # Then what the failed run brought, in reading order: the banner's "Go to line", the
    # offer of a hint, and the results.
    visited = []
    for _ in range(3):
        keyboard.press("Tab")
        visited.append(page.page.evaluate(FOCUSED))
    assert visited == ["banner-line", "hint", "results"]
    mark = page.mark()
    keyboard.press("Control+Enter")  # runs from anywhere on the page, as aria-keyshortcuts says
    assert page.wait_verdict(mark).verdict == "failed"

    for _ in range(4):
        keyboard.press("Shift+Tab")
    assert page.page.evaluate(FOCUSED) == "run"
    mark = page.mark()
    keyboard.press("Enter")  # a verdict of a run numbered after the mark: Enter really ran
    assert page.wait_verdict(mark).verdict == "failed"
    assert page.page.evaluate(FOCUSED) == "run"


@pytest.mark.parametrize("problem", LOCAL_PROBLEMS, ids=lambda p: p.slug)
def test_torch_problems_served_as_static_files_say_how_to_run_them_locally(
    problem, context, static_url
):
    page = context.new_page()
    page.goto(f"{static_url}p/{problem.slug}/")
    notice = page.locator("[data-testid=local-only]").inner_text()
    assert f"pytest problems/{problem.slug}" in notice
    assert f"grpo-kit check {problem.slug}" in notice
    assert not page.locator("[data-testid=run]").is_visible()


def test_the_site_requests_nothing_outside_localhost(context, base_url):
    page = browser.open_ready(context, base_url, FIRST.slug)
    assert page.run(browser.standalone(FIRST.reference)).verdict == "passed"
    page.page.goto(base_url)
    page.page.wait_for_load_state("networkidle")
    hosts = {urlsplit(url).hostname for url in context.requested if not url.startswith("data:")}
    assert hosts == {"127.0.0.1"}
    assert any(url.endswith("pyodide.asm.wasm") for url in context.requested)  # Python came too
