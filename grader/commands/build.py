"""`grpo-kit build`: build the problem site into web/dist/."""

from __future__ import annotations

import argparse
import sys

HELP = "build the problem site (web/dist/) from problems/, fetching pinned assets if needed"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--force", action="store_true", help="rebuild even if nothing changed since the last build"
    )


def run(args: argparse.Namespace) -> int:
    from grader import assets, site

    if not args.force and not site.is_stale():
        print(f"site is up to date in {site.DIST_DIR} (nothing changed; --force rebuilds it)")
        return 0
    try:
        out = site.build_site()
    except (assets.AssetError, site.BuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"site built in {out}")
    return 0
