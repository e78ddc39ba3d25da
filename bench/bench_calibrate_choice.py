"""`failfast calibrate` on an agent the bundle never trained on: the LM probe alone against the
per-group choice calibrate now re-makes (training.evaluate.recalibrate_choice), on held-out runs.

The agent's labelled runs are scored once with the bundle: the LM probe and every candidate the
bundle serves, as served for the agent's group (or read from --records). Then --splits times,
the runs are halved at random by instance; on the calibration half `failfast calibrate`'s steps
run (the LM probe's thresholds by training.calibrate.recalibrate, every candidate's thresholds
and the choice by training.evaluate.recalibrate_choice), and the held-out half is served both ways:

- probe: the LM probe at its recalibrated threshold (what calibrate served before);
- served: the candidate the re-made choice serves for the group (serving.choice.Choice.served),
  at its own recalibrated threshold.

Printed per target: the mean realized FPR, the share of splits over the target, the mean tokens
saved of each, the paired difference served - probe (its mean, and the 2.5-97.5 percentiles of
the per-split differences: the spread a user's one calibration may land in, not an interval
for the mean), and how often each candidate was chosen.

    python bench/bench_calibrate_choice.py --bundle runs/loao-oh/bundle \\
        --data ../shared/data/swe-bench-verified/openhands-claude-3.5-sonnet --agent openhands \\
        --records /tmp/oh-choice.parquet --splits 50
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monitor.policy import PolicyConfig  # noqa: E402
from serving.choice import Choice  # noqa: E402
from training.calibrate.recalibrate import recalibrate, score_runs  # noqa: E402
from training.config import ThresholdConfig  # noqa: E402
from training.data.records import load_records, save_records  # noqa: E402
from training.evaluate.intervals import Outcome  # noqa: E402
from training.evaluate.recalibrate_choice import (  # noqa: E402
    add_candidate_scores,
    recalibrate_candidates,
)


def _records(args: argparse.Namespace, scorer) -> list:  # type: ignore[no-untyped-def]
    if args.records and Path(args.records).exists():
        return load_records(args.records)
    from training.data.runs import labelled_runs, load_runs

    runs = labelled_runs(load_runs(args.data)).runs
    for r in runs:  # as `failfast calibrate --agent NAME` names the group
        setattr(r, scorer.bundle.thresholds.group_by, args.agent)
    recs = score_runs(scorer, runs)
    names = add_candidate_scores(scorer, runs, recs, scorer.bundle.thresholds.group_by)
    print(f"scored {len(recs)} runs: monitor, {', '.join(names)}", file=sys.stderr)
    if args.records:
        save_records(args.records, recs)
    return recs


def _stops(records, scores_of, threshold, schedule):  # type: ignore[no-untyped-def]
    return {r.run_id: schedule.first_stop(scores_of(r), threshold) for r in records}


def main() -> int:
    from serving.scorer import Scorer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--data", nargs="+", default=[])
    ap.add_argument("--agent", required=True, help="the agent's threshold group")
    ap.add_argument("--records", default=None, help="score cache (parquet)")
    ap.add_argument("--targets", type=float, nargs="+", default=[0.05, 0.1])
    ap.add_argument("--splits", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    scorer = Scorer.load(args.bundle)
    bundle = scorer.bundle
    old = bundle.thresholds
    cands = bundle.candidates()
    if old is None or cands is None:
        print("the bundle needs thresholds and candidates.json", file=sys.stderr)
        return 2
    schedule = old.schedule if old else PolicyConfig.model_validate(bundle.policy).schedule()
    recs = _records(args, scorer)
    key = old.group_by
    for r in recs:  # the group the runs are calibrated and served as
        setattr(r, key, args.agent)
    cfg = ThresholdConfig(
        mode=old.mode, method=old.method, confidence=old.confidence, group_by=key,  # type: ignore[arg-type]
        margin=old.margin, adaptive_margin=old.adaptive_margin, fallback=old.fallback,
        targets=sorted(set(args.targets)),
    )  # fmt: skip
    rng = np.random.default_rng(args.seed)
    inst = sorted({r.instance_id for r in recs})
    rows: dict[float, dict[str, list[tuple[float, float]]]] = {
        t: {"probe": [], "served": []} for t in cfg.targets
    }
    picked: dict[float, collections.Counter[str]] = {t: collections.Counter() for t in cfg.targets}
    for _ in range(args.splits):
        half = set(rng.permutation(inst)[: len(inst) // 2].tolist())
        cal = [r for r in recs if r.instance_id in half]
        held = [r for r in recs if r.instance_id not in half]
        table = recalibrate(old, cal, cfg, schedule=schedule).table
        new, _ = recalibrate_candidates(cands, cal, cfg, schedule, [args.agent])
        choice = Choice.from_json(new, table)
        for t in cfg.targets:
            probe_th = table.lookup(args.agent, t)
            probe = Outcome.of(
                held, _stops(held, lambda r: r.scores["monitor"], probe_th.stop, schedule)
            ).rates()
            th = choice.served(args.agent, t, probe_th, scorable=set(held[0].scores))
            name = th.scorer or "monitor"
            served = Outcome.of(
                held, _stops(held, lambda r, n=name: r.scores[n], th.stop, schedule)
            ).rates()
            rows[t]["probe"].append((probe[0], probe[2]))
            rows[t]["served"].append((served[0], served[2]))
            picked[t][name] += 1
    n_res = sum(r.resolved for r in recs)
    print(
        f"{args.agent}: {len(recs)} runs ({n_res} resolved), {args.splits} random halves by "
        f"instance (seed {args.seed}); calibrated on one half, measured on the other"
    )
    print(
        "| target | served by | mean FPR | splits over target | tokens saved | served - probe: mean [2.5-97.5% of splits] |"
    )
    print("|---:|---|---:|---:|---:|---|")
    for t in cfg.targets:
        p = np.array(rows[t]["probe"])
        s = np.array(rows[t]["served"])
        diff = s[:, 1] - p[:, 1]
        lo, hi = np.nanpercentile(diff, [2.5, 97.5])
        for name, a in (("LM probe (before)", p), ("the re-made choice", s)):
            tail = (
                f"{100 * np.nanmean(diff):+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"
                if name.startswith("the")
                else ""
            )
            print(
                f"| {t:g} | {name} | {100 * np.nanmean(a[:, 0]):.1f}% | "
                f"{100 * np.mean(a[:, 0] > t):.0f}% | {100 * np.nanmean(a[:, 1]):.1f}% | {tail} |"
            )
        chosen = ", ".join(f"{n} {c}" for n, c in picked[t].most_common())
        print(f"|  | chosen ({args.splits} halves) | {chosen} | | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
