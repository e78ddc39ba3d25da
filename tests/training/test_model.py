"""Model stage on the tiny random Llama: classifier, one-pass features and cache, probe, fine-tuning, out-of-fold scores."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from monitor.featurise import Featuriser  # noqa: E402
from monitor.schedule import Schedule  # noqa: E402
from monitor.signals import SIGNAL_NAMES, signal_matrix  # noqa: E402
from tests.training.conftest import FEAT, make_runs  # noqa: E402
from training.config import TrainConfig  # noqa: E402
from training.data.examples import (  # noqa: E402
    prefix_examples,
    run_weights,
    window_examples,
)
from training.model.backbone import load_backbone  # noqa: E402
from training.model.cache import FeatureCache, config_hash, feature_key, run_hash  # noqa: E402
from training.model.classifier import PrefixClassifier, build_classifier  # noqa: E402
from training.model.classifier_files import load_classifier, save_classifier  # noqa: E402
from training.model.features import PassStats, extract_features  # noqa: E402
from training.model.finetune import add_lora, finetune, merge_lora  # noqa: E402
from training.model.probe import ProbeRows, fit_probe, head_scores  # noqa: E402

EVERY_STEP = Schedule(min_steps=1, every=1, persist=1)


def save_tiny(model, path, tiny_model_dir):
    """Save a classifier on the tiny model as `failfast train` does (probe head)."""
    return save_classifier(
        model,
        path,
        tokenizer_dir=tiny_model_dir,
        base="tiny",
        head_kind="probe",
        featuriser=FEAT.model_dump(),
    )


def _probe_data(model, featuriser, runs):
    feats = extract_features(model, featuriser, runs, progress=False)
    sig = [signal_matrix(r) for r in runs]
    ex = prefix_examples(runs, schedule=EVERY_STEP, weights=run_weights(runs))
    hid = np.stack([feats[i].hidden[k - 1] for i, k in zip(ex.run, ex.step, strict=True)])
    s = np.stack([sig[i][k - 1] for i, k in zip(ex.run, ex.step, strict=True)])
    return feats, sig, ex, hid, s


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
    save_tiny(model, tmp_path / "m", tiny_model_dir)
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
    save_tiny(model, tmp_path / "m", tiny_model_dir)
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


def test_probe_learns(model, featuriser, runs):
    feats, sig, ex, hid, s = _probe_data(model, featuriser, runs)
    agents = [runs[i].agent for i in ex.run]
    fit = fit_probe(model, ProbeRows(hid, s, ex.label, ex.weight, agents), C=1.0)
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
        ProbeRows(hid, s, ex.label, ex.weight, ["x"] * len(ex.label)),
        C=0.3,
        hidden_scale=0.1,
        agent_columns=False,
    )
    p = np.clip(head_scores(model, hid, s), 1e-7, 1 - 1e-7)
    w = ex.weight / ex.weight.mean()
    loss = np.average(-(ex.label * np.log(p) + (1 - ex.label) * np.log(1 - p)), weights=w)
    assert loss == pytest.approx(fit.train_loss, rel=1e-4)


def test_stop_loss_gradient_and_hard_max_limit():
    from scipy.optimize import check_grad

    from training.model.stop_loss import stop_loss

    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 4))
    runs = np.repeat(np.arange(10), 3)
    y = np.repeat((rng.uniform(size=10) < 0.4).astype(int), 3)
    w = rng.uniform(0.5, 2.0, 30)
    f = stop_loss(x, y, w, runs, C=0.7, focus=2.0)
    theta = rng.normal(size=5)
    assert check_grad(lambda t: f(t)[0], lambda t: f(t)[1], theta) < 1e-4
    # a sharp focus puts a resolved run's loss on its highest logit alone
    sharp = stop_loss(x, y, w, runs, C=1.0, focus=200.0)
    z = x @ theta[:-1] + theta[-1]
    want = sum(w[y == 1] * np.logaddexp(0, -z[y == 1]))
    for r in np.unique(runs[y == 0]):
        want += w[runs == r].sum() * np.logaddexp(0, z[runs == r].max())
    want += 0.5 * theta[:-1] @ theta[:-1]
    assert sharp(theta)[0] == pytest.approx(want, rel=1e-2)


def test_probe_with_max_focus_lowers_resolved_runs_highest_scores(model, featuriser, runs):
    feats, sig, ex, hid, s = _probe_data(model, featuriser, runs)
    agents = [runs[i].agent for i in ex.run]
    rows = ProbeRows(hid, s, ex.label, ex.weight, agents, ex.run)
    peaks = {}
    for focus in (0.0, 3.0):
        fit = fit_probe(model, rows, C=1.0, max_focus=focus)
        assert fit.max_focus == focus
        sc = head_scores(model, hid, s)
        peaks[focus] = np.mean([sc[ex.run == i].max() for i in np.unique(ex.run[ex.label == 0])])
    assert peaks[3.0] < peaks[0.0]
    with pytest.raises(ValueError, match="run indices"):
        fit_probe(model, ProbeRows(hid, s, ex.label, ex.weight, agents), C=1.0, max_focus=1.0)


def test_ranking_pairs_are_same_agent_same_step_failing_against_resolved():
    from training.model.stop_loss import ranking_pairs

    y = np.array([1, 0, 1, 0, 1, 0])
    agents = ["a", "a", "a", "b", "b", "a"]
    steps = np.array([3, 3, 4, 3, 3, 4])
    fi, ri = ranking_pairs(y, agents, steps, max_pairs=100)
    assert len(fi)
    assert len(fi) == len(ri)
    for f, r in zip(fi, ri, strict=True):
        assert (y[f], y[r]) == (1, 0)
        assert (agents[f], steps[f]) == (agents[r], steps[r])


def test_stop_loss_with_the_ranking_term_has_the_right_gradient():
    from scipy.optimize import check_grad

    from training.model.stop_loss import ranking_pairs, stop_loss

    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 3))
    y = (rng.uniform(size=40) < 0.5).astype(int)
    steps = np.tile(np.arange(1, 5), 10)
    pairs = ranking_pairs(y, ["a"] * 40, steps)
    for focus in (0.0, 3.0):
        f = stop_loss(x, y, np.ones(40), np.arange(40), C=0.5, focus=focus, pairs=pairs,
                      rank_weight=0.7)  # fmt: skip
        assert check_grad(lambda t, f=f: f(t)[0], lambda t, f=f: f(t)[1], rng.normal(size=4)) < 1e-4


@pytest.mark.parametrize("head", ["lora", "full"])
def test_finetune_heads_train(head, model, featuriser, runs, tmp_path):
    _, sig, ex, _, _ = _probe_data(model, featuriser, runs[:8])
    examples = window_examples(featuriser, runs[:8], sig, ex)
    assert sum(len(e["positions"]) for e in examples) == len(ex)
    before = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    tc = TrainConfig(
        max_steps=12,
        lr=3e-2,
        batch_size=4,
        progress=False,
        lora_r=4,
        lora_alpha=8,
        lora_top_layers=1,
        lora_targets=["q_proj", "v_proj"],
    )
    if head == "lora":
        add_lora(model, tc)
    model.train()
    losses = finetune(model, examples[:4], tc, out_dir=tmp_path, logging_steps=1)
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


def test_out_of_fold_scores_never_use_the_runs_instance(model, featuriser, runs):
    from training.data.folds import instance_folds
    from training.model.crossfit import out_of_fold_scores

    folds = instance_folds(runs, 3, seed=0)
    by_inst: dict[str, set[int]] = {}
    for r, f in zip(runs, folds, strict=True):
        by_inst.setdefault(r.instance_id, set()).add(int(f))
    assert all(len(fs) == 1 for fs in by_inst.values())  # both agents' runs share the fold
    assert set(folds.tolist()) == {0, 1, 2}
    feats, sig, ex, hid, s = _probe_data(model, featuriser, runs)
    agents = [runs[i].agent for i in ex.run]
    rows = ProbeRows(hid, s, ex.label, ex.weight, agents)
    fit_probe(model, rows, C=0.1, hidden_scale=0.1)
    served = [head_scores(model, f.hidden, g) for f, g in zip(feats, sig, strict=True)]
    oof = out_of_fold_scores(
        model, runs, [f.hidden for f in feats], sig, ex.run, rows,
        C=0.1, hidden_scale=0.1, folds=3, seed=0,
    )  # fmt: skip
    # the served head is restored
    again = [head_scores(model, f.hidden, g) for f, g in zip(feats, sig, strict=True)]
    assert all(np.array_equal(a, b) for a, b in zip(served, again, strict=True))
    # a run's out-of-fold score is the probe fitted on the other folds' examples only
    keep = folds[ex.run] != 0
    fit_probe(model, rows.take(keep), C=0.1, hidden_scale=0.1)
    i = int(np.flatnonzero(folds == 0)[0])
    assert np.allclose(oof[i], head_scores(model, feats[i].hidden, sig[i]))
    assert not np.allclose(oof[i], served[i])
    assert all(len(o) == len(r.steps) for o, r in zip(oof, runs, strict=True))
    with pytest.raises(ValueError, match="instances for"):
        instance_folds(runs[:2], 3)


def test_config_hash_ignores_fields_added_later_at_their_default() -> None:
    """Features cached before `pin_edit_chars` existed keep their key while it is off."""
    import hashlib
    import json

    from monitor.featurise import FeaturiserConfig
    from training.model.cache import config_hash

    cfg = FeaturiserConfig(window_tokens=512)
    before = {k: v for k, v in cfg.model_dump().items() if k != "pin_edit_chars"}
    old = hashlib.sha256(json.dumps(before, sort_keys=True).encode()).hexdigest()[:12]
    assert config_hash(cfg) == old
    assert config_hash(cfg.model_copy(update={"pin_edit_chars": 400})) != old


def test_probe_text_head_is_the_regressions_own_logit(runs, model, tiny_model_dir, tmp_path):
    """With text columns (train.probe_text) the head's logit plus the text head's is the fitted
    regression's own logit on every training row; the served form (monitor_text.json) scores
    runs as the training side does, and a saved model reads it back."""
    from serving.candidates import PieceText, TfidfLR
    from training.baselines.probe_text import TextColumns
    from training.model.classifier_files import load_classifier, save_classifier

    rng = np.random.default_rng(0)
    hidden = [rng.normal(size=(len(r.steps), model.n_features)).astype(np.float32) for r in runs]
    signals = [
        rng.poisson(2.0, size=(len(r.steps), model.n_signals)).astype(np.float32) for r in runs
    ]
    ex = prefix_examples(runs, schedule=EVERY_STEP, weights=run_weights(runs), max_per_run=3)
    cols, text_rows = TextColumns.fit(
        runs, ex, text=PieceText(200, 40, 30, 30, 0), scale=2.0, max_features=60
    )
    rows = ProbeRows(
        ex.rows(hidden), ex.rows(signals), ex.label, ex.weight,
        [runs[i].agent for i in ex.run], ex.run, ex.step, text_rows, cols.head(),
    )  # fmt: skip
    fit = fit_probe(model, rows, C=0.5, hidden_scale=0.1, agent_columns=False)
    assert model.text_head is not None
    assert np.abs(model.text_head.coef).max() > 0
    with pytest.raises(ValueError, match="pass the run"):
        head_scores(model, hidden[0], signals[0])
    per_run = [head_scores(model, h, s, r) for h, s, r in zip(hidden, signals, runs, strict=True)]
    p = np.clip([per_run[i][k - 1] for i, k in zip(ex.run, ex.step, strict=True)], 1e-7, 1 - 1e-7)
    w = ex.weight * len(ex.weight) / ex.weight.sum()
    loss = np.average(-(ex.label * np.log(p) + (1 - ex.label) * np.log(1 - p)), weights=w)
    assert loss == pytest.approx(fit.train_loss, rel=1e-5)
    served = TfidfLR.from_json(model.text_head.to_json())
    for r in runs[:6]:
        np.testing.assert_allclose(served.run_logits(r), model.text_head.run_logits(r), atol=1e-9)
    save_classifier(
        model, tmp_path / "m", tokenizer_dir=tiny_model_dir, base="tiny", head_kind="probe",
        featuriser=FEAT.model_dump(),
    )  # fmt: skip
    again = load_classifier(tmp_path / "m")
    np.testing.assert_allclose(
        head_scores(again, hidden[0], signals[0], runs[0]), per_run[0], atol=1e-6
    )
