"""The evaluation report: the monitor, the oracle and every baseline on the same runs.

`evaluate` returns the JSON of `failfast evaluate` (keys `monitor`, `baselines`, `oracle`,
`target_fpr`, `threshold`, `per_source`); `markdown_table` renders it. Score baselines and the
Budget are set, per agent, to stop at most as many resolved runs as the monitor did on the same
runs (equal realized FPR; this uses the evaluation runs' labels, only to align the comparison,
never for the monitor); score baselines use the monitor's whole check schedule, persistence
included (thresholds.json "schedule"). Rules without a knob (transcript-analyser rule, stuck patterns) and
LoopBrake (calibrated on the validation split at its own target) report their own FPR.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from training.evaluation import (
    EvalConfig,
    Stops,
    auroc_at_fractions,
    ledger_metrics,
    matched_knob_stops,
    matched_score_stops,
    oracle_stops,
    score_stops,
)
from training.records import RunRecord
from training.thresholds import schedule_of

METRIC_KEYS = (
    "realized_fpr",
    "fpr_upper_bound",
    "recall",
    "token_savings",
    "resolution_before",
    "resolution_after",
    "resolution_after_restart",
    "runs",
)


def rule_inputs(
    runs: Sequence[Any], records: Sequence[RunRecord]
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """What the rule baselines of `evaluate` need from the transcripts: the signal matrix of each
    evaluated run, and per agent a p95 Budget fitted on the runs of instances NOT evaluated
    (never on the evaluated runs themselves)."""
    from monitor.halts import fit_budget
    from monitor.signals import signal_matrix

    ids = {r.run_id for r in records}
    insts = {r.instance_id for r in records}
    signals = {t.id: signal_matrix(t) for t in runs if t.id in ids}
    fit_on: dict[str, list[Any]] = {}
    for t in runs:
        if t.instance_id not in insts:
            fit_on.setdefault(t.agent, []).append(t)
    return signals, {a: fit_budget(ts)[0] for a, ts in fit_on.items()}


def evaluate(
    records: Sequence[RunRecord],
    thresholds: Mapping[str, Any],
    *,
    config: EvalConfig | None = None,
    calibration: Sequence[RunRecord] | None = None,
    signals: Mapping[str, np.ndarray] | None = None,
    budgets: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Evaluate the monitor's thresholds and the baselines on (test) records.

    Args:
        records: evaluation runs (the saved test split by default).
        thresholds: thresholds.json dict picked on the validation split.
        config: evaluation settings.
        calibration: validation records (LoopBrake is calibrated on them); None skips LoopBrake.
        signals: run_id -> signal matrix, for the rule baselines; None skips them.
        budgets: group -> monitor.halts.Budget fitted on non-evaluation resolved runs (p95).
    """
    cfg = config or EvalConfig()
    sched = schedule_of(dict(thresholds))
    min_steps, every = sched["min_steps"], sched["every"]
    kw = {"min_steps": min_steps, "every": every}  # rules and LoopBrake: latched, no persistence
    records = [r for r in records if cfg.scorer in r.scores]
    notes: list[str] = []
    skw = {**kw, "persist": sched["persist"]}  # the scores' stop rule
    mon, used = score_stops(
        records, thresholds, target=cfg.target_fpr, scorer=cfg.scorer, group_by=cfg.group_by, **skw
    )
    rules: dict[str, tuple[Stops, dict[str, Any]]] = {}
    for name in cfg.score_baselines:
        have = [r for r in records if name in r.scores]
        if len(have) < len(records):
            notes.append(f"{name}: no scores in {len(records) - len(have)} runs; baseline skipped")
            continue
        st, th = matched_score_stops(records, mon, scorer=name, group_by=cfg.group_by, **skw)
        rules[name] = (st, {"knob": "threshold", "matched_to_monitor_fpr": True, "value": th})
    if signals is not None:
        from training import baseline_rules as br

        missing = [r.run_id for r in records if r.run_id not in signals]
        if missing:
            notes.append(
                f"rule baselines: no transcript for {len(missing)} runs; counted as not stopped"
            )
        sig = {r.run_id: signals[r.run_id] for r in records if r.run_id in signals}
        rules["transcript_analyser"] = (
            br.rule_stops(sig, br.transcript_rule_fired, **kw),
            {"knob": None, "rule": "40 turns, 3 identical calls, 4 consecutive errors, $5"},
        )
        rules["stuck_patterns"] = (
            br.rule_stops(sig, br.stuck_fired, **kw),
            {
                "knob": None,
                "rule": "OpenHands stuck patterns (4 same pair, 3 action-error, 3 monologue, 6 A-B)",
            },
        )
        if budgets:
            groups = {r.run_id: str(getattr(r, cfg.group_by)) for r in records}

            def budget_at(g: str, scale: float) -> Stops:
                b = budgets.get(g)
                return {
                    rid: (br.latched_stop(br.budget_fired(s, b, scale=scale), **kw) if b else None)
                    for rid, s in sig.items()
                    if groups[rid] == g
                }

            st, scales = matched_knob_stops(records, mon, budget_at, group_by=cfg.group_by)
            rules["budget_p95"] = (
                st,
                {"knob": "scale of the p95 caps", "matched_to_monitor_fpr": True, "value": scales},
            )
    if calibration:
        from training.baseline_rules import loopbrake_stops

        st, lines = loopbrake_stops(
            calibration, records, alpha=cfg.target_fpr, group_by=cfg.group_by, **kw
        )
        rules["loopbrake"] = (st, {"knob": None, "alpha": cfg.target_fpr, "stop_line": lines})
    orc = oracle_stops(records, min_steps=min_steps)
    scorers = [cfg.scorer, *(n for n in cfg.score_baselines if n in rules)]

    def section(subset: list[RunRecord]) -> dict[str, Any]:
        groups = sorted({str(getattr(r, cfg.group_by)) for r in subset})
        return {
            "monitor": ledger_metrics(
                subset,
                mon,
                confidence=cfg.confidence,
                monitor_token_price=cfg.monitor_token_price,
                restart_pool=records,
            ),
            "baselines": {
                name: {
                    **ledger_metrics(subset, st, confidence=cfg.confidence, restart_pool=records),
                    "info": info,
                }
                for name, (st, info) in rules.items()
            },
            "oracle": ledger_metrics(subset, orc, confidence=cfg.confidence, restart_pool=records),
            "auroc": {s: auroc_at_fractions(subset, scorer=s) for s in scorers},
            "threshold": {g: used[g] for g in groups},
        }

    by_source: dict[str, list[RunRecord]] = {}
    for r in records:
        by_source.setdefault(r.source, []).append(r)
    out = {"target_fpr": cfg.target_fpr, "schedule": sched}
    out.update(section(list(records)))
    out["per_source"] = {s: section(rs) for s, rs in sorted(by_source.items())}
    out["settings"] = {
        "confidence": cfg.confidence,
        "monitor_token_price": cfg.monitor_token_price,
        "threshold_mode": thresholds.get("mode"),
        "restart_rule": (
            "a stopped run is replaced by the next recorded run of the same instance by the same agent "
            "in run-id order (wrapping), not yet used in its chain; replacements are monitored too; "
            "with no run left the instance stays stopped = unresolved; tokens of every run count"
        ),
        "monitor_cost": "every encoded token charged in full at monitor_token_price agent tokens",
    }
    out["notes"] = notes
    return out


def _pct(x: Any) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def markdown_table(result: Mapping[str, Any]) -> str:
    """A markdown table per source and overall: one row per rule."""
    lines = [
        f"Target run-level FPR {result['target_fpr']:g}; schedule {result['schedule']}.",
        "",
        "| scope | rule | runs | FPR [CI] | FPR bound | recall | tokens saved | net saved | "
        "resolved before | after | after restart |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    scopes = [*((s, v) for s, v in result["per_source"].items()), ("overall", result)]
    for scope, sec in scopes:
        rows = [("monitor", sec["monitor"]), *sec["baselines"].items(), ("oracle", sec["oracle"])]
        for name, m in rows:
            ci = m.get("fpr_ci") or [None, None]
            lines.append(
                f"| {scope} | {name} | {m['runs']} | {_pct(m['realized_fpr'])} "
                f"[{_pct(ci[0])}, {_pct(ci[1])}] | {_pct(m['fpr_upper_bound'])} | "
                f"{_pct(m['recall'])} | {_pct(m['token_savings'])} | "
                f"{_pct(m.get('net_token_savings'))} | {_pct(m['resolution_before'])} | "
                f"{_pct(m['resolution_after'])} | {_pct(m['resolution_after_restart'])} |"
            )
    return "\n".join(lines) + "\n"
