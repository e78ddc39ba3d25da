"""train.text_candidate: a second probe that also reads the TF-IDF text, offered to the per-group
choice as candidate "monitor_text" and served from the same graphs (a second logit)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.training.conftest import make_runs  # noqa: E402
from tests.training.test_pipeline import assert_text_part_required, tiny_config  # noqa: E402
from training.data.records import load_records  # noqa: E402
from training.pipeline.train import run_pipeline  # noqa: E402


def test_the_second_head_reads_the_first_heads_signal_standardisation(model):
    """fold_text_probe rewrites the twin's signal weights for the model's own standardisation:
    the same logits from the one head input the graphs compute."""
    from training.model.classifier import PrefixClassifier
    from training.model.text_probe import fold_text_probe

    twin = PrefixClassifier(model.backbone, model.signal_names, model.signal_transform)
    g = torch.Generator().manual_seed(0)
    s = model.n_signals
    with torch.no_grad():
        model.signal_mean.copy_(torch.rand(s, generator=g))
        model.signal_std.copy_(torch.rand(s, generator=g) + 0.5)
        twin.signal_mean.copy_(torch.rand(s, generator=g) * 3)
        twin.signal_std.copy_(torch.rand(s, generator=g) + 2.0)
        twin.head.weight.copy_(torch.randn(twin.head.weight.shape, generator=g))
        twin.head.bias.fill_(0.3)
    twin.text_head = object()  # kept as the second probe's text part
    model.text_probe = fold_text_probe(model, twin)
    hidden = torch.randn(2, 5, model.n_features, generator=g)
    signals = torch.rand(2, 5, s, generator=g) * 10
    with torch.no_grad():
        want = twin.head_logits(hidden, signals)
        got = model.text_probe_logits(hidden, signals)
        first = model.head_logits(hidden, signals)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-4)
    assert not np.allclose(first.numpy(), want.numpy())  # the first head is its own
    bare = PrefixClassifier(model.backbone, model.signal_names, model.signal_transform)
    with pytest.raises(ValueError, match="no text part"):
        fold_text_probe(model, bare)


def test_text_candidate_end_to_end_records_match_the_bundle(tiny_model_dir, tmp_path):
    """Records, out-of-fold calibration runs, candidates.json, the bundle (format 4), the
    whole-run scorer and live KV sessions (alone and batched) agree on monitor_text, and the
    LM probe's scores are the same as without it."""
    from monitor.errors import BundleError
    from monitor.thresholds import Thresholds
    from serving.scorer import Scorer

    runs = make_runs(20, seed=3)
    train = {
        "probe_C": [0.3],
        "probe_hidden_scale": [0.5],
        "tfidf_text": {"task_chars": 200, "thought_chars": 100},
        "max_prefixes_per_run": 6,
    }
    th = {"calibration": "val+train-oof", "crossfit_folds": 3, "group_by": "agent"}
    cfg = tiny_config(
        tiny_model_dir,
        tmp_path,
        train={**train, "text_candidate": 1.0, "text_candidate_prefixes": 4},
        thresholds=th,
    )
    run_pipeline(cfg, runs, tmp_path / "out")
    out = tmp_path / "out"
    recs = {n: load_records(out / "records" / f"{n}.parquet") for n in ("val", "test", "train_oof")}
    for name, rs in recs.items():
        assert rs, name
        assert all(len(r.scores["monitor_text"]) == r.n_steps for r in rs), name
    moved = max(
        float(np.abs(np.subtract(r.scores["monitor_text"], r.scores["monitor"])).max())
        for r in recs["test"]
    )
    assert moved > 1e-3  # a second probe, not a copy of the first
    # the LM probe is what it is without the second probe
    plain = tiny_config(tiny_model_dir, tmp_path, train={**train, "bundle": False}, thresholds=th)
    run_pipeline(plain, runs, tmp_path / "plain")
    before = {r.run_id: r for r in load_records(tmp_path / "plain" / "records" / "test.parquet")}
    for r in recs["test"]:
        np.testing.assert_allclose(r.scores["monitor"], before[r.run_id].scores["monitor"])
    cands = json.loads((out / "candidates.json").read_text())
    assert "monitor_text" in cands["thresholds"]
    meta = json.loads((out / "model" / "classifier.json").read_text())
    assert meta["text_probe"] == "text_probe.json"
    manifest = json.loads((out / "bundle" / "monitor.json").read_text())
    assert manifest["versions"]["bundle_format"] == 4
    assert manifest["classifier"]["text_probe"] == "text_probe.json"
    assert "text_probe.json" in manifest["files"]
    import onnx

    graph = onnx.load(str(out / "bundle" / "model.onnx"), load_external_data=False).graph
    assert [o.name for o in graph.output] == ["logits", "logits_text"]
    # the second head's nodes are named after it, so the int8 schemes keep it in fp32
    assert any("text_head" in n.name for n in graph.node if n.op_type in ("MatMul", "Gemm"))

    scorer = Scorer.load(out / "bundle", threads=1)
    assert scorer.heads == 2
    assert scorer.choice is not None
    assert scorer.choice.servable("monitor_text")
    by_id = {r.id: r for r in runs}
    served = Thresholds(stop=0.999, warn=0.99, origin="agent", scorer="monitor_text")
    scorer.served = lambda agent, source="", instance_id="": served  # type: ignore[method-assign]
    for rec in recs["test"][:4]:
        traj = by_id[rec.run_id]
        both = scorer.score_heads(traj)
        np.testing.assert_allclose(both["monitor"], rec.scores["monitor"], atol=1e-5)
        np.testing.assert_allclose(both["monitor_text"], rec.scores["monitor_text"], atol=1e-5)
        assert scorer.score_run(traj) == both["monitor"]
        whole, th_used = scorer.score_served(traj)
        assert th_used.scorer == "monitor_text"
        np.testing.assert_allclose(whole, both["monitor_text"], atol=1e-9)
        for batched in (False, True):
            if batched:
                scorer.enable_batching(0.001, 4)
            sess = scorer.start(traj.task, traj.agent)
            assert sess.scorer_name == "monitor_text"
            live = [sess.observe(st) for st in traj.steps]
            np.testing.assert_allclose(live, both["monitor_text"], atol=1e-4)
            scorer.close()
        short = dataclasses.replace(traj, steps=traj.steps[:2])
        assert len(scorer.score_heads(short)["monitor_text"]) == 2

    # `failfast evaluate --bundle` on new runs scores the second probe as the records did
    from training.evaluate.inputs import score_with_bundle

    test_runs = [by_id[r.run_id] for r in recs["test"][:3]]
    scored = score_with_bundle(out / "bundle", test_runs, progress=False)
    for got, rec in zip(scored, recs["test"][:3], strict=True):
        np.testing.assert_allclose(
            got.scores["monitor_text"], rec.scores["monitor_text"], atol=1e-5
        )

    # a bundle whose second probe's text part is missing or unlisted is refused
    bad = tmp_path / "bad"
    m = assert_text_part_required(
        out / "bundle", bad, "text_probe.json", "second probe's text part"
    )
    # graphs with a second logit that monitor.json does not name are refused, not misread
    del m["classifier"]["text_probe"]
    (bad / "monitor.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match=r"outputs .* do not start with \['logits'\]"):
        Scorer.load(bad, verify=False)


def test_text_candidate_needs_the_text_and_the_choice(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="train.text_candidate needs train.tfidf_text"):
        tiny_config(tiny_model_dir, tmp_path, train={"text_candidate": 1.0})
    with pytest.raises(ValueError, match="train.probe_text: null"):
        tiny_config(
            tiny_model_dir,
            tmp_path,
            train={"text_candidate": 1.0, "probe_text": 1.0, "tfidf_text": {}},
        )
