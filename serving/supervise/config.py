"""What `failfast supervise` was asked to do: its flags, as one dataclass."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from serving.limits import MAX_STEPS, MAX_TRANSCRIPT_BYTES
from serving.supervise.budget import Budgets


@dataclass
class SuperviseConfig:
    """What `failfast supervise` was asked to do (its flags)."""

    cmd: list[str]
    transcript: Path
    max_attempts: int = 2
    summary: Path | None = None
    workdir: Path = field(default_factory=Path.cwd)
    fmt: str | None = None
    agent: str | None = None
    source: str | None = None
    instance_id: str | None = None
    task: str = ""
    budgets: Budgets = field(default_factory=Budgets)
    interval: float = 0.5
    grace: float = 10.0
    max_bytes: int = MAX_TRANSCRIPT_BYTES
    max_steps: int = MAX_STEPS

    @property
    def kept_prefix(self) -> Path:
        """What every attempt's kept file is named from: FILE.attempt- beside the transcript."""
        return self.transcript.with_name(f"{self.transcript.name}.attempt-")

    def kept(self, attempt: int, suffix: str = "") -> Path:
        """Where attempt `attempt`'s files go beside the transcript (FILE.attempt-N[suffix])."""
        return self.kept_prefix.with_name(f"{self.kept_prefix.name}{attempt}{suffix}")
