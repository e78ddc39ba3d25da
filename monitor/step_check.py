"""What a live session checks of a step before any state changes, and how it reports a step it
could not take: the evidence of a `monitor_error` decision."""

from __future__ import annotations

from monitor.types import Step


def error_evidence(e: BaseException) -> dict[str, str]:
    """A monitor_error decision's evidence: the error, one line."""
    return {"error": f"{type(e).__name__}: {e}"[:300]}


_TEXT = ("kind", "thought", "tool", "action", "observation", "role")


def check_step(step: object) -> None:
    """TypeError naming the field when `step` is not a Step whose fields have their types."""
    if not isinstance(step, Step):
        raise TypeError(f"observe() takes a monitor.types.Step, not {type(step).__name__}")
    for name in _TEXT:
        if not isinstance(getattr(step, name), str):
            raise TypeError(f"Step.{name} must be text, not {type(getattr(step, name)).__name__}")
    for name in ("tokens_in", "tokens_out"):
        v = getattr(step, name)
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"Step.{name} must be an int, not {type(v).__name__}")
    for name in ("cost_usd", "timestamp"):
        v = getattr(step, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            raise TypeError(f"Step.{name} must be a number or None, not {type(v).__name__}")
