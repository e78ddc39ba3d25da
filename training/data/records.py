"""Per-run score records: what training hands to thresholds and evaluation.

One RunRecord per labelled run: its per-step token ledger and, for every scorer (the monitor and
each learned baseline), the score after steps 1..k for k = 1..n. Stored as parquet so a saved
split can be re-evaluated without re-encoding anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from monitor.atomic import atomic_write_bytes

Stops = dict[str, int | None]
"""What a stop rule did to some runs: run_id -> the prefix length k it stopped the run at, None =
not stopped."""


@dataclass
class RunRecord:
    """Scores and token ledger of one labelled run.

    Attributes:
        run_id: Trajectory.id.
        instance_id: task id (splits and restarts group by it).
        agent: agent family (thresholds are per agent).
        source: data source (metrics are reported per source).
        resolved: the verdict (unknown-label runs never become records).
        step_tokens: (n,) tokens of each step's model call.
        scores: scorer name -> (n,) P(unresolved | steps 1..k) at index k-1.
        encoded_tokens: tokens the monitor itself encoded for this run (its own cost).
    """

    run_id: str
    instance_id: str
    agent: str
    source: str
    resolved: bool
    step_tokens: np.ndarray
    scores: dict[str, np.ndarray] = field(default_factory=dict)
    encoded_tokens: int = 0

    @property
    def n_steps(self) -> int:
        return int(len(self.step_tokens))


def records_from_runs(
    runs: Sequence[Any],
    scores: dict[str, Sequence[np.ndarray]],
    encoded: Sequence[int] | None = None,
) -> list[RunRecord]:
    """One RunRecord per labelled Trajectory: its step ledger and, per scorer name, its scores.

    Args:
        runs: labelled Trajectories (resolved is not None).
        scores: scorer name -> per-run score arrays, in the order of `runs`.
        encoded: tokens the monitor encoded per run (None: 0).
    """
    return [
        RunRecord(
            run_id=r.id,
            instance_id=r.instance_id,
            agent=r.agent,
            source=r.source or r.agent,
            resolved=bool(r.resolved),
            step_tokens=np.array([s.tokens for s in r.steps], dtype=np.int64),
            scores={name: np.asarray(v[i], dtype=np.float64) for name, v in scores.items()},
            encoded_tokens=int(encoded[i]) if encoded is not None else 0,
        )
        for i, r in enumerate(runs)
    ]


def group_records(records: Sequence[RunRecord], by: str) -> dict[str, list[RunRecord]]:
    """Records by the string value of one of their fields ("agent", "source"), in input order."""
    groups: dict[str, list[RunRecord]] = {}
    for r in records:
        groups.setdefault(str(getattr(r, by)), []).append(r)
    return groups


def save_records(path: str | Path, records: list[RunRecord]) -> None:
    """Write records to one parquet file (one row per run; a list column per scorer)."""
    names = sorted({n for r in records for n in r.scores})
    cols: dict[str, list] = {
        "run_id": [r.run_id for r in records],
        "instance_id": [r.instance_id for r in records],
        "agent": [r.agent for r in records],
        "source": [r.source for r in records],
        "resolved": [bool(r.resolved) for r in records],
        "step_tokens": [np.asarray(r.step_tokens, dtype=np.int64).tolist() for r in records],
        "encoded_tokens": [int(r.encoded_tokens) for r in records],
    }
    for n in names:
        cols[f"score:{n}"] = [
            np.asarray(r.scores[n], dtype=np.float64).tolist() if n in r.scores else None
            for r in records
        ]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    buf = pa.BufferOutputStream()
    pq.write_table(pa.table(cols), buf)
    # whole or not at all: a cross-fit killed while writing keeps the previous records
    atomic_write_bytes(path, buf.getvalue().to_pybytes())


def load_records(path: str | Path) -> list[RunRecord]:
    """Read records written by save_records."""
    t = pq.read_table(path).to_pylist()
    out = []
    for row in t:
        scores = {
            k.split(":", 1)[1]: np.asarray(v, dtype=np.float64)
            for k, v in row.items()
            if k.startswith("score:") and v is not None
        }
        out.append(
            RunRecord(
                run_id=row["run_id"],
                instance_id=row["instance_id"],
                agent=row["agent"],
                source=row["source"],
                resolved=bool(row["resolved"]),
                step_tokens=np.asarray(row["step_tokens"], dtype=np.int64),
                scores=scores,
                encoded_tokens=int(row["encoded_tokens"]),
            )
        )
    return out
