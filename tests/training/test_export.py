"""ONNX export: both graphs match torch, the bundle is complete and verified, the CLI works."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.bundle_helpers import shared_bundle

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def bundle(tiny_model_dir, tmp_path_factory):
    return shared_bundle(tiny_model_dir, tmp_path_factory)


def test_bundle_files_and_manifest(bundle):
    names = {p.name for p in bundle.iterdir()}
    assert {"model.onnx", "model_kv.onnx", "model.int8.onnx", "model_kv.int8.onnx"} <= names
    assert {"tokenizer.json", "monitor.json", "README.md", "baselines"} <= names
    m = json.loads((bundle / "monitor.json").read_text())
    assert m["versions"]["bundle_format"] == 2
    assert m["export"]["full_max_abs_diff"] <= 1e-4
    assert m["export"]["kv_max_abs_diff"] <= 1e-4
    assert 0 < m["export"]["int8_max_abs_diff"] < 0.5
    assert m["featuriser"]["window_tokens"] == 640
    assert len(m["signal_names"]) == 25
    assert m["kv"] == {"n_layers": 2, "kv_heads": 4, "head_dim": 4, "pooled_hidden": 0}
    assert m["classifier"]["pooling"] == "last"
    # the schedule of thresholds.json is the policy's
    assert (m["policy"]["min_steps"], m["policy"]["every"]) == (2, 1)
    # every file but monitor.json is hashed, baselines included
    assert "baselines/signals_lr.joblib" in m["files"]
    assert "monitor.json" not in m["files"]
    assert "Intended use" in (bundle / "README.md").read_text()


def test_graphs_match_torch_on_other_shapes(bundle, tiny_model_dir):
    """Batch 4, length 71: neither was used at export; padded rows included."""
    import onnxruntime as ort
    import torch

    from training.model.classifier_files import load_classifier

    model = load_classifier(bundle.parent / "model")
    g = torch.Generator().manual_seed(5)
    ids = torch.randint(1, 300, (4, 71), generator=g)
    mask = torch.ones(4, 71, dtype=torch.long)
    mask[2, 40:] = 0
    pos = torch.tensor([[3, 20, 39]] * 4)
    sig = torch.rand(4, 3, 25, generator=g) * 100
    with torch.no_grad():
        ref = model(ids, mask, pos, sig).numpy()
    sess = ort.InferenceSession(str(bundle / "model.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(
        ["logits"],
        {
            "input_ids": ids.numpy(),
            "attention_mask": mask.numpy(),
            "positions": pos.numpy(),
            "signals": sig.numpy(),
        },
    )[0]
    assert got.shape == (4, 3)
    assert np.abs(got - ref).max() <= 1e-4


def test_mean_pooled_kv_graph_carries_the_running_mean(tiny_model_dir, tmp_path_factory):
    """pooling last+mean: model_kv.onnx fed in three chunks (running hidden sum/count passed
    along with the KV cache) gives the whole-rendering logits at each chunk's last token."""
    import onnxruntime as ort
    import torch

    from training.export.graphs import kv_names
    from training.model.classifier_files import load_classifier

    bundle = shared_bundle(tiny_model_dir, tmp_path_factory, pooling="last+mean")
    m = json.loads((bundle / "monitor.json").read_text())
    assert m["classifier"]["pooling"] == "last+mean"
    assert m["kv"]["pooled_hidden"] == 16
    assert m["export"]["full_max_abs_diff"] <= 1e-4
    assert m["export"]["kv_max_abs_diff"] <= 1e-4
    model = load_classifier(bundle.parent / "model")
    assert model.pooling == "last+mean"
    sess = ort.InferenceSession(str(bundle / "model_kv.onnx"), providers=["CPUExecutionProvider"])
    past_names, present_names = kv_names(2, pooled=True)
    assert [i.name for i in sess.get_inputs()][3:] == past_names
    assert [o.name for o in sess.get_outputs()][1:] == present_names
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(1, 300, (1, 61), generator=g)
    cuts = [(0, 17), (17, 18), (18, 61)]  # one chunk of a single token
    sig = torch.rand(1, 3, 25, generator=g) * 50
    with torch.no_grad():
        ref = model(ids, torch.ones_like(ids), torch.tensor([[16, 17, 60]]), sig).numpy()[0]
        h = model.features(ids, torch.ones_like(ids))[0].numpy()
    state = [np.zeros((1, 16), np.float32), np.zeros((1, 1), np.float32)]
    state += [np.zeros((1, 4, 0, 4), np.float32)] * 4
    got = []
    for j, (a, b) in enumerate(cuts):
        feed = {
            "input_ids": ids[:, a:b].numpy(),
            "attention_mask": np.ones((1, b), np.int64),
            "signals": sig[:, j].numpy(),
            **dict(zip(past_names, state, strict=True)),
        }
        logits, *state = sess.run(None, feed)
        got.append(float(logits[0]))
        assert state[1][0, 0] == b  # the count of tokens in the window so far
        np.testing.assert_allclose(state[0][0], h[:b].sum(axis=0), rtol=1e-4, atol=1e-4)
    assert np.abs(np.array(got) - ref).max() <= 1e-4


def test_export_without_signals(tiny_model_dir, tmp_path):
    """A head with no signal columns: the unused signals input is pruned, scoring still works."""
    import torch

    from monitor.featurise import FeaturiserConfig
    from training.config import ExportConfig
    from training.export.bundle import write_bundle
    from training.model.backbone import load_backbone
    from training.model.classifier import PrefixClassifier
    from training.model.classifier_files import save_classifier

    model = PrefixClassifier(load_backbone(tiny_model_dir), [])
    torch.nn.init.normal_(model.head.weight, std=1.0)
    d = save_classifier(
        model,
        tmp_path / "m",
        tokenizer_dir=tiny_model_dir,
        base="tiny",
        head_kind="probe",
        featuriser=FeaturiserConfig(window_tokens=256).model_dump(),
    )
    report = write_bundle(d, tmp_path / "b", cfg=ExportConfig(check_batch=2, check_length=40))
    assert report.full_max_abs_diff <= 1e-4
    assert report.kv_max_abs_diff <= 1e-4
    from serving.scorer import Scorer
    from tests.bundle_helpers import make_run

    scorer = Scorer.load(tmp_path / "b")
    scores = scorer.score_run(make_run(6))
    assert len(scores) == 6
    assert all(0 < s < 1 for s in scores)
    # no thresholds.json: no stop by score
    assert math.isinf(scorer.thresholds("mini-swe-agent").stop)


def test_export_refuses_non_bundle_folder(tiny_model_dir, tmp_path, bundle):
    from monitor.errors import BundleError
    from training.export.bundle import write_bundle

    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "precious.txt").write_text("keep me")
    with pytest.raises(BundleError, match="not empty and not a bundle"):
        write_bundle(bundle.parent / "model", tmp_path / "x")
    assert (tmp_path / "x" / "precious.txt").read_text() == "keep me"


def test_export_cli(bundle, tmp_path, capsys):
    from training.cli import main

    rc = main(["export", "--model", str(bundle.parent / "model"), "--out", str(tmp_path / "cli")])
    assert rc == 0
    out = capsys.readouterr().out
    diffs = [
        float(line.split("=")[1].split()[0])
        for line in out.splitlines()
        if "onnxruntime - torch" in line
    ]
    assert len(diffs) == 2
    assert max(diffs) <= 1e-4
    assert (tmp_path / "cli" / "monitor.json").is_file()


def test_quant_auroc_change(bundle):
    from tests.bundle_helpers import make_run
    from training.export.quant import quant_auroc_change

    runs = [make_run(4 + i % 5, seed=i) for i in range(8)]
    for i, r in enumerate(runs):
        r.resolved = i % 2 == 0
    out = quant_auroc_change(bundle, runs)
    row = out["per_agent"]["mini-swe-agent"]
    assert row["runs"] == 8
    for k in ("0.25", "0.5", "0.75", "overall"):
        assert 0 <= row["fp32"][k] <= 1
        assert 0 <= row["int8"][k] <= 1
        assert out["delta"]["mini-swe-agent"][k] == pytest.approx(row["int8"][k] - row["fp32"][k])
    assert set(out["delta"]) == {"mini-swe-agent", "mean_per_agent"}


def test_model_card_is_rendered_from_the_manifest_thresholds() -> None:
    from training.export.card import model_card

    manifest = {
        "classifier": {"base": "b", "n_layers": 4, "head_kind": "probe"},
        "signal_names": ["a"],
        "export": {"full_max_abs_diff": 1e-6, "kv_max_abs_diff": 1e-6},
        "target": 0.05,
        "thresholds": {
            "mode": "bound",
            "method": "conformal",
            "group_by": "source",
            "fallback": "none",
            "margin": 2,
            "targets": [0.05, 0.1],
            "groups": {
                "src-a": {
                    "n_resolved": 50,
                    "stop": {"0.05": {"threshold": 0.8}, "0.1": {"threshold": 0.7}},
                },
                "src-b": {"n_resolved": 9, "stop": {"0.05": {"refused": "needs at least 39"}}},
            },
            "pooled": {"n_resolved": 59, "stop": {"0.05": {"threshold": 0.75}}},
        },
    }
    card = model_card(manifest)
    assert "keyed by **source**" in card
    assert "`source` (HTTP" in card
    assert "fallback none: a group not listed below" in card
    assert "src-a (50 resolved calibration runs): 0.05: 0.800, 0.1: 0.700" in card
    assert "src-b (9 resolved calibration runs): 0.05: refused (needs at least 39)" in card
    assert "pass that name as the session's `agent`" not in card
    assert "adaptive margin" not in card
    adaptive = {**manifest["thresholds"], "adaptive_margin": 8}
    adaptive["groups"] = {
        "src-a": {"n_resolved": 400, "stop": {"0.05": {"threshold": 0.8, "margin": 1.4}}}
    }
    card = model_card({**manifest, "thresholds": adaptive})
    assert "adaptive margin 8: a group with n resolved calibration runs" in card
    assert "src-a (400 resolved calibration runs): 0.05: 0.800 (margin 1.40)" in card
    manifest["thresholds"] |= {"group_by": "agent", "fallback": "pooled"}
    card = model_card(manifest)
    assert "`agent` (HTTP" in card
    assert "fallback pooled" in card
    assert "the LM probe for every group (no candidates.json)" in card
    chosen = {
        "src-a": {"scorer": "monitor", "by_target": {"0.05": "tfidf_lr"},
                  "held_out_saved": {"tfidf_lr": 0.123}},
        "src-b": {"scorer": "step_limit", "by_target": {}},
    }  # fmt: skip

    def table(stops: dict) -> dict:  # a candidate's thresholds.json, stop per group at 5%
        groups = {
            g: {"n_resolved": 50, "stop": {"0.05": st}, "warn": 0.5} for g, st in stops.items()
        }
        return {"mode": "bound", "confidence": 0.95, "method": "conformal", "group_by": "source",
                "fallback": "none", "schedule": {"min_steps": 3}, "targets": [0.05],
                "groups": groups, "pooled": {"n_resolved": 100, "warn": 0.5}}  # fmt: skip

    tfidf = {"vocabulary": {"x": 0}, "idf": [1.0], "coef": [0.5], "intercept": 0.0}
    cands = {
        "chosen": chosen,
        "params": {"tfidf_lr": tfidf},
        "thresholds": {
            "tfidf_lr": table({"src-a": {"threshold": 0.9}}),
            "step_limit": table({"src-b": {"threshold": 5e-4}}),
        },
    }
    card = model_card({**manifest, "target": 0.05}, cands)
    assert "- src-a: tfidf_lr (held-out tokens saved, mean over targets: 12.3%)" in card
    assert "- src-b: step_limit" in card
    # what the bundle would serve instead: a refused choice, a group re-calibrated since
    cands["thresholds"]["step_limit"] = table({"src-b": {"refused": "needs at least 39"}})
    card = model_card({**manifest, "target": 0.05}, cands)
    assert "- src-b: monitor (the LM probe: the chosen step_limit has no threshold at 0.05)" in card
    calibration = {"records": "failfast calibrate", "per_agent": {"src-a": {"runs": 9}}}
    manifest["thresholds"]["calibration"] = calibration
    card = model_card({**manifest, "target": 0.05}, cands)
    assert "- src-a: monitor (the LM probe: the group was re-calibrated" in card
