"""The local server: files sent compressed and cached by their hashed names, and the run API
that lets the PyTorch problems run from their pages, open only to the server's own pages."""

import gzip
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest
import zstandard

from grader import browser, localrun, serve, webruntime
from grader.problems import all_problems
from grader.serve import serve_in_thread

TORCH = next(p for p in all_problems() if not p.runs_in_browser and p.slug == "grpo_loss_torch")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A small built site: a page, a hashed script (with its precompressed copies), a file."""
    root = tmp_path_factory.mktemp("site")
    (root / "p" / "x").mkdir(parents=True)
    (root / "p" / "x" / "index.html").write_text("<!doctype html><head></head><p>hi</p>")
    (root / "assets").mkdir()
    script = b"console.log('hi');" * 100
    (root / "assets" / "page-ABCD2345.js").write_bytes(script)
    (root / "assets" / "page-ABCD2345.js.gz").write_bytes(gzip.compress(script))
    snapshot = root / "pyodide-0123456789abcdef" / "snapshot.bin"
    snapshot.parent.mkdir()
    snapshot.write_bytes(bytes(range(256)) * 64)
    webruntime.zstd_compress(snapshot)
    (root / "kit.json").write_text("{}")
    return root


@pytest.fixture(scope="module")
def server(site):
    server, url = serve_in_thread(site, local_runs=True)
    yield server, url
    server.shutdown()


def get(url, headers=None):
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {})) as response:
        return response.headers, response.read()


def post(server, url, body, **headers):
    """POST /api/... as the server's own page would, unless `headers` say otherwise."""
    port = server.server_address[1]
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {"Origin": f"http://127.0.0.1:{port}", "Content-Type": "application/json",
            serve.TOKEN_HEADER: server.token} | headers  # fmt: skip
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={k: v for k, v in sent.items() if v is not None})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_hashed_files_are_cached_for_good_and_sent_compressed(server):
    _, url = server
    headers, body = get(url + "assets/page-ABCD2345.js", {"Accept-Encoding": "gzip, br"})
    assert headers["Content-Encoding"] == "gzip"  # no .br beside it: the next best
    assert headers["Cache-Control"] == serve.IMMUTABLE
    assert gzip.decompress(body).startswith(b"console.log")
    headers, body = get(url + "assets/page-ABCD2345.js")  # a client that takes no gzip
    assert "Content-Encoding" not in headers and body.startswith(b"console.log")
    headers, _ = get(url + "kit.json")  # not hashed: revalidated every time
    assert headers["Cache-Control"] == "no-cache"
    assert headers["Cross-Origin-Embedder-Policy"] == "require-corp"


def test_the_runtime_goes_as_zstd_to_browsers_that_take_it(server, site):
    _, url = server
    snapshot = "pyodide-0123456789abcdef/snapshot.bin"
    headers, body = get(url + snapshot, {"Accept-Encoding": "gzip, deflate, br, zstd"})
    assert headers["Content-Encoding"] == "zstd"
    assert zstandard.ZstdDecompressor().decompress(body) == (site / snapshot).read_bytes()
    headers, body = get(url + snapshot, {"Accept-Encoding": "gzip"})  # no gzip copy: as it is
    assert "Content-Encoding" not in headers and body == (site / snapshot).read_bytes()


def test_pages_carry_the_token_only_for_this_servers_own_host(server, site):
    the_server, url = server
    _, page = get(url + "p/x/")
    assert f'content="{the_server.token}"'.encode() in page
    port = the_server.server_address[1]
    _, rebound = get(url + "p/x/", {"Host": f"attacker.example:{port}"})  # DNS rebinding
    assert the_server.token.encode() not in rebound
    static, static_url = serve_in_thread(site)  # without the run API: no token at all
    try:
        _, page = get(static_url + "p/x/")
        assert b"grpo-kit-token" not in page
    finally:
        static.shutdown()


@pytest.mark.parametrize(
    "headers, status",
    [
        ({"Origin": "http://evil.example"}, 403),
        ({"Origin": None}, 403),
        ({serve.TOKEN_HEADER: "guessed"}, 403),
        ({serve.TOKEN_HEADER: None}, 403),
        ({"Content-Type": "text/plain"}, 415),
    ],
    ids=["foreign-origin", "no-origin", "wrong-token", "no-token", "not-json"],
)
def test_the_run_api_refuses_requests_not_from_its_own_page(server, headers, status):
    the_server, url = server
    body = {"slug": TORCH.slug, "code": "x = 1\n", "run": "r1"}
    code, answer = post(the_server, url + "api/run", body, **headers)
    assert code == status and answer["type"] == "error"


def test_the_run_api_refuses_oversized_code_and_unknown_problems(server):
    the_server, url = server
    huge = {"slug": TORCH.slug, "code": "#" * (serve.MAX_REQUEST_BYTES + 1), "run": "r1"}
    code, answer = post(the_server, url + "api/run", huge)
    assert code == 413 and "KiB" in answer["message"]
    code, answer = post(the_server, url + "api/run", {"slug": "nope", "code": "", "run": "r"})
    assert code == 404
    browser_problem = next(p for p in all_problems() if p.runs_in_browser)
    code, _ = post(
        the_server, url + "api/run", {"slug": browser_problem.slug, "code": "", "run": "r"}
    )
    assert code == 404  # the numpy problems run in the browser
    code, _ = post(the_server, url + "api/run", b"{not json")
    assert code == 400


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"slug": "grpo_loss_torch", "code": "\\ud800", "run": "r"}',
        b"\xff\xfe{}",
        b"null",
        b'{"slug": ["../grpo_loss_torch"], "code": "", "run": "r"}',
        b'{"slug": "grpo_loss_torch", "code": "", "run": ' + b"9" * 5000 + b"}",
    ],
    ids=[
        "nested-too-deeply",
        "lone-surrogate",
        "not-utf8",
        "not-an-object",
        "slug-not-text",
        "long-int",
    ],
)
def test_malformed_requests_get_an_answer_not_a_dropped_connection(server, body):
    the_server, url = server
    code, answer = post(the_server, url + "api/run", body)
    assert code in (400, 404) and answer["type"] == "error"
    assert not the_server.local_runs._current


def test_a_client_that_stops_sending_is_let_go(site, monkeypatch):
    # A body announced and never sent, or a connection left open, must not hold a thread
    # of the server for good.
    assert 0 < (serve.SiteHandler.timeout or 0) <= 60, "a client may hold a thread for good"
    monkeypatch.setattr(serve.SiteHandler, "timeout", 0.5)  # the same, sooner
    the_server, url = serve_in_thread(site, local_runs=True)
    try:
        port = the_server.server_address[1]
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(f"POST /api/run HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                           f"Origin: http://127.0.0.1:{port}\r\n"
                           f"{serve.TOKEN_HEADER}: {the_server.token}\r\n"
                           "Content-Type: application/json\r\n"
                           "Content-Length: 1000\r\n\r\n{".encode())  # fmt: skip
            start = time.monotonic()
            assert client.recv(1024) == b"", "the server should close the connection"
            assert time.monotonic() - start < 5
    finally:
        the_server.shutdown()


def test_a_posted_reference_passes_and_the_starter_fails_in_the_sandbox(server):
    the_server, url = server
    code, answer = post(the_server, url + "api/run", {"slug": TORCH.slug, "run": "ref",
                                                      "code": browser.standalone(TORCH.reference)})  # fmt: skip
    assert code == 200 and answer["type"] == "result", answer
    assert {t["outcome"] for t in answer["result"]["tests"]} == {"passed"}
    code, answer = post(the_server, url + "api/run", {"slug": TORCH.slug, "run": "starter",
                                                      "code": TORCH.stub.read_text()})  # fmt: skip
    result = answer["result"]
    assert {t["outcome"] for t in result["tests"]} == {"failed"}
    assert result["file_problems"][0]["kind"] == "not_implemented"
    assert all(t["title"] for t in result["tests"])


def test_stop_ends_a_run_on_the_server_and_says_which_test_ran(server):
    the_server, url = server
    loop = "\n".join(f"def {name}(*args, **kwargs):\n    while True:\n        pass\n"
                     for name in TORCH.implement)  # fmt: skip
    answers = []
    request = {"slug": TORCH.slug, "code": loop, "run": "looping"}
    worker = threading.Thread(
        target=lambda: answers.append(post(the_server, url + "api/run", request))
    )
    worker.start()
    deadline = time.monotonic() + 120
    while the_server.local_runs._current is None and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(3)  # into the first test's endless call (the sandbox starts first)
    assert post(the_server, url + "api/stop", {"run": "someone else's"})[1] == {"stopped": False}
    stopped_at = time.monotonic()
    assert post(the_server, url + "api/stop", {"run": "looping"})[1] == {"stopped": True}
    worker.join(timeout=60)
    assert time.monotonic() - stopped_at < localrun.STOP_GRACE_S + 5
    ((code, answer),) = answers
    assert code == 200
    if answer["type"] == "result":  # pytest reported the tests done before the stop
        assert answer["result"]["interrupted"]
        assert answer["result"]["interrupted_at"]["test"].startswith(f"problems/{TORCH.slug}/")
    else:
        assert answer["type"] == "stopped"
