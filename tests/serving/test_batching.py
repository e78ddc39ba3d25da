"""Batched KV calls (serving.batching): sessions with different past lengths share one
model_kv.onnx call and get exactly the scores and caches they get one at a time."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.bundle_helpers import make_run, shared_bundle

pytest.importorskip("torch")


@pytest.fixture(scope="module", params=["last", "last+mean"])
def scorer(request, tiny_model_dir, tmp_path_factory):
    from serving.scorer import Scorer

    bundle = shared_bundle(tiny_model_dir, tmp_path_factory, pooling=request.param)
    return Scorer.load(bundle, threads=1)


def test_pack_unpack_equals_one_at_a_time(scorer):
    """Three caches of 0, 9 and 23 tokens, 5 / 1 / 12 new tokens: one padded call gives each row
    the logit and the (cut back) cache of its own call."""
    from serving.batching import KVRequest, pack, unpack

    rng = np.random.default_rng(0)
    sig = rng.random(len(scorer.signal_index), dtype=np.float32) * 10
    reqs = []
    for past, new in ((0, 5), (9, 1), (23, 12)):
        ids = rng.integers(1, 300, past + new).tolist()
        state = scorer._start_state
        if past:
            _, state = scorer.run_kv(ids[:past], state, sig)
        reqs.append(KVRequest(ids[past:], state, sig))
    alone = [unpack(scorer._kv_call(pack([r], scorer.past_names)), [r])[0] for r in reqs]
    feed = pack(reqs, scorer.past_names)
    assert feed["input_ids"].shape == (3, 12)
    assert feed["attention_mask"].sum(axis=1).tolist() == [5, 10, 35]
    together = unpack(scorer._kv_call(feed), reqs)
    for (a_logit, a_state), (b_logit, b_state) in zip(alone, together, strict=True):
        assert b_logit == pytest.approx(a_logit, abs=1e-5)
        assert [t.shape for t in b_state] == [t.shape for t in a_state]
        for x, y in zip(a_state, b_state, strict=True):
            np.testing.assert_allclose(y, x, atol=1e-5)


def test_concurrent_sessions_batched_equal_unbatched(scorer):
    """Six live sessions of different lengths, observed from six threads through the batcher,
    score every step as the same sessions do one at a time (re-renders included)."""
    runs = [make_run(8 + 5 * i, seed=i) for i in range(6)]
    alone: list[list[float]] = [[] for _ in runs]
    for r, out in zip(runs, alone, strict=True):
        session = scorer.start(r.task, r.agent)
        out.extend(session.observe(s) for s in r.steps)
    scorer.enable_batching(window=0.02, max_batch=4)
    try:
        got: list[list[float]] = [[] for _ in runs]

        def follow(i: int) -> None:
            session = scorer.start(runs[i].task, runs[i].agent)
            got[i].extend(session.observe(s) for s in runs[i].steps)

        threads = [threading.Thread(target=follow, args=(i,)) for i in range(len(runs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        batcher = scorer.batcher
        assert batcher is not None
        assert batcher.rows > batcher.calls  # some calls were shared
    finally:
        scorer.close()
    assert scorer.batcher is None
    for a, b in zip(alone, got, strict=True):
        np.testing.assert_allclose(b, a, atol=1e-5)


def test_groups_bound_padding():
    """Calls are split where padding would cost over `slack` times the work of separate calls: new
    tokens weigh a whole token's projections, a longer past only its attention."""
    from serving.batching import KVRequest, groups, padded_cost, real_cost

    def req(past: int, new: int) -> KVRequest:
        return KVRequest([1] * new, [np.zeros((1, 1, past, 8), np.float32)], np.zeros(0))

    steps = [req(1000, 50), req(10, 60), req(990, 60), req(20, 40), req(600, 55)]
    chunks = [req(0, 256), req(256, 256), req(900, 256)]
    out = groups(steps + chunks, slack=1.5)
    assert [sorted((len(r.ids), r.past) for r in g) for g in out] == [
        [(40, 20), (50, 1000), (55, 600), (60, 10), (60, 990)],  # pasts 10..1000 share a call
        [(256, 0), (256, 256), (256, 900)],  # never padded from 60 to 256 new tokens
    ]
    for g in out:
        assert padded_cost(g) <= 1.5 * real_cost(g)


def test_batcher_hands_every_caller_the_error():
    from serving.batching import KVBatcher, KVRequest

    def boom(feed):
        raise RuntimeError("graph failed")

    batcher = KVBatcher(boom, ["past_key_0"], window=0.05, max_batch=8)
    errors: list[str] = []

    def call() -> None:
        r = KVRequest([1, 2], [np.zeros((1, 1, 3, 8), np.float32)], np.zeros(0, np.float32))
        try:
            batcher.submit(r)
        except RuntimeError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    batcher.close()
    assert errors == ["graph failed"] * 3
    with pytest.raises(RuntimeError, match="closed"):
        batcher.submit(KVRequest([1], [np.zeros((1, 1, 0, 8), np.float32)], np.zeros(0)))


def test_service_batches_concurrent_sessions(tiny_model_dir, tmp_path_factory):
    """--max-batch 4: steps posted from four threads share model calls (see /metrics) and every
    decision carries the score the session gets alone."""
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from serving.app import create_app
    from serving.limits import ServiceConfig
    from serving.scorer import Scorer

    bundle = shared_bundle(tiny_model_dir, tmp_path_factory, pooling="last+mean")
    want = Scorer.load(bundle, threads=1)
    runs = [make_run(6 + 3 * i, seed=10 + i) for i in range(4)]
    alone = []  # the decisions' scores of the same runs, one session at a time
    for r in runs:
        session = want.session(r.task, r.agent)
        alone.append([session.observe(s).score for s in r.steps])
    scorer = Scorer.load(bundle, threads=1)
    app = create_app(scorer, ServiceConfig(max_batch=4, batch_window_ms=30))
    got: list[list[float]] = [[] for _ in runs]
    with TestClient(app) as c:

        def follow(i: int) -> None:
            body = {"task": runs[i].task, "agent": runs[i].agent}
            sid = c.post("/v1/sessions", json=body).json()["session_id"]
            for s in runs[i].steps:
                d = s.to_dict()
                d.pop("index")
                got[i].append(c.post(f"/v1/sessions/{sid}/steps", json=d).json()["score"])

        threads = [threading.Thread(target=follow, args=(i,)) for i in range(len(runs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        text = c.get("/metrics").text
    rows = {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("failfast_batched_")
    }
    # one row per step, more for a re-rendered window (fed in chunks of 256 tokens)
    assert rows["failfast_batched_rows"] >= sum(len(r.steps) for r in runs)
    assert rows["failfast_batched_calls"] < rows["failfast_batched_rows"]
    scorer.close()
    for a, b in zip(alone, got, strict=True):
        np.testing.assert_allclose(b, a, atol=1e-5)
