"""Issue 25, item 4: `failfast serve` ends on SIGTERM within its deadline while a client reads
nothing, drops a client that leaves a response unread past the write deadline, and logs the end
record of every session still open. A real server on 127.0.0.1; every wait is bounded."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.bundle_helpers import free_port, make_run, shared_bundle

pytest.importorskip("torch")

# the OpenAPI document, asked for many times on one connection and never read: megabytes queue
PIPELINED = 400


@pytest.fixture(scope="module")
def bundle(tiny_model_dir, tmp_path_factory):
    return shared_bundle(tiny_model_dir, tmp_path_factory)


def start(bundle: Path, tmp: Path, *flags: str) -> tuple[subprocess.Popen, str, Path]:
    port = free_port()
    dlog = tmp / "decisions.jsonl"
    cmd = [sys.executable, "-m", "training.cli", "serve", "--bundle", str(bundle)]
    cmd += ["--port", str(port), "--threads", "1", "--decision-log", str(dlog), *flags]
    out = open(tmp / "server.log", "w")  # noqa: SIM115 - the process writes it until it ends
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1) as r:
                if r.status == 200:
                    return proc, url, dlog
        except OSError:
            time.sleep(0.2)
    proc.kill()
    pytest.fail(f"server did not start: {(tmp / 'server.log').read_text()[-2000:]}")


def call(url: str, path: str, body: dict | None = None, method: str = "POST") -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url + path, data=data, method=method, headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        text = r.read()
    return json.loads(text) if text else {}


def slow_reader(url: str) -> socket.socket:
    """A connection with a tiny receive buffer that asks for megabytes and reads none."""
    host, port = url.rsplit("/", 1)[1].split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.sendall(b"GET /openapi.json HTTP/1.1\r\nHost: x\r\n\r\n" * PIPELINED)
    return sock


def open_session(url: str) -> str:
    sid = call(url, "/v1/sessions", {"task": "fix it", "agent": "mini-swe-agent", "run": "r-1"})
    for step in make_run(3).steps:
        call(url, f"/v1/sessions/{sid['session_id']}/steps", step.to_dict())
    return sid["session_id"]


def test_sigterm_ends_serve_within_its_deadline_with_a_slow_reader(bundle, tmp_path):
    proc, url, dlog = start(
        bundle, tmp_path, "--shutdown-timeout-seconds", "2", "--write-timeout-seconds", "600"
    )
    try:
        sid = open_session(url)
        sock = slow_reader(url)
        time.sleep(3.0)  # the server's buffers fill; its task waits on the client
        assert proc.poll() is None
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail("serve still running 20 s after SIGTERM")
        took = time.monotonic() - t0
        sock.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    # 2 s for requests in progress + 2 s hard-exit grace, and slack for 2 loaded cores
    assert took < 9.0, f"took {took:.1f} s"
    ends = [json.loads(x) for x in dlog.read_text().splitlines() if '"end"' in x]
    assert [(e["session"], e["steps"]) for e in ends if e["event"] == "end"] == [(sid, 3)]


def test_a_response_left_unread_past_the_write_deadline_drops_the_connection(bundle, tmp_path):
    proc, url, _ = start(bundle, tmp_path, "--write-timeout-seconds", "1")
    try:
        sock = slow_reader(url)
        time.sleep(4.0)  # 1 s of stalled writes, then the server aborts the connection
        sock.settimeout(0.5)
        ended = False
        deadline = time.monotonic() + 20  # drain what was sent before the abort
        while time.monotonic() < deadline:
            try:
                if not sock.recv(1 << 20):
                    ended = True
                    break
            except ConnectionResetError:
                ended = True
                break
            except TimeoutError:
                break  # nothing more, yet no end: the connection is still held
        sock.close()
        assert ended, "the server still holds a connection whose client reads nothing"
        assert call(url, "/healthz", method="GET")["status"] == "ok"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_serve_on_an_address_in_use_exits_2_without_saying_it_listens(bundle, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cmd = [sys.executable, "-m", "training.cli", "serve", "--bundle", str(bundle)]
        p = subprocess.run([*cmd, "--port", str(port)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "listening on" not in p.stdout
    assert f"cannot listen on 127.0.0.1:{port}" in p.stderr
