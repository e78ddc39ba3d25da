"""The `failfast` command.

The CLI lives in training/ because training is the top of the import graph
(monitor <- serving <- training). Each package registers its own subcommands in its
`commands.py`; handlers import their heavy dependencies lazily, so `failfast check` or
`failfast serve` never import torch.
"""

from __future__ import annotations

import argparse
import logging
import sys

from monitor import commands as monitor_commands
from serving import commands as serving_commands
from training import commands as training_commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="failfast",
        description="Early-failure monitor for coding agents: ingest, train, evaluate, serve.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    monitor_commands.register(sub)
    training_commands.register(sub)
    serving_commands.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    rc = args.func(args)
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
