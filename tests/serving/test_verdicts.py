"""Verdict feedback over HTTP (the app in process, a scripted scorer): verdicts on open, closed
and expired sessions, by session or run id, the answers, /v1/status, /metrics, the decision log
and the runs `failfast calibrate` rebuilds from it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from monitor.policy import PolicyConfig
from monitor.scripted import ScriptedScorer

pytest.importorskip("httpx")
from fastapi.testclient import TestClient  # noqa: E402

from serving.app import create_app  # noqa: E402
from serving.limits import ServiceConfig  # noqa: E402

POLICY = PolicyConfig(min_steps=2, persist=1)


def client(tmp_path: Path, scores: list[float], **cfg) -> TestClient:
    scorer = ScriptedScorer(scores, threshold=0.5)
    scorer.policy = {}  # type: ignore[attr-defined]
    config = ServiceConfig(decision_log=str(tmp_path / "decisions.jsonl"), **cfg)
    return TestClient(create_app(scorer, config, POLICY))


def run(c: TestClient, n: int, **open_body) -> tuple[str, list[dict]]:
    sid = c.post("/v1/sessions", json={"task": "t", "agent": "a", **open_body}).json()["session_id"]
    out = [
        c.post(f"/v1/sessions/{sid}/steps", json={"action": f"cmd {k}"}).json() for k in range(n)
    ]
    return sid, out


def test_verdicts_open_closed_by_run_id_and_errors(tmp_path) -> None:
    c = client(tmp_path, [0.1, 0.9, 0.9, 0.2])
    # stopped at step 2, two more steps arrive (a dry-run harness): a false positive
    sid, ds = run(c, 4, run="job-1")
    assert [d["action"] for d in ds] == ["continue", "stop", "stop", "stop"]
    r = c.post(f"/v1/sessions/{sid}/verdict", json={"resolved": True})
    assert r.status_code == 200
    body = r.json()
    assert (body["counted"], body["stopped"], body["stop_step"]) == (True, True, 2)
    assert body["watch"]["stopped_resolved"] == 1
    assert c.post(f"/v1/sessions/{sid}/verdict", json={"resolved": True}).status_code == 409
    # a run with a verdict is over: no more steps or checks (a later stop would not count)
    r = c.post(f"/v1/sessions/{sid}/steps", json={"action": "late"})
    assert r.status_code == 409
    assert "already has a verdict" in r.json()["error"]
    assert c.post(f"/v1/sessions/{sid}/check").status_code == 409
    assert c.delete(f"/v1/sessions/{sid}").status_code == 204
    # closed first, verdict after, by run id; stopped and obeyed: taken, not counted
    sid2, _ = run(c, 2, run="job-2")
    assert c.delete(f"/v1/sessions/{sid2}").status_code == 204
    r = c.post("/v1/verdicts", json={"run_id": "job-2", "resolved": False})
    assert r.status_code == 200
    assert r.json()["session_id"] == sid2
    assert not r.json()["counted"]
    # by session id after close, not stopped
    (tmp_path / "b").mkdir()
    c3 = client(tmp_path / "b", [0.1])
    sid3, _ = run(c3, 3)
    c3.delete(f"/v1/sessions/{sid3}")
    r = c3.post("/v1/verdicts", json={"session_id": sid3, "resolved": True})
    assert r.json()["counted"]
    assert not r.json()["stopped"]
    # errors
    assert c.post("/v1/sessions/nope/verdict", json={"resolved": True}).status_code == 404
    assert c.post("/v1/verdicts", json={"run_id": "nope", "resolved": True}).status_code == 404
    r = c.post("/v1/verdicts", json={"resolved": True})
    assert r.status_code == 422
    assert "exactly one" in r.json()["error"]
    both = {"run_id": "job-1", "session_id": sid, "resolved": True}
    assert c.post("/v1/verdicts", json=both).status_code == 422
    for bad in ("maybe", "yes", 1):  # strict: a verdict is never guessed
        r = c.post("/v1/verdicts", json={"run_id": "job-1", "resolved": bad})
        assert r.status_code == 422, bad
    # an open session found by its run id
    sid4, _ = run(c, 1, run="job-4")
    r = c.post("/v1/verdicts", json={"run_id": "job-4", "resolved": True})
    assert r.json()["session_id"] == sid4


def test_expired_session_still_takes_its_verdict(tmp_path) -> None:
    c = client(tmp_path, [0.1], session_idle_seconds=0.05)
    sid, _ = run(c, 3, run="slow")
    time.sleep(0.1)
    assert c.get("/healthz").json()["sessions"] == 0  # expired (and closed: end record logged)
    r = c.post(f"/v1/sessions/{sid}/verdict", json={"resolved": True})
    assert r.status_code == 200
    assert r.json()["counted"]
    ends = [json.loads(x) for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert [e["event"] for e in ends] == ["start", "end", "verdict"]
    assert ends[1]["session"] == sid
    assert ends[1]["scores"] == [0.1, 0.1, 0.1]


def test_recent_runs_bound_forgets_old_sessions(tmp_path) -> None:
    c = client(tmp_path, [0.1], recent_runs=1)
    first, _ = run(c, 1)
    c.delete(f"/v1/sessions/{first}")
    second, _ = run(c, 1)
    c.delete(f"/v1/sessions/{second}")
    r = c.post(f"/v1/sessions/{first}/verdict", json={"resolved": True})
    assert r.status_code == 404
    assert "--recent-runs" in r.json()["error"]
    assert c.post(f"/v1/sessions/{second}/verdict", json={"resolved": True}).status_code == 200


def test_shadow_sample_status_metrics_and_the_log_rebuilds(tmp_path) -> None:
    c = client(tmp_path, [0.1, 0.9, 0.9], watch_runs="shadow", drift_alpha=0.2)
    sids = []
    for i in range(30):
        sid, _ = run(c, 3, run=f"shadow-{i}", shadow=True)  # stopped at 2, resolved: FP
        assert c.post(f"/v1/sessions/{sid}/verdict", json={"resolved": True}).json()["counted"]
        c.delete(f"/v1/sessions/{sid}")
        sids.append(sid)
    plain, _ = run(c, 3, run="plain")
    c.delete(f"/v1/sessions/{plain}")
    r = c.post("/v1/verdicts", json={"run_id": "plain", "resolved": True}).json()
    assert not r["counted"]
    assert "shadow" in r["not_counted_because"]
    st = c.get("/v1/status").json()
    other = st["groups"]["other"]
    assert (st["sample"], st["alpha"], st["target"]) == ("shadow", 0.2, 0.05)
    assert (other["runs"], other["resolved"], other["stopped_resolved"]) == (30, 30, 30)
    assert other["drift"] is True
    assert other["flagged_at_resolved"] <= 3
    assert st["drift"] is True
    assert "calibration" in st
    metrics = c.get("/metrics").text
    assert 'failfast_fpr_drift{group="other"} 1' in metrics
    assert 'failfast_verdicts_total{group="other",outcome="not_counted"} 1' in metrics

    from training.data.decisions import runs_from_logs

    got = runs_from_logs([tmp_path / "decisions.jsonl"])
    assert len(got.records) == 31  # the plain run finished (steps after its stop) too
    rec = {r.run_id: r for r in got.records}[sids[0]]
    assert rec.resolved
    assert rec.agent == "a"
    assert list(rec.scores["monitor"]) == [0.1, 0.9, 0.9]
    assert got.starts[0]["event"] == "start"


def test_bench_drift_flags_drift_and_agrees_across_paths(tmp_path) -> None:
    """bench/bench_drift.py on a synthetic pool: the service stops exactly the runs the offline
    rule stops, HTTP and Python and full/compact replays give the same flag points, 2x drift is
    flagged, the target rarely."""
    import numpy as np

    from tests.bench_loader import load_bench
    from training.data.records import RunRecord, save_records

    rng = np.random.default_rng(0)
    recs = [
        RunRecord(f"r{i}", f"i{i}", "a", "a", i % 2 == 0, np.full(6, 3), {"monitor": rng.random(6)})
        for i in range(400)
    ]
    save_records(tmp_path / "pool.parquet", recs)
    argv = ["--records", str(tmp_path / "pool.parquet"), "--replays", "30", "--max-resolved", "300"]
    rows = load_bench("bench_drift").main([*argv, "--check-full", "2", "--http-replays", "1"])
    two, at = rows
    assert two["true_fpr"] == pytest.approx(0.10)
    assert at["true_fpr"] == pytest.approx(0.05)
    for row in rows:
        assert row["stops_unlike_offline"] == 0
        assert row["full_mismatches"] == "0 of 2"
        assert row["http_mismatches"] == "0 of 1"
    assert two["median_to_flag"] < 200
    assert two["within_1000"] >= 0.8
    assert at["within_1000"] <= 0.2


def test_a_step_field_no_step_has_is_named_in_the_answer(tmp_path) -> None:
    c = client(tmp_path, [0.1])
    sid = c.post("/v1/sessions", json={"task": "t", "agent": "a"}).json()["session_id"]
    d = c.post(f"/v1/sessions/{sid}/steps", json={"action": "ls", "output": "a.py"}).json()
    assert d["ignored_fields"] == ["output"]
    d = c.post(f"/v1/sessions/{sid}/steps", json={"action": "ls", "observation": "a.py"}).json()
    assert "ignored_fields" not in d
