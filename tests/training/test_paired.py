"""Two cross-fits of the same runs compared run by run (training.experiments.paired)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from training.config import load_pipeline_config
from training.data.records import RunRecord, save_records
from training.experiments.paired import compare_view, main

from .test_candidates import _runs


def _folder(root: Path, records: list[RunRecord]) -> Path:
    (root / "instance").mkdir(parents=True)
    save_records(root / "instance" / "records.parquet", records)
    return root


@pytest.fixture(scope="module")
def cfg():  # type: ignore[no-untyped-def]
    return load_pipeline_config("configs/quick.yaml", ["evaluate.n_boot=50"])


def _blind(records: list[RunRecord], seed: int) -> list[RunRecord]:
    """The same runs with the monitor's scores replaced by noise."""
    rng = np.random.default_rng(seed)
    return [
        dataclasses.replace(r, scores={**r.scores, "monitor": rng.uniform(0.2, 0.6, r.n_steps)})
        for r in records
    ]


def test_a_cross_fit_against_itself_differs_by_nothing(tmp_path: Path, cfg) -> None:  # type: ignore[no-untyped-def]
    recs = _runs("a", 160, informative="monitor", seed=0) + _runs(
        "b", 160, informative="monitor", seed=1
    )
    a = _folder(tmp_path / "a", recs)
    b = _folder(tmp_path / "b", recs)
    res = compare_view(cfg, a, b, "instance", folds=5, draws=40)
    assert res["runs"] == 320
    assert res["only_a"] == res["only_b"] == 0
    for per in res["saved"].values():
        for c in per.values():
            assert c["delta"] == 0
            assert c["ci"] == [0.0, 0.0]
    live = res["live_auroc"]["step:5"]
    assert live["a"] == live["b"] > 0.8
    assert live["ci"] == [0.0, 0.0]
    # the same records make the same served choice in every fold, group and target
    assert set(res["chosen"]) == {f"{t:g}" for t in cfg.thresholds.targets}
    for groups in res["chosen"].values():
        assert groups
        for c in groups.values():
            assert c["a"] == c["b"]
            assert sum(c["a"].values()) == 5


def test_a_blind_monitor_loses_with_an_interval_below_zero(tmp_path: Path, cfg) -> None:  # type: ignore[no-untyped-def]
    recs = _runs("a", 160, informative="monitor", seed=0) + _runs(
        "b", 160, informative="monitor", seed=1
    )
    a = _folder(tmp_path / "a", recs)
    b = _folder(tmp_path / "b", _blind(recs, 3)[:300])  # and 20 runs only A scored
    assert main([str(a), str(b), "--config", "configs/quick.yaml", "--draws", "40"]) == 0
    import json

    (res,) = json.loads((a / "paired-b.json").read_text())
    assert res["runs"] == 300
    assert res["only_a"] == 20
    live = res["live_auroc"]["step:5"]
    assert live["b"] < 0.65 < live["a"]
    assert live["ci"][1] < 0
    mon = res["saved"]["0.1"]["monitor"]
    assert mon["delta"] < 0
    assert mon["ci"][1] < 0
    md = (a / "paired-b.md").read_text()
    assert "monitor AUROC among runs live at step:5" in md
    # Per agent, the choice a bundle serves (made per target): with the informative monitor it
    # beats every baseline on both agents at 5%, 10% and 25%; with it blinded it falls back to
    # the length rules or a stack of length and noise, tied with a baseline on at least one
    # agent at some of them (failing runs are long here, so length alone ranks well).
    counts = res["agents_above_baselines"]
    assert all(counts[t]["a"] == 2 for t in ("0.05", "0.1", "0.25"))
    assert sum(counts[t]["b"] for t in counts) < sum(counts[t]["a"] for t in counts)
    served = res["per_agent"]["0.1"]["a"]["a"]
    assert set(served["vs"]) == {"step_limit", "token_limit", "signals_lr", "tfidf_lr"}
    assert all(c["ci"][0] > 0 for c in served["vs"].values())
    tied = [per["b"] for per in res["per_agent"]["0.25"].values() if not per["b"]["above_all"]]
    assert tied
    assert min(c["ci"][0] for c in tied[0]["vs"].values()) <= 0
    # which candidate each fold's served choice took, per group and side: five folds each, and
    # with the monitor blinded B's choice moves off it somewhere (and the markdown says where)
    chosen = res["chosen"]
    for groups in chosen.values():
        for c in groups.values():
            assert sum(c["a"].values()) == sum(c["b"].values()) == 5
    moved = [(t, g) for t, groups in chosen.items() for g, c in groups.items() if c["a"] != c["b"]]
    assert moved
    t, g = moved[0]
    assert f"Served choice at {float(t):.0%} where A and B differ" in md
    assert f"- {g}: A " in md
    b25 = counts["0.25"]["b"]
    assert f"(above every one with the paired interval > 0: A 2 of 2, B {b25} of 2)" in md
