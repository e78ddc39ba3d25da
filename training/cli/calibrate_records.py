"""`failfast calibrate`'s input: the calibration records of --data (labelled runs scored now by
the bundle, or decision logs with their verdicts, as logged), with what was read, for the
calibration record the bundle keeps."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from monitor.escape import visible

if TYPE_CHECKING:
    from serving.scorer import Scorer


def calibration_records(
    args: argparse.Namespace, scorer: Scorer, group_by: str
) -> tuple[list[Any], dict[str, Any], list[Any]]:
    """The calibration records of --data (runs scored now, decision logs as logged), and the
    labelled runs read from files (the --check's rule baselines read them)."""
    from training.calibrate.recalibrate import score_runs
    from training.data.decisions import is_decision_log, runs_from_logs
    from training.data.runs import labelled_runs, load_runs
    from training.evaluate.recalibrate_choice import add_candidate_scores

    logs = [p for p in args.data if is_decision_log(p)]
    raw = [p for p in args.data if p not in logs]
    if args.verdicts and not logs:
        raise ValueError("--verdicts goes with decision logs in --data (none found)")
    kinds = (["runs"] if raw else []) + (["decision-log"] if logs else [])
    data: dict[str, Any] = {"kind": "+".join(kinds), "paths": list(args.data)}
    data |= {"labels": list(args.labels), "verdicts": list(args.verdicts)}
    if args.agent:
        data["agent"] = args.agent
    records = []
    lab_runs: list[Any] = []
    if raw:
        runs = load_runs(raw, labels=args.labels)
        lab = labelled_runs(runs)
        lab_runs = lab.runs
        if args.agent and group_by == "agent":  # the group is the agent the model reads ...
            for r in lab.runs:
                r.agent = args.agent
        print(
            f"read {len(runs)} runs: {len(lab.runs)} labelled, "
            f"{sum(lab.unknown.values())} without a verdict, {sum(lab.empty.values())} without "
            "steps (left out)"
        )
        data |= {"runs_read": len(runs), "runs_labelled": len(lab.runs)}
        data |= {"no_verdict": sum(lab.unknown.values()), "no_steps": sum(lab.empty.values())}
        scored = score_runs(scorer, lab.runs, progress=not args.no_progress)
        for rec in scored:  # ... or, keyed by source, only the group: the scores stay the
            rec.source = args.agent or rec.source  # transcript's, as `score --source` sees them
        # every candidate the bundle serves, as served for the run's group: calibrate makes the
        # per-group choice on them (training.evaluate.recalibrate_choice), and the check reports them
        names = add_candidate_scores(scorer, lab.runs, scored, group_by)
        if names:
            print(f"candidates scored as served: {', '.join(names)}")
        records += scored
    if logs:
        got = runs_from_logs(logs, args.verdicts, shadow_only=args.shadow_only)
        for prob in got.problems[:20]:  # each bad line is skipped, never fatal
            print(f"problem: {visible(prob)}", file=sys.stderr)
        if len(got.problems) > 20:
            print(f"problem: ... {len(got.problems) - 20} more", file=sys.stderr)
        check_graphs(got.starts, scorer)
        if args.agent:  # else each logged run keeps its logged agent and source
            for rec in got.records:
                rec.agent = rec.source = args.agent
        skipped = ", ".join(f"{n} {why}" for why, n in sorted(got.skipped.items())) or "none"
        print(f"decision logs: {len(got.records)} runs with a verdict; left out: {skipped}")
        if any(why.startswith("scored by") for why in got.skipped):
            print(  # their logged scores are another scorer's: nothing to set a probe threshold on
                "note: a run of a group the bundle serves with another candidate (its choice) "
                "carries that candidate's scores, not the LM probe's; to calibrate such a group, "
                "give its transcripts and verdicts instead (--data RUNS --labels FILE): the LM "
                "probe scores them, and the group is then served by the LM probe",
                file=sys.stderr,
            )
        data |= {"log_runs": len(got.records), "log_left_out": dict(got.skipped)}
        records += got.records
    if args.records_out:
        from training.data.records import save_records

        save_records(args.records_out, records)
    return records, data, lab_runs


def check_graphs(starts: list[dict[str, Any]], scorer: Scorer) -> None:
    """A log scored by other graphs than the bundle's cannot calibrate it."""
    ours = scorer.bundle.graph_hashes
    for s in starts:
        theirs = s.get("graphs") or {}
        if theirs and any(ours.get(k) != v for k, v in theirs.items()):
            raise ValueError(
                f"the decision log was scored by bundle {s.get('bundle')!r} whose graphs differ "
                f"from {scorer.bundle.path}'s: its scores cannot calibrate this bundle"
            )
