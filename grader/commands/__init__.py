"""One module per `grpo-kit` subcommand: HELP, configure(parser) and run(args) -> exit code.

Modules import heavy libraries (torch, numpy) inside run() so that `grpo-kit --help` stays fast.
"""
