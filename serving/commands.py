"""Subcommands of `failfast` that belong to this package (registered by training/cli.py).

Keep imports at the top light; import heavy modules inside the handlers.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add this package's subcommands to the `failfast` parser."""
