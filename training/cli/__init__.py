"""The `failfast` command: one parser, one module per command group.

The CLI sits in training/ because training is the top of the import graph
(monitor <- serving <- training). Each module here registers its subcommands; every handler
imports its heavy dependencies lazily, so `failfast check` or `failfast serve` never import torch.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from training.cli import (
    calibrate,
    corpus,
    crossfit,
    experiments,
    known,
    live,
    monitor,
    serving,
    signing,
    supervise,
    training,
)


def build_parser() -> argparse.ArgumentParser:
    """The `failfast` parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="failfast",
        description="Early-failure monitor for coding agents: ingest, train, evaluate, serve.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    monitor.register(sub)
    corpus.register(sub)
    training.register(sub)
    crossfit.register(sub)
    calibrate.register(sub)
    experiments.register(sub)
    serving.register(sub)
    live.register(sub)
    supervise.register(sub)
    signing.register(sub)
    known.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse `argv` (default: sys.argv), set up logging and run the subcommand's handler."""
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what a saved artefact records
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # the reader of our output went away (`| head`): end quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # the flush at exit must not fail again
        return 141  # as a shell reports a process ended by SIGPIPE
