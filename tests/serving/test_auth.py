"""API keys (issue 23), the app in process with a scripted scorer: the key file's rules, 401 /
403 / 2xx by route and scope, /healthz open, refusals in /metrics without the key, the key's name
(never the key) in the decision log, verdicts only for sessions that exist or existed in the log
(also across a restart), one per session, reload, and the loopback-only rule."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from monitor.policy import PolicyConfig
from monitor.scripted import ScriptedScorer
from serving.keys import (
    KeyFileError,
    KeyRing,
    check_bind,
    client_headers,
    is_loopback,
    parse_keys,
)

pytest.importorskip("httpx")
from fastapi.testclient import TestClient  # noqa: E402

from serving.app import create_app  # noqa: E402
from serving.limits import ServiceConfig  # noqa: E402

SCORE = "score-key-0123456789abcdef"
VERDICT = "verdict-key-0123456789abcdef"
ADMIN = "admin-key-0123456789abcdef"
POLICY = PolicyConfig(min_steps=2, persist=1)


def key_file(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def keys(tmp_path: Path) -> KeyRing:
    text = (
        "# the harness scores; the evaluator gives verdicts\n"
        f"{SCORE}\n"
        "\n"
        f"{VERDICT} score,verdict evaluator\n"
        f"{ADMIN} admin ops\n"
    )
    return KeyRing(key_file(tmp_path / "keys", text))


def client(tmp_path: Path, ring: KeyRing | None, scores=(0.1,), **cfg) -> TestClient:
    scorer = ScriptedScorer(list(scores), threshold=0.5)
    scorer.policy = {}  # type: ignore[attr-defined]
    config = ServiceConfig(decision_log=str(tmp_path / "decisions.jsonl"), **cfg)
    return TestClient(create_app(scorer, config, POLICY, keys=ring))


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def open_run(c: TestClient, key: str, n: int = 2, **body) -> str:
    r = c.post("/v1/sessions", json={"task": "t", "agent": "a", **body}, headers=auth(key))
    assert r.status_code == 201, r.text
    sid = r.json()["session_id"]
    for k in range(n):
        step = c.post(f"/v1/sessions/{sid}/steps", json={"action": f"c {k}"}, headers=auth(key))
        assert step.status_code == 200
    return sid


# --- the key file ---------------------------------------------------------------------------


def test_key_file_scopes_names_and_lookup(tmp_path) -> None:
    ring = keys(tmp_path)
    score = ring.find(SCORE)
    assert score is not None
    assert score.scopes == {"score"}
    assert score.name.startswith("key-")
    assert len(score.name) == 12
    assert SCORE[:8] not in score.name
    evaluator = ring.find(VERDICT)
    assert evaluator is not None
    assert (evaluator.name, evaluator.scopes) == ("evaluator", {"score", "verdict"})
    assert ring.find(ADMIN).scopes == {"admin"}  # type: ignore[union-attr]
    assert ring.find("not-a-key-0123456789") is None
    assert ring.find(SCORE + "x") is None
    assert ring.find("") is None


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("short\n", "16 to 512"),
        (f"{SCORE} score,write\n", "unknown scope write"),
        (f"{SCORE} ,\n", "unknown scope (none)"),
        (f"{SCORE}\n{SCORE} admin\n", "line 2: the same key is listed twice"),
        (f"{SCORE} score name extra\n", "4 columns"),
        (f"{SCORE} score bad/name\n", "a name is"),
        (f"{SCORE} score {SCORE}\n", "must not be the key"),
        ("# only a comment\n\n", "no keys"),
    ],
)
def test_key_file_errors_name_the_line_never_the_key(tmp_path, text, what) -> None:
    path = key_file(tmp_path / "keys", text)
    with pytest.raises(KeyFileError) as e:
        KeyRing(path)
    assert what in str(e.value)
    assert str(path) in str(e.value)
    assert SCORE not in str(e.value)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o660])
def test_key_file_open_to_others_is_refused(tmp_path, mode) -> None:
    path = key_file(tmp_path / "keys", f"{SCORE}\n", mode)
    with pytest.raises(KeyFileError, match=r"chmod 600"):
        KeyRing(path)


def test_key_file_not_regular_or_missing(tmp_path) -> None:
    with pytest.raises(KeyFileError, match="cannot open"):
        KeyRing(tmp_path / "absent")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(KeyFileError, match="not a regular file"):
        KeyRing(fifo)


def test_parse_keys_comment_lines_only() -> None:
    got = parse_keys(f"  # note\n{SCORE} verdict\n")
    assert [k.scopes for k in got] == [{"verdict"}]
    # a trailing comment (USAGE's example) is neither scope nor name; a "#" inside a key is
    # part of it
    got = parse_keys(f"{SCORE}   # score only\n{ADMIN} admin prom #x y z\nabc#def-0123456789ab\n")
    assert [(k.scopes, k.name) for k in got[:2]] == [({"score"}, got[0].name), ({"admin"}, "prom")]
    assert got[0].name.startswith("key-")
    assert got[2].scopes == {"score"}
    assert [k.digest for k in got] == [
        parse_keys(f"{key}\n")[0].digest for key in (SCORE, ADMIN, "abc#def-0123456789ab")
    ]


def test_reload_swaps_keys_and_keeps_them_on_a_bad_file(tmp_path, caplog) -> None:
    ring = keys(tmp_path)
    new = "new-key-0123456789abcdef"
    key_file(ring.path, f"{new} admin\n")
    assert ring.reload()
    assert ring.find(new) is not None
    assert ring.find(SCORE) is None
    ring.path.chmod(0o644)  # a careless edit: the keys in use stay
    with caplog.at_level(logging.ERROR, logger="serving.keys"):
        assert not ring.reload()
    assert ring.find(new) is not None
    assert "chmod 600" in caplog.text
    assert new not in caplog.text


# --- the service ----------------------------------------------------------------------------


def test_no_key_unknown_key_401_everywhere_but_healthz(tmp_path) -> None:
    c = client(tmp_path, keys(tmp_path))
    calls = [
        ("post", "/v1/sessions", {"task": "t"}),
        ("post", "/v1/score", {"steps": [{"action": "ls"}]}),
        ("post", "/v1/sessions/abc/steps", {"action": "ls"}),
        ("post", "/v1/sessions/abc/check", None),
        ("delete", "/v1/sessions/abc", None),
        ("post", "/v1/sessions/abc/verdict", {"resolved": True}),
        ("post", "/v1/verdicts", {"session_id": "abc", "resolved": True}),
        ("get", "/v1/status", None),
        ("get", "/metrics", None),
        ("get", "/v1/nothing-here", None),
    ]
    for method, path, body in calls:
        for headers in (
            {},
            auth("wrong-key-0123456789abcdef"),
            {"Authorization": f"Basic {SCORE}"},
            {"Authorization": "Bearer"},
        ):
            kw = {"json": body} if body is not None else {}
            r = c.request(method.upper(), path, headers=headers, **kw)
            assert r.status_code == 401, (method, path, headers, r.text)
            assert "Bearer" in r.headers["www-authenticate"]
            assert "API key" in r.json()["error"]
            wrong = "wrong" in headers.get("Authorization", "")
            assert ("not one of this service's keys" in r.json()["error"]) == wrong
    r = c.get("/healthz")
    assert r.status_code == 200
    assert r.json()["status"] == "ok"
    assert c.get("/openapi.json").status_code == 200


def test_scopes_403_and_2xx(tmp_path) -> None:
    c = client(tmp_path, keys(tmp_path), scores=[0.1, 0.9])
    sid = open_run(c, SCORE)
    r = c.post("/v1/score", json={"steps": [{"action": "ls"}]}, headers=auth(SCORE))
    assert r.status_code == 200
    assert c.post(f"/v1/sessions/{sid}/check", headers=auth(SCORE)).status_code == 200
    # a score-only key on a verdict route: 403 naming the scope and the key's name, not the key
    r = c.post(f"/v1/sessions/{sid}/verdict", json={"resolved": True}, headers=auth(SCORE))
    assert r.status_code == 403
    assert "`verdict` scope" in r.json()["error"]
    assert SCORE not in r.text
    r = c.post("/v1/verdicts", json={"session_id": sid, "resolved": True}, headers=auth(SCORE))
    assert r.status_code == 403
    assert c.get("/v1/status", headers=auth(SCORE)).status_code == 403
    assert c.get("/metrics", headers=auth(VERDICT)).status_code == 403
    assert c.post("/v1/sessions", json={"task": "t"}, headers=auth(ADMIN)).status_code == 403
    # a verdict key: 2xx
    r = c.post(f"/v1/sessions/{sid}/verdict", json={"resolved": True}, headers=auth(VERDICT))
    assert r.status_code == 200, r.text
    assert c.get("/v1/status", headers=auth(ADMIN)).status_code == 200
    assert c.delete(f"/v1/sessions/{sid}", headers=auth(SCORE)).status_code == 204
    # an unknown path with an admin key reaches the router (404), not an auth answer
    assert c.get("/v1/nothing-here", headers=auth(ADMIN)).status_code == 404


def test_refusals_counted_by_route_without_the_key(tmp_path, caplog) -> None:
    c = client(tmp_path, keys(tmp_path))
    with caplog.at_level(logging.INFO):
        c.post("/v1/sessions/some-id/steps", json={"action": "x"}, headers=auth("guess" * 4))
        c.post("/v1/sessions/other-id/steps", json={"action": "x"})
        c.post("/v1/verdicts", json={"session_id": "s", "resolved": True}, headers=auth(SCORE))
        c.get("/v1/" + SCORE)  # a key in the path must not become a label either
    text = c.get("/metrics", headers=auth(ADMIN)).text
    server_log = "\n".join(  # the service's lines (httpx logs the test client's URLs)
        r.getMessage() for r in caplog.records if not r.name.startswith("httpx")
    )
    assert (
        'failfast_auth_refused_total{route="POST /v1/sessions/{id}/steps",status="401"} 2' in text
    )
    assert 'failfast_auth_refused_total{route="POST /v1/verdicts",status="403"} 1' in text
    assert 'failfast_auth_refused_total{route="GET unmatched",status="401"} 1' in text
    for secret in (SCORE, VERDICT, ADMIN, "guess" * 4, "some-id"):
        assert secret not in text
        assert secret not in server_log
    assert "401 on POST /v1/sessions/{id}/steps" in server_log


def test_verdict_log_names_the_key_one_per_session_and_only_known(tmp_path) -> None:
    c = client(tmp_path, keys(tmp_path))
    sid = open_run(c, SCORE, run="job-1")
    ok = c.post(f"/v1/sessions/{sid}/verdict", json={"resolved": True}, headers=auth(VERDICT))
    assert ok.status_code == 200
    again = c.post(
        "/v1/verdicts", json={"run_id": "job-1", "resolved": False}, headers=auth(VERDICT)
    )
    assert again.status_code == 409
    r = c.post("/v1/sessions/never-opened/verdict", json={"resolved": True}, headers=auth(VERDICT))
    assert r.status_code == 404
    text = (tmp_path / "decisions.jsonl").read_text()
    verdicts = [json.loads(x) for x in text.splitlines() if '"verdict"' in x]
    assert [(v["session"], v["key_name"]) for v in verdicts] == [(sid, "evaluator")]
    for secret in (SCORE, VERDICT, ADMIN):
        assert secret not in text


def test_verdicts_after_a_restart_only_for_logged_sessions(tmp_path) -> None:
    ring = keys(tmp_path)
    c = client(tmp_path, ring)
    given = open_run(c, SCORE, run="given")
    pending = open_run(c, SCORE, run="pending")
    still_open = open_run(c, SCORE, run="open-at-exit")
    c.post(f"/v1/sessions/{given}/verdict", json={"resolved": True}, headers=auth(VERDICT))
    for sid in (given, pending):
        assert c.delete(f"/v1/sessions/{sid}", headers=auth(SCORE)).status_code == 204
    c.close()  # the service stops with `still_open` open: no end record, nothing to restore
    c2 = client(tmp_path, ring)
    r = c2.post(f"/v1/sessions/{given}/verdict", json={"resolved": False}, headers=auth(VERDICT))
    assert r.status_code == 409  # its verdict is in the log
    r = c2.post("/v1/verdicts", json={"run_id": "pending", "resolved": True}, headers=auth(VERDICT))
    assert r.status_code == 200, r.text
    assert r.json()["session_id"] == pending
    assert r.json()["counted"]
    r = c2.post(f"/v1/sessions/{pending}/verdict", json={"resolved": True}, headers=auth(VERDICT))
    assert r.status_code == 409
    r = c2.post(
        f"/v1/sessions/{still_open}/verdict", json={"resolved": True}, headers=auth(VERDICT)
    )
    assert r.status_code == 404
    status = c2.get("/v1/status", headers=auth(ADMIN)).json()
    assert status["closed_runs_remembered"] == 2


def test_restore_skips_other_bundles_and_torn_lines(tmp_path) -> None:
    from serving.history import closed_sessions

    log = tmp_path / "decisions.jsonl"
    end = {"event": "end", "run": "r", "agent": "a", "steps": 3, "stop_step": 2, "reason": "x"}
    lines = [
        {"event": "start", "bundle_sha256": "old"},
        {**end, "session": "s-old"},
        {"event": "start", "bundle_sha256": "new"},
        {"event": "verdict", "session": "s-1", "resolved": False},  # given while it was open
        {**end, "session": "s-1"},
        {**end, "session": "s-2", "stop_step": None},
    ]
    log.write_text("\n".join(json.dumps(x) for x in lines) + '\n{"event": "end", "sess')
    got = closed_sessions(log, "new", keep=10)
    assert [(o.session, o.verdict, o.stop_step) for o in got] == [
        ("s-1", False, 2),
        ("s-2", None, None),
    ]
    assert [o.session for o in closed_sessions(log, "new", keep=1)] == ["s-2"]
    assert closed_sessions(tmp_path / "absent.jsonl", "new", keep=10) == []


def test_without_keys_nothing_changes(tmp_path) -> None:
    c = client(tmp_path, None)
    sid = open_run(c, "")
    assert c.post(f"/v1/sessions/{sid}/verdict", json={"resolved": True}).status_code == 200
    metrics = c.get("/metrics").text
    assert "failfast_auth_refused_total" not in metrics
    log = (tmp_path / "decisions.jsonl").read_text()
    assert "key_name" not in log


# --- binding and clients --------------------------------------------------------------------


def test_loopback_only_without_keys() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"):
        assert is_loopback(host), host
        check_bind(host, keys=False, insecure_open=False)
    for host in ("0.0.0.0", "::", "", "10.1.2.3", "192.168.0.1"):
        assert not is_loopback(host), host
        with pytest.raises(ValueError, match="--api-key-file"):
            check_bind(host, keys=False, insecure_open=False)
        check_bind(host, keys=True, insecure_open=False)
        check_bind(host, keys=False, insecure_open=True)


def test_client_headers_from_the_environment() -> None:
    assert client_headers({"FAILFAST_API_KEY": f" {SCORE}\n"}) == auth(SCORE)
    assert client_headers({"FAILFAST_API_KEY": ""}) == {}
    assert client_headers({}) == {}
