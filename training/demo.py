"""`failfast demo`: the whole pipeline in one command, the way a new user meets it.

Stages, each timed: ingest (monitor.corpus.ingest into OUT/corpus; prints the per-source table),
train (training.train.main on that corpus: splits, features, probe, baselines, records, metrics,
thresholds.json, OUT/bundle), evaluate (training.eval_report.evaluate on the saved test split with
the thresholds picked on validation, at each target FPR: JSON, markdown and plots under OUT/eval/),
and a results table (monitor vs baselines vs oracle per source and overall, one column group per
target FPR). Nothing needs a manual step in between.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from training.config import PipelineConfig

log = logging.getLogger(__name__)
T = TypeVar("T")
DEMO_TARGETS = (0.05, 0.10)


def _timed(
    times: dict[str, float], name: str, fn: Callable[[], T], say: Callable[[str], None]
) -> T:
    say(f"== {name}")
    t = time.perf_counter()
    out = fn()
    times[name] = time.perf_counter() - t
    say(f"== {name}: {times[name]:.1f} s")
    return out


def target_name(target: float) -> str:
    """File stem of one target FPR's report: 0.05 -> 'fpr05', 0.1 -> 'fpr10'."""
    return f"fpr{round(100 * target):02d}"


def evaluate_train_dir(
    train_dir: str | Path,
    runs: Sequence[Any] | None,
    *,
    targets: Sequence[float] = DEMO_TARGETS,
    out_dir: str | Path | None = None,
    eval_overrides: Mapping[str, Any] | None = None,
    plots: bool = True,
) -> dict[str, dict[str, Any]]:
    """Evaluate a training output on its saved test split at each target FPR.

    Does what `failfast evaluate --train-dir TRAIN_DIR --data ...` does, with the runs already in
    memory: thresholds from TRAIN_DIR/thresholds.json (picked on validation), LoopBrake calibrated
    on records/val.parquet, rule baselines from the runs' signals, the p95 Budget fitted per agent
    on runs of instances not in the test split.

    Args:
        train_dir: a `failfast train` output folder.
        runs: the labelled runs trained on (for the rule baselines); None skips those baselines.
        targets: run-level FPR targets.
        out_dir: write `fprNN.json`, `fprNN.md` and `plots_fprNN/` here (None: write nothing).
        eval_overrides: EvalConfig fields (besides target_fpr).
        plots: write the plots.

    Returns:
        target name (`fpr05`, ...) -> the evaluate() report.
    """
    from training.eval_report import evaluate, markdown_table, rule_inputs
    from training.evaluation import EvalConfig
    from training.records import load_records

    train_dir = Path(train_dir)
    th_path = train_dir / "thresholds.json"
    if not th_path.is_file():
        raise FileNotFoundError(f"{th_path}: no thresholds.json (was training cut short?)")
    thresholds = json.loads(th_path.read_text())
    records = load_records(train_dir / "records" / "test.parquet")
    val_path = train_dir / "records" / "val.parquet"
    calibration = load_records(val_path) if val_path.is_file() else None
    signals, budgets = None, None
    if runs:
        labelled = [t for t in runs if t.resolved is not None and t.steps]
        signals, budgets = rule_inputs(labelled, records)
    results: dict[str, dict[str, Any]] = {}
    for target in targets:
        cfg = EvalConfig(**{**dict(eval_overrides or {}), "target_fpr": target})
        res = evaluate(
            records,
            thresholds,
            config=cfg,
            calibration=calibration,
            signals=signals,
            budgets=budgets,
        )
        name = target_name(target)
        results[name] = res
        if out_dir is None:
            continue
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.json").write_text(json.dumps(res, indent=1, default=float) + "\n")
        (out / f"{name}.md").write_text(markdown_table(res))
        if plots:
            from training.plots import write_plots

            scorers = [cfg.scorer, *(n for n in cfg.score_baselines if n in res["baselines"])]
            write_plots(
                records, res, out / f"plots_{name}", scorers=scorers, n_runs=cfg.n_plot_runs
            )
    return results


def _pct(x: Any) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def results_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """A markdown table: per source and overall, one row per rule (monitor, baselines, oracle);
    for each target FPR its realized FPR, recall and token savings (%), then resolution after
    cold restarts at the first target."""
    names = list(results)
    first = results[names[0]]
    head = ["scope", "rule", "runs"]
    for n in names:
        t = results[n]["target_fpr"]
        head += [f"FPR@{t:g}", f"recall@{t:g}", f"saved@{t:g}"]
    head += ["resolved before", f"after restart@{results[names[0]]['target_fpr']:g}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    scopes = [*first["per_source"], "overall"]
    for scope in scopes:
        secs = {
            n: (results[n] if scope == "overall" else results[n]["per_source"][scope])
            for n in names
        }
        rules = ["monitor", *secs[names[0]]["baselines"], "oracle"]
        for rule in rules:
            cells = [scope, rule]
            runs = None
            for n in names:
                sec = secs[n]
                m = sec.get(rule) if rule in ("monitor", "oracle") else sec["baselines"].get(rule)
                if m is None:
                    cells += ["-", "-", "-"]
                    continue
                runs = m["runs"]
                cells += [_pct(m["realized_fpr"]), _pct(m["recall"]), _pct(m["token_savings"])]
            m0 = (
                secs[names[0]].get(rule)
                if rule in ("monitor", "oracle")
                else secs[names[0]]["baselines"].get(rule)
            ) or {}
            cells.insert(2, str(runs if runs is not None else "-"))
            cells += [_pct(m0.get("resolution_before")), _pct(m0.get("resolution_after_restart"))]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_demo(
    cfg: PipelineConfig,
    data: Sequence[str | Path],
    out: str | Path,
    *,
    targets: Sequence[float] = DEMO_TARGETS,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Ingest, train, evaluate and report; returns {"timings": ..., "results": ...}.

    Writes OUT/corpus/, the training output in OUT/ (records/, thresholds.json, bundle/, ...),
    OUT/eval/ (fprNN.json/.md, plots_fprNN/, results.md) and OUT/demo.json (timings and paths).
    """
    from monitor.corpus import ingest
    from training.data import load_runs
    from training.train import format_metrics
    from training.train import main as train_main

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    corpus = out / "corpus"
    summary = _timed(
        times, "ingest", lambda: ingest([Path(p) for p in data], corpus, progress=True), say
    )
    say(summary.table())
    say(f"{summary.runs} runs, {len(summary.problems)} problems -> {corpus}")
    if summary.runs == 0:
        raise ValueError(f"no run could be read from {', '.join(map(str, data))}")
    metrics = _timed(times, "train", lambda: train_main(cfg, [corpus], out), say)
    say(format_metrics(metrics))
    if not (out / "thresholds.json").is_file():
        raise FileNotFoundError(
            f"{out / 'thresholds.json'} was not written: set train.bundle=true to pick thresholds"
        )

    def _eval() -> dict[str, dict[str, Any]]:
        runs = load_runs([corpus])
        return evaluate_train_dir(
            out,
            runs,
            targets=targets,
            out_dir=out / "eval",
            eval_overrides=_eval_overrides(cfg),
        )

    results = _timed(times, "evaluate", _eval, say)
    table = results_table(results)
    (out / "eval" / "results.md").write_text(
        "Test split; thresholds picked on the validation split; numbers in %.\n\n" + table
    )
    times["total"] = time.perf_counter() - t0
    say("\nResults on the held-out test split (thresholds picked on validation; numbers in %):")
    say(table)
    say("wall time: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
    report = {
        "timings_s": {k: round(v, 2) for k, v in times.items()},
        "train_seconds": metrics.get("seconds"),
        "out": str(out),
        "reports": {n: str(out / "eval" / f"{n}.json") for n in results},
        "bundle": str(out / "bundle"),
    }
    (out / "demo.json").write_text(json.dumps(report, indent=1) + "\n")
    say(f"wrote {out} (bundle: {out / 'bundle'}, reports and plots: {out / 'eval'})")
    return {"timings": times, "results": results}


def _eval_overrides(cfg: PipelineConfig) -> dict[str, Any]:
    """The config's `evaluate` section as EvalConfig fields (target_fpr is set per target)."""
    sec = cfg.evaluate
    data = sec.model_dump() if hasattr(sec, "model_dump") else dict(sec or {})
    data.pop("target_fpr", None)
    return data
