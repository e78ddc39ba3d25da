"""A deterministic fake StepScorer for harness tests: scores come from a list.

It ships in the package so that harness authors can test their integration without a model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from monitor.protocols import BundleInfo
from monitor.thresholds import DEFAULT_TARGET, Thresholds
from monitor.types import Step, Trajectory


class ScriptedSession:
    """Returns the scripted scores in order (the last one repeats once the list runs out)."""

    def __init__(
        self, scores: Sequence[float], threshold: float, warn_threshold: float, fail_at: int | None
    ) -> None:
        self.scores = list(scores)
        self.threshold = threshold
        self.warn_threshold = warn_threshold
        self.threshold_origin = "scripted"
        self.scorer_name = "monitor"  # it stands in for the LM probe
        self.known_task = False
        self.fail_at = fail_at
        self.k = 0

    def observe(self, step: Step) -> float:
        """Score after one more step; raises RuntimeError at step `fail_at` (1-based)."""
        self.k += 1
        if self.fail_at is not None and self.k == self.fail_at:
            raise RuntimeError(f"scripted failure at step {self.k}")
        if not self.scores:
            return 0.0
        return self.scores[min(self.k, len(self.scores)) - 1]


class ScriptedScorer:
    """A Scorer (monitor.protocols) whose sessions return `scores[k-1]` after step k; no bundle,
    the default target and policy, the same thresholds for every run.

    Args:
        scores: the scores, one per step (the last one repeats).
        threshold: stop threshold each session reports.
        warn_threshold: warn threshold each session reports.
        fail_at: a step (1-based) at which the session raises, to test error handling.
    """

    def __init__(
        self,
        scores: Sequence[float],
        *,
        threshold: float = 0.5,
        warn_threshold: float = 0.3,
        fail_at: int | None = None,
    ) -> None:
        self.scores = list(scores)
        self.threshold = threshold
        self.warn_threshold = warn_threshold
        self.fail_at = fail_at
        self.started: list[tuple[str, str | None]] = []

    target: float = DEFAULT_TARGET
    policy: dict[str, Any] = {}  # noqa: RUF012 - read only: the default PolicyConfig
    bundle: BundleInfo | None = None
    int8: bool = False
    tokens_encoded: int = 0
    batcher: None = None

    def enable_batching(self, window: float, max_batch: int) -> None:
        """Nothing to batch: scripted sessions make no graph calls."""

    def thresholds(self, agent: str | None, source: str = "") -> Thresholds:
        """The scripted thresholds, for every run."""
        return Thresholds(self.threshold, self.warn_threshold, "agent")

    def served(self, agent: str | None, source: str = "") -> Thresholds:
        """The scripted thresholds (a scripted scorer has no candidates to choose from)."""
        return self.thresholds(agent, source)

    def score_served(
        self, traj: Trajectory, *, cancelled: Callable[[], bool] | None = None
    ) -> tuple[list[float], Thresholds]:
        """`score_run` and the scripted thresholds."""
        return self.score_run(traj), self.served(traj.agent or None, traj.source)

    def start(self, task: str, agent: str | None = None, source: str = "") -> ScriptedSession:
        """Open a session (records the task and agent it was opened for)."""
        self.started.append((task, agent))
        return ScriptedSession(self.scores, self.threshold, self.warn_threshold, self.fail_at)

    def score_run(
        self, traj: Trajectory, *, cancelled: Callable[[], bool] | None = None
    ) -> list[float]:
        """Scores at every step boundary of `traj`."""
        session = ScriptedSession(self.scores, self.threshold, self.warn_threshold, None)
        return [session.observe(s) for s in traj.steps]
