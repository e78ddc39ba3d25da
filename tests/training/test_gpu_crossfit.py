"""The GPU crossfit (training.pipeline.gpu_crossfit) end to end on the CPU: tiny model, and the
script's --dry-run on the real model and data (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.training.conftest import make_runs
from tests.training.test_pipeline import tiny_config
from training.data.records import RunRecord, load_records

ROOT = Path(__file__).resolve().parents[2]


def _tiny(tiny_model_dir, tmp_path):
    return tiny_config(
        tiny_model_dir,
        tmp_path,
        model={"head": "lora"},
        train={
            "bundle": False,
            "lora_top_layers": 1,
            "max_steps": 2,
            "batch_size": 2,
            "probe_C": [0.1, 1.0],  # two pairs: the out-of-fold selection runs too
            "probe_hidden_scale": [0.1],
        },
        evaluate={"n_boot": 20},
    )


def test_gpu_crossfit_scores_every_run_once_and_writes_the_headline(tiny_model_dir, tmp_path):
    from training.pipeline.gpu_crossfit import run_gpu_crossfit

    runs = make_runs(24, seed=3)
    cfg = _tiny(tiny_model_dir, tmp_path)
    res = run_gpu_crossfit(cfg, runs, tmp_path / "g", folds=3, budget_s=1e6)
    recs = load_records(tmp_path / "g" / "instance" / "records.parquet")
    assert sorted(r.run_id for r in recs) == sorted(r.id for r in runs)  # each run scored once
    assert set(recs[0].scores) == {"monitor", "signals_lr", "tfidf_lr", "step_limit"}
    meta = res["meta"]
    assert meta["aborted"] is None
    assert len(meta["pairs"]) == 3
    assert meta["device"]["cuda"] in (True, False)
    for p in meta["pairs"]:  # tuning, calibration and test runs are disjoint and cover the pair
        assert min(p["tune_runs"], p["calibration_runs"], p["windows"]) > 0
    assert sum(p["test_runs"] for p in meta["pairs"]) == len(runs)
    head = json.loads((tmp_path / "g" / "report.json").read_text())
    assert set(head["agents"]) == {"alpha", "beta"}
    alpha = head["agents"]["alpha"]
    assert set(alpha["live_auroc"]["monitor"]) == {"5", "10"}
    assert set(alpha["saved"]) == {"0.05", "0.1"}
    md = (tmp_path / "g" / "report.md").read_text()
    assert "mean per agent" in md
    assert "full run" in md
    full = json.loads((tmp_path / "g" / "instance" / "report.json").read_text())
    assert "calibrated" in full  # the as-shipped candidates, as `failfast crossfit` reports them


def test_gpu_crossfit_stops_within_budget_and_writes_the_pairs_done(tiny_model_dir, tmp_path):
    from training.pipeline.gpu_crossfit import run_gpu_crossfit

    runs = make_runs(24, seed=4)
    cfg = _tiny(tiny_model_dir, tmp_path)
    res = run_gpu_crossfit(cfg, runs, tmp_path / "g", folds=3, budget_s=0.001)
    meta = res["meta"]
    assert len(meta["pairs"]) == 1
    assert "exceeds the 0 s budget" in meta["aborted"]
    recs = load_records(tmp_path / "g" / "instance" / "records.parquet")
    assert len(recs) == meta["pairs"][0]["test_runs"] < len(runs)
    assert "PARTIAL" in (tmp_path / "g" / "report.md").read_text()


def test_live_auroc_counts_only_runs_still_going():
    from training.pipeline.gpu_crossfit import live_auroc

    def rec(i, n, resolved, s):
        return RunRecord(f"r{i}", f"i{i}", "a", "src", resolved, np.ones(n), {"m": np.full(n, s)})

    recs = [
        rec(0, 6, False, 0.9),
        rec(1, 6, True, 0.1),
        rec(2, 5, False, 0.0),
        rec(3, 9, True, 0.2),
    ]
    out = live_auroc(recs, "m", 5)  # run 2 ended at step 5: nothing left to save there
    assert out == {"auroc": 1.0, "runs": 3}
    assert live_auroc(recs, "m", 6) == {"auroc": None, "runs": 1}  # one class left


@pytest.mark.slow
@pytest.mark.data
def test_gpu_crossfit_script_dry_run_on_the_real_model(data_dir, tmp_path):
    out = tmp_path / "dry"
    env = {**os.environ, "PYTHON": sys.executable}
    p = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_crossfit.sh"), "--dry-run", str(data_dir), str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.startswith("device: ")
    assert "DRY RUN" in p.stdout
    head = json.loads((out / "report.json").read_text())
    assert head["meta"]["dry_run"]
    assert 36 <= head["meta"]["runs"] <= 44  # stratified: about 40
    assert len(head["meta"]["pairs"]) == 2


def test_gpu_config_tunes_every_layer_on_every_run():
    from training.config import load_pipeline_config

    cfg = load_pipeline_config(ROOT / "configs" / "gpu-crossfit.yaml")
    assert cfg.model.n_layers is None  # all 30 layers kept
    assert cfg.model.head == "lora"
    assert cfg.train.lora_top_layers >= 30  # adapters on every layer
    assert {"q_proj", "v_proj", "gate_proj", "down_proj"} <= set(cfg.train.lora_targets)
    assert cfg.data.train_max_runs is None  # every run
    assert cfg.train.bf16
    quick = load_pipeline_config(ROOT / "configs" / "quick.yaml")  # comparable to its crossfit
    assert cfg.featurise == quick.featurise
    assert cfg.thresholds == quick.thresholds
    assert cfg.policy == quick.policy
    assert cfg.train.tfidf_text == quick.train.tfidf_text  # the same baselines, by `extends`
