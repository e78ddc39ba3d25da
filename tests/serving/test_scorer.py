"""The onnxruntime Scorer: whole runs, prefixes, KV sessions, thresholds, bundle checks."""

from __future__ import annotations

import json
import shutil
import threading

import numpy as np
import pytest

from tests.bundle_helpers import make_run, shared_bundle

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def bundle(tiny_model_dir, tmp_path_factory):
    return shared_bundle(tiny_model_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def scorer(bundle):
    from serving.scorer import Scorer

    return Scorer.load(bundle, threads=1)


def torch_scores(bundle, traj):
    """Reference scores: the torch classifier on the featuriser's windows."""
    import torch

    from monitor.signals import signal_matrix
    from training.model.classifier_files import load_classifier

    model = load_classifier(bundle.parent / "model")
    from serving.scorer import Scorer

    feat = Scorer.load(bundle, verify=False).featuriser
    sig = signal_matrix(traj).astype(np.float32)
    out = np.zeros(len(traj.steps))
    for w in feat.windows(traj):
        k = np.asarray(w.steps) - 1
        with torch.no_grad():
            logits = model(
                torch.tensor([w.ids]),
                torch.ones(1, len(w.ids), dtype=torch.long),
                torch.tensor([w.boundaries]),
                torch.from_numpy(sig[k][None]),
            )
        out[k] = torch.sigmoid(logits[0].double()).numpy()
    return out


def test_score_run_matches_torch(bundle, scorer):
    traj = make_run(30)
    scores = np.array(scorer.score_run(traj))
    assert scores.shape == (30,)
    assert len(scorer.featuriser.windows(traj)) > 3  # the run crosses several windows
    assert np.abs(scores - torch_scores(bundle, traj)).max() < 1e-5
    assert ((scores > 0) & (scores < 1)).all()


def test_session_matches_score_run_across_rerenders(scorer):
    traj = make_run(30, seed=3)
    full = scorer.score_run(traj)
    sess = scorer.start(traj.task, traj.agent)
    live = [sess.observe(s) for s in traj.steps]
    assert sess.restarts >= 3
    assert live == pytest.approx(full, abs=1e-5)
    # a new step costs its own tokens: far fewer tokens than re-encoding every prefix
    per_prefix = sum(len(w.ids) for w in scorer.featuriser.windows(traj))
    assert sess.tokens_encoded <= per_prefix


@pytest.mark.parametrize("pooling", ["last", "last+mean"])
def test_chunked_kv_feeding_gives_the_same_scores(scorer, pooled_bundle, pooling):
    """Live sessions feed the KV graph in chunks (Scorer.encode_chunk, a memory bound): chunks of
    5 tokens, 256 and one call per input all give the whole-rendering scores."""
    from serving.scorer import Scorer

    sc = scorer if pooling == "last" else Scorer.load(pooled_bundle, threads=1)
    traj = make_run(20, seed=5)
    full = np.array(sc.score_run(traj))
    for chunk in (5, 256, 0):
        sc.encode_chunk = chunk
        try:
            sess = sc.start(traj.task, traj.agent)
            live = np.array([sess.observe(s) for s in traj.steps])
        finally:
            sc.encode_chunk = Scorer.encode_chunk
        assert sess.restarts >= 1
        assert np.abs(live - full).max() <= 1e-4, chunk


@pytest.fixture(scope="module")
def pooled_bundle(tiny_model_dir, tmp_path_factory):
    return shared_bundle(tiny_model_dir, tmp_path_factory, pooling="last+mean")


def test_mean_pooled_session_equals_whole_rendering_at_every_step(pooled_bundle):
    """pooling last+mean: the running hidden sum/count travels with the KV cache and restarts
    on each re-render, so every live score equals the whole-rendering (and torch) score."""
    from serving.scorer import Scorer

    scorer = Scorer.load(pooled_bundle, threads=1)
    assert scorer.pooled
    traj = make_run(30, seed=3)
    full = np.array(scorer.score_run(traj))
    np.testing.assert_allclose(full, torch_scores(pooled_bundle, traj), atol=1e-5)
    sess = scorer.start(traj.task, traj.agent)
    live = np.array([sess.observe(s) for s in traj.steps])
    assert sess.restarts >= 3
    assert np.abs(live - full).max() <= 1e-4
    # the mean matters: the same head on "last" alone scores differently
    assert not scorer.bundle.kv["pooled_hidden"] == 0


def test_score_prefix_is_the_run_score(scorer):
    traj = make_run(12, seed=1)
    full = scorer.score_run(traj)
    assert scorer.score_prefix(traj, 5) == pytest.approx(full[4], abs=1e-6)
    with pytest.raises(ValueError, match="outside"):
        scorer.score_prefix(traj, 13)


def test_int8_close_to_fp32(bundle, scorer):
    from serving.scorer import Scorer

    traj = make_run(15, seed=2)
    q = Scorer.load(bundle, int8=True)
    a, b = np.array(scorer.score_run(traj)), np.array(q.score_run(traj))
    assert np.abs(a - b).max() < 0.05
    assert not np.array_equal(a, b)  # really another graph


def test_thresholds_lookup(scorer, caplog):
    th = scorer.thresholds("mini-swe-agent")
    assert (th.stop, th.warn, th.origin) == (0.61, 0.45, "agent")
    # refused for its own agent -> pooled
    th = scorer.thresholds("swe-agent")
    assert (th.stop, th.warn, th.origin) == (0.7, 0.5, "pooled")
    with caplog.at_level("WARNING"):
        th = scorer.thresholds("never-seen-agent")
    assert (th.stop, th.origin) == (0.7, "pooled-unknown-agent")
    assert "never-seen-agent" in caplog.text
    # the warning says what the thresholds are keyed by and which names exist
    assert "keyed by agent" in caplog.text
    assert "mini-swe-agent" in caplog.text
    sess = scorer.start("task", "mini-swe-agent")
    assert (sess.threshold, sess.warn_threshold) == (0.61, 0.45)


def test_monitor_session_gives_decisions_and_stops(bundle):
    from serving.scorer import Scorer

    scorer = Scorer.load(bundle, target=0.1)
    traj = make_run(10, seed=4)
    scores = scorer.score_run(traj)
    session = scorer.session(traj.task, traj.agent)
    decisions = [session.observe(s) for s in traj.steps]
    stops = [d for d in decisions if d.stop]
    # a stopped session repeats its stop without scoring again: compare up to the first stop
    scored = len(decisions) if not stops else stops[0].step
    assert [d.score for d in decisions[:scored]] == pytest.approx(scores[:scored], abs=1e-5)
    assert decisions[0].threshold == 0.55
    from monitor.policy import PolicyConfig

    first = PolicyConfig.model_validate(scorer.policy).first_stop(scores, 0.55)
    if first is None:
        assert not stops
    else:
        assert stops[0].step == first
        assert stops[0].reason == "predicted_failure"
        assert all(d.stop for d in decisions[first - 1 :])


def test_internal_failure_is_monitor_error_then_recovers(scorer):
    from monitor import Monitor, PolicyConfig

    traj = make_run(8, seed=5)
    full = scorer.score_run(traj)
    # a policy that never stops on score, so every step is scored (the tiny head scores ~0.8)
    quiet = Monitor(PolicyConfig(min_steps=100), scorer=scorer)
    session = scorer.session(traj.task, traj.agent, monitor=quiet)
    raw = session.scorer
    for s in traj.steps[:3]:
        session.observe(s)
    real = raw._scorer.kv

    class Broken:
        def run(self, *a, **k):
            raise RuntimeError("onnxruntime fell over")

    raw._scorer.kv = Broken()
    try:
        d = session.observe(traj.steps[3])
    finally:
        raw._scorer.kv = real
    assert (d.action, d.reason) == ("continue", "monitor_error")
    d = session.observe(traj.steps[4])  # the cache is rebuilt from the window
    assert d.score == pytest.approx(full[4], abs=1e-5)


def test_sessions_are_thread_safe(scorer):
    runs = [make_run(12, seed=s) for s in range(4)]
    want = [scorer.score_run(r) for r in runs]
    got: dict[int, list[float]] = {}

    def work(i):
        sess = scorer.start(runs[i].task, runs[i].agent)
        got[i] = [sess.observe(s) for s in runs[i].steps]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        assert got[i] == pytest.approx(want[i], abs=1e-5)


def test_bundle_errors(bundle, tmp_path):
    from monitor.errors import BundleError
    from serving.bundle import load_bundle

    bad = tmp_path / "b"
    shutil.copytree(bundle, bad)
    with open(bad / "tokenizer.json", "a") as f:
        f.write(" ")
    with pytest.raises(BundleError, match=r"tokenizer.json: sha256 does not match"):
        load_bundle(bad)
    shutil.copyfile(bundle / "tokenizer.json", bad / "tokenizer.json")
    m = json.loads((bad / "monitor.json").read_text())
    m["versions"]["bundle_format"] = 99
    (bad / "monitor.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="bundle format 99"):
        load_bundle(bad)
    m["versions"]["bundle_format"] = 1  # before batched KV graphs: re-export, says the error
    (bad / "monitor.json").write_text(json.dumps(m))
    with pytest.raises(
        BundleError, match="bundle format 1, .* reads format 2 or 3 .*failfast export"
    ):
        load_bundle(bad)
    m["versions"]["bundle_format"] = 2
    m["signal_names"] = ["steps", "telepathy"]
    (bad / "monitor.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="telepathy"):
        load_bundle(bad)
    (bad / "model_kv.onnx").unlink()
    m["signal_names"] = ["steps"]
    (bad / "monitor.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="model_kv.onnx: listed in monitor.json but missing"):
        load_bundle(bad)
    with pytest.raises(BundleError, match="not found"):
        load_bundle(tmp_path / "nope")


def test_unlisted_graph_is_refused_and_paths_stay_inside(bundle, tmp_path):
    from monitor.errors import BundleError
    from serving.bundle import load_bundle

    b = tmp_path / "b"
    shutil.copytree(bundle, b)
    # a graph in the folder that monitor.json does not list with a hash is never run
    m = json.loads((b / "monitor.json").read_text())
    m["files"].pop("model.int8.onnx", None)
    (b / "monitor.json").write_text(json.dumps(m))
    if not (b / "model.int8.onnx").is_file():
        shutil.copyfile(b / "model.onnx", b / "model.int8.onnx")
    loaded = load_bundle(b)
    assert loaded.graph("model.onnx") == b / "model.onnx"
    with pytest.raises(BundleError, match="not listed in monitor.json"):
        loaded.graph("model.onnx", int8=True)
    m = json.loads((b / "monitor.json").read_text())
    m["files"]["../outside"] = "0" * 64
    (b / "monitor.json").write_text(json.dumps(m))
    with pytest.raises(BundleError, match="points outside the bundle"):
        load_bundle(b)


def test_thresholds_keyed_by_source_are_found_by_source(bundle):
    """A bundle whose thresholds are per source: live sessions, whole runs and the HTTP service
    look a run up by its source; by agent alone it is an unknown group (pooled fallback)."""
    import copy

    from fastapi.testclient import TestClient

    from monitor.thresholds import ThresholdTable
    from serving.app import create_app
    from serving.runs import score_transcript
    from serving.scorer import Scorer
    from tests.bundle_helpers import THRESHOLDS

    scorer = Scorer.load(bundle, threads=1)
    table = copy.deepcopy(THRESHOLDS)
    table["group_by"] = "source"
    table["per_agent"] = {"mini-swe-agent-gemini-3-pro": table["per_agent"]["mini-swe-agent"]}
    scorer.bundle.manifest.thresholds = ThresholdTable.model_validate(table)

    src = "mini-swe-agent-gemini-3-pro"
    assert scorer.start("t", "mini-swe-agent", source=src).threshold_origin == "agent"
    assert scorer.start("t", "mini-swe-agent").threshold_origin == "pooled-unknown-agent"
    assert scorer.session("t", "mini-swe-agent", source=src).scorer.threshold == 0.61

    traj = make_run(6)
    traj.source = src
    assert score_transcript(scorer, traj).threshold_origin == "agent"

    client = TestClient(create_app(scorer))
    r = client.post("/v1/sessions", json={"task": "t", "agent": "mini-swe-agent", "source": src})
    assert r.status_code == 201, r.text
    assert (r.json()["threshold"], r.json()["threshold_origin"]) == (0.61, "agent")
