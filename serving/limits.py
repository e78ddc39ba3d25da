"""The limits of the HTTP service, in one config class (light: `failfast serve --help` reads it
without importing FastAPI). docs/USAGE.md, "Limits the service enforces", lists them with the
status code each one answers.
"""

from __future__ import annotations

import argparse
from typing import Any, Literal

from pydantic import Field

from monitor.config import StrictModel

MAX_TRANSCRIPT_BYTES = 64 * 1024 * 1024
"""Default limit on a transcript's decompressed size (well above real runs: docs/SPEED.md)."""
MAX_STEPS = 5000
"""Default limit on the steps of one scored run (scoring time grows with it: docs/SPEED.md)."""


class ServiceConfig(StrictModel):
    """Limits of the HTTP service (docs/USAGE.md, "Limits the service enforces"); each is a
    `failfast serve` flag of the same name (`max_body_bytes` -> `--max-body-bytes`)."""

    max_body_bytes: int = Field(
        default=16 * 1024 * 1024, ge=1024, description="Largest request body (413)."
    )
    max_transcript_bytes: int = Field(
        default=MAX_TRANSCRIPT_BYTES,
        ge=1024,
        description="Largest transcript once decompressed; a gzip body is inflated in a stream "
        "and refused as soon as it passes this (413).",
    )
    max_steps: int = Field(
        default=5000, ge=1, description="Most steps one session may receive (409)."
    )
    max_score_steps: int = Field(
        default=MAX_STEPS, ge=1, description="Most steps of one run sent to /v1/score (413)."
    )
    max_sessions: int = Field(default=1024, ge=1, description="Most open sessions at once (429).")
    max_sessions_per_client: int = Field(
        default=256,
        ge=0,
        description="Most open sessions of one client (429); 0: no per-client limit.",
    )
    evict_idle_seconds: float = Field(
        default=60.0,
        ge=0,
        description="When all sessions are taken, the idlest is closed to make room if it has been "
        "idle this long (else 429).",
    )
    client_header: str | None = Field(
        default=None,
        description="Header naming the client for the per-client limit (e.g. X-Forwarded-For, "
        "set only behind a proxy you trust); None: the peer address.",
    )
    max_concurrent: int = Field(
        default=32,
        ge=1,
        description="Model calls run at once (more wait). 32 on 2 cores gave 2x the throughput of 2 "
        "(bench/bench_load.py), lower it to bound memory.",
    )
    max_batch: int = Field(
        default=1,
        ge=1,
        description="Most sessions' pending steps run as one batched model call (serving/"
        "batching.py); 1: off, every step is its own call (on 2 CPU cores a ~80-token step "
        "already runs the matmuls at full speed and padding only adds work: docs/SPEED.md).",
    )
    batch_window_ms: float = Field(
        default=5.0,
        ge=0,
        le=1000,
        description="How long a pending step waits for other sessions' steps to join its batch "
        "(milliseconds; a batch also starts as soon as max_batch steps wait).",
    )
    session_idle_seconds: float = Field(
        default=1800.0, gt=0, description="Idle sessions expire after this (then 404)."
    )
    body_timeout_seconds: float = Field(
        default=30.0, gt=0, description="A request body must arrive within this (408)."
    )
    header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Request line and headers must arrive within this, or the connection is "
        "closed (`failfast serve` only: a uvicorn setting).",
    )
    max_connections: int = Field(
        default=1024,
        ge=1,
        description="Open connections plus requests in progress; beyond, uvicorn answers 503 "
        "(`failfast serve` only).",
    )
    write_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="How long, summed over one response, a client may leave it unread (the "
        "server's send buffer full) before the connection is dropped (`failfast serve` only).",
    )
    shutdown_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        description="On SIGTERM or SIGINT: requests in progress get this long to finish, then "
        "they are cancelled, every open session's end record is logged and the process exits "
        "(`failfast serve` only).",
    )
    decision_log: str | None = Field(
        default=None,
        description="Append to this file one JSON line per decision that is not a plain "
        "continue, per verdict, and per closed session (its per-step scores and tokens): what "
        "`failfast calibrate --data FILE` recalibrates from. None: not written.",
    )
    drift_alpha: float = Field(
        default=0.1,
        gt=0,
        lt=1,
        description="Chance that the drift flag is ever raised for an agent whose realized FPR "
        "is at the target (monitor/drift.py).",
    )
    watch_runs: Literal["all", "shadow"] = Field(
        default="all",
        description="Whose verdicts count in the realized FPR: every run that went on to its own "
        "end (all), or only sessions opened with shadow=true (shadow), for harnesses that obey stops.",
    )
    recent_runs: int = Field(
        default=10_000,
        ge=0,
        description="Closed sessions remembered so that a verdict arriving after the close still "
        "counts (404 for older ones).",
    )


FLAG_ALIASES = {"session_idle_seconds": ("--idle-seconds",)}
"""Older flag names still accepted."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    """One `--field-name` flag per ServiceConfig field (default: the field's default)."""
    for name, info in ServiceConfig.model_fields.items():
        kind: Any = {int: int, float: float}.get(info.annotation, str)  # type: ignore[arg-type]
        parser.add_argument(
            "--" + name.replace("_", "-"),
            *FLAG_ALIASES.get(name, ()),
            dest=name,
            type=kind,
            default=None,
            help=f"{info.description} Default: {info.default}.",
        )


def from_flags(args: argparse.Namespace) -> ServiceConfig:
    """The ServiceConfig of the flags that were given (the others keep their defaults)."""
    given = {
        n: getattr(args, n)
        for n in ServiceConfig.model_fields
        if getattr(args, n, None) is not None
    }
    return ServiceConfig(**given)
