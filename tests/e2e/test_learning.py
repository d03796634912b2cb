"""End to end: what a learner gets from a run. The failures come first and the passing tests
fold into one line; a problem of the whole file is one banner with a mark in the editor;
tracebacks and printed output stay short; hints come after a failed run; a solved problem
points to the next one; the list counts what is solved and what has a draft; the PyTorch
problems run on the local server."""

from __future__ import annotations

import pytest

from grader import browser
from grader.problems import all_problems

PROBLEMS = all_problems()
FIRST = next(p for p in PROBLEMS if p.runs_in_browser)
NAME = FIRST.implement[0]
TORCH = next(p for p in PROBLEMS if p.slug == "grpo_loss_torch")
REFERENCE = browser.standalone(FIRST.reference)
# The reference without its KL term: the tests of the KL fail, the others pass. It prints.
NO_KL = REFERENCE.replace(
    "return float(surrogate - beta * kl)", "print('y' * 5000)\n    return float(surrogate)"
)


def results(page) -> list[str]:
    """data-status of the results shown outside any folded group, in order."""
    return page.page.locator(".results > [data-testid=result]").evaluate_all(
        "items => items.map(item => item.dataset.status)"
    )


def test_the_hidden_tests_are_listed_before_the_first_run(context, base_url):
    page = browser.ProblemPage(context.new_page(), base_url, FIRST.slug).open()
    items = page.page.locator("[data-testid=result]")
    assert items.count() >= 20
    assert set(items.evaluate_all("items => items.map(item => item.dataset.status)")) == {"notrun"}
    assert "pt" in items.first.inner_text()  # each with its points


def test_failures_come_first_and_passing_tests_and_their_output_fold(context, base_url):
    assert NO_KL != REFERENCE
    page = browser.open_ready(context, base_url, FIRST.slug)
    verdict = page.run(NO_KL)
    assert verdict.verdict == "failed" and "passed" in verdict.statuses
    assert results(page) and set(results(page)) == {"failed"}  # only failures, unfolded
    passed = page.page.locator("[data-testid=group-passed]")
    assert passed.locator(":scope > details").get_attribute("open") is None
    assert "tests passed" in passed.locator("summary").inner_text()
    # Printed output: under each failing test, folded under passing ones, 20,000 characters
    # in all whatever the number of tests.
    shown = page.page.locator("[data-testid=result-stdout]").evaluate_all(
        "items => items.map(item => item.textContent.replace(/\\n\\[.*not shown\\]$/, '').length)"
    )
    assert sum(shown) <= 20_000 + 100 and len(shown) >= 2
    assert page.page.locator(
        ".results > [data-testid=result] [data-testid=result-stdout]"
    ).first.is_visible()


def test_a_syntax_error_is_one_banner_and_a_mark_on_its_line(context, base_url):
    page = browser.open_ready(context, base_url, FIRST.slug)
    verdict = page.run(f"import numpy as np\n\n\ndef {NAME}(rhos:\n    return 0.0\n")
    assert verdict.verdict == "failed"
    banner = page.page.locator("[data-testid=banner]")
    assert banner.count() == 1 and banner.get_attribute("data-kind") == "syntax"
    assert "syntax error on line 4" in banner.inner_text()
    assert not banner.inner_text().startswith("NotImplementedError")
    assert results(page) == []  # every test is held up by the banner, folded under it
    assert page.page.locator(".cm-lint-marker-error").count() == 1  # the editor's gutter
    assert page.page.locator(".cm-lintRange-error").count() == 1
    page.page.click("[data-testid=banner-line]")
    assert (
        page.page.evaluate("document.activeElement.closest('[data-testid]')?.dataset.testid")
        == "editor"
    )
    line = page.page.locator(".cm-activeLine").inner_text()
    assert line.startswith(f"def {NAME}(rhos:")


def test_the_starter_is_one_banner_not_one_block_per_test(context, base_url):
    page = browser.open_ready(context, base_url, FIRST.slug)
    verdict = page.run()
    banner = page.page.locator("[data-testid=banner]")
    assert banner.count() == 1 and banner.get_attribute("data-kind") == "not_implemented"
    assert len(results(page)) <= 2  # tests that expect an error see it differently
    assert verdict.statuses.count("failed") == len(verdict.statuses)


def test_infinite_recursion_shows_a_short_traceback(context, base_url):
    page = browser.open_ready(context, base_url, FIRST.slug)
    page.run(f"def {NAME}(*args, **kwargs):\n    return {NAME}(*args, **kwargs)\n")
    traceback = page.page.locator("[data-testid=traceback]").first.inner_text().splitlines()
    assert len(traceback) <= 8
    assert traceback[-1].strip().startswith("[Previous line repeated")


def test_hints_come_after_a_failed_run_and_are_remembered(context, base_url):
    page = browser.open_ready(context, base_url, FIRST.slug)
    assert not page.page.locator("[data-testid=hints]").is_visible()
    page.run(NO_KL)
    button = page.page.locator("[data-testid=hint]")
    assert button.inner_text() == f"Show a hint (1 of {len(FIRST.hints)})"
    button.click()
    assert page.page.locator("[data-testid=hint-text]").count() == 1
    assert button.inner_text() == f"Show a hint (2 of {len(FIRST.hints)})"
    page.page.reload()
    assert page.page.locator("[data-testid=hint-text]").count() == 1


def test_a_solved_problem_links_to_the_next_and_the_list_counts_it(context, base_url):
    page = browser.open_ready(context, base_url, FIRST.slug)
    assert not page.page.locator("[data-testid=next]").is_visible()
    assert page.run(REFERENCE).verdict == "passed"
    following = next(p for p in PROBLEMS if p.order > FIRST.order)
    link = page.page.locator("[data-testid=next]")
    assert link.is_visible() and link.get_attribute("href") == f"/p/{following.slug}/"

    draft = browser.ProblemPage(context.new_page(), base_url, following.slug).open()
    draft.page.click(".cm-content")
    draft.page.keyboard.type("# started\n")
    draft.page.goto(base_url)  # leaving the page saves the draft
    rows = draft.page.locator("[data-testid=problem-row]")
    assert (
        rows.locator(f"xpath=self::*[@data-slug='{FIRST.slug}']").get_attribute("data-solved")
        == "true"
    )
    assert (
        rows.locator(f"xpath=self::*[@data-slug='{following.slug}']").get_attribute("data-draft")
        == "true"
    )
    progress = draft.page.locator("[data-testid=progress]").inner_text()
    assert progress.startswith(f"1 of {len(PROBLEMS)} problems solved")


@pytest.mark.parametrize("code, verdict", [("reference", "passed"), ("starter", "failed")])
def test_a_pytorch_problem_runs_on_the_local_server(code, verdict, context, base_url):
    page = browser.open_ready(context, base_url, TORCH.slug)
    assert not page.page.locator("[data-testid=local-only]").is_visible()
    result = page.run(browser.standalone(TORCH.reference) if code == "reference" else None)
    assert result.verdict == verdict, result.summary
    assert set(result.statuses) == {verdict}
    if code == "starter":
        banner = page.page.locator("[data-testid=banner]")
        assert banner.get_attribute("data-kind") == "not_implemented"
        assert "line" in page.page.locator("[data-testid=banner-line]").inner_text()
