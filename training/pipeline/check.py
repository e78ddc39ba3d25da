"""`failfast calibrate --check F`: calibrate on part of the user's runs, measure on the rest.

The labelled runs are split by instance (all runs of a task on one side, seeded): a fraction F
is held out, the bundle is calibrated on the other runs exactly as `failfast calibrate` would,
and the held-out runs are evaluated under those thresholds as they would be served (the
report of `failfast evaluate` and its plain summary). The CLI then writes either that bundle or
one recalibrated on every run (`--recalibrate-all`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor.schedule import Schedule
from monitor.thresholds import ThresholdTable
from monitor.types import Trajectory
from training.calibrate.recalibrate import Recalibrated, recalibrate
from training.config import EvalConfig, ThresholdConfig
from training.data.records import RunRecord
from training.data.splits import make_splits


def split_for_check(
    records: Sequence[RunRecord], fraction: float, *, seed: int = 0
) -> tuple[list[RunRecord], list[RunRecord]]:
    """(calibration records, held-out records): `fraction` of the instances held out, seeded
    and stratified by the agents that ran each instance (training.data.splits).

    Raises:
        ValueError: `fraction` not in (0, 1), or a side ends up empty (too few instances).
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"--check takes the held-out fraction, in (0, 1): got {fraction:g}")
    runs = [
        Trajectory(id=r.run_id, instance_id=r.instance_id, agent=r.agent, source=r.source)
        for r in records
    ]
    sp = make_splits(runs, fractions=(1.0 - fraction, 0.0, fraction), seed=seed)
    held = set(sp.test)
    calib = [r for r in records if r.instance_id not in held]
    check = [r for r in records if r.instance_id in held]
    if not calib or not check:
        raise ValueError(
            f"--check {fraction:g}: {len({r.instance_id for r in records})} instances cannot be "
            "split into a calibration part and a held-out part (give more runs)"
        )
    return calib, check


@dataclass
class CheckResult:
    """The held-out evaluation of thresholds calibrated on the other part.

    Attributes:
        calibrated: the recalibration on the calibration part.
        report: `training.evaluate.report.evaluate` on the held-out part.
        calibration_records, held_out: the two parts.
    """

    calibrated: Recalibrated
    report: dict[str, Any]
    calibration_records: list[RunRecord] = field(default_factory=list)
    held_out: list[RunRecord] = field(default_factory=list)

    @property
    def table(self) -> ThresholdTable:
        return self.calibrated.table

    def record(self, fraction: float, seed: int) -> dict[str, Any]:
        """What the bundle's calibration record keeps of the check (no run ids)."""
        m = self.report["monitor"]
        auroc = (self.report.get("auroc") or {}).get("monitor") or {}
        return {
            "held_out_fraction": fraction,
            "seed": seed,
            "calibration_runs": len(self.calibration_records),
            "held_out_runs": len(self.held_out),
            "held_out_resolved": m["resolved_runs"],
            "target_fpr": self.report["target_fpr"],
            "realized_fpr": m["realized_fpr"],
            "recall": m["recall"],
            "token_savings": m["token_savings"],
            "auroc": auroc,
            **self._served(),
        }

    def _served(self) -> dict[str, Any]:
        """What the checked bundle serves, where the per-group choice serves other candidates
        than the LM probe (the report's "served" row): its realized FPR and savings too."""
        sel = (self.report.get("calibrated_baselines") or {}).get("selected")
        if not sel:
            return {}
        chosen = {g: c.get("chosen") for g, c in (sel.get("choice") or {}).items()}
        return {
            "served": {
                "scorer_per_group": chosen,
                "realized_fpr": sel["realized_fpr"],
                "recall": sel["recall"],
                "token_savings": sel["token_savings"],
            }
        }


def check_calibration(
    old: ThresholdTable | None,
    calib: Sequence[RunRecord],
    held_out: Sequence[RunRecord],
    cfg: ThresholdConfig,
    *,
    schedule: Schedule,
    target: float,
    replace: bool = False,
    runs: Sequence[Trajectory] | None = None,
    candidates: dict[str, Any] | None = None,
) -> CheckResult:
    """Calibrate on `calib` (as `failfast calibrate`), evaluate `held_out` at `target` under the
    result. `runs` (the transcripts) add the rule baselines, their Budget fitted on the
    calibration part's instances; LoopBrake is calibrated on the calibration part.
    `candidates`: the bundle's candidates.json; where the records carry the candidates'
    scores, the per-group choice is re-made on `calib` as `failfast calibrate` makes it
    (training.evaluate.recalibrate_choice), and the held-out runs are served by it.

    Raises:
        ValueError: from `recalibrate` (no records, mismatched grouping).
    """
    from training.evaluate.inputs import EvalInputs, rule_inputs

    result = recalibrate(old, calib, cfg, schedule=schedule, replace=replace)
    served = None
    if candidates is not None:
        from training.evaluate.recalibrate_choice import recalibrate_candidates

        served, choice = recalibrate_candidates(
            candidates, calib, cfg, schedule, list(result.groups), replace=replace
        )
        served = served if choice else None  # no candidate scores: as before
    inputs = EvalInputs(
        list(held_out),
        result.table,
        calibration=list(calib),
        candidates=served,
        as_served=served is not None,
    )
    if runs:
        inputs.signals, inputs.budgets = rule_inputs(runs, held_out, result.table.group_by)
    report = inputs.evaluate(EvalConfig(target_fpr=target))
    return CheckResult(result, report, list(calib), list(held_out))
