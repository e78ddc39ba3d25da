"""Core types: Step, Trajectory, Decision (see shared DESIGN.md, "Core types").

These are plain dataclasses so that every reader, the featuriser, training and serving agree on
one shape. `to_dict` / `from_dict` round-trip them through JSON (the corpus stores them so).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

Action = Literal["continue", "warn", "stop"]

# Stable halt-reason labels (used as metric labels; never rename).
HALT_REASONS = (
    "step_budget",
    "token_budget",
    "cost_budget",
    "wall_clock",
    "repeat_loop",
    "error_streak",
    "no_progress",
    "stuck_pattern",
    "context_thrash",
    "format_errors",
    "predicted_failure",
    "monitor_error",
)


@dataclass
class Step:
    """One agent step: the model call that chose an action, and what the environment answered.

    Attributes:
        index: 0-based position in the run's main-agent steps.
        kind: "action" (a tool call / command), "message" (prose with no action),
            "format_error" (output the harness could not parse), "compaction" (context was
            compacted/condensed), "submit" (final submission).
        thought: the model's reasoning text shown with the action ("" when none).
        tool: tool name ("bash", "str_replace_editor", "search_class", ...; "" for prose).
        action: the action as text: the shell command, or `tool(args)` normalised to one string.
        args: the tool arguments as parsed, when the format has them.
        observation: what the environment returned (command output, tool result).
        is_error: the observation reports an error (non-zero exit, is_error, error event).
        tokens_in: prompt tokens of the model call that produced this step.
        tokens_out: completion tokens of that call.
        tokens_estimated: True when tokens_in/out were estimated, not read from the transcript.
        cost_usd: cost of the call when the transcript has it, else None.
        timestamp: seconds since epoch of the call when known, else None.
        role: agent role in multi-agent runs (CodeR: Manager, Reproducer, ...), else "".
        raw: the native record(s) this step came from, for round trips (not serialised).
    """

    index: int
    kind: str = "action"
    thought: str = ""
    tool: str = ""
    action: str = ""
    args: dict[str, Any] | None = None
    observation: str = ""
    is_error: bool = False
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_estimated: bool = True
    cost_usd: float | None = None
    timestamp: float | None = None
    role: str = ""
    raw: Any = field(default=None, repr=False, compare=False)

    @property
    def tokens(self) -> int:
        """Prompt + completion tokens of this step's model call."""
        return self.tokens_in + self.tokens_out

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("raw", None)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Step:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class Totals:
    """Run-level totals as reported by the transcript (None when not reported)."""

    tokens_in: int | None = None
    tokens_out: int | None = None
    cost_usd: float | None = None
    api_calls: int | None = None
    wall_seconds: float | None = None


@dataclass
class Trajectory:
    """One run of one agent on one task.

    Attributes:
        id: unique run id within a corpus (e.g. "acr-run-1/django__django-11039").
        instance_id: the task id (SWE-bench instance id); splits are by this.
        agent: agent family ("mini-swe-agent", "swe-agent", "coder", "autocoderover",
            "openhands", "claude-code", "codex", or ATIF agent name). Thresholds are per agent.
        source: the data source the run came from (folder name such as "autocoderover-gpt4");
            metrics are reported per source.
        model: the LM that drove the agent, when known.
        format: the reader that parsed it ("mini-swe-agent", "swe-agent", ...).
        path: the transcript file or directory it was read from.
        task: the problem statement.
        steps: main-agent steps in order.
        resolved: True / False / None (no verdict: excluded from training and metrics).
        submission: the final diff ("" when none).
        exit_status: the harness's exit status string when known.
        totals: run totals as reported.
        run: run/attempt name inside the source (e.g. "acr-run-2", "cost_2_1"), "" when single.
        provenance: where the reader found the names ("instance", "source", "run" -> a file and
            field, or a folder), for `failfast inspect`; not stored in a corpus.
    """

    id: str
    instance_id: str
    agent: str
    source: str = ""
    model: str = ""
    format: str = ""
    path: str = ""
    task: str = ""
    steps: list[Step] = field(default_factory=list)
    resolved: bool | None = None
    submission: str = ""
    exit_status: str = ""
    totals: Totals = field(default_factory=Totals)
    run: str = ""
    provenance: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def total_tokens(self) -> int:
        """Sum of per-step tokens (the ledger)."""
        return sum(s.tokens for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["steps"] = [s.to_dict() for s in self.steps]
        d["totals"] = dataclasses.asdict(self.totals)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["steps"] = [Step.from_dict(s) for s in d.get("steps", [])]
        kw["totals"] = Totals(**(d.get("totals") or {}))
        return cls(**kw)


@dataclass
class Flag:
    """A review flag: a sign that needs a human; it never stops a run by itself."""

    name: str
    step: int
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class RestartPacket:
    """What a warm restart keeps: the current diff and a short summary (transcript dropped)."""

    diff: str = ""
    summary: str = ""
    task: str = ""  # the session's task (empty when it was opened without one)


@dataclass
class Decision:
    """The monitor's answer at a step boundary.

    Attributes:
        action: "continue", "warn" or "stop".
        reason: a stable label from HALT_REASONS, or "ok" when nothing fired.
        score: P(unresolved | prefix) from the learned scorer, None without one.
        threshold: the stop threshold the score was compared with, None without a scorer.
        step: number of steps seen when deciding (the prefix length k).
        evidence: the signals that fired and their values.
        flags: review flags raised at this step.
        restart: on stop, the packet for a warm restart.
    """

    action: Action
    reason: str = "ok"
    score: float | None = None
    threshold: float | None = None
    step: int = 0
    evidence: dict[str, Any] = field(default_factory=dict)
    flags: list[Flag] = field(default_factory=list)
    restart: RestartPacket | None = None

    @property
    def stop(self) -> bool:
        return self.action == "stop"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
