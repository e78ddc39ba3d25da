"""Known tasks with many more verdicts than calibration saw: a stress test (issue 26).

    python -m training.experiments.prior_sharpness TRAIN_DIR [--factors 1 3 10 30] \\
        [--targets 0.05 0.1] [--out FILE]

A bundle's known-task choice is calibrated on priors from as many other-agent runs per task as
its training data had (at most 13 in ../shared/data). A user who adds public verdicts with
`failfast known-tasks` (e.g. every leaderboard submission's run of a SWE-bench task) gives a task
far more: its prior is then sharper than any calibration run's. This measures what that does to
the FPR promise, on TRAIN_DIR's saved test split served as its candidates.json ships it
(`failfast evaluate`'s known_tasks section without calibration records): the test tasks'
other-agent verdicts are added (as `failfast evaluate` does), then every count of the table is
multiplied by each factor F (the same failure rate per task, F times the evidence), once with
the table's cap on other-agent runs (`TaskPrior.max_others`, what the bundle ships) and once
without it. Prints and writes, per factor and target, the known runs' realized FPR and tokens
saved, overall and per agent.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from monitor.atomic import atomic_write_text
from monitor.thresholds import ThresholdTable
from serving.task_prior import TaskPrior
from training.config import EvalConfig
from training.data.records import RunRecord, load_records
from training.evaluate.known_tasks import with_verdicts


def inflated(table: TaskPrior, factor: int, *, capped: bool) -> TaskPrior:
    """`table` with every [runs, unresolved] count times `factor`; without its cap when not
    `capped`."""
    out = copy.deepcopy(table)
    out.counts = {
        inst: {a: [c[0] * factor, c[1] * factor] for a, c in per.items()}
        for inst, per in table.counts.items()
    }
    if not capped:
        out.max_others = 0
    return out


def stress(
    records: Sequence[RunRecord],
    thresholds: ThresholdTable,
    candidates: dict[str, Any],
    *,
    factors: Sequence[int],
    targets: Sequence[float],
) -> list[dict[str, Any]]:
    """One row per factor, cap and target: the known_tasks section's overall and per-agent
    figures as the bundle serves the test runs (training.evaluate.known_report.known_from_bundle
    through training.evaluate.report.evaluate)."""
    from training.evaluate.report import evaluate

    base = with_verdicts(TaskPrior.from_json(candidates["known_tasks"]["prior"]), records)
    records = [r for r in records if base.prior(r.instance_id, r.agent) is not None]
    rows = []
    for f in factors:
        for capped in (True, False) if base.max_others else (False,):
            cands = copy.deepcopy(candidates)
            cands["known_tasks"]["prior"] = inflated(base, f, capped=capped).to_json()
            for t in targets:
                kt = evaluate(
                    records, thresholds, config=EvalConfig(target_fpr=t), candidates=cands
                )["known_tasks"]
                rows.append({"factor": f, "capped": capped, "target": t, **_figures(kt)})
    return rows


def _figures(kt: dict[str, Any]) -> dict[str, Any]:
    """The figures of a known_tasks section: per scope (overall, each agent) the runs, those
    the known choice served, and the served rates with it."""
    scopes = {"overall": kt["overall"], **kt["per_agent"]}
    return {
        s: {"runs": r["runs"], "served_known": r["known_runs_served"], **r["with_known_tasks"]}
        for s, r in scopes.items()
    }


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a table (tokens saved and realized FPR with known tasks, overall)."""
    lines = [
        "| factor | cap | target | known runs | served by the known choice | saved | realized FPR "
        "| worst FPR of an agent it serves |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        o = r["overall"]
        worst = max(  # among agents the known choice serves (the others are served as before)
            (
                v["realized_fpr"] or 0.0
                for k, v in r.items()
                if isinstance(v, dict) and k != "overall" and v["served_known"]
            ),
            default=0.0,
        )
        lines.append(
            f"| {r['factor']} | {'on' if r['capped'] else 'off'} | {100 * r['target']:g}% | "
            f"{o['runs']} | {o['served_known']} | {_pct(o['tokens_saved'])} | "
            f"{_pct(o['realized_fpr'])} | {_pct(worst)} |"
        )
    return "\n".join(lines) + "\n"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("train_dir", type=Path, help="a failfast train / demo output folder")
    ap.add_argument("--factors", type=int, nargs="+", default=[1, 3, 10, 30])
    ap.add_argument("--targets", type=float, nargs="+", default=[0.05, 0.1])
    ap.add_argument("--out", type=Path, help="JSON file (default TRAIN_DIR/prior_sharpness.json)")
    args = ap.parse_args(argv)
    d: Path = args.train_dir
    records = load_records(d / "records" / "test.parquet")
    thresholds = ThresholdTable.model_validate(json.loads((d / "thresholds.json").read_text()))
    candidates = json.loads((d / "candidates.json").read_text())
    if not candidates.get("known_tasks"):
        raise SystemExit(f"{d / 'candidates.json'}: no known_tasks section")
    rows = stress(records, thresholds, candidates, factors=args.factors, targets=args.targets)
    out = args.out or d / "prior_sharpness.json"
    atomic_write_text(out, json.dumps(rows, indent=1) + "\n")
    sys.stdout.write(markdown(rows) + f"written: {out}\n")


if __name__ == "__main__":
    main()
