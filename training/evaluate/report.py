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

from monitor.thresholds import ThresholdTable
from serving.choice import MONITOR_TEXT
from training.config import EvalConfig
from training.data.records import RunRecord, Stops, group_records
from training.evaluate.auroc import auroc_at_fractions
from training.evaluate.calibrated import live_auroc
from training.evaluate.ledger import ledger_metrics, oracle_stops
from training.evaluate.rule_baselines import rule_baselines
from training.evaluate.shipped import as_shipped
from training.evaluate.stops import matched_score_stops, score_stops

CALIBRATED = "calibrated:"
"""Prefix of the calibrated baselines' names among the report's stop rules."""


def _section(
    subset: list[RunRecord],
    records: list[RunRecord],
    stops: dict[str, Stops],
    rules: Mapping[str, dict[str, Any]],
    used: Mapping[str, dict[str, Any]],
    cfg: EvalConfig,
    group_by: str,
    calibrated: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The report of one scope (a source, or all runs): ledgers, AUROC, thresholds used."""

    def ledger(name: str, **kw: Any) -> dict[str, Any]:
        return ledger_metrics(
            subset, stops[name], confidence=cfg.confidence, restart_pool=records, **kw
        )

    scorers = [cfg.scorer, *(n for n in cfg.score_baselines if n in rules)]
    groups = sorted({str(getattr(r, group_by)) for r in subset})
    cal = {}
    for name, info in (calibrated or {}).items():
        th = {g: info["threshold"][g] for g in groups if g in info["threshold"]}
        cal[name] = {
            **ledger(f"{CALIBRATED}{name}"),
            "threshold": th,
            "refused_groups": [g for g in info["refused_groups"] if g in th],
            "calibration_runs": info["calibration_runs"],
            **(
                {"choice": {g: info["choice"][g] for g in groups if g in info["choice"]}}
                if "choice" in info
                else {}
            ),  # fmt: skip
        }
    live = [*scorers, *(n for n in cal if n not in scorers and n != "selected")]
    return {
        "monitor": ledger("monitor", monitor_token_price=cfg.monitor_token_price),
        "calibrated_baselines": cal,
        "baselines": {name: {**ledger(name), "info": info} for name, info in rules.items()},
        "oracle": ledger("oracle"),
        "auroc": {s: auroc_at_fractions(subset, scorer=s) for s in scorers},
        "auroc_live": {s: live_auroc(subset, s) for s in live if s in subset[0].scores},
        "threshold": {g: used[g] for g in groups},
    }


VIEWS = {
    "calibrated_baselines": (
        "as shipped: each scorer's thresholds picked on the calibration runs by the monitor's "
        "procedure (same groups, margin, fallback, check schedule); the comparison to use"
    ),
    "baselines": (
        "score baselines and the Budget tuned on the evaluated runs to the monitor's realized "
        "FPR (`tuned on these runs`): a hindsight upper bound for each, not what it would save "
        "shipped; the fixed rules (`fixed rule`: transcript analyser, stuck patterns, LoopBrake) "
        "at their own settings, tuned on nothing"
    ),
    "oracle": "stops every failing run at its first checked step and no resolved run: the ceiling",
    "auroc_live": "AUROC among runs still going at step k / t tokens: what modelling uses",
    "auroc": "AUROC at a fraction of each run's own length (leaks the run's length)",
}
"""What each comparison in a report means (its `views`)."""


def _calibrated_scorers(cfg: EvalConfig, calibration: Sequence[RunRecord]) -> list[str]:
    """The scorers calibrated as shipped: the monitor, the second probe (train.text_candidate)
    where the calibration runs carry it, and the baselines."""
    second = [MONITOR_TEXT] if all(MONITOR_TEXT in r.scores for r in calibration) else []
    return [cfg.scorer, *second, *cfg.score_baselines]


def _calibrated_baselines(
    records: Sequence[RunRecord],
    thresholds: ThresholdTable,
    cfg: EvalConfig,
    monitor: tuple[Stops, dict[str, Any]],
    rules: Mapping[str, tuple[Stops, dict[str, Any]]],
    calibration: Sequence[RunRecord] | None,
    candidates: dict[str, Any] | None,
    notes: list[str],
    as_served: bool = False,
) -> tuple[dict[str, Stops], dict[str, dict[str, Any]]]:
    """Every baseline calibrated as the monitor is (`calibrated_baselines`): recalibrated on
    `calibration` (with LoopBrake's own line beside them), else the thresholds a bundle's
    candidates.json ships; none without either. `as_served`: the bundle's thresholds and
    choice even with `calibration` (its candidates.json was re-made on those runs: the check
    of `failfast calibrate`), LoopBrake beside them. `monitor`: the LM probe's stops and
    thresholds used; a note is added to `notes` when the bundle's thresholds are used."""
    if not calibration or (as_served and candidates):
        if not candidates:
            return {}, {}
        from training.evaluate.shipped import from_bundle

        notes.append(
            "calibrated baselines and the served choice: re-made on the calibration runs, as "
            "`failfast calibrate` ships them (candidates.json)"
            if calibration
            else "calibrated baselines: the thresholds the bundle ships (candidates.json)"
        )
        cal_stops, cal_info = from_bundle(
            records, candidates, thresholds, target=cfg.target_fpr, monitor=monitor
        )
    else:
        cal_stops, cal_info = as_shipped(
            calibration, records, thresholds, target=cfg.target_fpr,
            scorers=_calibrated_scorers(cfg, calibration),
        )  # fmt: skip
    cal_stops.pop(cfg.scorer, None)  # the monitor's own entry is `monitor`
    cal_info.pop(cfg.scorer, None)
    if "loopbrake" in rules and calibration:
        lines = rules["loopbrake"][1]["stop_line"]
        groups = {str(getattr(r, thresholds.group_by)) for r in records}
        cal_stops["loopbrake"] = rules["loopbrake"][0]
        cal_info["loopbrake"] = {
            "threshold": {g: {"stop_line": lines.get(g)} for g in groups},
            "refused_groups": sorted(g for g in groups if lines.get(g) is None),
            "calibration_runs": len(calibration),
            "rule": "LoopBrake's own conformal step line at alpha = target (no margin)",
        }
    return cal_stops, cal_info


def evaluate(
    records: Sequence[RunRecord],
    thresholds: ThresholdTable,
    *,
    config: EvalConfig | None = None,
    calibration: Sequence[RunRecord] | None = None,
    signals: Mapping[str, np.ndarray] | None = None,
    budgets: Mapping[str, Any] | None = None,
    candidates: dict[str, Any] | None = None,
    as_served: bool = False,
) -> dict[str, Any]:
    """Evaluate the monitor's thresholds and the baselines on (test) records.

    Args:
        records: evaluation runs (the saved test split by default).
        thresholds: the table picked on the validation split.
        config: evaluation settings.
        calibration: validation records (LoopBrake is calibrated on them); None skips LoopBrake.
        signals: run_id -> signal matrix, for the rule baselines; None skips them.
        budgets: group -> monitor.halts.Budget fitted on non-evaluation resolved runs (p95).
        candidates: a bundle's candidates.json; without `calibration` the calibrated baselines
            and the served choice are its shipped thresholds (training.evaluate.shipped).
        as_served: with `candidates`, those shipped thresholds and choice even with
            `calibration` (a candidates.json re-made on the calibration runs).
    """
    cfg = config or EvalConfig()
    key = cfg.group_by or thresholds.group_by
    sched = thresholds.schedule
    records = [r for r in records if cfg.scorer in r.scores]
    notes: list[str] = []
    mon, used = score_stops(records, thresholds, target=cfg.target_fpr, scorer=cfg.scorer)
    rules: dict[str, tuple[Stops, dict[str, Any]]] = {}
    for name in cfg.score_baselines:
        have = [r for r in records if name in r.scores]
        if len(have) < len(records):
            notes.append(f"{name}: no scores in {len(records) - len(have)} runs; baseline skipped")
            continue
        st, th = matched_score_stops(records, mon, scorer=name, schedule=sched, group_by=key)
        rules[name] = (st, {"knob": "threshold", "matched_to_monitor_fpr": True, "value": th})
    if signals is not None:
        replayed, more = rule_baselines(  # budgets are keyed as the thresholds are
            records, mon, signals, budgets, schedule=sched, group_by=thresholds.group_by
        )
        rules.update(replayed)
        notes += more
    if calibration:
        from training.baselines.rules import loopbrake_stops

        st, lines = loopbrake_stops(
            calibration, records, alpha=cfg.target_fpr, schedule=sched, group_by=key
        )
        rules["loopbrake"] = (st, {"knob": None, "alpha": cfg.target_fpr, "stop_line": lines})
    cal_stops, cal_info = _calibrated_baselines(
        records, thresholds, cfg, (mon, used), rules, calibration, candidates, notes, as_served
    )
    stops = {
        "monitor": mon,
        "oracle": oracle_stops(records, min_steps=sched.min_steps),
        **{name: st for name, (st, _) in rules.items()},
        **{f"{CALIBRATED}{name}": st for name, st in cal_stops.items()},
    }
    info = {name: i for name, (_, i) in rules.items()}
    key_by = thresholds.group_by
    out: dict[str, Any] = {"target_fpr": cfg.target_fpr, "schedule": sched.model_dump()}
    out.update(_section(records, records, stops, info, used, cfg, key_by, cal_info))
    out["per_source"] = {
        s: _section(rs, records, stops, info, used, cfg, key_by, cal_info)
        for s, rs in sorted(group_records(records, "source").items())
    }
    if candidates and candidates.get("known_tasks"):
        from training.evaluate.known_report import known_section

        scorers = _calibrated_scorers(cfg, calibration) if calibration else []
        served = stops.get(f"{CALIBRATED}selected") or stops["monitor"]
        out["known_tasks"] = known_section(
            records, calibration, thresholds, cfg.target_fpr, scorers, candidates, served, cal_info
        )
    out["views"] = dict(VIEWS)
    out["settings"] = {
        "confidence": cfg.confidence,
        "monitor_token_price": cfg.monitor_token_price,
        "threshold_mode": thresholds.mode,
        "restart_rule": (
            "a stopped run is replaced by the next recorded run of the same instance by the same agent "
            "in run-id order (wrapping), not yet used in its chain; replacements are monitored too; "
            "with no run left the instance stays stopped = unresolved; tokens of every run count"
        ),
        "monitor_cost": "every encoded token charged in full at monitor_token_price agent tokens",
    }
    out["notes"] = notes
    return out


def pct(x: float | None, *, missing: str = "-", unit: str = "") -> str:
    """A fraction as a percentage with one decimal (`missing` for None)."""
    return missing if x is None else f"{100 * x:.1f}{unit}"


def _pct(x: float | None) -> str:
    return pct(x, missing="n/a", unit="%")


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
        rows = [
            ("monitor", sec["monitor"]),
            *(("served (per-group choice)" if n == "selected" else f"{n} (calibrated as shipped)", m)
              for n, m in sec.get("calibrated_baselines", {}).items()),
            *((f"{n} (tuned on these runs)" if m.get("info", {}).get("matched_to_monitor_fpr")
               else f"{n} (fixed rule)", m)
              for n, m in sec["baselines"].items()),
            ("oracle (the ceiling)", sec["oracle"]),
        ]  # fmt: skip
        for name, m in rows:
            ci = m.get("fpr_ci") or [None, None]
            lines.append(
                f"| {scope} | {name} | {m['runs']} | {_pct(m['realized_fpr'])} "
                f"[{_pct(ci[0])}, {_pct(ci[1])}] | {_pct(m['fpr_upper_bound'])} | "
                f"{_pct(m['recall'])} | {_pct(m['token_savings'])} | "
                f"{_pct(m.get('net_token_savings'))} | {_pct(m['resolution_before'])} | "
                f"{_pct(m['resolution_after'])} | {_pct(m['resolution_after_restart'])} |"
            )
    from training.evaluate.known_report import known_lines

    legend = [
        "",
        "Rows: `monitor` is the LM probe as shipped; `(calibrated as shipped)`: "
        + VIEWS["calibrated_baselines"]
        + "; "
        + VIEWS["baselines"]
        + "; `oracle`: "
        + VIEWS["oracle"]
        + ".",
    ]
    return "\n".join(lines + legend + known_lines(result.get("known_tasks"), _pct)) + "\n"
