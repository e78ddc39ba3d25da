"""Stop-rule variants compared as shipped on a cross-fitted view's records (no refitting).

    failfast crossfit --rereport --stop-rules base persist3 ... --data - --out XFIT --views instance

Each variant changes how scores become stops, never the models: the margin the targets are
fitted at (fixed, or relaxed with the group's size: `adaptiveC`), the persistence of the stop
rule (k consecutive checks over the threshold), `min_steps`, how often a score is checked
(`every`), or the scores themselves (the running mean of the last m scores, or the logit less
b log(step), a threshold that rises with the step: `tiltB`); `choiceN` keeps the stops and
averages the per-group choice over N draws of its inner folds. Every candidate and the per-group
choice are then calibrated and judged exactly as `failfast crossfit`'s `calibrated` section does
(training.evaluate.candidates), on the view's folds, so the variants compare on the same runs
with the same intervals. Use it on the K-fold views (instance, repo): the shift view checks the
FPR promise of what the instance view prefers.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from training.data.records import RunRecord

log = logging.getLogger(__name__)
LEARNED = ("monitor", "signals_lr", "tfidf_lr")


def running_mean(x: np.ndarray, m: int) -> np.ndarray:
    """Mean of the last m scores at each step (fewer at the start)."""
    c = np.cumsum(np.concatenate([[0.0], np.asarray(x, dtype=np.float64)]))
    k = np.arange(1, len(x) + 1)
    lo = np.maximum(0, k - m)
    return (c[k] - c[lo]) / (k - lo)


def tilted(x: np.ndarray, b: float) -> np.ndarray:
    """sigmoid(logit(s_k) - b log k) at each step k = 1..n: a threshold on these scores is a
    threshold on the logit that rises by b per e-fold of the run's length (b < 0: falls)."""
    from serving.numeric import logit, sigmoid

    return sigmoid(logit(x) - b * np.log(np.arange(1, len(x) + 1)))


def _map_scores(records: Sequence[RunRecord], f: Callable[[np.ndarray], np.ndarray]) -> list:
    return [
        dataclasses.replace(
            r, scores={n: (f(s) if n in LEARNED else s) for n, s in r.scores.items()}
        )
        for r in records
    ]


VARIANTS: dict[str, dict[str, Any]] = {
    "base": {},
    # marginX: every group fitted at target / X (the config's adaptive_margin off)
    "margin2": {"margin": 2.0, "adaptive_margin": None},
    "margin1.5": {"margin": 1.5, "adaptive_margin": None},
    "margin1.75": {"margin": 1.75, "adaptive_margin": None},
    "margin1": {"margin": 1.0, "adaptive_margin": None},
    # adaptiveC: a group with n resolved calibration runs at target / min(2, 1 + C / sqrt(n))
    "adaptive4": {"margin": 2.0, "adaptive_margin": 4.0},
    "adaptive5": {"margin": 2.0, "adaptive_margin": 5.0},
    "adaptive6": {"margin": 2.0, "adaptive_margin": 6.0},
    "adaptive8": {"margin": 2.0, "adaptive_margin": 8.0},
    "adaptive10": {"margin": 2.0, "adaptive_margin": 10.0},
    "persist1": {"persist": 1},
    "persist3": {"persist": 3},
    "min_steps5": {"min_steps": 5},
    "every2": {"every": 2},
    "every3": {"every": 3},
    "every2_persist1": {"every": 2, "persist": 1},
    "choice3": {"repeats": 3},
    "choice5": {"repeats": 5},
    "mean3": {"scores": lambda s: running_mean(s, 3)},
    "mean5": {"scores": lambda s: running_mean(s, 5)},
    "mean3_persist1": {"scores": lambda s: running_mean(s, 3), "persist": 1},
    # tiltB: the learned scores' logits less B log(step), so the threshold rises with the step
    "tilt-0.25": {"scores": lambda s: tilted(s, -0.25)},
    "tilt0.25": {"scores": lambda s: tilted(s, 0.25)},
    "tilt0.5": {"scores": lambda s: tilted(s, 0.5)},
    "tilt1": {"scores": lambda s: tilted(s, 1.0)},
}


def run_variant(
    name: str,
    records: Sequence[RunRecord],
    cfg: Any,
    fold: np.ndarray | None,
    n_boot: int,
    *,
    pairs: Sequence[tuple[Sequence[RunRecord], Sequence[RunRecord]]] | None = None,
) -> dict[str, Any]:
    """The `calibrated` report of one variant (training.evaluate.candidates): on the K folds
    `fold` of `records`, or (a view without K folds) on its (calibration, test) `pairs`."""
    from training.evaluate.candidates import crossfit_candidates, pair_candidates

    v = VARIANTS[name]
    tcfg = cfg.thresholds.model_copy(
        update={k: v[k] for k in ("margin", "adaptive_margin") if k in v}
    )
    sched = cfg.policy.schedule().model_copy(
        update={k: v[k] for k in ("persist", "min_steps", "every") if k in v}
    )
    if pairs is not None:
        if "scores" in v:
            pairs = [(_map_scores(c, v["scores"]), _map_scores(t, v["scores"])) for c, t in pairs]
        return pair_candidates(
            pairs,
            tcfg,
            sched,
            seed=cfg.data.split_seed,
            n_boot=n_boot,
            choice_repeats=v.get("repeats", 1),
        )
    recs = _map_scores(records, v["scores"]) if "scores" in v else list(records)
    return crossfit_candidates(
        recs,
        tcfg,
        sched,
        fold=fold,
        seed=cfg.data.split_seed,
        n_boot=n_boot,
        choice_repeats=v.get("repeats", 1),
    )


def summary(rep: dict[str, Any]) -> dict[str, Any]:
    """Per target: mean per-agent saved [CI] and max agent FPR of every scorer."""
    out: dict[str, Any] = {}
    for key, per in rep["mean_per_agent"].items():
        out[key] = {
            n: {"saved": v["saved"], "ci": v["saved_ci"], "fpr_max": v["fpr_max"]}
            for n, v in per.items()
        }
    out["live_auroc"] = rep["mean_per_agent_live_auroc"]
    return out


def line(name: str, row: dict[str, Any]) -> str:
    """One markdown row: per target, the monitor's and the per-group choice's mean per-agent
    saved [CI] and the choice's worst agent FPR."""
    cells = []
    for key in ("0.05", "0.1"):
        if key not in row:
            continue
        m, c = row[key]["monitor"], row[key]["selected_per_target"]
        cells += [
            f"{100 * m['saved']:.1f}",
            f"{100 * c['saved']:.1f} [{100 * c['ci'][0]:.1f}, {100 * c['ci'][1]:.1f}]",
            f"{100 * c['fpr_max']:.1f}",
        ]
    return f"| {name} | " + " | ".join(cells) + " |"


def compare(
    cfg: Any, folder: Path, variants: Sequence[str], *, folds: int, n_boot: int = 200
) -> str:
    """Run `variants` on FOLDER/records.parquet (a view of `failfast crossfit`: its K folds, or
    the calibration records each pair of a time or benchmark view kept), add them to
    FOLDER/stop_rules.json (written whole after each) and return the markdown table."""
    from monitor.atomic import atomic_write_text
    from training.data.records import load_records
    from training.evaluate.views import view_calibration, view_folds

    if not (folder / "records.parquet").is_file():
        raise ValueError(f"{folder}: no records.parquet (write it with `failfast crossfit` first)")
    records = load_records(folder / "records.parquet")
    fold = view_folds(folder.name, records, folds, cfg.data.split_seed)
    pairs = view_calibration(folder, records) if fold is None else None
    if fold is None and pairs is None:
        raise ValueError(
            f"{folder}: {folder.name} is neither a K-fold view (instance, repo) nor a view that "
            "kept its calibration records (calibration-<i>.parquet, pairs.json: cross-fit it again)"
        )
    path = folder / "stop_rules.json"
    done: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    for name in variants:
        t = time.perf_counter()
        done[name] = summary(run_variant(name, records, cfg, fold, n_boot, pairs=pairs))
        done[name]["seconds"] = round(time.perf_counter() - t, 1)
        atomic_write_text(path, json.dumps(done, indent=1))
        log.info("%s: %s", name, line(name, done[name]))
    head = [
        f"## Stop-rule variants, {folder.name} view (mean per-agent tokens saved %, [CI])",
        "",
        "| variant | 5% monitor | 5% choice | 5% choice max FPR | 10% monitor | 10% choice | "
        "10% choice max FPR |",
        "|---|---:|---|---:|---:|---|---:|",
    ]
    md = "\n".join(head + [line(n, r) for n, r in done.items()]) + "\n"
    atomic_write_text(folder / "stop_rules.md", md)
    return md
