"""Calibrating a bundle on an agent it was never trained on: realized FPR on held-out runs.

The agent's labelled runs are scored once with the bundle (or read from --records), then split
at random into calibration and held-out halves by instance, --splits times. On each split:

- uncalibrated: the bundle as shipped; the agent is unknown to it, so it gets the POOLED
  threshold of the training agents (the lookup rule of docs/BUNDLE.md);
- calibrated: `failfast calibrate`'s thresholds (training.calibrate.recalibrate) picked on the
  calibration half, with the bundle's method and schedule.

Both are measured on the held-out half: realized run-level FPR (stopped resolved / resolved),
the share of splits over the target, recall (stopped unresolved / unresolved). The in-domain
reference is the same protocol on the agents the bundle WAS trained on, using their validation
and test records from the training dir (--in-domain OUT/records: runs the model never trained
on), plus the shipped thresholds on the test split (what `failfast train` reports).

    python bench/bench_calibrate.py --bundle runs/quick/bundle \\
        --data ../shared/data/swe-bench-verified/openhands-claude-3.5-sonnet \\
        --records /tmp/openhands.parquet --in-domain runs/quick/records [--splits 200]
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from monitor.schedule import Schedule
from monitor.thresholds import ThresholdTable
from training.calibrate.recalibrate import recalibrate, score_runs
from training.config import ThresholdConfig
from training.data.records import RunRecord, group_records, load_records, save_records


def held_out_rates(
    records: Sequence[RunRecord], table: ThresholdTable, agent: str, target: float
) -> tuple[float, float, str]:
    """(realized FPR, recall, threshold source) of `table` at `target` on `records`."""
    th = table.lookup(agent, target)
    stop = [table.schedule.first_stop(r.scores["monitor"], th.stop) is not None for r in records]
    res = np.array([r.resolved for r in records])
    st = np.array(stop)
    fpr = float(st[res].mean()) if res.any() else float("nan")
    recall = float(st[~res].mean()) if (~res).any() else float("nan")
    return fpr, recall, th.origin


def halves(records: Sequence[RunRecord], rng: np.random.Generator) -> tuple[list, list]:
    """A random split of the records into two halves by instance."""
    inst = sorted({r.instance_id for r in records})
    cal = set(rng.permutation(inst)[: len(inst) // 2].tolist())
    return [r for r in records if r.instance_id in cal], [
        r for r in records if r.instance_id not in cal
    ]


def protocol(
    records: Sequence[RunRecord],
    agent: str,
    bundle_table: ThresholdTable | None,
    cfg: ThresholdConfig,
    schedule: Schedule,
    *,
    splits: int,
    seed: int,
) -> dict[str, Any]:
    """Uncalibrated and calibrated held-out rates of one agent over random instance halves."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list[tuple[float, float]]] = {"uncalibrated": [], "calibrated": []}
    sources: set[str] = set()
    n_cal, n_held = [], []
    target = cfg.targets[0]
    for _ in range(splits):
        cal, held = halves(records, rng)
        n_cal.append(sum(r.resolved for r in cal))
        n_held.append(sum(r.resolved for r in held))
        if bundle_table is not None:
            fpr, rec, _ = held_out_rates(held, bundle_table, agent, target)
            rows["uncalibrated"].append((fpr, rec))
        new = recalibrate(bundle_table, cal, cfg, schedule=schedule).table
        fpr, rec, src = held_out_rates(held, new, agent, target)
        sources.add(src)
        rows["calibrated"].append((fpr, rec))
    out: dict[str, Any] = {
        "agent": agent,
        "runs": len(records),
        "resolved_cal": float(np.mean(n_cal)),
        "resolved_held": float(np.mean(n_held)),
        "calibrated_threshold_from": sorted(sources),
    }
    for name, vals in rows.items():
        if not vals:
            continue
        a = np.array(vals)
        out[name] = {
            "fpr_mean": float(np.nanmean(a[:, 0])),
            "fpr_sd": float(np.nanstd(a[:, 0])),
            "over_target": float(np.mean(a[:, 0] > target + 1e-12)),
            "recall_mean": float(np.nanmean(a[:, 1])),
        }
    return out


def agent_records(args: argparse.Namespace, scorer: Any) -> list[RunRecord]:
    """The new agent's records: --records when it exists, else --data scored now (and saved)."""
    if args.records is not None and args.records.is_file():
        recs = load_records(args.records)
    else:
        from training.data.runs import labelled_runs, load_runs

        runs = labelled_runs(load_runs(args.data)).runs
        recs = score_runs(scorer, runs)
        if args.records is not None:
            save_records(args.records, recs)
    if args.agent:
        for r in recs:
            r.agent = r.source = args.agent
    return recs


def line(name: str, row: dict[str, Any], setting: str) -> str:
    s = row.get(setting)
    if s is None:
        return ""
    return (
        f"| {name} | {setting} | {row['runs']} | {row['resolved_cal']:.0f} / "
        f"{row['resolved_held']:.0f} | {s['fpr_mean']:.3f} ± {s['fpr_sd']:.3f} | "
        f"{s['over_target']:.0%} | {s['recall_mean']:.3f} |"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", required=True)
    p.add_argument("--data", nargs="+", default=[], help="the new agent's labelled runs")
    p.add_argument("--records", type=Path, default=None, help="score cache (parquet)")
    p.add_argument("--agent", default=None, help="its threshold group (default: as read)")
    p.add_argument("--in-domain", type=Path, default=None, help="training OUT/records folder")
    p.add_argument("--target", type=float, default=0.05)
    p.add_argument(
        "--margin",
        type=float,
        default=1.0,
        help="fit at target / margin (1: the exact-target protocol the figures in USAGE used; "
        "the configs ship 2)",
    )
    p.add_argument("--splits", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args(argv)
    # the shipped table warns once per lookup of an agent it never saw: that is the point here
    logging.getLogger("monitor.thresholds").setLevel(logging.ERROR)

    from monitor.policy import PolicyConfig
    from serving.scorer import Scorer

    scorer = Scorer.load(args.bundle, threads=args.threads)
    table = scorer.bundle.thresholds
    schedule = table.schedule if table else PolicyConfig.model_validate(scorer.policy).schedule()
    method = table.method if table and table.method != "empirical" else "conformal"
    key = table.group_by if table is not None else "agent"  # the bundle's threshold groups
    cfg = ThresholdConfig(
        targets=[args.target],
        method=method,  # type: ignore[arg-type]
        margin=args.margin,
        fallback="pooled",  # the uncalibrated row measures what the pooled fallback does
        group_by=key,  # type: ignore[arg-type]
    )
    result: dict[str, Any] = {"target": args.target, "method": method, "new": [], "in_domain": []}
    recs = agent_records(args, scorer)
    for agent, mine in sorted(group_records(recs, key).items()):
        result["new"].append(
            protocol(mine, agent, table, cfg, schedule, splits=args.splits, seed=args.seed)
        )
    shipped = {}
    if args.in_domain is not None:
        files = sorted(args.in_domain.glob("*.parquet"))
        pool = [r for f in files for r in load_records(f) if "monitor" in r.scores]
        for agent, mine in sorted(group_records(pool, key).items()):
            result["in_domain"].append(
                protocol(mine, agent, None, cfg, schedule, splits=args.splits, seed=args.seed)
            )
        test = args.in_domain / "test.parquet"
        if test.is_file() and table is not None:
            for agent, held in sorted(group_records(load_records(test), key).items()):
                shipped[agent] = held_out_rates(held, table, agent, args.target)
    result["shipped_on_test"] = shipped
    print(
        f"target {args.target:g} ({method}); {args.splits} random instance halves "
        "(calibration / held-out); realized FPR on the held-out half, mean ± sd over splits"
    )
    print("")
    print(
        "| agent | thresholds | runs | resolved cal / held | realized FPR | splits over target | recall |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for row in result["new"]:
        for setting in ("uncalibrated", "calibrated"):
            print(line(f"{row['agent']} (not in training)", row, setting))
    for row in result["in_domain"]:
        print(line(f"{row['agent']} (in training)", row, "calibrated"))
    for agent, (fpr, rec, src) in shipped.items():
        print(
            f"| {agent} (in training) | shipped, test split ({src}) | | | {fpr:.3f} | | {rec:.3f} |"
        )
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
