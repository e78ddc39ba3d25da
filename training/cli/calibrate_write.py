"""What `failfast calibrate` prints and writes once its records are scored: the new thresholds
per group, what each group will be served with (the per-group choice re-made on the same runs,
training.evaluate.recalibrate_choice), and the recalibrated bundle."""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING, Any

from monitor.escape import visible
from training.cli.scorer_args import problem

if TYPE_CHECKING:
    from serving.scorer import Scorer


def served_choice(
    bundle: Any,
    records: list[Any],
    cfg: Any,
    table: Any,
    groups: list[str],
    served: float,
    *,
    replace: bool = False,
) -> tuple[dict[str, Any] | None, bool]:
    """The bundle's candidates.json with the per-group choice re-made for `groups` on `records`
    (None: the bundle has none), whether any choice was made, and what each group will be
    served with at `served`, printed (as serving.choice decides it with the new `table`)."""
    from serving.choice import Choice
    from training.evaluate.recalibrate_choice import recalibrate_candidates

    old = bundle.candidates()
    if old is None:
        return None, False
    new, choice = recalibrate_candidates(old, records, cfg, table.schedule, groups, replace=replace)
    serving = Choice.from_json(new, table)
    key = f"{served:g}"
    for g in groups:
        th = serving.served(g, served, table.lookup(g, served))
        c = choice.get(g)
        if c is None:
            print(
                f"served for {visible(g)} at {key}: {th.scorer} (no candidate scores in its runs)"
            )
            continue
        saved = c.get("held_out_by_target", {}).get(key)
        also = ", ".join(
            f"{n} {100 * v:.1f}%" for n, v in sorted(c["mean_saved"].items(), key=lambda x: -x[1])
        )
        held = f"{100 * saved:.1f}% of tokens saved on held-out runs; " if saved is not None else ""
        print(
            f"served for {visible(g)} at {key}: {th.scorer} ({held}mean over the targets: "
            f"{also or 'none qualified'})"
        )
    return new, bool(choice)


def write_bundle(
    args: argparse.Namespace, scorer: Scorer, cfg: Any, records: list[Any], data: dict
) -> int:
    """Pick the thresholds on `records`, print them, re-make the per-group choice and write the
    recalibrated bundle to `args.out`; the exit code (2 with the reason when nothing is
    written)."""
    from monitor.errors import BundleError
    from monitor.policy import PolicyConfig
    from monitor.thresholds import target_key
    from training.calibrate.recalibrate import calibration_record, recalibrate, refusals
    from training.export.calibrated import write_calibrated_bundle

    bundle = scorer.bundle
    old = bundle.thresholds
    schedule = old.schedule if old else PolicyConfig.model_validate(bundle.policy).schedule()
    served = args.serve_target if args.serve_target is not None else bundle.target
    try:
        result = recalibrate(old, records, cfg, schedule=schedule, replace=args.replace)
    except ValueError as e:
        return problem(e)
    table = result.table
    print(f"thresholds ({cfg.mode}, {cfg.method}; schedule {schedule.model_dump()}):")
    for g, c in result.groups.items():
        entry = table.groups[g]
        cells = []
        for t in cfg.targets:
            st = entry.stop[target_key(t)]
            cells.append(  # a refusal says what it would need (the count of resolved runs)
                f"{t:g}: {st.threshold:.4f}"
                if st.threshold is not None
                else f"{t:g}: refused ({(st.refused or '').rsplit(': ', 1)[-1]})"
            )
        print(f"  {visible(g)}: {c['runs']} runs, {c['resolved']} resolved -> " + ", ".join(cells))
    for g, why in result.kept.items():
        print(f"  {visible(g)}: {visible(why)}")
    print(f"  pooled: {result.pooled}")
    refused = refusals(table, list(result.groups), served)
    for g, why in refused.items():
        print(f"refused at the served target {served:g} for {visible(g)}: {visible(why)}")
    if result.groups and all(g in refused for g in result.groups):
        if "pooled" in refused or result.pooled != "recalibrated":
            kept = " (the --check report is kept beside it)" if args.check is not None else ""
            why = (
                f"no group of the data can certify the served target {served:g} (see above); "
                f"no bundle written{kept}. Give more resolved runs, a larger --serve-target, or "
                "another --method"
            )
            return problem(ValueError(why))
    command = "failfast " + " ".join(shlex.quote(a) for a in args.argv)
    record = calibration_record(
        result, cfg, data=data, served_target=served, bundle=bundle, command=command
    )
    cands, remade = served_choice(
        bundle, records, cfg, table, list(result.groups), served, replace=args.replace
    )
    if remade:
        record["candidates"] = (
            "per-group choice re-made on these runs (training.evaluate.recalibrate_choice)"
        )
    try:
        out = write_calibrated_bundle(
            bundle, args.out, table, record, target=served, candidates=cands
        )
    except BundleError as e:
        return problem(e)
    print(f"recalibrated bundle: {out} (served target {served:g}; calibrated {record['at']})")
    return 0
