"""What a trained bundle serves per group, live vs replay, and what a step costs with it.

For each threshold group of the bundle: the candidate it is served with at the bundle's target
(serving.choice), then for up to N runs of that group in a corpus (`failfast ingest` output or
transcripts): a live session step by step against `Scorer.score_served` on the whole run (the
largest |difference|), the served scores against the training side's record of the same
candidate when a records file is given, and the median time per live step.

    python bench/bench_served.py runs/quick/bundle runs/quick/corpus \\
        [--records runs/quick/records/test.parquet] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from serving.scorer import Scorer  # noqa: E402
from training.data.records import load_records  # noqa: E402
from training.data.runs import load_runs  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("bundle", type=Path)
    p.add_argument("data", nargs="+", help="an ingest folder or transcripts")
    p.add_argument("--records", type=Path, help="a records parquet of the same runs (optional)")
    p.add_argument("--runs", type=int, default=3, help="runs per group")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    scorer = Scorer.load(args.bundle, threads=args.threads)
    table = scorer.bundle.thresholds
    if table is None:
        print(f"{args.bundle}: no thresholds: the LM probe serves no stop by score")
        return 2
    recs = {r.run_id: r for r in load_records(args.records)} if args.records else {}
    runs = [t for t in load_runs(args.data) if t.steps and (not recs or t.id in recs)]
    by_group: dict[str, list] = {}
    for t in runs:
        by_group.setdefault(table.group_of(t.agent, t.source), []).append(t)
    print(f"bundle {args.bundle.name}, target {scorer.target:g}, {len(runs)} runs read")
    for g in sorted(table.groups):
        th = scorer.served("", g)
        print(f"{g}: {th.scorer}, stop {th.stop:.4g} ({th.origin}): {th.why}")
        for t in by_group.get(g, [])[: args.runs]:
            sess = scorer.start(t.task, t.agent, t.source)
            times, live = [], []
            for st in t.steps:
                t0 = time.perf_counter()
                live.append(sess.observe(st))
                times.append(time.perf_counter() - t0)
            replay, _ = scorer.score_served(t)
            diff = float(np.max(np.abs(np.asarray(live) - np.asarray(replay))))
            ref = recs[t.id].scores.get(th.scorer) if t.id in recs else None
            vs = (
                f", |served - record| {float(np.max(np.abs(np.asarray(replay) - ref))):.1e}"
                if ref is not None and th.scorer != "monitor"
                else ""
            )
            print(
                f"  {t.id}: {len(t.steps)} steps, |live - replay| {diff:.1e}{vs}, "
                f"median {1000 * statistics.median(times):.2f} ms/step, "
                f"model tokens {sess.tokens_encoded}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
