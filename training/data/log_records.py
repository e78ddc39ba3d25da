"""The typed records of a decision log (the lines `training.data.decisions` rebuilds runs from).

Each line is read as bytes and decoded alone, so one invalid UTF-8 byte costs its line only;
a line that is not JSON, not an object, or whose "end" / "verdict" / "start" record has a field
of the wrong type is a `LineProblem` (file, line number, why) and is skipped. Scores are the
monitor's probabilities: a number outside [0, 1] (or NaN, +-inf) is refused, `null` is a step
the scorer did not score.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
)

Name = Annotated[str, Field(max_length=1000)]


def _name(v: Any) -> Any:
    """Run and session ids: text, or an integer id written as a number; null is ""."""
    if v is None:
        return ""
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    return v


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    run: Name = ""
    session: Name = ""
    session_id: Name = ""

    @field_validator("run", "session", "session_id", mode="before")
    @classmethod
    def _ids(cls, v: Any) -> Any:
        return _name(v)

    def key(self) -> tuple[str, str]:
        """(session id, run id); either may be ""."""
        return self.session or self.session_id, self.run


class EndRecord(_Record):
    """A closed run: its per-step scores and tokens, where it stopped, whether it was a shadow."""

    event: Literal["end"]
    agent: Name | None = None
    source: Name | None = None
    scores: list[float | None] = Field(default_factory=list)
    tokens: list[Annotated[StrictInt, Field(ge=0)]] = Field(default_factory=list)
    stop_step: Annotated[StrictInt, Field(ge=0)] | None = None
    shadow: StrictBool | None = None
    scorer: Name = "monitor"
    """The candidate that scored the run (serving.choice): only the LM probe's runs recalibrate
    the LM probe."""

    @field_validator("scores", mode="before")
    @classmethod
    def _scores(cls, v: Any) -> Any:
        if v is None:
            return []
        if not isinstance(v, list):
            raise ValueError(f"must be a list of scores, not {type(v).__name__}")
        for i, x in enumerate(v):
            if x is None:
                continue
            if isinstance(x, bool) or not isinstance(x, int | float):
                raise ValueError(f"score {i} is {type(x).__name__}, not a number or null")
            # the monitor's scores are probabilities: anything else was not written by it
            if not (math.isfinite(x) and 0.0 <= x <= 1.0):
                raise ValueError(f"score {i} is {x!r}, outside [0, 1]")
        return [None if x is None else float(x) for x in v]

    @field_validator("tokens", mode="before")
    @classmethod
    def _tokens(cls, v: Any) -> Any:
        return [] if v is None else v


class VerdictRecord(_Record):
    """A verdict the service logged (or a line of a --verdicts file, with run_id)."""

    event: Literal["verdict"] | None = None
    run_id: Name = ""
    resolved: StrictBool
    finished: StrictBool | None = None

    @field_validator("run_id", mode="before")
    @classmethod
    def _run_id(cls, v: Any) -> Any:
        return _name(v)

    def key(self) -> tuple[str, str]:
        return self.session or self.session_id, self.run or self.run_id


class StartRecord(_Record):
    """What wrote the log: the bundle and the sha256 of its graphs."""

    event: Literal["start"]
    bundle: str | None = None
    graphs: dict[str, str] = Field(default_factory=dict)

    @field_validator("graphs", mode="before")
    @classmethod
    def _graphs(cls, v: Any) -> Any:
        return {} if v is None else v


@dataclass(frozen=True)
class LineProblem:
    """A line left out: where it is and why."""

    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


def _why(e: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in x.get('loc', ())) or 'record'}: {x.get('msg')}"
        for x in e.errors()[:3]
    )


def json_lines(path: Path, problems: list[LineProblem]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of every JSON-object line; every other non-empty line a problem."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as e:
                problems.append(LineProblem(str(path), n, f"not valid UTF-8 ({e.reason})"))
                continue
            except ValueError as e:
                problems.append(LineProblem(str(path), n, f"not JSON ({e})"))
                continue
            if not isinstance(rec, dict):
                problems.append(LineProblem(str(path), n, "not a JSON object"))
                continue
            yield n, rec


MODELS: dict[str, type[_Record]] = {
    "end": EndRecord,
    "verdict": VerdictRecord,
    "start": StartRecord,
}


def log_records(
    path: Path, problems: list[LineProblem]
) -> Iterator[tuple[int, EndRecord | VerdictRecord | StartRecord]]:
    """The typed end, verdict and start records of a decision log (other events are skipped
    silently: observe and check lines carry nothing calibration reads)."""
    for n, rec in json_lines(path, problems):
        model = MODELS.get(rec.get("event"))  # type: ignore[arg-type]
        if model is None:
            continue
        try:
            yield n, model.model_validate(rec)  # type: ignore[misc]
        except ValidationError as e:
            problems.append(LineProblem(str(path), n, f"bad {rec['event']} record: {_why(e)}"))


def verdict_record(
    rec: Any, path: Path, n: int, problems: list[LineProblem]
) -> VerdictRecord | None:
    """One entry of a --verdicts file, or None (a problem recorded)."""
    if not isinstance(rec, dict):
        problems.append(LineProblem(str(path), n, "not a JSON object"))
        return None
    try:
        return VerdictRecord.model_validate(rec)
    except ValidationError as e:
        problems.append(LineProblem(str(path), n, f"bad verdict: {_why(e)}"))
        return None
