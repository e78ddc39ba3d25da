"""The HTTP service, through a real uvicorn process on 127.0.0.1."""

from __future__ import annotations

import base64
import json
import time

import pytest

from tests.bundle_helpers import make_run, serve, shared_bundle

httpx = pytest.importorskip("httpx")
pytest.importorskip("torch")


@pytest.fixture(scope="module")
def bundle(tiny_model_dir, tmp_path_factory):
    return shared_bundle(tiny_model_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def server(bundle, tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "server.log"
    limits = ["--max-body-bytes", "200000", "--max-steps", "12", "--idle-seconds", "3"]
    yield from serve(bundle, log, *limits)


def step_json(step) -> dict:
    d = step.to_dict()
    d.pop("index")
    return d


def test_session_flow_matches_offline_scores(server, bundle):
    from serving.scorer import Scorer

    traj = make_run(8, seed=7)
    want = Scorer.load(bundle).score_run(traj)
    r = httpx.post(f"{server}/v1/sessions", json={"task": traj.task, "agent": "mini-swe-agent"})
    assert r.status_code == 201
    body = r.json()
    assert (body["threshold"], body["warn_threshold"], body["threshold_origin"]) == (
        0.61,
        0.45,
        "agent",
    )
    sid = body["session_id"]
    got = []
    for step in traj.steps:
        d = httpx.post(f"{server}/v1/sessions/{sid}/steps", json=step_json(step)).json()
        assert d["action"] in ("continue", "warn", "stop")
        assert "ignored_fields" not in d  # every field a Step has is read
        got.append(d["score"])
        assert d["step"] == len(got)
        if d["action"] == "stop":
            assert d["restart"]["summary"]
            break
    assert got == pytest.approx(want[: len(got)], abs=1e-5)
    assert httpx.post(f"{server}/v1/sessions/{sid}/check").json()["action"] in (
        "continue",
        "warn",
        "stop",
    )
    assert httpx.delete(f"{server}/v1/sessions/{sid}").status_code == 204
    r = httpx.post(f"{server}/v1/sessions/{sid}/steps", json=step_json(traj.steps[0]))
    assert r.status_code == 404
    assert "unknown session" in r.json()["error"]


@pytest.mark.data
def test_score_transcript_text_base64_and_steps(server, bundle, data_dir):
    from serving.scorer import Scorer
    from serving.transcripts import read_transcript

    path = next(
        (data_dir / "swe-bench-verified" / "mini-swe-agent-gemini-3-pro" / "trajs").glob(
            "*/*.traj.json.gz"
        )
    )
    import gzip

    raw = gzip.decompress(path.read_bytes())
    traj = read_transcript(path)
    want = Scorer.load(bundle).score_run(traj)
    r = httpx.post(
        f"{server}/v1/score",
        json={"transcript": raw.decode(), "filename": path.name[:-3]},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["n_steps"] == len(traj.steps) > 0
    assert body["scores"] == pytest.approx(want, abs=1e-5)
    # no folder over HTTP: no source taken from the server's temporary one
    assert body["group"] == Scorer.load(bundle).bundle.group_of(traj.agent, "")
    b64 = base64.b64encode(path.read_bytes()).decode()  # gzip bytes as sent by a client
    r2 = httpx.post(
        f"{server}/v1/score",
        json={"transcript": b64, "encoding": "base64", "all_decisions": True},
        timeout=60,
    )
    assert r2.status_code == 200, r2.text
    assert r2.json()["scores"] == pytest.approx(want, abs=1e-5)
    assert len(r2.json()["decisions"]) == len(traj.steps)
    steps = [step_json(s) for s in make_run(5).steps]
    r3 = httpx.post(
        f"{server}/v1/score",
        json={"steps": steps, "task": make_run(5).task, "agent": "mini-swe-agent"},
    )
    assert r3.status_code == 200
    assert r3.json()["n_steps"] == 5
    assert "ignored_fields" not in r3.json()
    typo = [{**steps[0], "observaton": "x", "output": "y"}]
    r4 = httpx.post(f"{server}/v1/score", json={"steps": typo, "agent": "mini-swe-agent"})
    assert r4.status_code == 200
    assert r4.json()["ignored_fields"] == ["observaton", "output"]


def test_errors_are_4xx_with_messages(server):
    r = httpx.post(
        f"{server}/v1/sessions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    assert "not valid JSON" in r.json()["error"]
    # curl -d without -H, or a web page's form (no CORS preflight): refused, never read as JSON
    form = {"content-type": "application/x-www-form-urlencoded", "origin": "https://x.example"}
    for body in (json.dumps({"task": "t"}), "task=t"):
        r = httpx.post(f"{server}/v1/sessions", content=body, headers=form)
        assert r.status_code == 415, r.text
        assert "content-type: application/json" in r.json()["error"]
    r = httpx.post(f"{server}/v1/score", json={"transcript": "hello, I am not a transcript"})
    assert r.status_code == 422
    assert "cannot read transcript" in r.json()["error"]
    r = httpx.post(f"{server}/v1/score", json={"transcript": "@@@", "encoding": "base64"})
    assert r.status_code == 400
    assert "base64" in r.json()["error"]
    r = httpx.post(f"{server}/v1/score", json={})
    assert r.status_code == 422
    assert "exactly one" in r.json()["error"]
    r = httpx.post(f"{server}/v1/sessions", json={"task": 5})
    assert r.status_code == 422
    assert "task" in r.json()["error"]
    r = httpx.post(
        f"{server}/v1/score", content=b"x" * 300_000, headers={"content-type": "application/json"}
    )
    assert r.status_code == 413
    assert "200000" in r.json()["error"]


def test_chunked_body_over_the_limit_is_413(server):
    """No Content-Length (Transfer-Encoding: chunked): counted while read, same 413 JSON error."""

    def chunks(n: int):
        yield b'{"transcript": "'
        for _ in range(n):
            yield b"x" * 10_000
        yield b'"}'

    headers = {"content-type": "application/json"}
    r = httpx.post(f"{server}/v1/score", content=chunks(30), headers=headers, timeout=30)
    assert r.request.headers.get("transfer-encoding") == "chunked"
    assert "content-length" not in r.request.headers
    assert r.status_code == 413
    assert r.json() == {"error": "request body over 200000 bytes"}
    # a chunked body under the limit still reaches the endpoint (422: not a transcript)
    r = httpx.post(f"{server}/v1/score", content=chunks(3), headers=headers, timeout=30)
    assert r.status_code == 422
    assert "cannot read transcript" in r.json()["error"]
    body = json.dumps({"steps": [step_json(s) for s in make_run(3).steps]}).encode()
    r = httpx.post(
        f"{server}/v1/score", content=iter([body[:50], body[50:]]), headers=headers, timeout=30
    )
    assert r.status_code == 200
    assert r.json()["n_steps"] == 3


def test_step_limit_and_idle_expiry(server):
    sid = httpx.post(f"{server}/v1/sessions", json={"task": "t"}).json()["session_id"]
    step = {"tool": "bash", "action": "ls", "observation": "a b"}
    codes = [
        httpx.post(f"{server}/v1/sessions/{sid}/steps", json=step).status_code for _ in range(13)
    ]
    assert codes[:12] == [200] * 12
    assert codes[12] == 409
    time.sleep(3.5)  # --idle-seconds 3
    r = httpx.post(f"{server}/v1/sessions/{sid}/steps", json=step)
    assert r.status_code == 404


def test_metrics_and_openapi(server):
    httpx.post(f"{server}/v1/score", json={"steps": [{"action": "ls"}]})
    text = httpx.get(f"{server}/metrics").text
    assert "failfast_decisions_total{" in text
    assert 'failfast_request_seconds_bucket{endpoint="POST /v1/score",le="+Inf"}' in text
    assert "failfast_sessions_open" in text
    spec = httpx.get(f"{server}/openapi.json").json()
    assert {"/v1/score", "/v1/sessions", "/v1/sessions/{sid}/steps", "/healthz", "/metrics"} <= set(
        spec["paths"]
    )
    assert json.loads(httpx.get(f"{server}/healthz").text)["status"] == "ok"
