"""`grpo-kit build`: build the problem site into web/dist/."""

from __future__ import annotations

import argparse

HELP = "build the problem site (web/dist/) from problems/, fetching pinned assets if needed"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--force", action="store_true", help="rebuild even if nothing changed since the last build"
    )


def run(args: argparse.Namespace) -> int:
    from grader import assets, site

    try:
        out = site.build_site() if args.force or site.is_stale() else site.DIST_DIR
    except (assets.AssetError, site.BuildError) as exc:
        print(f"error: {exc}")
        return 1
    print(f"site ready in {out}")
    return 0
