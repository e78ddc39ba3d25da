"""What an evaluation reads (records, thresholds, calibration runs, the rules' inputs) and where
its report goes (JSON, markdown, plots).

`failfast evaluate` finds its inputs with `find_inputs`, in this order:
- records: the given parquet files; else the transcripts scored with the bundle (score_data);
  else the saved test split TRAIN_DIR/records/test.parquet (TRAIN_DIR: the given one, else the
  bundle's folder or its parent when it holds records/).
- thresholds: the bundle's monitor.json; else TRAIN_DIR/thresholds.json; else picked now on
  TRAIN_DIR/records/val.parquet with TRAIN_DIR/config.yaml. Never on the evaluated runs.
- rule baselines (transcript-analyser rule, stuck patterns, p95 Budget) need the transcripts:
  the runs given as data, matched by run id. The Budget is fitted per agent on the labelled runs
  of instances not evaluated.
`failfast demo` evaluates its own training output with `train_dir_inputs`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from monitor.thresholds import ThresholdTable
from training.config import EvalConfig
from training.data.records import RunRecord, load_records, records_from_runs

if TYPE_CHECKING:
    from serving.scorer import Scorer

log = logging.getLogger(__name__)


@dataclass
class EvalInputs:
    """Everything `training.evaluate.report.evaluate` reads besides its config.

    Attributes:
        records: the evaluated runs.
        thresholds: the monitor's thresholds (picked on validation).
        calibration: validation records (LoopBrake's calibration); None skips LoopBrake.
        signals: run_id -> signal matrix of the evaluated runs; None skips the rule baselines.
        budgets: group -> p95 Budget fitted on runs of instances not evaluated.
    """

    records: list[RunRecord]
    thresholds: ThresholdTable
    calibration: list[RunRecord] | None = None
    signals: dict[str, np.ndarray] | None = None
    budgets: dict[str, Any] | None = None
    candidates: dict[str, Any] | None = None
    """A bundle's candidates.json: the calibrated baselines use it when there are no calibration
    records; its known-task choice is reported either way (training.evaluate.known_tasks)."""
    as_served: bool = False
    """Use `candidates` (thresholds and choice) even with calibration records: a candidates.json
    re-made on them (the check of `failfast calibrate`)."""

    def evaluate(self, cfg: EvalConfig) -> dict[str, Any]:
        """The report (training.evaluate.report.evaluate) of these inputs under `cfg`."""
        from training.evaluate.report import evaluate

        return evaluate(
            self.records,
            self.thresholds,
            config=cfg,
            calibration=self.calibration,
            signals=self.signals,
            budgets=self.budgets,
            candidates=self.candidates,
            as_served=self.as_served,
        )


def rule_inputs(
    runs: Sequence[Any], records: Sequence[RunRecord], group_by: str = "agent"
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """What the rule baselines need from the transcripts: the signal matrix of each evaluated run,
    and per group (agent or source, as the thresholds are keyed) a p95 Budget fitted on the runs
    of instances NOT evaluated."""
    from monitor.halts import fit_budget
    from monitor.signals import signal_matrix

    ids = {r.run_id for r in records}
    insts = {r.instance_id for r in records}
    signals = {t.id: signal_matrix(t) for t in runs if t.id in ids}
    fit_on: dict[str, list[Any]] = {}
    for t in runs:
        if t.instance_id not in insts:
            fit_on.setdefault(str(getattr(t, group_by)), []).append(t)
    return signals, {a: fit_budget(ts)[0] for a, ts in fit_on.items()}


def _read_thresholds(path: Path) -> ThresholdTable:
    return ThresholdTable.model_validate(json.loads(path.read_text()))


def _validation(train_dir: Path | None) -> list[RunRecord] | None:
    """The calibration records of a training output: validation, plus the training runs scored
    out of fold when it saved them (the runs the monitor's thresholds were calibrated on)."""
    val = train_dir / "records" / "val.parquet" if train_dir else None
    if not (val and val.is_file()):
        return None
    oof = val.with_name("train_oof.parquet")
    return load_records(val) + (load_records(oof) if oof.is_file() else [])


def train_dir_inputs(train_dir: str | Path, runs: Sequence[Any] | None) -> EvalInputs:
    """The saved test split of a `failfast train` output, its thresholds.json and validation
    records, and the rules' inputs from `runs` (the labelled runs it trained on; None: no rules)."""
    train_dir = Path(train_dir)
    th_path = train_dir / "thresholds.json"
    if not th_path.is_file():
        raise FileNotFoundError(f"{th_path}: no thresholds.json (was training cut short?)")
    inputs = EvalInputs(
        load_records(train_dir / "records" / "test.parquet"),
        _read_thresholds(th_path),
        _validation(train_dir),
    )
    cands = train_dir / "candidates.json"
    if cands.is_file():  # its known-task choice is reported (training.evaluate.known_tasks)
        inputs.candidates = json.loads(cands.read_text())
    if runs:
        labelled = [t for t in runs if t.resolved is not None and t.steps]
        inputs.signals, inputs.budgets = rule_inputs(
            labelled, inputs.records, inputs.thresholds.group_by
        )
    return inputs


def _find_train_dir(bundle: Path | None, train_dir: Path | None) -> Path | None:
    if train_dir is not None or bundle is None:
        return train_dir
    return next((d for d in (bundle, bundle.parent) if (d / "records").is_dir()), None)


def _find_thresholds(bundle: Path | None, train_dir: Path | None) -> ThresholdTable:
    if bundle is not None and (bundle / "monitor.json").is_file():
        th = json.loads((bundle / "monitor.json").read_text()).get("thresholds")
        if th:
            return ThresholdTable.model_validate(th)
    if train_dir and (train_dir / "thresholds.json").is_file():
        return _read_thresholds(train_dir / "thresholds.json")
    val = _validation(train_dir)
    if train_dir and val is not None:
        from training.calibrate.thresholds import ThresholdPicker
        from training.config import load_pipeline_config

        log.warning(
            "no thresholds.json: picking thresholds now on %s's validation records", train_dir
        )
        config = train_dir / "config.yaml"
        cfg = load_pipeline_config(config if config.is_file() else None)
        return ThresholdPicker(cfg.thresholds, schedule=cfg.policy).fit(val).thresholds_
    raise SystemExit(
        "evaluate: no thresholds found (give --bundle or --train-dir with thresholds.json)"
    )


def score_with_bundle(
    bundle: str | Path, runs: Sequence[Any], *, scorer: Scorer | None = None, progress: bool = True
) -> list[RunRecord]:
    """RunRecords of labelled runs scored with an exported bundle and the baselines saved in it
    (`scorer`: the bundle already loaded; `progress`: a bar on stderr)."""
    from tqdm import tqdm

    from serving.scorer import Scorer
    from training.baselines.learned import baseline_run_scores, load_baselines

    scorer = scorer or Scorer.load(bundle)
    pipes = load_baselines(Path(bundle) / "baselines")
    out = []
    for t in tqdm(runs, desc="scoring runs", unit="run", disable=not progress):
        # the LM probe ("monitor") and, where the bundle has one, the second probe
        scores = {k: np.asarray(v) for k, v in scorer.score_heads(t).items()}
        if not len(scores["monitor"]):
            continue
        try:
            scores.update(baseline_run_scores(pipes, scorer.featuriser, t))
        except Exception as e:  # a baseline failing must not lose the monitor's scores
            log.warning("%s: baseline scores skipped: %s", t.id, e)
        enc = sum(len(w.ids) for w in scorer.featuriser.windows(t))
        out += records_from_runs([t], {k: [v] for k, v in scores.items()}, [enc])
    return out


def find_inputs(
    *,
    bundle: str | None = None,
    train_dir: str | None = None,
    records: Sequence[str] | None = None,
    data: Sequence[str] | None = None,
    labels: Sequence[str] = (),
    score_data: bool = False,
) -> EvalInputs:
    """The inputs of `failfast evaluate` from its options (order in the module docstring)."""
    from training.data.runs import load_runs

    b = Path(bundle) if bundle else None
    tdir = _find_train_dir(b, Path(train_dir) if train_dir else None)
    thresholds = _find_thresholds(b, tdir)
    runs = [t for t in load_runs(data, labels=labels) if t.resolved is not None] if data else None
    if data and not runs:
        raise SystemExit(
            "evaluate: no run under --data has a verdict; name its label file with --labels FILE"
        )
    if records:
        recs = [r for f in records for r in load_records(f)]
    elif score_data:
        if not (bundle and runs):
            raise SystemExit("evaluate: --score-data needs --bundle and --data")
        recs = score_with_bundle(bundle, runs)
    elif tdir and (tdir / "records" / "test.parquet").is_file():
        recs = load_records(tdir / "records" / "test.parquet")
    else:
        raise SystemExit(
            "evaluate: no records (give --records, --train-dir, or --bundle --data --score-data)"
        )
    signals, budgets = rule_inputs(runs, recs, thresholds.group_by) if runs else (None, None)
    cands = b / "candidates.json" if b is not None else None
    shipped = json.loads(cands.read_text()) if cands is not None and cands.is_file() else None
    return EvalInputs(recs, thresholds, _validation(tdir), signals, budgets, shipped)


def write_report(
    result: dict[str, Any],
    records: Sequence[RunRecord],
    cfg: EvalConfig,
    *,
    json_path: str | Path | None = None,
    plots_dir: str | Path | None = None,
    thresholds: ThresholdTable | None = None,
) -> str:
    """Write the report as JSON (+ its markdown table beside it, and with `thresholds` the plain
    summary under it) and plots; returns the table."""
    from training.evaluate.report import markdown_table

    table = markdown_table(result)
    if json_path is not None:
        out = Path(json_path)
        out.parent.mkdir(parents=True, exist_ok=True)
        from monitor.atomic import atomic_write_text  # each file whole or not at all

        md = table
        if thresholds is not None:
            from training.evaluate.summary import plain_summary

            md += (
                "\n## In plain words\n\n```\n"
                + plain_summary(result, records, thresholds)
                + "```\n"
            )
        atomic_write_text(out, json.dumps(result, indent=1, default=float) + "\n")
        atomic_write_text(out.with_suffix(".md"), md)
    if plots_dir is not None:
        from training.evaluate.plots import write_plots

        scorers = [cfg.scorer, *(n for n in cfg.score_baselines if n in result["baselines"])]
        write_plots(records, result, plots_dir, scorers=scorers, n_runs=cfg.n_plot_runs)
    return table
