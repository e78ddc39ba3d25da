"""Two cross-fits of the same runs compared run by run, as shipped (issue 26).

    python -m training.experiments.paired A B --config configs/quick.yaml \\
        --views instance repo time [--draws 500]

A and B are `failfast crossfit` output folders (e.g. the shipped settings and a variant: another
feature engine, layer count, text). For each view both are calibrated and served exactly as
their report's `calibrated` section is (training.evaluate.candidates.candidate_stops: every
candidate, the stack and the per-group choice, thresholds from the other folds or the pair's
calibration records), on the runs both scored. B minus A, with 95% paired bootstrap intervals
(runs resampled within agent and label, the same draws for both):

- mean per-agent tokens saved by the served choice and by each single candidate, per target,
  with each side's worst agent's realized FPR;
- the monitor's mean per-agent AUROC among runs still going at steps 5 and 10 (`--live A_SCORE
  B_SCORE` compares other scores: `--live monitor monitor_text` with B = A gives the second
  probe's paired gain over the LM probe on the same runs);
- per agent and target, on each side, the served choice minus each calibrated baseline (the issue's
  criterion: more than every baseline with the paired interval above 0), and how many agents pass;
- per target and group, which candidate each pair's (fold's) served choice took on each side
  (`chosen`; the markdown lists the groups where A and B differ): whether a gain comes from a
  choice made in every fold or in one.

`--extra NAME ...` offers more scores the records carry to the per-group choice, on each side
that carries them (training.experiments.extra_candidate adds another cross-fit's LM probe).

Writes A/paired-<name of B>.json and .md and prints the table. What decides a setting is the
served row on the instance view with the FPR holding on the others (docs/RESULTS.md).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from training.evaluate.calibrated import LENGTH_SCORERS
from training.experiments.paired_io import add_comparison_args, served_pairs, write_comparison
from training.experiments.paired_markdown import markdown

LIVE_POINTS = (5, 10)
MONITOR = "monitor"
SERVED = "selected_per_target"
"""The choice a bundle serves (candidates.json `by_target`: made for each target alone). Before
the twenty-fifth round the per-agent tables used "selected" (one choice over all targets)."""
# The simple rules a served choice must beat per agent (the LM probe and the stack are not
# baselines: they are what the choice is made from).
BASELINES = (*LENGTH_SCORERS, "signals_lr", "tfidf_lr")


def _weighted_auc(y: np.ndarray, s: np.ndarray, w: np.ndarray) -> float:
    from training.evaluate.intervals import _auroc

    return _auroc(y, s, w)


def compare_view(
    cfg: Any,
    a: Path,
    b: Path,
    view: str,
    *,
    folds: int,
    draws: int,
    extra: Sequence[str] = (),
    live_scores: tuple[str, str] = (MONITOR, MONITOR),
) -> dict:
    """B minus A on one view (module docstring) as a JSON-able dict; `extra`: more candidates
    of the per-group choice, on each side whose records carry them (candidate_stops)."""
    from training.data.records import load_records

    ids_a = {r.run_id for r in load_records(a / view / "records.parquet")}
    ids_b = {r.run_id for r in load_records(b / view / "records.parquet")}
    keep = ids_a & ids_b
    sa = served_pairs(cfg, a / view, view, folds, keep, extra)[0]
    sb = served_pairs(cfg, b / view, view, folds, keep, extra)[0]
    out = compare_served(cfg, view, sa, sb, draws=draws, live_scores=live_scores)
    return {**out, "only_a": len(ids_a - keep), "only_b": len(ids_b - keep)}


def compare_served(
    cfg: Any,
    view: str,
    sa: Any,
    sb: Any,
    *,
    draws: int,
    live_scores: tuple[str, str] = (MONITOR, MONITOR),
) -> dict:
    """B minus A (module docstring) from each side's training.evaluate.candidates.Served on the
    same test runs (`compare_view` builds them from two cross-fit folders)."""
    from training.evaluate.intervals import Outcome, by_group, resample_weights

    rec_b = {r.run_id: r for r in sb.records}
    names = [n for n in sa.stops if n in sb.stops]
    targets = sorted(sa.stops[names[0]])
    groups = by_group(sorted(sa.records, key=lambda r: r.run_id), lambda r: r.agent)
    ordered = sorted(sa.records, key=lambda r: r.run_id)
    saved: dict[str, dict[str, dict[str, list[Any]]]] = {
        f"{t:g}": {n: {"a": [], "b": [], "da": [], "db": [], "fa": [], "fb": []} for n in names}
        for t in targets
    }
    live: dict[int, dict[str, list[Any]]] = {k: {"a": [], "b": [], "da": [], "db": []}
                                             for k in LIVE_POINTS}  # fmt: skip
    per_agent: dict[str, dict[str, Any]] = {f"{t:g}": {} for t in targets}
    for i, (agent, idx) in enumerate(groups.items()):
        ra = [ordered[j] for j in idx]
        rb = [rec_b[r.run_id] for r in ra]
        y = np.array([int(r.resolved) for r in ra])
        w = resample_weights(y, draws, seed=cfg.data.split_seed + i)
        for t in targets:
            for n in names:
                oa, ob = Outcome.of(ra, sa.stops[n][t]), Outcome.of(rb, sb.stops[n][t])
                cell = saved[f"{t:g}"][n]
                cell["a"].append(oa.rates()[2])
                cell["b"].append(ob.rates()[2])
                cell["fa"].append(oa.rates()[0])
                cell["fb"].append(ob.rates()[0])
                cell["da"].append([oa.rates(x)[2] for x in w])
                cell["db"].append([ob.rates(x)[2] for x in w])
            if SERVED in names:
                per_agent[f"{t:g}"][str(agent)] = _against_baselines(saved[f"{t:g}"], names)
        _add_live(live, ra, rb, y, w, live_scores)
    return {
        "view": view,
        "runs": len(sa.records),
        "saved": {t: {n: _summary(c) for n, c in per.items()} for t, per in saved.items()},
        "live_auroc": {f"step:{k}": _summary(c) for k, c in live.items() if c["a"]},
        "live_scores": {"a": live_scores[0], "b": live_scores[1]},
        "per_agent": per_agent,
        "agents_above_baselines": {
            t: {side: sum(per[side]["above_all"] for per in agents.values()) for side in "ab"}
            for t, agents in per_agent.items()
        },
        "chosen": chosen_counts(sa.choices, sb.choices, targets),
    }


def chosen_counts(
    choices_a: Sequence[dict[str, Any]],
    choices_b: Sequence[dict[str, Any]],
    targets: Sequence[float],
) -> dict[str, dict[str, dict[str, dict[str, int]]]]:
    """Per target and threshold group, how many of each side's pairs (folds) chose each
    candidate for the served choice (made per target): where B's extra candidates won, and how
    steadily. `choices_*`: training.evaluate.candidates.Served.choices."""
    from monitor.thresholds import target_key

    out: dict[str, dict[str, dict[str, dict[str, int]]]] = {}
    for t in targets:
        key = target_key(t)
        per: dict[str, dict[str, dict[str, int]]] = {}
        for side, choices in (("a", choices_a), ("b", choices_b)):
            for pair in choices:
                for group, c in pair.items():
                    name = str((c.get("chosen_by_target") or {}).get(key))
                    cell = per.setdefault(group, {"a": {}, "b": {}})[side]
                    cell[name] = cell.get(name, 0) + 1
        out[f"{t:g}"] = dict(sorted(per.items()))
    return out


def _add_live(
    live: dict[int, dict[str, list[Any]]],
    ra: Sequence[Any],
    rb: Sequence[Any],
    y: np.ndarray,
    w: np.ndarray,
    live_scores: tuple[str, str],
) -> None:
    """One agent's AUROC of A's and B's live score among its runs still going at each of
    LIVE_POINTS, and under each bootstrap weighting `w`, appended to `live`."""
    la, lb = live_scores
    for k in LIVE_POINTS:
        m = np.array([r.n_steps > k for r in ra])
        if m.sum() < 2 or len(np.unique(y[m])) < 2:
            continue
        fail = 1 - y[m]
        s_a = np.array([r.scores[la][k - 1] for r, ok in zip(ra, m, strict=True) if ok])
        s_b = np.array([r.scores[lb][k - 1] for r, ok in zip(rb, m, strict=True) if ok])
        one = np.ones(int(m.sum()))
        live[k]["a"].append(_weighted_auc(fail, s_a, one))
        live[k]["b"].append(_weighted_auc(fail, s_b, one))
        live[k]["da"].append([_weighted_auc(fail, s_a, x[m]) for x in w])
        live[k]["db"].append([_weighted_auc(fail, s_b, x[m]) for x in w])


def _summary(c: dict[str, list[Any]]) -> dict[str, Any]:
    """Mean per agent of A and B, B - A with its paired interval (and each side's worst FPR)."""
    from training.evaluate.intervals import percentile_ci

    da, db = np.array(c["da"], dtype=float), np.array(c["db"], dtype=float)
    out = {
        "a": float(np.nanmean(c["a"])),
        "b": float(np.nanmean(c["b"])),
        "delta": float(np.nanmean(c["b"]) - np.nanmean(c["a"])),
        "ci": percentile_ci(np.nanmean(db, axis=0) - np.nanmean(da, axis=0)),
    }
    if "fa" in c:
        out["fpr_max_a"] = float(np.nanmax(c["fa"]))
        out["fpr_max_b"] = float(np.nanmax(c["fb"]))
    return out


def _against_baselines(cells: dict[str, dict[str, list[Any]]], names: list[str]) -> dict:
    """The agent just appended to `cells`: on each side, the served choice's tokens saved minus
    each baseline's, with the paired interval over the same draws."""
    from training.evaluate.intervals import percentile_ci

    out: dict[str, Any] = {}
    served = cells[SERVED]
    for side in "ab":
        vs: dict[str, dict[str, Any]] = {}
        for n in (n for n in BASELINES if n in names):
            draws = np.array(served[f"d{side}"][-1], float) - np.array(
                cells[n][f"d{side}"][-1], float
            )
            vs[n] = {"delta": float(served[side][-1] - cells[n][side][-1]),
                     "ci": percentile_ci(draws)}  # fmt: skip
        out[side] = {
            "saved": float(served[side][-1]),
            "vs": vs,
            "above_all": bool(vs) and all((c["ci"][0] or 0.0) > 0 for c in vs.values()),
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from training.config import load_pipeline_config

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_comparison_args(p, "the reference crossfit folder", "the variant's crossfit folder")
    p.add_argument(
        "--extra",
        nargs="+",
        default=[],
        metavar="SCORE",
        help="more candidates of the per-group choice (scores the records carry, e.g. the "
        "monitor_text that training.experiments.extra_candidate adds)",
    )
    p.add_argument(
        "--live",
        nargs=2,
        default=[MONITOR, MONITOR],
        metavar=("A_SCORE", "B_SCORE"),
        help="the scores whose live AUROC is compared (default: monitor on both sides)",
    )
    args = p.parse_args(argv)
    cfg = load_pipeline_config(args.config, args.override)
    results = []
    for view in args.views:
        for side in (args.a, args.b):
            if not (side / view / "records.parquet").exists():
                p.error(f"{side / view / 'records.parquet'}: missing (run failfast crossfit)")
        results.append(
            compare_view(
                cfg,
                args.a,
                args.b,
                view,
                folds=args.folds,
                draws=args.draws,
                extra=args.extra,
                live_scores=(args.live[0], args.live[1]),
            )
        )
    md = markdown(results, str(args.a), str(args.b))
    name = f"paired-{args.b.name}" + ("" if args.live == [MONITOR, MONITOR] else "-live")
    write_comparison(args.a, name, results, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
