"""The rule baselines of the evaluation report, replayed on the runs' signals: the
transcript-analyser rule, OpenHands' stuck patterns, and the p95 Budget matched to the monitor's
realized FPR (training.baselines.rules does the replaying)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from monitor.schedule import Schedule
from training.data.records import RunRecord, Stops
from training.evaluate.stops import matched_knob_stops


def rule_baselines(
    records: Sequence[RunRecord],
    monitor_stops: Stops,
    signals: Mapping[str, np.ndarray],
    budgets: Mapping[str, Any] | None,
    *,
    schedule: Schedule,
    group_by: str,
) -> tuple[dict[str, tuple[Stops, dict[str, Any]]], list[str]]:
    """The rules replayed on the runs' signals (latched, under the checks of `schedule`): the
    transcript-analyser rule, the stuck patterns, and the p95 Budget scaled to the monitor's
    realized FPR per group. Returns ({name: (stops, info)}, notes)."""
    from monitor.halts import StuckLimits, TranscriptRule
    from training.baselines import rules as br

    notes = []
    missing = [r.run_id for r in records if r.run_id not in signals]
    if missing:
        notes.append(
            f"rule baselines: no transcript for {len(missing)} runs; counted as not stopped"
        )
    sig = {r.run_id: signals[r.run_id] for r in records if r.run_id in signals}
    tr = TranscriptRule()
    said = (
        f"{tr.max_turns} turns, {tr.max_repeats} identical calls, "
        f"{tr.max_error_streak} consecutive errors, ${tr.max_cost_usd:g}"
    )
    out: dict[str, tuple[Stops, dict[str, Any]]] = {
        "transcript_analyser": (
            br.rule_stops(sig, lambda s: br.rule_fired(s, tr), schedule=schedule),
            {"knob": None, "rule": said},
        ),
        "stuck_patterns": (
            br.rule_stops(sig, lambda s: br.rule_fired(s, StuckLimits()), schedule=schedule),
            {
                "knob": None,
                "rule": "OpenHands stuck patterns (4 same pair, 3 action-error, 3 monologue, 6 A-B)",
            },
        ),
    }
    if budgets:
        groups = {r.run_id: str(getattr(r, group_by)) for r in records}

        def budget_at(g: str, scale: float) -> Stops:
            b = budgets.get(g)
            return {
                rid: (
                    br.latched_stop(br.budget_fired(s, b, scale=scale), schedule=schedule)
                    if b
                    else None
                )
                for rid, s in sig.items()
                if groups[rid] == g
            }

        st, scales = matched_knob_stops(records, monitor_stops, budget_at, group_by=group_by)
        out["budget_p95"] = (
            st,
            {"knob": "scale of the p95 caps", "matched_to_monitor_fpr": True, "value": scales},
        )
    return out, notes
