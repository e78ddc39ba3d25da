"""Cross-fitted evaluation: every run scored once, by heads and thresholds that never saw it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.training.conftest import make_runs
from tests.training.test_pipeline import tiny_config
from training.data.folds import repo_folds, time_halves, view_pairs
from training.data.records import load_records
from training.evaluate.intervals import Outcome, _auroc, resample_weights, rule_with_ci


def test_views_keep_instances_together_and_cover_every_run():
    runs = make_runs(20, seed=3)
    for run in runs:  # two repositories, numbered issues
        run.instance_id = ("a__a-" if int(run.instance_id.split("-")[1]) % 2 else "b__b-") + (
            run.instance_id.split("-")[1]
        )
    for view in ("instance", "repo", "time"):
        pairs = view_pairs(view, runs, k=2)
        tested = np.concatenate([te for _, te in pairs])
        if view != "time":
            assert sorted(tested.tolist()) == list(range(len(runs)))
        for tr, te in pairs:
            assert not {runs[i].instance_id for i in tr} & {runs[i].instance_id for i in te}
    folds = repo_folds(runs, 2)
    assert len({(runs[i].instance_id[0], folds[i]) for i in range(len(runs))}) == 2
    half = time_halves(runs)
    late = {runs[i].instance_id for i in np.flatnonzero(half == 1)}
    early = {runs[i].instance_id for i in np.flatnonzero(half == 0)}
    for repo in ("a__a-", "b__b-"):
        e = [int(i[len(repo) :]) for i in early if i.startswith(repo)]
        l_ = [int(i[len(repo) :]) for i in late if i.startswith(repo)]
        assert max(e) < min(l_)


def test_outcome_rates_and_bootstrap():
    from training.data.records import RunRecord

    recs = [
        RunRecord(f"r{i}", f"i{i}", "a", "s", i < 4, np.full(10, 5, dtype=np.int64))
        for i in range(10)
    ]
    stops = {"r0": 3, "r5": 2, "r6": 8}
    o = Outcome.of(recs, stops)
    fpr, recall, saved = o.rates()
    assert fpr == pytest.approx(1 / 4)
    assert recall == pytest.approx(2 / 6)
    assert saved == pytest.approx((35 + 40 + 10) / 500)
    w = resample_weights(np.array([r.resolved for r in recs]), 200, seed=1)
    assert (w[:, :4].sum(1) == 4).all()
    assert (w[:, 4:].sum(1) == 6).all()
    row = rule_with_ci(o, w)
    assert row["fpr_ci"][0] <= fpr <= row["fpr_ci"][1]
    assert row["saved_ci"][0] <= saved <= row["saved_ci"][1]


def test_weighted_auroc_matches_sklearn():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    s = np.round(rng.random(200) + 0.4 * y, 1)  # ties
    w = rng.integers(0, 3, 200).astype(float)
    assert _auroc(y, s, np.ones(200)) == pytest.approx(roc_auc_score(y, s))
    assert _auroc(y, s, w) == pytest.approx(roc_auc_score(y, s, sample_weight=w))


@pytest.mark.slow
def test_crossfit_end_to_end(tiny_model_dir, tmp_path):
    from training.pipeline.crossfit import run_crossfit

    runs = make_runs(30, seed=2)
    cfg = tiny_config(tiny_model_dir, tmp_path, train={"bundle": False})
    report = run_crossfit(cfg, runs, tmp_path / "xf", views=["instance"], folds=3)["instance"]
    recs = load_records(tmp_path / "xf" / "instance" / "records.parquet")
    assert sorted(r.run_id for r in recs) == sorted(r.id for r in runs)  # each run scored once
    assert set(recs[0].scores) == {"monitor", "signals_lr", "tfidf_lr", "step_limit"}
    agents = report["groups"]["agent"]
    assert set(agents) == {"alpha", "beta"}
    row = agents["alpha"]["targets"]["0.05"]
    assert {"configured", "conformal", "conformal-margin2", "clopper-pearson"} <= set(
        row["methods"]
    )
    assert set(row["equal_fpr"]) == {"signals_lr", "tfidf_lr", "step_limit"}
    for b in row["equal_fpr"].values():  # at equal FPR: never more resolved runs stopped
        assert b["stopped_resolved"] <= row["methods"]["configured"]["stopped_resolved"]
    md = (tmp_path / "xf" / "instance" / "report.md").read_text()
    assert "Mean per-agent monitor AUROC" in md
    png = tmp_path / "xf" / "instance" / "threshold_methods.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    stops = json.loads((tmp_path / "xf" / "instance" / "stops.json").read_text())
    assert set(stops["methods"]["configured"]["0.05"]) == {r.id for r in runs}
    cal = report["calibrated"]  # every candidate calibrated as shipped, and the choice
    assert {"monitor", "signals_lr", "tfidf_lr", "step_limit", "token_limit", "selected"} <= set(
        cal["mean_per_agent"]["0.05"]
    )
    assert "step:5" in report["mean_per_agent_live_auroc"]["monitor"]
    assert "Calibrated as shipped" in md


def test_threshold_methods_plot_draws_every_view_and_target(tmp_path):
    from training.evaluate.crossfit_plots import plot_threshold_methods

    def report(fpr):
        row = {"fpr": fpr, "fpr_ci": [max(fpr - 0.02, 0.0), fpr + 0.02]}
        methods = {"conformal": row, "conformal-margin2": {**row, "fpr": fpr / 2}}
        targets = {"0.05": {"methods": methods}, "0.1": {"methods": methods}}
        return {"groups": {"agent": {"a": {"targets": targets}, "b": {"targets": {}}}}}

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    empty = report(0.04)  # a group without resolved runs: no rate, no interval
    empty["groups"]["agent"]["b"]["targets"] = {
        "0.05": {"methods": {"conformal": {"fpr": float("nan"), "fpr_ci": [None, None]}}}
    }
    reports = {"instance": report(0.04), "repo": report(0.2), "time": empty}
    path = plot_threshold_methods(reports, tmp_path / "p.png")
    assert path.stat().st_size > 10_000
    assert plt.get_fignums() == before  # the figure is closed


@pytest.mark.slow
def test_time_view_keeps_calibration_records_and_reports_the_served_choice(
    tiny_model_dir, tmp_path
):
    from training.pipeline.crossfit import run_crossfit
    from training.pipeline.view_report import rereport

    runs = make_runs(40, seed=4)
    for run in runs:  # two repositories, numbered issues: the time view's earlier and later half
        n = int(run.instance_id.split("-")[1])
        run.instance_id = ("a__a-" if n % 2 else "b__b-") + str(n)
    cfg = tiny_config(tiny_model_dir, tmp_path, train={"bundle": False})
    report = run_crossfit(cfg, runs, tmp_path / "xf", views=["time"], folds=3)["time"]
    folder = tmp_path / "xf" / "time"
    tests = json.loads((folder / "pairs.json").read_text())
    cal = load_records(folder / "calibration-0.parquet")
    recs = load_records(folder / "records.parquet")
    assert sorted(tests[0]) == sorted(r.run_id for r in recs)
    assert not {r.instance_id for r in cal} & {r.instance_id for r in recs}
    assert set(cal[0].scores) == {"monitor", "signals_lr", "tfidf_lr", "step_limit"}
    assert "pair's training runs" in report["calibrated"]["calibration"]
    assert "selected" in report["calibrated"]["mean_per_agent"]["0.05"]
    before = json.loads((folder / "report.json").read_text())["calibrated"]
    rereport(cfg, tmp_path / "xf", views=["time"], folds=3)
    assert json.loads((folder / "report.json").read_text())["calibrated"] == before


def test_crossfit_offers_the_text_candidate_scored_out_of_fold(tiny_model_dir, tmp_path):
    """train.text_candidate in `failfast crossfit`: the test runs and each pair's calibration
    runs carry monitor_text (the second probe, out of fold for the calibration runs), and the
    as-shipped comparison calibrates it like every other candidate."""
    from training.pipeline.crossfit import run_crossfit

    runs = make_runs(40, seed=4)
    for run in runs:
        n = int(run.instance_id.split("-")[1])
        run.instance_id = ("a__a-" if n % 2 else "b__b-") + str(n)
    cfg = tiny_config(
        tiny_model_dir,
        tmp_path,
        train={"bundle": False, "tfidf_text": {}, "text_candidate": 1.0},
    )
    report = run_crossfit(cfg, runs, tmp_path / "xf", views=["time"], folds=3)["time"]
    folder = tmp_path / "xf" / "time"
    cal = load_records(folder / "calibration-0.parquet")
    recs = load_records(folder / "records.parquet")
    for rs in (cal, recs):
        assert all(len(r.scores["monitor_text"]) == r.n_steps for r in rs)
        assert any(not np.allclose(r.scores["monitor_text"], r.scores["monitor"]) for r in rs)
    assert "monitor_text" in report["calibrated"]["mean_per_agent"]["0.05"]
