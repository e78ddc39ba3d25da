"""API keys and signed bundles through a real `failfast serve` (issue 23): a keyed server on a
signed bundle under --trust answers 401 / 403 / 2xx, keeps /healthz open, reloads its keys on
SIGHUP; the Claude Code hook sends FAILFAST_API_KEY and reads a 401 as monitor_error; without a
key file a non-loopback --host exits 2 before anything binds."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.bundle_helpers import claude_event, free_port, shared_bundle, start_server

httpx = pytest.importorskip("httpx")
pytest.importorskip("torch")
pytest.importorskip("cryptography")

SCORE = "score-key-0123456789abcdef"
VERDICT = "verdict-key-0123456789abcdef"
ADMIN = "admin-key-0123456789abcdef"
KEYS = f"{SCORE}\n{VERDICT} score,verdict evaluator\n{ADMIN} admin ops\n"


def write_keys(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def failfast(*args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "training.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        **kw,
    )


@pytest.fixture(scope="module")
def signed(tiny_model_dir, tmp_path_factory):
    """A copy of the tiny bundle that stops on stuck loops only (refused pooled threshold),
    signed with a fresh key pair: (bundle, public key, private key)."""
    from training.export.sign import generate_keypair, sign_bundle

    root = tmp_path_factory.mktemp("signed")
    copy = root / "bundle"
    shutil.copytree(shared_bundle(tiny_model_dir, tmp_path_factory), copy)
    manifest = json.loads((copy / "monitor.json").read_text())
    manifest["thresholds"]["pooled"]["stop"] = {"0.05": {"refused": "test: halts only"}}
    (copy / "monitor.json").write_text(json.dumps(manifest))
    private, public, _ = generate_keypair(root / "signing")
    sign_bundle(copy, private)
    return copy, public, private


@pytest.fixture(scope="module")
def server(signed, tmp_path_factory):
    """`failfast serve --api-key-file KEYS --trust PUB` on the signed bundle: (url, process,
    key file, server log)."""
    bundle, public, _ = signed
    root = tmp_path_factory.mktemp("keyed")
    keys = write_keys(root / "keys", KEYS)
    log = root / "server.log"
    args = ["--bundle", str(bundle), "--threads", "1"]
    args += ["--api-key-file", str(keys), "--trust", str(public)]
    args += ["--decision-log", str(root / "decisions.jsonl")]
    url, proc = start_server(args, log)
    yield url, proc, keys, log
    proc.terminate()
    proc.wait(timeout=10)


def test_keyed_server_401_403_2xx_healthz(server, signed):
    url, _, _, log = server
    health = httpx.get(f"{url}/healthz")
    assert health.status_code == 200
    assert health.json()["bundle_sha256"]  # the signed bundle loaded under --trust
    body = {"task": "t", "agent": "mini-swe-agent"}
    assert httpx.post(f"{url}/v1/sessions", json=body).status_code == 401
    r = httpx.post(f"{url}/v1/sessions", json=body, headers=auth("wrong-key-0123456789abcdef"))
    assert r.status_code == 401
    r = httpx.post(f"{url}/v1/sessions", json=body, headers=auth(SCORE))
    assert r.status_code == 201
    sid = r.json()["session_id"]
    step = {"action": "ls", "observation": "a.py"}
    r = httpx.post(f"{url}/v1/sessions/{sid}/steps", json=step, headers=auth(SCORE))
    assert r.status_code == 200
    assert r.json()["action"] in ("continue", "warn", "stop")
    verdict = {"resolved": True, "finished": True}
    r = httpx.post(f"{url}/v1/sessions/{sid}/verdict", json=verdict, headers=auth(SCORE))
    assert r.status_code == 403
    r = httpx.post(f"{url}/v1/sessions/{sid}/verdict", json=verdict, headers=auth(VERDICT))
    assert r.status_code == 200
    assert httpx.get(f"{url}/metrics", headers=auth(SCORE)).status_code == 403
    metrics = httpx.get(f"{url}/metrics", headers=auth(ADMIN)).text
    assert 'failfast_auth_refused_total{route="POST /v1/sessions",status="401"} 2' in metrics
    text = log.read_text() + metrics
    for secret in (SCORE, VERDICT, ADMIN):
        assert secret not in text


def test_sighup_reloads_the_key_file(server):
    url, proc, keys, log = server
    new = "rotated-key-0123456789abcdef"

    def status_of(key: str) -> int:
        return httpx.get(f"{url}/v1/status", headers=auth(key)).status_code

    def after_hup(want: dict[str, int]) -> None:
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while {k: status_of(k) for k in want} != want:
            assert time.monotonic() < deadline, {k: status_of(k) for k in want}
            time.sleep(0.1)

    assert status_of(ADMIN) == 200
    assert status_of(new) == 401
    write_keys(keys, f"{new} admin rotated\n")
    after_hup({new: 200, ADMIN: 401})
    # a key file left open to others is refused on reload; the keys in use stay
    keys.write_text(f"{ADMIN} admin ops\n")
    keys.chmod(0o644)
    proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "not reloaded" not in log.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert (status_of(new), status_of(ADMIN)) == (200, 401)
    assert proc.poll() is None
    write_keys(keys, KEYS)
    after_hup({ADMIN: 200, new: 401})


def test_hook_sends_the_key_and_reads_401_as_monitor_error(server, fixtures_dir, tmp_path):
    url = server[0]
    path = tmp_path / "loop.jsonl"
    shutil.copyfile(fixtures_dir / "claude_code_constructed_loop.jsonl", path)
    event = json.dumps(claude_event(path))
    env = {k: v for k, v in os.environ.items() if k != "FAILFAST_API_KEY"}
    cli = ["hook", "claude-code", "--url", url]
    for missing in (env, {**env, "FAILFAST_API_KEY": "wrong-key-0123456789abcdef"}):
        p = failfast(*cli, env=missing, input=event)
        assert (p.returncode, p.stdout) == (0, ""), p.stderr  # never a stop, never a crash
        assert "monitor_error" in p.stderr
        assert "HTTP 401" in p.stderr
        assert "FAILFAST_API_KEY" in p.stderr
        assert "Traceback" not in p.stderr
    p = failfast(*cli, env={**env, "FAILFAST_API_KEY": SCORE}, input=event)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["continue"] is False
    assert "stuck_pattern" in out["stopReason"]
    assert SCORE not in p.stderr


def test_non_loopback_host_without_keys_exits_2_before_binding(tmp_path):
    port = free_port()
    absent = str(tmp_path / "no-bundle")  # the host is refused before the bundle is looked at
    p = failfast("serve", "--bundle", absent, "--host", "0.0.0.0", "--port", str(port))
    assert p.returncode == 2
    assert "--api-key-file" in p.stderr
    assert "0.0.0.0" in p.stderr
    assert "not found" not in p.stderr
    with socket.socket() as s:  # nothing was bound
        s.bind(("0.0.0.0", port))
    # --insecure-open passes the address check (and then fails on the missing bundle)
    p = failfast("serve", "--bundle", absent, "--host", "0.0.0.0", "--insecure-open")
    assert p.returncode == 2
    assert "bundle folder not found" in p.stderr
    # a key file open to others: exit 2, whatever the address
    keys = tmp_path / "keys"
    keys.write_text(f"{SCORE}\n")
    keys.chmod(0o644)
    p = failfast("serve", "--bundle", absent, "--api-key-file", str(keys))
    assert p.returncode == 2
    assert "chmod 600" in p.stderr
    assert SCORE not in p.stderr


def test_every_call_of_the_service_client_carries_the_key(server, monkeypatch):
    """`_post_within` (the hook's, and the session client's on top of it) adds the key itself:
    a session call without FAILFAST_API_KEY is a ServiceError naming the variable."""
    from serving.hooks.claude_code import ServiceError, _post_within

    url = server[0]

    def open_session() -> bytes:
        request = urllib.request.Request(
            f"{url}/v1/sessions",
            data=json.dumps({"task": "t"}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        return _post_within(request, 30)

    monkeypatch.delenv("FAILFAST_API_KEY", raising=False)
    with pytest.raises(ServiceError, match=r"HTTP 401.*FAILFAST_API_KEY"):
        open_session()
    monkeypatch.setenv("FAILFAST_API_KEY", VERDICT)
    assert json.loads(open_session())["session_id"]


@pytest.mark.data
def test_real_transcript_scored_only_with_a_key(server, signed, data_dir):
    """A real mini-swe-agent run of ../shared/data through the keyed, --trust server: refused
    without a key, and with one the scores equal the signed bundle's offline scores."""
    import base64

    from serving.scorer import Scorer
    from serving.transcripts import read_transcript

    url = server[0]
    path = next(
        (data_dir / "swe-bench-verified" / "mini-swe-agent-gemini-3-pro" / "trajs").glob(
            "*/*.traj.json.gz"
        )
    )
    body = {"transcript": base64.b64encode(path.read_bytes()).decode(), "encoding": "base64"}
    assert httpx.post(f"{url}/v1/score", json=body, timeout=60).status_code == 401
    r = httpx.post(f"{url}/v1/score", json=body, headers=auth(SCORE), timeout=120)
    assert r.status_code == 200, r.text
    scorer = Scorer.load(signed[0], trust=[signed[1]])
    want = scorer.score_run(read_transcript(path))
    assert r.json()["n_steps"] == len(want) > 0
    assert r.json()["scores"] == pytest.approx(want, abs=1e-5)


def test_supervisor_sessions_send_the_key_and_a_401_is_monitor_error(server, monkeypatch):
    """`failfast supervise --url` (serving.remote.RemoteMonitor): without FAILFAST_API_KEY every
    decision is continue / monitor_error (the agent runs on); with a key, the service decides."""
    from monitor.types import Step
    from serving.remote import RemoteMonitor

    url = server[0]
    step = Step(index=0, action="ls", observation="a.py")
    monkeypatch.delenv("FAILFAST_API_KEY", raising=False)
    session = RemoteMonitor(url, timeout=30).start("t", "mini-swe-agent")
    d = session.observe(step)
    assert (d.action, d.reason) == ("continue", "monitor_error")
    assert session.check().reason == "monitor_error"
    monkeypatch.setenv("FAILFAST_API_KEY", SCORE)
    session = RemoteMonitor(url, timeout=30).start("t", "mini-swe-agent")
    d = session.observe(step)
    assert d.reason != "monitor_error"
    assert d.score is not None
    session.end()
