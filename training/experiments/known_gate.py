"""Known tasks served with a per-group gate, cross-fitted (issue 26, twenty-fifth round).

    python -m training.experiments.known_gate A B --config configs/quick.yaml \\
        --views instance repo time [--draws 500]

A: the shipped cross-fit; B: `training.experiments.task_prior A --known-only --min-runs 4` (the
runs of known tasks, with the prior's candidates). On B's runs, each run is served as a bundle
with a known-task choice serves it: by B's choice (calibrated on known runs) for its group and
target where `training.evaluate.known_tasks.known_wins` says so (that choice saved more on its
held-out calibration runs than A's choice for the group saved on its own), else by A's choice
(the ordinary path, calibrated on all runs). Both choices come from pairs that hold the run's task
out. Compared with A run by run (training.experiments.paired.compare_served): writes
A/paired-<B>-gated.json and .md and prints the table. `--all-runs`: on every run A scored, the
runs of unknown tasks served by A's choice (the whole served system against the shipped one),
A/paired-<B>-gated-all.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence

from serving.task_prior import PRIOR_CANDIDATES
from training.evaluate.candidates import SELECTED_PER_TARGET, Served
from training.evaluate.known_tasks import known_wins


def gated(
    sa: Served, wa: dict[str, int], sb: Served, wb: dict[str, int], group_by: str
) -> tuple[Served, dict[str, dict[str, int]]]:
    """A's Served (its runs: B's, or with --all-runs every run A scored) with the served choice
    (SELECTED_PER_TARGET) replaced by the gated one, and per target how many runs each path
    served; a run B did not score (an unknown task) takes A's."""
    stops = {t: dict(st) for t, st in sa.stops[SELECTED_PER_TARGET].items()}
    counts: dict[str, dict[str, int]] = {}
    for r in sa.records:
        g = str(getattr(r, group_by))
        ca = sa.choices[wa[r.run_id]].get(g)
        cb = sb.choices[wb[r.run_id]].get(g) if r.run_id in wb else None
        for t in stops:
            key = f"{t:g}"
            known = cb is not None and known_wins(cb, ca, key)
            if known:
                stops[t][r.run_id] = sb.stops[SELECTED_PER_TARGET][t][r.run_id]
            c = counts.setdefault(key, {"known": 0, "ordinary": 0})
            c["known" if known else "ordinary"] += 1
    out = dataclasses.replace(sa, stops={**sa.stops, SELECTED_PER_TARGET: stops})
    return out, counts


def main(argv: Sequence[str] | None = None) -> int:
    from training.config import load_pipeline_config
    from training.data.records import load_records
    from training.experiments.paired import compare_served
    from training.experiments.paired_io import add_comparison_args, served_pairs, write_comparison
    from training.experiments.paired_markdown import markdown

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_comparison_args(p, "the shipped crossfit folder", "task_prior --known-only output")
    p.add_argument(
        "--all-runs",
        action="store_true",
        help="compare on every run A scored (unknown tasks served by A's choice)",
    )
    args = p.parse_args(argv)
    cfg = load_pipeline_config(args.config, args.override)
    results = []
    for view in args.views:
        for side in (args.a, args.b):
            if not (side / view / "records.parquet").exists():
                p.error(f"{side / view / 'records.parquet'}: missing")
        keep = {r.run_id for r in load_records(args.b / view / "records.parquet")}
        if args.all_runs:
            keep = {r.run_id for r in load_records(args.a / view / "records.parquet")}
        sa, wa = served_pairs(cfg, args.a / view, view, args.folds, keep, PRIOR_CANDIDATES)
        sb, wb = served_pairs(cfg, args.b / view, view, args.folds, keep, PRIOR_CANDIDATES)
        sg, counts = gated(sa, wa, sb, wb, cfg.thresholds.group_by)
        res = compare_served(cfg, view, sa, sg, draws=args.draws)
        res["served_by"] = counts
        results.append(res)
    md = markdown(results, str(args.a), f"{args.b} (gated)")
    md += "\n\nRuns served by each path (known / ordinary): " + json.dumps(
        {r["view"]: r["served_by"] for r in results}
    )
    name = f"paired-{args.b.name}-gated" + ("-all" if args.all_runs else "")
    write_comparison(args.a, name, results, md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
