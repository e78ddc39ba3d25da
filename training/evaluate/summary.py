"""The evaluation in plain words: what a user would get from the monitor on these runs.

`plain_summary` reads the report of `training.evaluate.report.evaluate` and the evaluated records
and says, per threshold group and overall: how well the monitor separates failing from
succeeding runs (AUROC, with a warning near chance), what it saves at the target and which good
runs it would have lost, and what the report's "FPR bound" and "after restart" columns mean here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from monitor.thresholds import ThresholdTable
from training.data.records import RunRecord, group_records
from training.evaluate.calibrated import quiet_lookups
from training.evaluate.stops import score_stops

NEAR_CHANCE = 0.6
"""AUROC at half a run below this is called near chance (0.5 = a coin; the cross-fitted quick
model reaches 0.60-0.73 per agent at 50%, docs/RESULTS.md)."""

MAX_LISTED = 10
"""Good runs listed by name per group (the rest are counted)."""


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def _auroc(sec: Mapping[str, Any], scorer: str) -> str:
    a = (sec.get("auroc") or {}).get(scorer) or {}
    vals = [a.get(k) for k in ("0.25", "0.5", "0.75")]
    return " / ".join("n/a" if v is None else f"{v:.2f}" for v in vals)


def _threshold_words(used: Mapping[str, Any]) -> str:
    t, src = used.get("threshold"), used.get("from", "")
    if t is not None:
        return f"stop threshold {t:.3f} ({src})"
    if src == "unknown-group":
        return (
            "NO stop by score: the thresholds have no such group (calibrate it, or name its group)"
        )
    if src == "refused":
        return "NO stop by score: the target was refused (too few resolved calibration runs)"
    return f"NO stop by score ({src})"


def _scope(
    name: str,
    sec: Mapping[str, Any],
    recs: Sequence[RunRecord],
    stops: Mapping[str, int | None],
    target: float,
    scorer: str,
    baselines: Sequence[str],
) -> list[str]:
    m = sec["monitor"]
    n, n_res = m["runs"], m["resolved_runs"]
    n_fail = n - n_res
    lines = [f"{name}: {n} runs ({n_res} resolved, {n_fail} not)"]
    half = ((sec.get("auroc") or {}).get(scorer) or {}).get("0.5")
    base = ", ".join(f"{b} {_auroc(sec, b)}" for b in baselines if (sec.get("auroc") or {}).get(b))
    lines.append(
        f"  separation: AUROC {_auroc(sec, scorer)} at 25 / 50 / 75% of a run (0.5 = chance, "
        f"1 = perfect)" + (f"; baselines: {base}" if base else "")
    )
    if half is not None and half < NEAR_CHANCE:
        lines.append(
            f"  WARNING: near chance (AUROC {half:.2f} < {NEAR_CHANCE} at half a run): the monitor "
            "barely tells these runs apart; expect few useful stops, and treat savings here as luck"
        )
    for g, used in sorted((sec.get("threshold") or {}).items()):
        lines.append(f"  group {g}: {_threshold_words(used)}")
    good = [r for r in recs if r.resolved and stops.get(r.run_id) is not None]
    bad = sum(1 for r in recs if not r.resolved and stops.get(r.run_id) is not None)
    lines.append(
        f"  at the {target:g} target: stopped {bad} of {n_fail} failing runs (recall "
        f"{_pct(m['recall'])}) and {len(good)} of {n_res} good runs (realized FPR "
        f"{_pct(m['realized_fpr'])}); saved {_pct(m['token_savings'])} of all tokens "
        f"({_pct(m.get('net_token_savings'))} net of the monitor's own cost)"
    )
    if good:
        listed = ", ".join(
            f"{r.run_id} (step {stops[r.run_id]} of {r.n_steps})" for r in good[:MAX_LISTED]
        )
        more = f" and {len(good) - MAX_LISTED} more" if len(good) > MAX_LISTED else ""
        lines.append(f"  good runs it would have lost: {listed}{more}")
    bound = m.get("fpr_upper_bound")
    if bound is not None and n_res:
        over = (
            "; with this few good runs it sits above the target even where the monitor meets it"
            if bound > target
            else ""
        )
        lines.append(
            f"  FPR bound {_pct(bound)}: the 95% upper confidence limit of the true FPR from "
            f"{len(good)} stopped of {n_res} good runs here, not a promise the monitor broke{over}"
        )
    return lines


def _served(result: Mapping[str, Any], target: float) -> list[str]:
    """A line on what the bundle serves where its per-group choice is another candidate than
    the LM probe (the lines above are the probe alone)."""
    sel = (result.get("calibrated_baselines") or {}).get("selected")
    choice = (sel or {}).get("choice") or {}
    other = {
        g: c.get("chosen") for g, c in choice.items() if c.get("chosen") not in (None, "monitor")
    }
    if not sel or not other:
        return []
    names = ", ".join(f"{g}: {c}" for g, c in sorted(other.items()))
    return [
        f"served as the bundle serves it (the per-group choice: {names}; the lines above are "
        f"the LM probe alone): at the {target:g} target realized FPR {_pct(sel['realized_fpr'])}, "
        f"recall {_pct(sel['recall'])}, saved {_pct(sel['token_savings'])} of all tokens"
    ]


def plain_summary(
    result: Mapping[str, Any],
    records: Sequence[RunRecord],
    thresholds: ThresholdTable,
    *,
    scorer: str = "monitor",
) -> str:
    """The report in plain words (see the module docstring); ends with a newline."""
    target = float(result["target_fpr"])
    recs = [r for r in records if scorer in r.scores]
    with quiet_lookups():  # the report's own lookup said it once
        stops, _ = score_stops(recs, thresholds, target=target, scorer=scorer)
    baselines = [b for b in ("tfidf_lr", "signals_lr") if b in (result.get("auroc") or {})]
    out = [f"What the monitor would have done on these {len(recs)} runs (target FPR {target:g}):"]
    by_source = group_records(recs, "source")
    if len(by_source) > 1:
        for s, rs in sorted(by_source.items()):
            out += _scope(s, result["per_source"][s], rs, stops, target, scorer, baselines)
    out += _scope("overall", result, recs, stops, target, scorer, baselines)
    out += _served(result, target)
    per_instance: dict[str, int] = {}
    for r in recs:
        per_instance[r.instance_id] = per_instance.get(r.instance_id, 0) + 1
    if per_instance and max(per_instance.values()) == 1:
        out.append(
            "after restart = after: every instance here has one recorded run, so a stopped run "
            "has no other run to restart with (the restart simulation replays the next recorded "
            "run of the same instance; a live warm restart is a new run, not measured here)"
        )
    return "\n".join(out) + "\n"
