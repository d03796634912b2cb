"""Serve the built site on localhost: fast, cross-origin isolated, and able to run PyTorch.

* The isolation headers make the page ``crossOriginIsolated``, which lets Stop interrupt
  Python through a SharedArrayBuffer instead of restarting it.
* Files whose names carry their content's hash (web/build.mjs names them) are cached by the
  browser for a year without asking again; the pages themselves are revalidated each time, so
  a rebuilt site is never shadowed by a stale copy. The build precompressed every large file
  (``.br``, ``.gz`` beside it, and ``.zst`` for the Python runtime's big files): the first of
  zstd, brotli and gzip that the browser accepts is sent as it is.
* With `local_runs` (``grpo-kit serve`` on a machine with PyTorch), ``POST /api/run`` runs a
  problem's hidden tests on posted code (``grader/localrun.py``) and ``POST /api/stop`` stops
  that run. Only the site's own pages may ask: the request must come from this server's origin
  on 127.0.0.1 or localhost, carry the token that this server wrote into its pages (a fresh one
  per start), be JSON, and stay under a size limit.
"""

from __future__ import annotations

import email.utils
import functools
import hmac
import http.server
import io
import json
import re
import secrets
import threading
from http import HTTPStatus
from pathlib import Path

ISOLATION_HEADERS = {
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
    "Cross-Origin-Resource-Policy": "same-origin",
}
IMMUTABLE = "public, max-age=31536000, immutable"
# The names web/build.mjs gives from a hash of the content: "/assets/page-I5225FUB.js", and
# every file under "/pyodide-7ad3bfff4b345f87/" or "/katex-0289a02cf4/".
HASHED = re.compile(r"^/(assets/\w+-[A-Z0-9]{8}\.|pyodide-[0-9a-f]{16}/|katex-[0-9a-f]{10}/)")
ENCODINGS = (("zstd", ".zst"), ("br", ".br"), ("gzip", ".gz"))  # best first
TOKEN_HEADER = "X-Grpo-Kit-Token"
TOKEN_META = '<meta name="grpo-kit-token" content="{}">'
MAX_REQUEST_BYTES = 300 * 1024  # the largest source a solution may be (256 KiB), and JSON
LOCAL_HOSTS = ("127.0.0.1", "localhost")


class RequestRefused(Exception):
    """An API request this server does not serve; carries the status and what to do."""

    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


class SiteHandler(http.server.SimpleHTTPRequestHandler):
    # Seconds a socket may wait on the client: a body announced and never sent, or an idle
    # connection kept open, lets its thread go instead of holding it for good. (A run's own
    # time is not waiting on the socket.)
    timeout = 30
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".js": "text/javascript",
        ".mjs": "text/javascript",
        ".wasm": "application/wasm",
        ".json": "application/json",
        ".whl": "application/zip",
        ".zip": "application/zip",
        ".svg": "image/svg+xml",
        ".bin": "application/octet-stream",
    }

    def end_headers(self) -> None:
        for name, value in ISOLATION_HEADERS.items():
            self.send_header(name, value)
        super().end_headers()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass  # one line per file would bury the URL; errors still reach the page

    # ------------------------------------------------------------------ files

    def send_head(self):
        path = Path(self.translate_path(self.path))
        if path.is_dir():
            if not self.path.split("?", 1)[0].endswith("/"):
                return super().send_head()  # the redirect to the folder's URL, with its slash
            path = path / "index.html"
        if not path.is_file():
            self.send_error(HTTPStatus.NOT_FOUND, "File not found")
            return None
        if path.suffix == ".html":
            return self._send_page(path)
        return self._send_file(path)

    def _send_page(self, path: Path):
        body = path.read_bytes()
        if getattr(self.server, "local_runs", None) is not None and self._host_is_local():
            meta = TOKEN_META.format(self.server.token).encode()
            body = body.replace(b"</head>", meta + b"\n</head>", 1)
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        return io.BytesIO(body)

    def _send_file(self, path: Path):
        accepted = {
            part.split(";")[0].strip()
            for part in self.headers.get("Accept-Encoding", "").split(",")
        }
        chosen, encoding = path, None
        for name, suffix in ENCODINGS:
            variant = path.with_name(path.name + suffix)
            if name in accepted and variant.is_file():
                chosen, encoding = variant, name
                break
        stat = chosen.stat()
        immutable = HASHED.search(self.path.split("?", 1)[0]) is not None
        modified = email.utils.formatdate(stat.st_mtime, usegmt=True)
        if not immutable and self.headers.get("If-Modified-Since") == modified:
            self.send_response(HTTPStatus.NOT_MODIFIED)
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            return None
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Length", str(stat.st_size))
        self.send_header("Cache-Control", IMMUTABLE if immutable else "no-cache")
        self.send_header("Vary", "Accept-Encoding")
        if encoding:
            self.send_header("Content-Encoding", encoding)
        if not immutable:
            self.send_header("Last-Modified", modified)
        self.end_headers()
        return chosen.open("rb")

    # ------------------------------------------------------------------ the run API

    def do_POST(self) -> None:  # noqa: N802 - the base class's naming
        runs = getattr(self.server, "local_runs", None)
        try:
            if runs is None or self.path not in ("/api/run", "/api/stop"):
                raise RequestRefused(HTTPStatus.NOT_FOUND, "no such endpoint")
            request = self._checked_request()
            if self.path == "/api/stop":
                stopped = runs.stop(str(request.get("run", "")))
                self._send_json(HTTPStatus.OK, {"stopped": stopped})
            else:
                self._send_json(HTTPStatus.OK, self._run(runs, request))
        except RequestRefused as refused:
            self._send_json(refused.status, {"type": "error", "message": str(refused)})

    def _host_is_local(self) -> bool:
        port = self.server.server_address[1]
        return self.headers.get("Host") in {f"{host}:{port}" for host in LOCAL_HOSTS}

    def _checked_request(self) -> dict:
        port = self.server.server_address[1]
        origins = {f"http://{host}:{port}" for host in LOCAL_HOSTS}
        if not self._host_is_local() or self.headers.get("Origin") not in origins:
            raise RequestRefused(HTTPStatus.FORBIDDEN, "only this server's own pages may run code")
        token = self.headers.get(TOKEN_HEADER, "")
        if not hmac.compare_digest(token.encode(), self.server.token.encode()):
            raise RequestRefused(
                HTTPStatus.FORBIDDEN,
                "the page is older than this server (it was restarted): reload the page",
            )
        if self.headers.get("Content-Type", "").split(";")[0].strip() != "application/json":
            raise RequestRefused(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "send JSON")
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise RequestRefused(HTTPStatus.LENGTH_REQUIRED, "say the length of the code") from None
        if not 0 <= length <= MAX_REQUEST_BYTES:
            raise RequestRefused(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"the code is larger than {MAX_REQUEST_BYTES // 1024} KiB: a solution is far smaller",
            )
        try:
            request = json.loads(self.rfile.read(length))
        # ValueError: not UTF-8, not JSON, or an integer longer than Python converts;
        # RecursionError: nested too deeply.
        except (ValueError, RecursionError):
            raise RequestRefused(HTTPStatus.BAD_REQUEST, "the request is not valid JSON") from None
        if not isinstance(request, dict):
            raise RequestRefused(HTTPStatus.BAD_REQUEST, "the request must be a JSON object")
        return request

    def _run(self, runs, request: dict) -> dict:
        from grader.localrun import RunBusy
        from grader.problems import all_problems

        slug, code, run_id = request.get("slug"), request.get("code"), request.get("run")
        if not isinstance(code, str) or not isinstance(run_id, str) or not run_id:
            raise RequestRefused(HTTPStatus.BAD_REQUEST, "send the code and a run id as text")
        try:
            code.encode("utf-8")  # JSON lets through lone surrogates, which no file can hold
        except UnicodeEncodeError:
            raise RequestRefused(HTTPStatus.BAD_REQUEST, "the code is not valid text") from None
        problem = next((p for p in all_problems() if p.slug == slug), None)
        if problem is None or problem.runs_in_browser:
            raise RequestRefused(HTTPStatus.NOT_FOUND, f"no PyTorch problem named {slug!r}")
        try:
            return runs.run(problem, code, run_id)
        except RunBusy as busy:
            raise RequestRefused(HTTPStatus.CONFLICT, str(busy)) from None

    def _send_json(self, status: HTTPStatus, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)


def torch_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def make_server(directory: Path, host: str = "127.0.0.1", port: int = 8000,
                local_runs: bool = False):  # fmt: skip
    """An HTTP server for `directory` (port 0 picks a free port); raises OSError if taken.

    `local_runs`: serve the run API, so that the PyTorch problems run from their pages.
    """
    handler = functools.partial(SiteHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer((host, port), handler)
    server.token = secrets.token_urlsafe(32)
    server.local_runs = None
    if local_runs:
        from grader.localrun import LocalRuns

        server.local_runs = LocalRuns()
    return server


def serve_in_thread(directory: Path, host: str = "127.0.0.1", port: int = 0,
                    local_runs: bool = False):  # fmt: skip
    """Start a server in a daemon thread (for tests and benchmarks); returns (server, url)."""
    server = make_server(directory, host, port, local_runs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}/"
