"""`grpo-kit serve`: build the site if needed and serve it on localhost."""

from __future__ import annotations

import argparse
import sys

HELP = "build the problem site if needed and serve it on http://127.0.0.1 (solve in the browser)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    parser.add_argument(
        "--no-build", action="store_true", help="serve web/dist/ as it is, without rebuilding"
    )


def run(args: argparse.Namespace) -> int:
    from grader import assets, site
    from grader.serve import make_server, torch_available

    try:
        out = site.DIST_DIR if args.no_build else site.ensure_site()
    except (assets.AssetError, site.BuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not (out / "index.html").is_file():
        print(f"error: {out} holds no built site; run `grpo-kit build` first", file=sys.stderr)
        return 1
    try:
        server = make_server(out, port=args.port, local_runs=torch_available())
    except OSError as exc:
        print(f"error: cannot listen on 127.0.0.1:{args.port} ({exc.strerror}). Is another "
              f"`grpo-kit serve` running? Stop it, or pick another port: "
              f"grpo-kit serve --port {args.port + 1}", file=sys.stderr)  # fmt: skip
        return 1
    print(f"Serving the problems at http://127.0.0.1:{server.server_address[1]}/ (Ctrl+C stops)")
    if server.local_runs is None:
        print("PyTorch is not installed here: its problems' pages say how to run them locally")
    sys.stdout.flush()
    with server:
        server.serve_forever()
    return 0
