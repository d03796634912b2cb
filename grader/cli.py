"""The `grpo-kit` command: the kit's single front door."""

from __future__ import annotations

import argparse
import importlib
import sys

from grader import __version__

# Subcommands in the order `grpo-kit --help` lists them; each is grader/commands/<name>.py.
COMMANDS = ("list", "check", "build", "serve", "grade", "merge", "report", "export", "release",
            "new", "validate", "train", "ablate", "cases", "mutation")  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grpo-kit",
        description="Exercises that teach GRPO, auto-graded in the browser, locally and in batch.",
    )
    parser.add_argument("--version", action="version", version=f"grpo-kit {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"grader.commands.{name.replace('-', '_')}")
        sub = subparsers.add_parser(name, help=module.HELP, description=module.HELP)
        module.configure(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
