"""`failfast train` end to end on the tiny random Llama: outputs, cache, bundle agreement, calibration."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.training.conftest import FEAT, make_runs  # noqa: E402
from training.config import PipelineConfig  # noqa: E402
from training.data.records import load_records  # noqa: E402
from training.data.splits import load_splits  # noqa: E402
from training.pipeline.train import run_pipeline  # noqa: E402


def tiny_config(tiny_model_dir, tmp_path, **sections) -> PipelineConfig:
    """The tiny model cut to 1 layer, checks from step 2, a cache under tmp_path; `sections`
    add to each config section."""
    base = {
        "featurise": FEAT.model_dump(),
        "policy": {"min_steps": 2, "every": 1},
        "model": {"base": str(tiny_model_dir), "n_layers": 1},
        "train": {"cache_dir": str(tmp_path / "cache"), "progress": False},
    }
    for name, more in sections.items():
        base[name] = {**base.get(name, {}), **more}
    return PipelineConfig.model_validate(base)


def assert_served_as_recorded(scorer, traj, rec) -> None:
    """The bundle scores `traj` as its training record says: whole run and live KV session."""
    full = np.array(scorer.score_run(traj))
    np.testing.assert_allclose(full, rec.scores["monitor"], atol=1e-5)
    sess = scorer.start(traj.task, traj.agent)
    live = [sess.observe(st) for st in traj.steps]
    np.testing.assert_allclose(live, full, atol=1e-4)


def assert_text_part_required(bundle, bad, name: str, what: str) -> dict:
    """A copy of `bundle` in `bad` without its text part `name` is refused, and so is one whose
    monitor.json no longer lists it (`what`: how the error names it). Returns that manifest."""
    import shutil

    from monitor.errors import BundleError
    from serving.scorer import Scorer

    shutil.copytree(bundle, bad)
    (bad / name).unlink()
    with pytest.raises(BundleError, match=f"{name}: listed in monitor.json but missing"):
        Scorer.load(bad)
    m = json.loads((bad / "monitor.json").read_text())
    del m["files"][name]
    (bad / "monitor.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match=f"{what} is not listed"):
        Scorer.load(bad, verify=False)
    return m


def test_pipeline_end_to_end_and_cache(tiny_model_dir, tmp_path):
    runs = make_runs(20, seed=1)
    cfg = tiny_config(tiny_model_dir, tmp_path, train={"bundle": False, "probe_C": [0.1, 1.0]})
    m1 = run_pipeline(cfg, runs, tmp_path / "out1")
    out = tmp_path / "out1"
    for f in (
        "config.yaml",
        "data_summary.json",
        "splits.json",
        "metrics.json",
        "records/val.parquet",
        "records/test.parquet",
        "baselines/signals_lr.joblib",
        "baselines/tfidf_lr.joblib",
        "model/model.safetensors",
        "model/head.safetensors",
        "model/tokenizer.json",
    ):
        assert (out / f).is_file(), f
    assert json.loads((out / "model" / "config.json").read_text())["num_hidden_layers"] == 1
    assert set(m1["per_agent"]) == {"alpha", "beta"}
    assert set(m1["per_agent"]["alpha"]["monitor"]) == {"0.25", "0.5", "0.75", "overall"}
    assert m1["feature_pass"]["runs_encoded"] > 0
    val = load_records(out / "records" / "val.parquet")
    splits = load_splits(out / "splits.json")
    assert {r.instance_id for r in val} <= set(splits.val)
    for r in val:
        assert set(r.scores) == {"monitor", "signals_lr", "tfidf_lr"}
        assert len(r.scores["monitor"]) == r.n_steps
        assert r.encoded_tokens > 0
        assert ((r.scores["monitor"] > 0) & (r.scores["monitor"] < 1)).all()
    cfg.train.bundle = True  # thresholds.json and the serving bundle at the end
    m2 = run_pipeline(cfg, runs, tmp_path / "out2")
    assert (tmp_path / "out2" / "thresholds.json").is_file()
    assert (tmp_path / "out2" / "bundle" / "model.onnx").is_file()
    cands = json.loads((tmp_path / "out2" / "bundle" / "candidates.json").read_text())
    assert {"signals_lr", "tfidf_lr", "step_limit", "token_limit"} <= set(cands["thresholds"])
    assert set(cands["params"]) == {"signals_lr", "tfidf_lr"}
    assert set(cands["chosen"]) == {"alpha", "beta"} or cands["group_by"] == "source"
    assert m2["feature_pass"]["runs_encoded"] == 0
    assert m2["feature_pass"]["runs_cached"] > 0
    again = load_records(tmp_path / "out2" / "records" / "val.parquet")
    for a, b in zip(val, again, strict=True):
        assert np.array_equal(a.scores["monitor"], b.scores["monitor"])


def test_pipeline_mean_pooling_records_match_the_bundle(tiny_model_dir, tmp_path):
    """pooling last+mean end to end: the probe on cached [last ; mean] features scores the test
    runs as the exported bundle does (whole renderings and live KV sessions)."""
    from serving.scorer import Scorer

    runs = make_runs(12, seed=2)
    cfg = tiny_config(
        tiny_model_dir,
        tmp_path,
        model={"pooling": "last+mean"},
        train={"probe_C": [0.3], "probe_hidden_scale": [0.5], "baselines": False},
    )
    run_pipeline(cfg, runs, tmp_path / "out")
    out = tmp_path / "out"
    assert json.loads((out / "model" / "classifier.json").read_text())["pooling"] == "last+mean"
    assert any(p.name.endswith("-last-mean") for p in (tmp_path / "cache" / "features").glob("*/*"))
    scorer = Scorer.load(out / "bundle", threads=1)
    assert scorer.pooled
    by_id = {r.id: r for r in runs}
    test = load_records(out / "records" / "test.parquet")
    assert test
    for rec in test[:4]:
        assert_served_as_recorded(scorer, by_id[rec.run_id], rec)


def test_pipeline_calibrates_on_validation_plus_out_of_fold_training_runs(tiny_model_dir, tmp_path):
    runs = make_runs(20, seed=1)
    cfg = tiny_config(
        tiny_model_dir,
        tmp_path,
        thresholds={"calibration": "val+train-oof", "crossfit_folds": 3, "group_by": "agent"},
        train={"bundle": True, "baselines": False},
    )
    run_pipeline(cfg, runs, tmp_path / "out")
    out = tmp_path / "out"
    splits = load_splits(out / "splits.json")
    oof = load_records(out / "records" / "train_oof.parquet")
    val = load_records(out / "records" / "val.parquet")
    assert oof
    assert {r.instance_id for r in oof} <= set(splits.train)
    th = json.loads((out / "thresholds.json").read_text())
    cal = th["calibration"]
    assert cal["records"] == "val+train-oof"
    for agent in ("alpha", "beta"):
        rs = [r for r in val + oof if r.agent == agent]
        assert cal["per_agent"][agent] == {
            "runs": len(rs),
            "resolved": sum(bool(r.resolved) for r in rs),
        }
        assert th["groups"][agent]["n_resolved"] == cal["per_agent"][agent]["resolved"]


def test_val_train_oof_with_a_fine_tuned_head_fails_before_training(tiny_model_dir, tmp_path):
    cfg = PipelineConfig.model_validate(
        {
            "featurise": FEAT.model_dump(),
            "model": {"base": str(tiny_model_dir), "n_layers": 1, "head": "lora"},
            "thresholds": {"calibration": "val+train-oof"},
            "train": {"cache_dir": str(tmp_path / "cache"), "progress": False},
        }
    )
    with pytest.raises(ValueError, match="needs model.head=probe"):
        run_pipeline(cfg, make_runs(4), tmp_path / "out")
    assert not (tmp_path / "cache" / "features").exists()  # nothing was encoded


def test_candidates_calibrate_on_the_same_out_of_fold_runs_as_the_monitor(tiny_model_dir, tmp_path):
    runs = make_runs(20, seed=2)
    cfg = tiny_config(
        tiny_model_dir,
        tmp_path,
        thresholds={"calibration": "val+train-oof", "crossfit_folds": 3, "group_by": "agent"},
        train={"bundle": True, "baselines": True},
    )
    run_pipeline(cfg, runs, tmp_path / "out")
    out = tmp_path / "out"
    oof = load_records(out / "records" / "train_oof.parquet")
    val = load_records(out / "records" / "val.parquet")
    # every training run scored out of fold by the baselines too (refitted without its fold)
    assert all({"monitor", "signals_lr", "tfidf_lr"} <= set(r.scores) for r in oof)
    assert all(len(r.scores["tfidf_lr"]) == r.n_steps for r in oof)
    cands = json.loads((out / "candidates.json").read_text())
    assert cands["calibration_runs"] == len(val) + len(oof)
    th = json.loads((out / "thresholds.json").read_text())
    for name in ("signals_lr", "tfidf_lr", "step_limit"):
        for g, entry in cands["thresholds"][name]["groups"].items():
            assert entry["n_resolved"] == th["groups"][g]["n_resolved"]


def test_probe_text_end_to_end_records_match_the_bundle(tiny_model_dir, tmp_path):
    """train.probe_text: the probe reads the TF-IDF text beside the hidden state; the bundle
    serves the ONNX head's logit plus monitor_text.json's, and both the whole-run scorer and live
    KV sessions give the records' scores (calibrated on out-of-fold training runs too)."""

    from serving.scorer import Scorer

    runs = make_runs(20, seed=3)
    cfg = tiny_config(
        tiny_model_dir,
        tmp_path,
        train={
            "probe_C": [0.3],
            "probe_hidden_scale": [0.5],
            "tfidf_text": {"task_chars": 200, "thought_chars": 100},
            "probe_text": 1.0,
            "max_prefixes_per_run": 4,
        },
        thresholds={"calibration": "val+train-oof"},
    )
    run_pipeline(cfg, runs, tmp_path / "out")
    out = tmp_path / "out"
    assert json.loads((out / "model" / "classifier.json").read_text())["text_head"]
    manifest = json.loads((out / "bundle" / "monitor.json").read_text())
    assert manifest["versions"]["bundle_format"] == 3
    assert manifest["classifier"]["text_head"] == "monitor_text.json"
    assert "monitor_text.json" in manifest["files"]
    text = json.loads((out / "bundle" / "monitor_text.json").read_text())
    assert text["intercept"] == 0.0
    assert np.abs(text["coef"]).max() > 0
    scorer = Scorer.load(out / "bundle", threads=1)
    assert scorer.text_head is not None
    by_id = {r.id: r for r in runs}
    test = load_records(out / "records" / "test.parquet")
    oof = load_records(out / "records" / "train_oof.parquet")
    assert test
    assert oof
    assert all(len(r.scores["monitor"]) == r.n_steps for r in oof)
    moved = 0.0  # the text part is part of the served score
    for rec in test[:5]:
        assert_served_as_recorded(scorer, by_id[rec.run_id], rec)
        moved = max(moved, float(np.abs(scorer.text_head.run_logits(by_id[rec.run_id])).max()))
    assert moved > 1e-3
    # a bundle whose text head is missing or unlisted is refused, never served without it
    assert_text_part_required(out / "bundle", tmp_path / "bad", "monitor_text.json", "text head")


def test_known_tasks_table_and_choice_in_the_bundle(tiny_model_dir, tmp_path):
    """train.task_prior_min_runs: candidates.json carries the verdict table of the training and
    validation runs (never the test split's) and a known-task choice calibrated on the
    calibration runs of known tasks; the bundle serves a known task by it, and the evaluation
    reports the test runs as known tasks beside the ordinary served choice."""
    from monitor.thresholds import ThresholdTable
    from serving.scorer import Scorer
    from serving.task_prior import TaskPrior
    from training.evaluate.report import evaluate

    runs = make_runs(20, seed=2)
    cfg = tiny_config(
        tiny_model_dir,
        tmp_path,
        thresholds={"calibration": "val+train-oof", "crossfit_folds": 3, "group_by": "agent"},
        train={"bundle": True, "baselines": True, "task_prior_min_runs": 2},
    )
    run_pipeline(cfg, runs, tmp_path / "out")
    out = tmp_path / "out"
    cands = json.loads((out / "bundle" / "candidates.json").read_text())
    known = cands["known_tasks"]
    table = TaskPrior.from_json(known["prior"])
    splits = load_splits(out / "splits.json")
    assert set(table.counts) == set(splits.train) | set(splits.val)
    assert not set(table.counts) & set(splits.test)
    assert {"monitor_prior", "prior", "monitor", "signals_lr"} <= set(known["thresholds"])
    val = load_records(out / "records" / "val.parquet")
    oof = load_records(out / "records" / "train_oof.parquet")
    assert known["calibration_runs"] == len(val) + len(oof)  # two other-agent runs each
    scorer = Scorer.load(out / "bundle", threads=1)
    assert scorer.choice is not None
    assert scorer.choice.known is not None
    card = (out / "bundle" / "README.md").read_text()
    assert "## Known tasks" in card
    assert f"verdict table ({len(table.counts)} tasks)" in card
    test_run = next(r for r in runs if r.instance_id in set(splits.test))
    assert scorer.served(test_run.agent, instance_id=test_run.instance_id).task_prior is None
    seen = next(r for r in runs if r.instance_id in set(splits.val))
    p = table.prior(seen.instance_id, seen.agent)
    assert p is not None
    assert p == scorer.choice.prior_of(seen.instance_id, seen.agent)
    th = ThresholdTable.model_validate(json.loads((out / "thresholds.json").read_text()))
    report = evaluate(
        load_records(out / "records" / "test.parquet"),
        th,
        calibration=[*val, *oof],
        candidates=cands,
    )
    kt = report["known_tasks"]
    from training.evaluate.report import markdown_table

    assert f"Known tasks ({kt['known_runs']} runs whose task has 2+ runs" in markdown_table(report)
    assert kt["known_runs"] == len(load_records(out / "records" / "test.parquet"))
    assert 0 <= kt["known_runs_served"] <= kt["known_runs"]
    for entry in known["chosen"].values():  # the gate's record: targets served as unknown
        assert set(entry["as_unknown"]) <= {f"{t:g}" for t in th.targets}
    for row in [kt["overall"], *kt["per_agent"].values()]:
        for side in ("served", "with_known_tasks"):
            assert 0.0 <= row[side]["tokens_saved"] <= 1.0
    # new runs scored by the bundle alone (no calibration records): served as shipped
    test = load_records(out / "records" / "test.parquet")
    shipped = evaluate(test, th, candidates=cands)["known_tasks"]
    assert shipped["from"].startswith("the bundle's candidates.json")
    assert shipped["known_runs"] == len(test)
    assert 0 <= shipped["known_runs_served"] <= len(test)
    assert set(shipped["chosen"]) <= set(known["chosen"])
    assert shipped["overall"]["runs"] == len(test)
    if shipped["known_runs_served"] == 0:  # nothing known served: both sides are the served choice
        assert shipped["overall"]["served"] == shipped["overall"]["with_known_tasks"]
