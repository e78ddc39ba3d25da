"""Request bodies of the HTTP service (pydantic models; their constraints answer 422)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextvars import ContextVar
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidatorFunctionWrapHandler, field_validator
from pydantic_core import PydanticCustomError

from monitor.escape import check_name, visible
from monitor.types import Step
from serving.transcripts import safe_filename

log = logging.getLogger(__name__)


def _name(v: str | None) -> str | None:
    """A client-given name (agent, source, run id) obeys monitor.escape.check_name (422)."""
    if v is not None and (why := check_name(v)) is not None:
        raise ValueError(f"not a usable name: {why}")
    return v


def _run_id(v: str) -> str:
    """A harness run id: as `_name`, up to the 1,000 characters a verdict's run_id may have."""
    if (why := check_name(v, max_length=1000)) is not None:
        raise ValueError(f"not a usable run id: {why}")
    return v


def _instance_id(v: str) -> str:
    """A task id: as `_run_id`."""
    if (why := check_name(v, max_length=1000)) is not None:
        raise ValueError(f"not a usable instance id: {why}")
    return v


class StepIn(BaseModel):
    """One normalised step (monitor.types.Step fields; all but `index` optional). Numbers must be
    finite, token counts and cost not negative (422): a NaN cost turned every later score into
    null. A field that is not a Step field is kept out of the step and named in the answer
    (`ignored_fields`): a misspelt `observaton` is not read, and the caller is told so."""

    model_config = ConfigDict(extra="allow")

    index: int | None = Field(None, ge=0)
    kind: str = "action"
    thought: str = ""
    tool: str = ""
    action: str = ""
    args: dict[str, Any] | None = None
    observation: str = ""
    is_error: bool = False
    tokens_in: int = Field(0, ge=0)
    tokens_out: int = Field(0, ge=0)
    tokens_estimated: bool = True
    cost_usd: float | None = Field(None, ge=0, allow_inf_nan=False)
    timestamp: float | None = Field(None, allow_inf_nan=False)
    role: str = ""

    def ignored(self) -> list[str]:
        """The fields sent that are not Step fields (not read)."""
        return sorted(self.model_extra or {})

    def to_step(self, index: int) -> Step:
        d = self.model_dump()
        d["index"] = index if self.index is None else self.index
        return Step.from_dict(d)


STEP_LIMIT: ContextVar[int | None] = ContextVar("failfast_score_step_limit", default=None)
"""Most steps a /v1/score body may carry (the service's `max_score_steps`; None: no limit), set
by the route for the request being validated."""


class ScoreRequest(BaseModel):
    """A whole run: `transcript` (native format) or `steps` (normalised)."""

    transcript: str | None = Field(None, description="Transcript content (text, or base64).")
    encoding: Literal["text", "base64"] = "text"
    format: str | None = Field(None, description="Reader name; sniffed when absent.")
    filename: str = Field("transcript.json", description="Name hint for readers (a file name).")
    steps: list[StepIn] | None = None
    task: str = ""
    agent: str | None = Field(None, description="Agent family (overrides the transcript's).")
    source: str | None = Field(
        None,
        description="Calibration group (a source name in thresholds.json) when the bundle's "
        "thresholds are keyed by source; overrides the transcript's.",
    )
    submission: str = Field(
        "", description="The run's current diff (overrides the transcript's; a stop hands it on)."
    )
    instance_id: str | None = Field(
        None,
        description="The task's id (overrides the transcript's): a bundle with a verdict table "
        "of known tasks serves a task other agents have run by its known-task choice.",
    )
    all_decisions: bool = Field(False, description="Return the Decision after every step.")

    _names = field_validator("agent", "source")(staticmethod(_name))

    @field_validator("instance_id")
    @classmethod
    def _task(cls, v: str | None) -> str | None:
        return None if v is None else _instance_id(v)

    @field_validator("filename")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        return safe_filename(v)

    @field_validator("steps", mode="wrap")
    @classmethod
    def _within_step_limit(cls, v: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        # The list's length is checked before any step is validated (validating 2 M steps is slow).
        limit = STEP_LIMIT.get()
        if limit is not None and isinstance(v, list) and len(v) > limit:
            raise PydanticCustomError(
                "too_long", "at most {limit} steps", {"limit": limit, "actual_length": len(v)}
            )
        return handler(v)


class SessionRequest(BaseModel):
    task: str = ""
    agent: str | None = None
    source: str = Field(
        "",
        description="Calibration group (a source name in thresholds.json) when the bundle's "
        "thresholds are keyed by source; unset: looked up by agent.",
    )
    run: str = Field("", description="The harness's run id (a verdict may name the run by it).")
    shadow: bool = Field(
        False,
        description="The harness will not obey this run's stops (a shadow run: its verdict "
        "measures the false-positive rate).",
    )
    instance_id: str = Field(
        "",
        description="The task's id (e.g. a SWE-bench instance id): a bundle with a verdict "
        "table of known tasks serves a task other agents have run by its known-task choice.",
    )

    _names = field_validator("agent", "source")(staticmethod(_name))
    _run = field_validator("run")(staticmethod(_run_id))
    _instance = field_validator("instance_id")(staticmethod(_instance_id))


def steps_over(errors: Sequence[Any]) -> int | None:
    """The number of steps sent, when the validation failed on the step limit."""
    for e in errors:
        if e.get("type") == "too_long" and tuple(e.get("loc", ()))[-1:] == ("steps",):
            return len(e.get("input") or ())
    return None


NUMBERS = ("tokens_in", "tokens_out", "cost_usd", "timestamp")
"""Step fields that are numbers: a transcript's steps are checked against StepIn's rules too."""


_WARNED: set[str] = set()
_MAX_WARNED = 100  # names remembered (and logged) at most: random names must not grow it


def shown_fields(names: list[str]) -> list[str]:
    """Unknown field names as an answer names them: at most 20, each at most 60 characters,
    control characters made visible (monitor.escape.visible)."""
    return [visible(n)[:60] for n in names[:20]]


def note_ignored(answer: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """`answer` with `ignored_fields` when steps carried fields no Step has (logged once)."""
    if names:
        answer["ignored_fields"] = shown_fields(names)
        log_ignored(names)
    return answer


def log_ignored(names: list[str]) -> None:
    """Log once per field name that a client sends step fields no Step has (the first
    `_MAX_WARNED` names only; escaped and cut, so a name cannot forge a log line)."""
    new = [n for n in shown_fields(names) if n not in _WARNED]
    if new and len(_WARNED) < _MAX_WARNED:
        _WARNED.update(new)
        log.warning(
            "steps with fields that are not Step fields were ignored: %s (known: %s)",
            ", ".join(new),
            ", ".join(f for f in StepIn.model_fields if f != "index"),
        )
