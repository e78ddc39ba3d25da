"""`failfast calibrate`: new thresholds for a trained bundle from your own labelled runs.

    failfast calibrate --bundle B --data RUNS... --out B2 [--target-fpr 0.05 ...] [--agent NAME]
    failfast calibrate --bundle B --data decisions.jsonl [--verdicts verdicts.jsonl] --out B2
    failfast calibrate --bundle B --data RUNS... --out B2 --check 0.5 [--recalibrate-all]

Imports at the top stay light; the handler loads onnxruntime and scikit-learn when it runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, get_args

from training.cli.calibrate_records import calibration_records
from training.cli.calibrate_write import write_bundle
from training.cli.scorer_args import pin_arg, problem

if TYPE_CHECKING:
    from serving.scorer import Scorer


def register(sub: argparse._SubParsersAction) -> None:
    """Add `calibrate` to the `failfast` parser (long: one flat list of its flags and their help,
    read top to bottom like --help)."""
    from training.config import ThresholdConfig

    fields = ThresholdConfig.model_fields
    p = sub.add_parser(
        "calibrate",
        help="new thresholds for a trained bundle from labelled runs or a decision log (no "
        "retraining)",
        description=(
            "Score labelled runs with the bundle's ONNX graphs (or take the scores a service "
            "logged, --data DECISIONS.jsonl with verdicts), pick per-group stop thresholds under "
            "the bundle's check schedule, and write a copy of the bundle with them and a "
            "`calibration` record. Groups present in the data get new thresholds; the others "
            "keep theirs (--replace drops them). docs/USAGE.md, 'Calibrate a trained bundle on your own runs'."
        ),
    )
    p.add_argument("--bundle", required=True, help="the trained bundle")
    p.add_argument(
        "--data",
        nargs="+",
        required=True,
        help="labelled runs (an ingest folder, or transcripts + label files) and/or decision "
        "logs (failfast serve/watch --decision-log)",
    )
    p.add_argument("--out", required=True, help="folder for the recalibrated bundle")
    p.add_argument(
        "--labels", action="append", default=[], help="label file for raw runs (repeatable)"
    )
    p.add_argument(
        "--verdicts",
        action="append",
        default=[],
        help="verdicts of the runs in the decision logs: JSON lines {run_id|session_id, "
        "resolved} (repeatable; the service's own verdicts are in its decision log)",
    )
    p.add_argument(
        "--shadow-only",
        action="store_true",
        help="decision logs: only shadow runs (a harness that obeys the other runs' stops; "
        "docs/USAGE.md, shadow sampling)",
    )
    p.add_argument(
        "--agent",
        default=None,
        help="threshold group of every run given (e.g. your agent's name, when its transcripts "
        "read as another agent's format); serve it with `--source NAME` (source-keyed bundles, "
        "the quick and default configs: the model still reads the transcript's agent) or "
        "`--agent NAME` (agent-keyed bundles: the model reads NAME)",
    )
    p.add_argument(
        "--check",
        type=float,
        default=None,
        metavar="FRACTION",
        help="hold out this fraction of the instances (e.g. 0.5), calibrate on the rest, and "
        "evaluate the held-out runs under those thresholds as they would be served (report "
        "and plain summary printed, and written to OUT.check/); the bundle written is the one "
        "checked, unless --recalibrate-all",
    )
    p.add_argument(
        "--recalibrate-all",
        action="store_true",
        help="with --check: after the check, write a bundle calibrated on every run (more "
        "calibration runs; the check measured the half-calibrated one)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the --check split (default 0)")
    p.add_argument(
        "--target-fpr",
        type=float,
        nargs="+",
        default=None,
        help="run-level FPR targets to fit (default: the bundle's)",
    )
    p.add_argument(
        "--serve-target",
        type=float,
        default=None,
        help="the target served by default (default: the bundle's; added to the targets)",
    )
    p.add_argument("--mode", choices=get_args(fields["mode"].annotation), default=None)
    p.add_argument(
        "--method",
        choices=get_args(fields["method"].annotation),
        default=None,
        help="the FPR bound (default: the bundle's)",
    )
    p.add_argument("--confidence", type=float, default=None, help="confidence of the bound")
    p.add_argument(
        "--group-by",
        choices=get_args(fields["group_by"].annotation),
        default=None,
        help="threshold groups (default: the bundle's)",
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="drop the bundle's thresholds of groups absent from the data (and its pooled ones)",
    )
    p.add_argument(
        "-o",
        "--override",
        action="append",
        default=[],
        help="ThresholdConfig key=value, without the `thresholds.` prefix `failfast train -o` "
        "takes (e.g. -o margin=1)",
    )
    p.add_argument("--records-out", default=None, help="also save the scored records (parquet)")
    p.add_argument("--int8", action="store_true", help="score with the int8 graphs")
    p.add_argument("--threads", type=int, default=None, help="onnxruntime threads per call")
    pin_arg(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    from monitor.errors import BundleError, ConfigError, FailfastError
    from serving.scorer import Scorer

    try:
        scorer = Scorer.load(
            args.bundle, threads=args.threads, int8=args.int8, sha256=args.bundle_sha256
        )
        cfg = _threshold_config(args, scorer.bundle)
        if args.check is not None and any(_is_log(p) for p in args.data):
            raise ValueError("--check takes labelled runs, not decision logs")
        if args.recalibrate_all and args.check is None:
            raise ValueError("--recalibrate-all goes with --check")
        records, data, runs = calibration_records(args, scorer, cfg.group_by)
        if args.check is not None:
            records = _check(args, scorer, cfg, records, data, runs)
    except (BundleError, ConfigError, FailfastError, ValueError, OSError) as e:
        return problem(e)  # FailfastError: e.g. a damaged corpus in --data
    return write_bundle(args, scorer, cfg, records, data)


def _is_log(path: str) -> bool:
    from training.data.decisions import is_decision_log

    return is_decision_log(path)


def _check(
    args: argparse.Namespace,
    scorer: Scorer,
    cfg: Any,
    records: list[Any],
    data: dict[str, Any],
    runs: list[Any],
) -> list[Any]:
    """Run the --check, print and write its report; returns the records to calibrate on."""
    from pathlib import Path

    from monitor.policy import PolicyConfig
    from training.evaluate.inputs import write_report
    from training.evaluate.summary import plain_summary
    from training.pipeline.check import check_calibration, split_for_check

    bundle = scorer.bundle
    old = bundle.thresholds
    schedule = old.schedule if old else PolicyConfig.model_validate(bundle.policy).schedule()
    served = args.serve_target if args.serve_target is not None else bundle.target
    calib, held = split_for_check(records, args.check, seed=args.seed)
    print(
        f"check: split by instance (seed {args.seed}): calibrating on {len(calib)} runs, "
        f"holding out {len(held)} ({args.check:g} of the instances)"
    )
    got = check_calibration(
        old,
        calib,
        held,
        cfg,
        schedule=schedule,
        target=served,
        replace=args.replace,
        runs=runs,
        candidates=bundle.candidates(),
    )
    where = Path(f"{Path(args.out)}.check")
    table = write_report(
        got.report,
        held,
        _eval_config(served),
        json_path=where / "report.json",
        plots_dir=where / "plots",
        thresholds=got.table,
    )
    print(f"\nheld-out runs under thresholds calibrated on the other part, as served:\n{table}")
    print(plain_summary(got.report, held, got.table))
    print(f"check report: {where / 'report.md'} (and report.json, plots/)")
    data["check"] = got.record(args.check, args.seed)
    if args.recalibrate_all:
        print(f"recalibrating on all {len(records)} runs (--recalibrate-all)")
        unchecked = sorted(g for g, t in got.table.groups.items() if t.stop_at(served) is None)
        if unchecked:  # their new thresholds come from all runs, none held out to test them
            print(
                f"warning: the check could not calibrate {', '.join(unchecked)} at {served:g} on "
                "its calibration part, so no held-out run tested the threshold the bundle now "
                "gets for it; check again with more resolved runs before trusting it",
                file=sys.stderr,
            )
        data["check"]["bundle"] = "recalibrated on every run after the check"
        return records
    data["check"]["bundle"] = "the checked one (calibrated on the calibration part)"
    return calib


def _eval_config(target: float) -> Any:
    from training.config import EvalConfig

    return EvalConfig(target_fpr=target)


def _threshold_config(args: argparse.Namespace, bundle: Any) -> Any:
    """The bundle's threshold options, then the flags, then -o overrides."""
    from monitor.config import load_config
    from training.config import ThresholdConfig

    base: dict[str, Any] = {}
    old = bundle.thresholds
    if old is not None:
        base = {"mode": old.mode, "confidence": old.confidence, "group_by": old.group_by}
        base |= {"margin": old.margin, "fallback": old.fallback}
        base |= {"adaptive_margin": old.adaptive_margin}
        base["targets"] = list(old.targets)
        if old.method in get_args(ThresholdConfig.model_fields["method"].annotation):
            base["method"] = old.method
    flags = {
        "mode": args.mode,
        "method": args.method,
        "confidence": args.confidence,
        "group_by": args.group_by,
        "targets": args.target_fpr,
    }
    base |= {k: v for k, v in flags.items() if v is not None}
    served = args.serve_target if args.serve_target is not None else bundle.target
    base["targets"] = sorted(set(base.get("targets") or [served]) | {served})
    cfg = load_config(ThresholdConfig, None, args.override)
    return ThresholdConfig.model_validate(base | cfg.model_dump(exclude_unset=True))
