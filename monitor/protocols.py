"""The seams of the project, as small Protocols (implementations do not inherit).

- Reader: one per transcript format (monitor/formats/*).
- ScoreSession / StepScorer: a learned scorer as the decision policy sees it (serving/ implements
  it with onnxruntime; tests use a scripted fake).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from monitor.types import Step, Trajectory


class Reader(Protocol):
    """A transcript format. Each module in monitor/formats exposes these three names."""

    NAME: str

    def sniff(self, path: Path, head: bytes) -> bool:
        """True when the file (or directory) at `path` looks like this format.

        `head` is the first 64 KiB of the decompressed content ("" for a directory).
        """
        ...

    def read(self, path: Path) -> Trajectory:
        """Parse the run at `path`; raise TranscriptError naming the file on bad input."""
        ...


class ScoreSession(Protocol):
    """A live run being scored step by step."""

    threshold: float
    """Stop threshold for this session's agent (from the bundle's monitor.json)."""
    warn_threshold: float
    """Warn threshold for this session's agent."""

    def observe(self, step: Step) -> float:
        """Add one step; return P(unresolved | prefix so far)."""
        ...


class StepScorer(Protocol):
    """Something that opens scoring sessions (serving.Scorer, or a scripted fake)."""

    def start(self, task: str, agent: str | None = None, source: str = "") -> ScoreSession:
        """Open a session for a run on `task` by `agent` (None: pooled thresholds); `source`
        names its calibration group when thresholds are keyed by source."""
        ...

    def score_run(self, traj: Trajectory) -> list[float]:
        """Scores at every step boundary: element k-1 is P(unresolved | steps 1..k)."""
        ...
