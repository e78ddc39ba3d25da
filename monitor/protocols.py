"""The seams of the project, as small Protocols (implementations do not inherit).

- Reader: one per transcript format (monitor/formats/*).
- ScoreSession / StepScorer: a learned scorer as the decision policy sees it (serving/ implements
  it with onnxruntime; tests use a scripted fake).
- Scorer: what the service, the hooks and whole-run scoring call (serving.Scorer,
  monitor.scripted.ScriptedScorer); BundleInfo: the loaded bundle it names.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from monitor.types import Step, Trajectory

if TYPE_CHECKING:
    from monitor.thresholds import Thresholds, ThresholdTable


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
    threshold_origin: str
    """Where the stop threshold came from (monitor.thresholds.Thresholds.origin)."""
    scorer_name: str
    """The candidate that scores the run ("monitor": the LM probe; serving.choice)."""
    known_task: bool
    """The run is served by the bundle's known-task choice (serving.task_prior)."""

    def observe(self, step: Step) -> float:
        """Add one step; return P(unresolved | prefix so far)."""
        ...


class StepScorer(Protocol):
    """Something that opens scoring sessions (serving.Scorer, or a scripted fake)."""

    def start(self, task: str, agent: str | None = None, source: str = "") -> ScoreSession:
        """Open a session for a run on `task` by `agent` (None: pooled thresholds); `source`
        names its calibration group when thresholds are keyed by source. A scorer that serves
        known tasks (serving.scorer.Scorer) also takes `instance_id=`; monitor.session passes it
        only when the harness named the task."""
        ...

    def score_run(self, traj: Trajectory) -> list[float]:
        """Scores at every step boundary: element k-1 is P(unresolved | steps 1..k)."""
        ...


class BundleInfo(Protocol):
    """The loaded bundle a scorer serves (serving.bundle.Bundle)."""

    @property
    def path(self) -> Path:
        """The bundle folder (only its name is ever shown)."""
        ...

    @property
    def sha256(self) -> str:
        """sha256 of its monitor.json."""
        ...

    @property
    def thresholds(self) -> ThresholdTable | None:
        """Its thresholds (None: no stop by score)."""
        ...

    @property
    def calibration(self) -> dict[str, Any]:
        """What calibrated its thresholds, without local paths."""
        ...

    @property
    def graph_hashes(self) -> dict[str, str]:
        """sha256 of each of its ONNX graphs, by file name."""
        ...


class Batcher(Protocol):
    """Counts of a scorer's batched graph calls (serving.batching.KVBatcher)."""

    calls: int
    rows: int


class Scorer(StepScorer, Protocol):
    """A scorer as the service, the hooks and `score_transcript` call it."""

    @property
    def target(self) -> float:
        """The run-level FPR target its thresholds are looked up at."""
        ...

    @property
    def policy(self) -> dict[str, Any]:
        """The PolicyConfig dict it was calibrated with (check schedule and halts)."""
        ...

    @property
    def bundle(self) -> BundleInfo | None:
        """The bundle it serves (None: a scorer without one, e.g. scripted)."""
        ...

    @property
    def int8(self) -> bool:
        """Whether it runs the int8 graphs."""
        ...

    @property
    def tokens_encoded(self) -> int:
        """Tokens its live sessions had the model encode since it was loaded."""
        ...

    @property
    def batcher(self) -> Batcher | None:
        """Its batching of concurrent sessions' graph calls (None: off)."""
        ...

    def enable_batching(self, window: float, max_batch: int) -> None:
        """Batch concurrent sessions' calls (wait at most `window` s, up to `max_batch` rows)."""
        ...

    def served(self, agent: str | None, source: str = "") -> Thresholds:
        """The thresholds a run is served with, and the candidate they are for."""
        ...

    def score_served(
        self, traj: Trajectory, *, cancelled: Callable[[], bool] | None = None
    ) -> tuple[list[float], Thresholds]:
        """The served candidate's scores after every step of `traj`, and its thresholds."""
        ...

    def thresholds(self, agent: str | None, source: str = "") -> Thresholds:
        """Stop/warn thresholds of a run of `agent` (and `source`) at its target."""
        ...

    def score_run(
        self, traj: Trajectory, *, cancelled: Callable[[], bool] | None = None
    ) -> list[float]:
        """Scores at every step boundary (element k-1: P(unresolved | steps 1..k)); stops with
        monitor.errors.Cancelled when `cancelled()` says so."""
        ...


def takes_keyword(fn: Any, name: str) -> bool:
    """Whether callable `fn` accepts keyword argument `name` (by name or **kwargs): whether a
    StepScorer also takes what the protocol leaves out (e.g. `instance_id`)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
