"""Serve the built site on localhost, cross-origin isolated.

The two headers below make the page ``crossOriginIsolated``, which lets the Stop button
interrupt Python through a SharedArrayBuffer instead of restarting it. Every response is
revalidated (``no-cache``), so a rebuilt site is never shadowed by a stale copy, while an
unchanged file costs only a 304.
"""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

ISOLATION_HEADERS = {
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
    "Cross-Origin-Resource-Policy": "same-origin",
}


class SiteHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".js": "text/javascript",
        ".mjs": "text/javascript",
        ".wasm": "application/wasm",
        ".json": "application/json",
        ".whl": "application/zip",
        ".zip": "application/zip",
    }

    def end_headers(self) -> None:
        for name, value in ISOLATION_HEADERS.items():
            self.send_header(name, value)
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass  # one line per file would bury the URL; errors still reach the page


def make_server(directory: Path, host: str = "127.0.0.1", port: int = 8000):
    """An HTTP server for `directory` (port 0 picks a free port); raises OSError if taken."""
    handler = functools.partial(SiteHandler, directory=str(directory))
    return http.server.ThreadingHTTPServer((host, port), handler)


def serve_in_thread(directory: Path, host: str = "127.0.0.1", port: int = 0):
    """Start a server in a daemon thread (for tests and benchmarks); returns (server, url)."""
    server = make_server(directory, host, port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}/"
