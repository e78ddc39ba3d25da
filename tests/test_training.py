"""Training on the tiny random Llama: splits, examples, features + cache, heads, baselines, pipeline."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from monitor.errors import ConfigError  # noqa: E402
from monitor.featurise import Featuriser, FeaturiserConfig  # noqa: E402
from monitor.signals import SIGNAL_NAMES, signal_matrix  # noqa: E402
from monitor.types import Step, Trajectory  # noqa: E402
from training.baselines import learned as bl  # noqa: E402
from training.config import PipelineConfig  # noqa: E402
from training.data.examples import (  # noqa: E402
    checked_steps,
    prefix_examples,
    run_weights,
    window_examples,
)
from training.data.records import load_records  # noqa: E402
from training.data.runs import labelled_runs, stratified_subsample  # noqa: E402
from training.data.splits import load_splits, make_splits, save_splits  # noqa: E402
from training.model.backbone import load_backbone  # noqa: E402
from training.model.classifier import (  # noqa: E402
    PrefixClassifier,
    build_classifier,
    load_classifier,
    save_classifier,
)
from training.model.features import (  # noqa: E402
    FeatureCache,
    PassStats,
    config_hash,
    extract_features,
    feature_key,
    run_hash,
)
from training.model.finetune import add_lora, finetune, merge_lora  # noqa: E402
from training.model.probe import fit_probe, head_scores  # noqa: E402
from training.pipeline.train import run_pipeline  # noqa: E402

FEAT = FeaturiserConfig(
    window_tokens=128, task_chars=80, action_chars=40, obs_head_chars=30, obs_tail_chars=20
)


def make_runs(n_instances: int = 16, seed: int = 0) -> list[Trajectory]:
    """Two agents, two runs per instance; unresolved runs mostly show failing tests."""
    rng = random.Random(seed)
    runs = []
    for i in range(n_instances):
        for agent, p_fail in (("alpha", 0.4), ("beta", 0.7)):
            for j in range(2):
                fail = rng.random() < p_fail
                steps = []
                for k in range(rng.randint(3, 9)):
                    bad = fail and rng.random() < 0.8
                    steps.append(
                        Step(
                            index=k,
                            tool="bash",
                            action="python -m pytest tests -x" if k % 2 else f"grep -rn def{k} src",
                            observation="Traceback (most recent call last): Error"
                            if bad
                            else "3 passed",
                            is_error=bad,
                            tokens_in=100 + k,
                            tokens_out=10,
                        )
                    )
                runs.append(
                    Trajectory(
                        id=f"{agent}/{j}/inst-{i}",
                        instance_id=f"inst-{i}",
                        agent=agent,
                        source=f"src-{agent}",
                        task=f"Task {i}: fix the bug in django/db/models.py",
                        steps=steps,
                        resolved=not fail,
                    )
                )
    return runs


@pytest.fixture(scope="module")
def runs() -> list[Trajectory]:
    return make_runs()


@pytest.fixture(scope="module")
def featuriser(tiny_model_dir) -> Featuriser:
    return Featuriser.from_tokenizer_file(tiny_model_dir, FEAT)


@pytest.fixture
def model(tiny_model_dir):
    torch.manual_seed(0)
    return build_classifier(str(tiny_model_dir), None, SIGNAL_NAMES).eval()


def test_splits_do_not_leak(runs, tmp_path):
    s = make_splits(runs, fractions=(0.5, 0.25, 0.25), seed=3)
    parts = [set(s.train), set(s.val), set(s.test)]
    assert not (parts[0] & parts[1])
    assert not (parts[0] & parts[2])
    assert not (parts[1] & parts[2])
    assert set().union(*parts) == {r.instance_id for r in runs}
    assert (len(s.train), len(s.val), len(s.test)) == (8, 4, 4)
    for r in runs:  # every run of an instance is in the split of its instance
        assert r in s.select(runs, s.of(r.instance_id))
    assert make_splits(runs, fractions=(0.5, 0.25, 0.25), seed=3) == s
    assert make_splits(runs, fractions=(0.5, 0.25, 0.25), seed=4).train != s.train
    save_splits(tmp_path / "splits.json", s)
    assert load_splits(tmp_path / "splits.json") == s
    d = s.to_dict()
    d["val"].append(d["train"][0])
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(ConfigError, match="in both train and val"):
        load_splits(tmp_path / "bad.json")


def test_examples_weights_and_unknown_labels(runs):
    extra = Trajectory(
        id="x", instance_id="inst-x", agent="alpha", steps=runs[0].steps, resolved=None
    )
    lab = labelled_runs([*runs, extra])
    assert len(lab.runs) == len(runs)
    assert lab.unknown == {"alpha": 1}
    w = run_weights(lab.runs, balance="agent_class")
    assert w.mean() == pytest.approx(1.0)
    cells: dict = {}
    for r, wi in zip(lab.runs, w, strict=True):
        cells[(r.agent, r.resolved)] = cells.get((r.agent, r.resolved), 0) + wi
    assert len(cells) == 4
    assert np.allclose(list(cells.values()), len(runs) / 4)
    ex = prefix_examples(lab.runs, min_steps=2, every=2, weights=w)
    for i, r in enumerate(lab.runs):  # each run carries its run weight, spread over its prefixes
        assert ex.weight[ex.run == i].sum() == pytest.approx(w[i])
        assert (
            ex.step[ex.run == i].tolist()
            == checked_steps(len(r.steps), min_steps=2, every=2).tolist()
        )
    assert set(ex.label[ex.run == 0]) == {0 if lab.runs[0].resolved else 1}
    sub = stratified_subsample(lab.runs, 20, seed=0)
    assert len(sub) <= 22
    assert {r.agent for r in sub} == {"alpha", "beta"}


def test_scores_are_probabilities_and_save_load_round_trip(
    model, featuriser, runs, tiny_model_dir, tmp_path
):
    with torch.no_grad():
        model.head.weight.normal_()
        model.head.bias.fill_(0.3)
        model.signal_std.fill_(2.0)
    win = featuriser.windows(runs[0])[0]
    ids = torch.tensor([win.ids])
    sig = torch.tensor(signal_matrix(runs[0])[None, : len(win.steps)], dtype=torch.float32)
    logits = model(ids, torch.ones_like(ids), torch.tensor([win.boundaries]), sig)
    assert logits.shape == (1, len(win.boundaries))
    p = torch.sigmoid(logits)
    assert ((p > 0) & (p < 1)).all()
    save_classifier(
        model,
        tmp_path / "m",
        tokenizer_dir=tiny_model_dir,
        base="tiny",
        head_kind="probe",
        featuriser=FEAT.model_dump(),
    )
    meta = json.loads((tmp_path / "m" / "classifier.json").read_text())
    assert meta["n_layers"] == 2
    assert meta["signal_names"] == list(SIGNAL_NAMES)
    again = load_classifier(tmp_path / "m")
    assert torch.allclose(
        again(ids, torch.ones_like(ids), torch.tensor([win.boundaries]), sig), logits, atol=1e-6
    )


def test_one_pass_equals_per_prefix_encoding(model, featuriser, runs):
    feats = extract_features(model, featuriser, runs[:3], progress=False)
    win = featuriser.windows(runs[0])[0]
    for b, k in zip(win.boundaries, win.steps, strict=True):
        ids = torch.tensor([win.ids[: b + 1]])
        alone = model.features(ids, torch.ones_like(ids))[0, -1].detach().numpy()
        np.testing.assert_allclose(feats[0].hidden[k - 1], alone, atol=1e-5)
    assert feats[0].hidden.shape == (len(runs[0].steps), 16)
    assert feats[0].encoded_tokens == sum(len(w.ids) for w in featuriser.windows(runs[0]))


def test_causal_mean_pooling_equals_direct_mean(tiny_model_dir):
    torch.manual_seed(1)
    model = build_classifier(str(tiny_model_dir), None, SIGNAL_NAMES, pooling="last+mean").eval()
    assert model.head.in_features == 2 * 16 + len(SIGNAL_NAMES)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(1, 300, (2, 19), generator=g)
    mask = torch.ones(2, 19, dtype=torch.long)
    mask[1, 11:] = 0  # right padding
    with torch.no_grad():
        torch.nn.init.normal_(model.head.weight, std=0.5)
        feats = model.token_features(ids, mask)  # (B, T, 2H)
        h = model.features(ids, mask)
    assert feats.shape == (2, 19, 32)
    for row, n in ((0, 19), (1, 11)):
        hr = h[row, :n].double().numpy()
        direct = np.cumsum(hr, axis=0) / np.arange(1, n + 1)[:, None]
        np.testing.assert_allclose(feats[row, :n, :16].numpy(), hr, atol=1e-6)
        np.testing.assert_allclose(feats[row, :n, 16:].numpy(), direct, atol=1e-5)
        # each row's mean is that of the row encoded alone (padding is masked out)
        with torch.no_grad():
            alone = model.token_features(ids[row : row + 1, :n], mask[row : row + 1, :n])[0]
        np.testing.assert_allclose(feats[row, :n].numpy(), alone.numpy(), atol=1e-5)
    # forward = head over the gathered [last ; mean] at the positions
    pos = torch.tensor([[2, 10, 18], [0, 5, 10]])
    sig = torch.rand(2, 3, len(SIGNAL_NAMES), generator=g) * 9
    with torch.no_grad():
        logits = model(ids, mask, pos, sig)
        for row in range(2):
            want = model.head_logits(feats[row, pos[row]][None], sig[row][None])[0]
            assert torch.allclose(logits[row], want, atol=1e-6)


def test_mean_pooled_features_one_pass_and_round_trip(tiny_model_dir, featuriser, runs, tmp_path):
    torch.manual_seed(0)
    model = build_classifier(str(tiny_model_dir), None, SIGNAL_NAMES, pooling="last+mean").eval()
    feats = extract_features(model, featuriser, runs[:3], progress=False)
    assert feats[0].hidden.shape == (len(runs[0].steps), 32)
    for w in featuriser.windows(runs[0]):
        for b, k in zip(w.boundaries, w.steps, strict=True):
            ids = torch.tensor([w.ids[: b + 1]])
            with torch.no_grad():
                h = model.features(ids, torch.ones_like(ids))[0].numpy()
            np.testing.assert_allclose(feats[0].hidden[k - 1, :16], h[-1], atol=1e-5)
            np.testing.assert_allclose(feats[0].hidden[k - 1, 16:], h.mean(axis=0), atol=1e-5)
    with torch.no_grad():
        torch.nn.init.normal_(model.head.weight, std=0.5)
        model.signal_std.fill_(3.0)
    save_classifier(
        model,
        tmp_path / "m",
        tokenizer_dir=tiny_model_dir,
        base="tiny",
        head_kind="probe",
        featuriser=FEAT.model_dump(),
    )
    assert json.loads((tmp_path / "m" / "classifier.json").read_text())["pooling"] == "last+mean"
    again = load_classifier(tmp_path / "m")
    assert again.pooling == "last+mean"
    s = signal_matrix(runs[0])
    np.testing.assert_allclose(
        head_scores(again, feats[0].hidden, s), head_scores(model, feats[0].hidden, s), atol=1e-7
    )


def test_feature_cache_key_changes_with_pooling(tiny_model_dir, tmp_path):
    last, mean = feature_key(FEAT, "last"), feature_key(FEAT, "last+mean")
    assert last == config_hash(FEAT)  # caches written before pooling existed stay valid
    assert mean != last
    assert FeatureCache(tmp_path, "m", last).dir != FeatureCache(tmp_path, "m", mean).dir
    with pytest.raises(ValueError, match="pooling"):
        PrefixClassifier(load_backbone(tiny_model_dir), [], pooling="max")


def test_resumed_feature_cache_gives_identical_scores(model, featuriser, runs, tmp_path):
    cache = FeatureCache(tmp_path, "tiny", "cfg")
    first = extract_features(model, featuriser, runs, cache=cache, chunk_runs=5, progress=False)
    files = sorted(cache.dir.rglob("*.npz"))
    assert len(files) == len({run_hash(r) for r in runs})
    for f in files[::3]:  # as if the pass had been interrupted
        f.unlink()
    stats = PassStats()
    second = extract_features(
        model,
        featuriser,
        runs,
        cache=FeatureCache(tmp_path, "tiny", "cfg"),
        progress=False,
        stats=stats,
    )
    assert stats.cached_runs == len(files) - len(files[::3])
    assert stats.runs == len(files[::3])
    for a, b, r in zip(first, second, runs, strict=True):
        s = signal_matrix(r)
        assert np.array_equal(head_scores(model, a.hidden, s), head_scores(model, b.hidden, s))


def _probe_data(model, featuriser, runs):
    feats = extract_features(model, featuriser, runs, progress=False)
    sig = [signal_matrix(r) for r in runs]
    ex = prefix_examples(runs, min_steps=1, every=1, weights=run_weights(runs))
    hid = np.stack([feats[i].hidden[k - 1] for i, k in zip(ex.run, ex.step, strict=True)])
    s = np.stack([sig[i][k - 1] for i, k in zip(ex.run, ex.step, strict=True)])
    return feats, sig, ex, hid, s


def test_probe_learns(model, featuriser, runs):
    feats, sig, ex, hid, s = _probe_data(model, featuriser, runs)
    fit = fit_probe(model, hid, s, ex.label, ex.weight, [runs[i].agent for i in ex.run], C=1.0)
    assert fit.train_loss < 0.8 * fit.initial_loss
    assert float(model.head.weight.detach().abs().sum()) > 0
    scores = head_scores(model, hid, s)
    assert ((scores > 0) & (scores < 1)).all()
    from sklearn.metrics import roc_auc_score

    assert roc_auc_score(ex.label, scores) > 0.8
    assert set(fit.agent_offsets) == {"alpha", "beta"}
    # Without agent columns the exported head IS the fitted model: same loss after folding the
    # standardisation, the hidden scale and the asinh of the signals into it.
    fit = fit_probe(
        model,
        hid,
        s,
        ex.label,
        ex.weight,
        ["x"] * len(ex.label),
        C=0.3,
        hidden_scale=0.1,
        agent_columns=False,
    )
    p = np.clip(head_scores(model, hid, s), 1e-7, 1 - 1e-7)
    w = ex.weight / ex.weight.mean()
    loss = np.average(-(ex.label * np.log(p) + (1 - ex.label) * np.log(1 - p)), weights=w)
    assert loss == pytest.approx(fit.train_loss, rel=1e-4)


@pytest.mark.parametrize("head", ["lora", "full"])
def test_finetune_heads_train(head, model, featuriser, runs, tmp_path):
    _, sig, ex, _, _ = _probe_data(model, featuriser, runs[:8])
    examples = window_examples(featuriser, runs[:8], sig, ex)
    assert sum(len(e["positions"]) for e in examples) == len(ex)
    before = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    if head == "lora":
        add_lora(
            model, r=4, alpha=8, dropout=0.0, top_layers=1, target_modules=["q_proj", "v_proj"]
        )
    model.train()
    losses = finetune(
        model,
        examples[:4],
        out_dir=tmp_path,
        max_steps=12,
        lr=3e-2,
        batch_size=4,
        logging_steps=1,
        progress=False,
    )
    merge_lora(model)
    assert len(losses) == 12
    assert np.isfinite(losses).all()
    assert np.mean(losses[-3:]) < losses[0]  # loss goes down on a fixed batch
    after = model.backbone.state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed
    if head == "lora":  # only the adapted (top) layer moved
        assert all("layers.1." in k for k in changed)
    assert float(model.head.weight.detach().abs().sum()) > 0


def test_tfidf_run_scores_match_pipeline(featuriser, runs):
    ex = prefix_examples(runs, min_steps=1, every=1)
    steps = [ex.step[ex.run == i] for i in range(len(runs))]
    w = [ex.weight[ex.run == i] for i in range(len(runs))]
    pipe = bl.fit_tfidf_lr(featuriser, runs, steps, [0 if r.resolved else 1 for r in runs], w)
    r = runs[1]
    pieces = bl.run_pieces(featuriser, r)
    texts = ["".join(pieces[: k + 1]) for k in range(1, len(r.steps) + 1)]
    np.testing.assert_allclose(
        bl.tfidf_run_scores(pipe, featuriser, r), pipe.predict_proba(texts)[:, 1]
    )
    sig_pipe = bl.fit_signals_lr(
        np.stack([signal_matrix(x)[-1] for x in runs]),
        np.array([0 if x.resolved else 1 for x in runs]),
        np.ones(len(runs)),
    )
    s = bl.signals_run_scores(sig_pipe, signal_matrix(r))
    assert s.shape == (len(r.steps),)
    assert ((s > 0) & (s < 1)).all()


def test_pipeline_end_to_end_and_cache(tiny_model_dir, tmp_path):
    runs = make_runs(20, seed=1)
    cfg = PipelineConfig.model_validate(
        {
            "featurise": FEAT.model_dump(),
            "policy": {"min_steps": 2, "every": 1},
            "model": {"base": str(tiny_model_dir), "n_layers": 1},
            "train": {
                "cache_dir": str(tmp_path / "cache"),
                "progress": False,
                "bundle": False,
                "probe_C": [0.1, 1.0],
            },
        }
    )
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
    cfg = PipelineConfig.model_validate(
        {
            "featurise": FEAT.model_dump(),
            "policy": {"min_steps": 2, "every": 1},
            "model": {"base": str(tiny_model_dir), "n_layers": 1, "pooling": "last+mean"},
            "train": {
                "cache_dir": str(tmp_path / "cache"),
                "progress": False,
                "probe_C": [0.3],
                "probe_hidden_scale": [0.5],
                "baselines": False,
            },
        }
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
        traj = by_id[rec.run_id]
        full = np.array(scorer.score_run(traj))
        np.testing.assert_allclose(full, rec.scores["monitor"], atol=1e-5)
        sess = scorer.start(traj.task, traj.agent)
        live = [sess.observe(st) for st in traj.steps]
        np.testing.assert_allclose(live, full, atol=1e-4)


@pytest.mark.slow
def test_real_smollm2_truncated_backbone(tmp_path):
    """The GGUF base converts to a plain folder; a 2-layer cut scores a run and round-trips."""
    from training.model.backbone import resolve_base

    base = resolve_base("smollm2-135m")
    assert json.loads((base / "config.json").read_text()).get("quantization_config") is None
    model = build_classifier("smollm2-135m", 2, SIGNAL_NAMES).eval()
    assert len(model.backbone.layers) == 2
    assert model.hidden == 576
    feat = Featuriser.from_tokenizer_file(base, FEAT)
    run = make_runs(1)[0]
    feats = extract_features(model, feat, [run], progress=False)
    assert feats[0].hidden.shape == (len(run.steps), 576)
    save_classifier(
        model,
        tmp_path / "m",
        tokenizer_dir=base,
        base="smollm2-135m",
        head_kind="probe",
        featuriser=FEAT.model_dump(),
    )
    again = load_classifier(tmp_path / "m")
    again_feats = extract_features(again, feat, [run], progress=False)
    np.testing.assert_allclose(again_feats[0].hidden, feats[0].hidden, atol=1e-5)


def test_load_runs_from_an_ingest_folder_keeps_cache_keys(runs, tmp_path):
    from monitor.corpus import CORPUS_FILE, write_corpus
    from training.data.runs import load_runs

    write_corpus(runs, tmp_path / CORPUS_FILE)
    again = load_runs([tmp_path])
    assert [r.id for r in again] == [r.id for r in runs]
    assert [r.resolved for r in again] == [r.resolved for r in runs]
    # the feature cache is keyed by content: a corpus round trip must not invalidate it
    assert [run_hash(r) for r in again] == [run_hash(r) for r in runs]


def test_out_of_fold_scores_never_use_the_runs_instance(model, featuriser, runs):
    from training.model.crossfit import instance_folds, out_of_fold_scores

    folds = instance_folds(runs, 3, seed=0)
    by_inst: dict[str, set[int]] = {}
    for r, f in zip(runs, folds, strict=True):
        by_inst.setdefault(r.instance_id, set()).add(int(f))
    assert all(len(fs) == 1 for fs in by_inst.values())  # both agents' runs share the fold
    assert set(folds.tolist()) == {0, 1, 2}
    feats, sig, ex, hid, s = _probe_data(model, featuriser, runs)
    agents = [runs[i].agent for i in ex.run]
    fit_probe(model, hid, s, ex.label, ex.weight, agents, C=0.1, hidden_scale=0.1)
    served = [head_scores(model, f.hidden, g) for f, g in zip(feats, sig, strict=True)]
    oof = out_of_fold_scores(
        model, runs, [f.hidden for f in feats], sig, ex.run, hid, s, ex.label, ex.weight,
        C=0.1, hidden_scale=0.1, folds=3, seed=0,
    )  # fmt: skip
    # the served head is restored
    again = [head_scores(model, f.hidden, g) for f, g in zip(feats, sig, strict=True)]
    assert all(np.array_equal(a, b) for a, b in zip(served, again, strict=True))
    # a run's out-of-fold score is the probe fitted on the other folds' examples only
    keep = folds[ex.run] != 0
    fit_probe(model, hid[keep], s[keep], ex.label[keep], ex.weight[keep],
              [a for a, k in zip(agents, keep, strict=True) if k], C=0.1, hidden_scale=0.1)  # fmt: skip
    i = int(np.flatnonzero(folds == 0)[0])
    assert np.allclose(oof[i], head_scores(model, feats[i].hidden, sig[i]))
    assert not np.allclose(oof[i], served[i])
    assert all(len(o) == len(r.steps) for o, r in zip(oof, runs, strict=True))
    with pytest.raises(ValueError, match="instances for"):
        instance_folds(runs[:2], 3)


def test_pipeline_calibrates_on_validation_plus_out_of_fold_training_runs(tiny_model_dir, tmp_path):
    runs = make_runs(20, seed=1)
    cfg = PipelineConfig.model_validate(
        {
            "featurise": FEAT.model_dump(),
            "policy": {"min_steps": 2, "every": 1},
            "model": {"base": str(tiny_model_dir), "n_layers": 1},
            "thresholds": {"calibration": "val+train-oof", "crossfit_folds": 3},
            "train": {"cache_dir": str(tmp_path / "cache"), "progress": False, "bundle": True,
                      "baselines": False},
        }
    )  # fmt: skip
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
        assert th["per_agent"][agent]["n_resolved"] == cal["per_agent"][agent]["resolved"]


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
