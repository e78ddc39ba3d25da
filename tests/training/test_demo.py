"""`failfast demo` end to end on real runs with the tiny model; transfer and ablations on it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")

from training.cli import main  # noqa: E402
from training.config import PipelineConfig  # noqa: E402

CODER = "swe-bench-lite/coder-gpt4"
MINI = "swe-bench-verified/mini-swe-agent-gemini-3-pro"
N_PER_AGENT = 24


@pytest.fixture(scope="module")
def small_data(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 24 CodeR runs and the first 24 mini-swe-agent runs (by instance id), with their
    label files (which name other instances too: reported as problems, not fatal)."""
    root = tmp_path_factory.mktemp("data")
    coder = root / "coder-gpt4"
    (coder / "trajs").mkdir(parents=True)
    shutil.copy(data_dir / CODER / "results.json.gz", coder)
    for f in sorted((data_dir / CODER / "trajs").iterdir())[:N_PER_AGENT]:
        shutil.copy(f, coder / "trajs")
    mini = root / "mini-swe-agent-gemini-3-pro"
    for d in sorted((data_dir / MINI / "trajs").iterdir())[:N_PER_AGENT]:
        shutil.copytree(d, mini / "trajs" / d.name)
    shutil.copy(data_dir / MINI / "results_summary.json.gz", mini)
    return root


def tiny_config(tiny_model_dir: Path, cache: Path) -> dict:
    return {
        "featurise": {
            "window_tokens": 256,
            "task_chars": 80,
            "action_chars": 40,
            "obs_head_chars": 30,
            "obs_tail_chars": 20,
            "thought_chars": 0,
        },
        "policy": {"min_steps": 2, "every": 1},
        "model": {"base": str(tiny_model_dir), "n_layers": 1},
        "train": {
            "cache_dir": str(cache),
            "progress": False,
            "probe_C": [0.1, 1.0],
            "probe_hidden_scale": [0.1],
            "tfidf_max_features": 500,
            "max_steps": 2,
            "batch_size": 2,
        },
    }


def test_demo_end_to_end(tiny_model_dir, small_data, tmp_path, capsys):
    import yaml

    cfg_path = tmp_path / "tiny.yaml"
    cfg_path.write_text(yaml.safe_dump(tiny_config(tiny_model_dir, tmp_path / "cache")))
    out = tmp_path / "run"
    rc = main(["demo", "--config", str(cfg_path), "--data", str(small_data), "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    # the ingest table, the results table, the stage timings
    assert "coder-gpt4" in text
    assert "mini-swe-agent-gemini-3-pro" in text
    assert "| overall | oracle (the ceiling) |" in text
    assert "FPR@0.05" in text
    assert "FPR@0.1" in text
    for stage in ("ingest", "train", "evaluate", "total"):
        assert f"{stage} " in text.split("wall time:")[1]
    summary = json.loads((out / "corpus" / "summary.json").read_text())
    assert summary["sources"]["coder-gpt4"]["runs"] == N_PER_AGENT
    assert summary["sources"]["mini-swe-agent-gemini-3-pro"]["runs"] == N_PER_AGENT
    for f in ("thresholds.json", "bundle/model.onnx", "records/test.parquet", "demo.json"):
        assert (out / f).is_file(), f
    for name in ("fpr05", "fpr10"):
        res = json.loads((out / "eval" / f"{name}.json").read_text())
        assert res["target_fpr"] == pytest.approx(0.05 if name == "fpr05" else 0.10)
        assert (out / "eval" / f"{name}.md").is_file()
        assert len(list((out / "eval" / f"plots_{name}").glob("*.png"))) == 3
        assert set(res["per_source"]) <= {"coder-gpt4", "mini-swe-agent-gemini-3-pro"}
        oracle = res["oracle"]
        assert oracle["realized_fpr"] == 0.0
        # the oracle stops every unresolved run that reaches min_steps: recall 1 here
        assert oracle["recall"] == pytest.approx(1.0)
        assert {"signals_lr", "tfidf_lr", "transcript_analyser"} <= set(res["baselines"])
    demo = json.loads((out / "demo.json").read_text())
    times = demo["timings_s"]
    assert times["total"] >= times["ingest"] + times["train"] + times["evaluate"] - 0.1
    md = (out / "eval" / "results.md").read_text()
    assert md.count("| overall |") == 3 + len(res["baselines"])  # served, LM probe, oracle
    assert "| overall | served (per-group choice) |" in md


def test_transfer_and_ablations(tiny_model_dir, small_data, tmp_path, capsys):
    from monitor.corpus import ingest
    from training.experiments.run import run_experiment

    corpus = tmp_path / "corpus"
    ingest([small_data], corpus, progress=False)
    cfg = PipelineConfig.model_validate(tiny_config(tiny_model_dir, tmp_path / "cache"))
    res = run_experiment("transfer", cfg, [corpus], tmp_path / "out")
    assert set(res["agents"]) == {"coder", "mini-swe-agent"}
    for agent, e in res["agents"].items():
        assert e["test_runs"] > 0
        # trained without this agent's runs: the training set is the other agent's
        assert e["train_runs"] < e["test_runs"] + 2 * N_PER_AGENT
        for target in ("0.05", "0.1"):
            tr = e["targets"][target]["transfer"]
            # the held-out agent has no thresholds of its own: pooled (or no stop: refused, or
            # unknown-group with fallback none)
            assert {v["from"] for v in tr["threshold"].values()} <= {
                "pooled-unknown-agent",
                "refused",
                "unknown-group",
            }, agent
            assert tr["runs"] == e["test_runs"]
    md = (tmp_path / "out" / "experiments" / "transfer.md").read_text()
    assert "| coder |" in md
    assert "| mini-swe-agent |" in md

    variants = [
        "full:signals_only",
        "full:lm_signals",
        "full:window128",
        "full:lora",
        "subset:lm_only",
        "subset:window128",
        "subset:lora",
    ]
    res = run_experiment(
        "ablate",
        cfg,
        [corpus],
        tmp_path / "out",
        variants=variants,
        subset_train=8,
        subset_test=5,
        probe_grid=True,
    )
    assert list(res["variants"]) == variants
    assert res["subset"]["test"] <= 10  # at most 5 per agent
    assert res["subset"]["train"] <= 16
    counts = res["test_counts"]["subset"]
    assert sum(c["runs"] for c in counts.values()) == res["subset"]["test"]
    assert all(c["runs"] <= 5 for c in counts.values())
    full = res["variants"]["full:lm_signals"]
    assert full["selection"]["C"] in (0.1, 1.0)
    assert set(full["ledger"]) == {"0.05", "0.1"}
    # subset variants use the (C, scale) full:lm_signals picked
    assert res["variants"]["subset:lm_only"]["probe"]["C"] == full["selection"]["C"]
    win = res["variants"]["subset:window128"]
    # full:window128 ran the new featuriser's pass over every split: the subset reads the cache
    assert win["feature_pass"]["tokens_encoded_now"] == 0
    assert win["feature_pass"]["encoded_tokens_total"] > 0
    # every other variant is compared with its scope's lm_signals on the same runs
    vs = res["variants"]["full:signals_only"]["vs_reference"]
    assert vs["reference"] == "full:lm_signals"
    assert vs["runs"] == full["test_runs"]
    assert "vs_reference" not in full
    assert (tmp_path / "out" / "experiments" / "ablation_records" / "full_lora.parquet").is_file()
    grid = res["variants"]["subset:window128"]["grid"]
    assert set(grid) == {"C=0.1,hidden_scale=0.1", "C=1,hidden_scale=0.1"}
    assert all(0 <= x <= 1 for x in grid.values() if x is not None)
    assert "full:lm_signals" not in [v for v, e in res["variants"].items() if "grid" in e]
    fwin = res["variants"]["full:window128"]
    assert fwin["feature_pass"]["tokens_encoded_now"] > 0
    assert set(fwin["ledger"]) == {"0.05", "0.1"}
    flora = res["variants"]["full:lora"]
    assert flora["lora"]["val_pass_seconds"] > 0
    assert flora["lora"]["test_pass_seconds"] > 0
    assert flora["test_runs"] == full["test_runs"]
    assert set(flora["ledger"]) == {"0.05", "0.1"}
    lora = res["variants"]["subset:lora"]["lora"]
    assert lora["windows"] > 0
    assert lora["finetune_seconds"] > 0
    assert (tmp_path / "out" / "experiments" / "ablations.png").stat().st_size > 10_000
    table = (tmp_path / "out" / "experiments" / "ablations.md").read_text()
    for v in variants:
        assert f"| {v} |" in table
    assert "wrote" in capsys.readouterr().out


def test_ablation_full_lora_needs_the_probe_pick_first(tiny_model_dir, small_data, tmp_path):
    from training.experiments.ablations import run_ablations

    cfg = PipelineConfig.model_validate(tiny_config(tiny_model_dir, tmp_path / "cache"))
    with pytest.raises(ValueError, match="full:lm_signals before full:lora"):
        run_ablations(cfg, None, variants=["full:lora", "full:lm_signals"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown ablation"):
        run_ablations(cfg, None, variants=["full:window"])  # type: ignore[arg-type]


def test_auroc_standard_error_hanley_mcneil():
    from training.experiments.ablation_report import auroc_se

    # AUC 0.5 with 10 + 10 runs: var = (0.25 + 9/12 + 9/12) / 100
    assert auroc_se(0.5, 10, 10) == pytest.approx((1.75 / 100) ** 0.5)
    assert auroc_se(0.9, 40, 40) < auroc_se(0.9, 10, 10)
    assert auroc_se(0.7, 0, 10) is None
