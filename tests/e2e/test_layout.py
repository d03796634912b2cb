"""End to end: every page on a laptop and on a phone. No page scrolls sideways at 390 px,
axe-core (pinned in web/package.json) finds no violation, dark mode follows the system,
keyboard help shows only where there is a keyboard, and a phone switches between the
statement and the code.

Python is not needed to lay a page out: these contexts refuse the runtime's downloads, so
that a dozen pages load without a dozen Pythons starting on a two-core machine.
"""

from __future__ import annotations

import pytest

from grader import browser, site
from grader.problems import all_problems

PROBLEMS = all_problems()
FIRST = next(p for p in PROBLEMS if p.runs_in_browser)
PAGES = ["", *(f"p/{p.slug}/" for p in PROBLEMS)]
AXE = site.WEB_DIR / "node_modules" / "axe-core" / "axe.min.js"
SIZES = {
    "laptop": {"viewport": {"width": 1280, "height": 800}},
    "phone": {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True},
}


def axe_violations(page) -> list[str]:
    """Every axe-core violation on the page, as 'rule: the elements at fault'."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    found = page.evaluate("async () => (await axe.run(document)).violations")
    return [f"{v['id']}: {[node['target'] for node in v['nodes']][:5]}" for v in found]


def overflow(page) -> int:
    """How many pixels the page is wider than the screen."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


@pytest.fixture(scope="module", params=list(SIZES), ids=list(SIZES))
def sized(request, chromium):
    """A context of one size, with the runtime's downloads refused."""
    ctx = chromium.new_context(**SIZES[request.param])
    ctx.route("**/pyodide-*/**", lambda route: route.abort())
    ctx.size = request.param
    yield ctx
    ctx.close()


@pytest.mark.parametrize("path", PAGES, ids=["list", *(p.slug for p in PROBLEMS)])
def test_every_page_fits_the_screen_and_passes_axe(sized, base_url, path):
    page = sized.new_page()
    page.goto(base_url + path)
    views = ["statement", "code"] if path and sized.size == "phone" else [None]
    for view in views:
        if view:
            page.click(f".view-switch [data-view={view}]")
        assert overflow(page) <= 0, f"{path} ({view}) is {overflow(page)} px too wide"
        assert axe_violations(page) == [], f"{path} ({view})"
    page.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_results_pass_axe_in_light_and_dark(chromium, base_url, scheme):
    ctx = chromium.new_context(color_scheme=scheme, **SIZES["laptop"])
    page = browser.open_ready(ctx, base_url, FIRST.slug)
    # The starter (a banner, failures, the offer of a hint), with every colour the editor
    # gives Python: an f-string, a number, a comment, a call.
    page.run(FIRST.stub.read_text() + 'label = f"{len([1.5])} calls"  # note\n')
    page.page.click("[data-testid=hint]")
    page.page.click("[data-testid=group-held] summary")
    assert axe_violations(page.page) == []
    ctx.close()


def test_dark_mode_follows_the_system(chromium, base_url):
    colours = {}
    for scheme in ("light", "dark"):
        ctx = chromium.new_context(color_scheme=scheme)
        ctx.route("**/pyodide-*/**", lambda route: route.abort())
        page = ctx.new_page()
        page.goto(f"{base_url}p/{FIRST.slug}/")
        colours[scheme] = page.evaluate(
            """() => [document.body, document.querySelector('.cm-editor')]
                 .map(node => getComputedStyle(node).backgroundColor)"""
        )
        ctx.close()
    assert colours["light"] == ["rgb(255, 255, 255)", "rgb(255, 255, 255)"]
    assert colours["dark"][0] == colours["dark"][1] != colours["light"][0]


def test_phones_show_the_statement_or_the_code_and_no_keyboard_help(sized, base_url):
    page = sized.new_page()
    page.goto(f"{base_url}p/{FIRST.slug}/")
    keys = page.locator(".keys")
    editor = page.locator("[data-testid=editor]")
    statement = page.locator("#problem-statement")
    if sized.size == "laptop":
        assert keys.is_visible() and editor.is_visible() and statement.is_visible()
    else:
        assert not keys.is_visible()
        assert statement.is_visible() and not editor.is_visible()
        page.click(".view-switch [data-view=code]")
        assert editor.is_visible() and not statement.is_visible()
        assert page.locator("h1").is_visible()  # the title stays
        assert page.evaluate("window.scrollY") == 0  # the editor starts at the top
    page.close()
