"""The browser the end-to-end tests drive and the servers of the built site.

Needs Debian's chromium (`make system-deps` installs it) and builds the site if it is stale.
"""

from __future__ import annotations

import pytest

from grader import browser, site
from grader.serve import serve_in_thread

if browser.find_chromium() is None:
    pytest.skip("chromium is not installed (run `make system-deps`)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="install the dev extra: playwright")


@pytest.fixture(scope="session")
def built_site():
    return site.ensure_site()


@pytest.fixture(scope="session")
def base_url(built_site):
    """The site as `grpo-kit serve` serves it: the PyTorch problems run on this server."""
    server, url = serve_in_thread(built_site, local_runs=True)
    yield url
    server.shutdown()


@pytest.fixture(scope="session")
def static_url(built_site):
    """The site as plain static files: no server to run the PyTorch problems."""
    server, url = serve_in_thread(built_site)
    yield url
    server.shutdown()


@pytest.fixture(scope="session")
def chromium():
    with sync_api.sync_playwright() as playwright:
        instance = playwright.chromium.launch(**browser.launch_options())
        yield instance
        instance.close()


@pytest.fixture
def context(chromium):
    """A fresh browser profile that records every URL the pages request."""
    ctx = chromium.new_context()
    ctx.requested = []
    ctx.on("request", lambda request: ctx.requested.append(request.url))
    yield ctx
    ctx.close()
