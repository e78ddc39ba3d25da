"""Budgets that hold across attempts: total steps, tokens, dollars and wall clock.

Caps come from flags or from the YAML `failfast fit-budget --out caps.yaml` writes (its
`max_steps`, `max_tokens`, `max_cost_usd`, `max_wall_seconds`; the per-run p95 of resolved runs,
here applied to the total of all attempts: restarts must fit in what one good run takes). A cap
is reached when the total is at it (the next step would pass it); the warn band starts at
`warn_fraction` of a cap and is reported once per budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# budget field -> (total's key, halt reason), as monitor.halts.BUDGET_CHECKS names them
CAPS: dict[str, tuple[str, str]] = {
    "max_steps": ("steps", "step_budget"),
    "max_tokens": ("tokens", "token_budget"),
    "max_cost_usd": ("dollars", "cost_budget"),
    "max_wall_seconds": ("wall_seconds", "wall_clock"),
}


def read_caps(path: str | Path) -> dict[str, float]:
    """The four caps of a `fit-budget` YAML file (`{budget: {max_steps: ...}}` or the bare map).

    Raises:
        ValueError: the file cannot be read or is not such a map (the message names the file).
    """
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"{path}: cannot read the budget file: {e}") from e
    if isinstance(data, dict) and isinstance(data.get("budget"), dict):
        data = data["budget"]
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a budget map (expected `budget: {{max_steps: ...}}`)")
    from monitor.halts import Budget

    unknown = sorted(str(k) for k in data if k not in Budget.model_fields)
    if unknown:  # a misspelt cap would silently not hold
        raise ValueError(
            f"{path}: unknown budget field(s) {', '.join(unknown)} (known: "
            f"{', '.join(Budget.model_fields)}; supervise applies {', '.join(CAPS)})"
        )
    out = {}
    for name in CAPS:
        value = data.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ValueError(f"{path}: {name} must be a positive number, got {value!r}")
        out[name] = float(value)
    return out


@dataclass
class Budgets:
    """Caps over the totals of all attempts, and what was used of them."""

    caps: dict[str, float] = field(default_factory=dict)
    warn_fraction: float = 0.6
    warned: dict[str, float] = field(default_factory=dict)
    """Budget field -> the used fraction when it entered the warn band."""

    def hit(self, totals: dict[str, float]) -> tuple[str, str] | None:
        """(reason, text) of the first cap the totals reached, else None."""
        for name, cap in self.caps.items():
            key, reason = CAPS[name]
            if totals.get(key, 0.0) >= cap:
                return reason, f"{reason}: {key} {_num(totals.get(key, 0.0))} >= {name} {_num(cap)}"
        return None

    def new_warnings(self, totals: dict[str, float]) -> list[str]:
        """A line for each budget that just entered the warn band."""
        out = []
        for name, cap in self.caps.items():
            key, _ = CAPS[name]
            used = totals.get(key, 0.0) / cap
            if used >= self.warn_fraction and name not in self.warned:
                self.warned[name] = round(used, 3)
                out.append(
                    f"{key} {_num(totals.get(key, 0.0))} is {used:.0%} of {name} {_num(cap)}"
                )
        return out

    def report(self, totals: dict[str, float]) -> dict[str, Any]:
        """The summary's `budgets`: each cap, its total and used fraction, and the warn band."""
        return {
            "warn_fraction": self.warn_fraction,
            "caps": {
                name: {
                    "cap": cap,
                    "used": totals.get(CAPS[name][0], 0.0),
                    "fraction": round(totals.get(CAPS[name][0], 0.0) / cap, 4),
                    "warned_at": self.warned.get(name),
                }
                for name, cap in self.caps.items()
            },
        }


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.4g}"
