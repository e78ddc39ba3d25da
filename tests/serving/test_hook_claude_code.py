"""`failfast hook claude-code --url`: the same answers and restart packets as `--bundle`, through a
real `failfast serve` (uvicorn) on 127.0.0.1; a dead, silent or broken service never blocks."""

from __future__ import annotations

import http.server
import json
import logging
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.bundle_helpers import claude_event, free_port, serve, shared_bundle

pytest.importorskip("torch")

FIXTURES = ("claude_code_constructed_loop.jsonl", "claude_code_constructed_session.jsonl")


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "training.cli", "hook", "claude-code", *args]


@pytest.fixture(scope="module")
def bundle(tiny_model_dir, tmp_path_factory):
    return shared_bundle(tiny_model_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def server(bundle, tmp_path_factory):
    yield from serve(bundle, tmp_path_factory.mktemp("log") / "server.log")


@pytest.fixture(scope="module")
def halts_only(bundle, tmp_path_factory):
    """A bundle copy whose pooled stop threshold is refused (infinite: only heuristic halts stop,
    whatever the random tiny head scores), and a server on it."""
    root = tmp_path_factory.mktemp("halts-only")
    copy = root / "bundle"
    shutil.copytree(bundle, copy)
    manifest = json.loads((copy / "monitor.json").read_text())
    manifest["thresholds"]["pooled"]["stop"] = {"0.05": {"refused": "test: halts only"}}
    (copy / "monitor.json").write_text(json.dumps(manifest))
    for url in serve(copy, root / "server.log"):
        yield copy, url


def _prefix(src, dst, n_lines: int):
    lines = src.read_text().splitlines(keepends=True)
    dst.write_text("".join(lines[:n_lines]))
    return dst


def test_url_decisions_equal_bundle_decisions_on_every_prefix(
    server, bundle, fixtures_dir, tmp_path
):
    """In process: every prefix of both constructed transcripts, both event kinds."""
    from serving.hooks.claude_code import restart_path, run_hook
    from serving.scorer import Scorer

    scorer = Scorer.load(bundle, threads=1)
    actions = set()
    for name in FIXTURES:
        src = fixtures_dir / name
        n = len(src.read_text().splitlines())
        for k in range(1, n + 1):
            for kind in ("PreToolUse", "PostToolUse"):
                a = _prefix(src, tmp_path / f"a-{k}-{kind}.jsonl", k)
                b = _prefix(src, tmp_path / f"b-{k}-{kind}.jsonl", k)
                by_bundle = run_hook(claude_event(a, kind), scorer)
                by_url = run_hook(claude_event(b, kind), url=server)
                assert by_url == by_bundle, (name, k, kind)
                assert restart_path(a).exists() == restart_path(b).exists()
                if restart_path(a).exists():
                    assert restart_path(a).read_text() == restart_path(b).read_text()
                    actions.add("stop")
                else:
                    actions.add("warn" if by_bundle else "continue")
    assert "stop" in actions
    assert len(actions) >= 2


def test_cli_url_equals_bundle_on_a_loop(halts_only, fixtures_dir, tmp_path):
    """End to end: the CLI with --url prints the same stop as with --bundle (the stuck-pattern
    halt, infinite stop threshold), and writes the same restart packet."""
    from serving.hooks.claude_code import restart_path

    bundle, url = halts_only
    outs, packets = [], []
    for src_args, where in (
        (["--bundle", str(bundle), "--threads", "1"], "a"),
        (["--url", url], "b"),
    ):
        (tmp_path / where).mkdir()
        path = tmp_path / where / "loop.jsonl"
        shutil.copyfile(fixtures_dir / "claude_code_constructed_loop.jsonl", path)
        p = subprocess.run(
            _cli(*src_args),
            input=json.dumps(claude_event(path)),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, p.stderr
        outs.append(json.loads(p.stdout))
        packets.append(restart_path(path).read_text())
    assert outs[0] == outs[1]
    assert packets[0] == packets[1]
    assert outs[1]["continue"] is False
    assert "stuck_pattern" in outs[1]["stopReason"]
    assert outs[1]["hookSpecificOutput"]["permissionDecision"] == "deny"
    packet = json.loads(packets[1])  # strict JSON: the infinite threshold is written as null
    assert (packet["agent"], packet["reason"], packet["threshold"]) == (
        "claude-code",
        "stuck_pattern",
        None,
    )
    assert f"after {packet['step']} steps" in outs[1]["stopReason"]
    # the stop text is said once to the user (stopReason), its headline once to the model
    assert "systemMessage" not in outs[1]
    headline = outs[1]["hookSpecificOutput"]["permissionDecisionReason"]
    assert outs[1]["stopReason"].startswith(headline)
    assert "Tried " not in headline
    assert outs[1]["stopReason"].count("stuck_pattern") == 1
    # the last error is the failing line, not pytest's "1 failed in 0.12s"
    assert "Last error: FAILED tests/test_x.py::test_x" in packet["summary"]


def test_cli_dead_or_silent_service_exits_0_without_output(fixtures_dir):
    path = fixtures_dir / "claude_code_constructed_loop.jsonl"
    dead = f"http://127.0.0.1:{free_port()}"
    p = subprocess.run(
        _cli("--url", dead), input=json.dumps(claude_event(path)), capture_output=True, text=True
    )
    assert (p.returncode, p.stdout) == (0, "")
    assert "monitor_error" in p.stderr
    assert "unreachable" in p.stderr
    # A listener that never answers: the --timeout ends the wait.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        t0 = time.monotonic()
        p = subprocess.run(
            _cli("--url", url, "--timeout", "0.5"),
            input=json.dumps(claude_event(path)),
            capture_output=True,
            text=True,
            timeout=60,
        )
        took = time.monotonic() - t0
    assert (p.returncode, p.stdout) == (0, "")
    assert "monitor_error" in p.stderr
    assert "timed out" in p.stderr
    assert took < 30
    # --bundle and --url together is a usage error
    p = subprocess.run(_cli("--url", dead, "--bundle", "x"), input=b"{}", capture_output=True)
    assert p.returncode == 2


class _Canned(http.server.BaseHTTPRequestHandler):
    answers: list[tuple[int, bytes]] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        status, body = self.answers.pop(0)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_bad_answers_give_no_output_and_name_the_cause(fixtures_dir, tmp_path, caplog):
    from serving.hooks.claude_code import restart_path, run_hook

    path = tmp_path / "loop.jsonl"
    shutil.copyfile(fixtures_dir / "claude_code_constructed_loop.jsonl", path)
    stop = {"action": "stop", "reason": "stuck_pattern", "step": 7, "restart": None}
    _Canned.answers = [
        (500, b'{"error": "boom"}'),
        (200, b"not json"),
        (200, json.dumps({"decision": {"action": "explode"}}).encode()),
        (200, json.dumps({"scores": []}).encode()),
        (200, json.dumps({"decision": stop}).encode()),
    ]
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Canned)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        with caplog.at_level(logging.ERROR):
            for cause in ('HTTP 500: {"error": "boom"}', "no usable decision", "not a decision"):
                caplog.clear()
                assert run_hook(claude_event(path), url=url) == {}
                assert "monitor_error" in caplog.text
                assert cause in caplog.text
            assert run_hook(claude_event(path), url=url) == {}  # no "decision" key
            assert not restart_path(path).exists()
            # a well-formed stop from the service is obeyed and the packet written
            out = run_hook(claude_event(path), url=url)
    finally:
        httpd.shutdown()
    assert out["continue"] is False
    assert "stuck_pattern" in out["stopReason"]
    assert json.loads(restart_path(path).read_text())["step"] == 7


def test_url_ignores_proxy_settings(fixtures_dir, tmp_path, monkeypatch):
    """The transcript goes to --url only: an http_proxy in the environment (here a dead one)
    neither receives it nor breaks the hook."""
    from serving.hooks.claude_code import run_hook

    path = tmp_path / "loop.jsonl"
    shutil.copyfile(fixtures_dir / "claude_code_constructed_loop.jsonl", path)
    stop = {"action": "stop", "reason": "stuck_pattern", "step": 7, "restart": None}
    _Canned.answers = [(200, json.dumps({"decision": stop}).encode())]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_proxy = f"http://127.0.0.1:{s.getsockname()[1]}"
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(var, dead_proxy)
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    httpd = http.server.HTTPServer(("127.0.0.1", 0), _Canned)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        out = run_hook(claude_event(path), url=f"http://127.0.0.1:{httpd.server_address[1]}")
    finally:
        httpd.shutdown()
    assert out["continue"] is False


def _source_keyed(bundle, root, group: str):
    """A copy of the tiny bundle keyed by source, whose only group is `group` (fallback none)."""
    copy = root / "bundle"
    shutil.copytree(bundle, copy)
    manifest = json.loads((copy / "monitor.json").read_text())
    th = manifest["thresholds"]
    th["group_by"], th["fallback"] = "source", "none"
    th["groups"] = {group: th["groups"]["mini-swe-agent"]}
    (copy / "monitor.json").write_text(json.dumps(manifest))
    return copy


def test_source_flag_finds_the_calibrated_group(
    bundle, fixtures_dir, tmp_path, monkeypatch, capsys
):
    """Without --source a Claude Code run falls in no group (no stop by score); --source names
    the group calibrated for the hook; --agent changes the name the model reads."""
    import io

    from serving.hooks.claude_code import decide
    from serving.scorer import Scorer
    from training.cli import main

    copy = _source_keyed(bundle, tmp_path, "my-claude")
    scorer = Scorer.load(copy, threads=1)
    event = claude_event(fixtures_dir / "claude_code_constructed_session.jsonl")
    assert decide(event, scorer).threshold in (None, float("inf"))
    mine = decide(event, scorer, source="my-claude")
    assert mine.threshold == pytest.approx(0.61)
    other = decide(event, scorer, source="my-claude", agent="not-claude")
    assert other.score != pytest.approx(mine.score)  # the header the model reads changed
    # the CLI takes the flags (stdin in, stdout out)
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(event)))
    argv = ["hook", "claude-code", "--bundle", str(copy), "--threads", "1"]
    assert main([*argv, "--source", "my-claude", "--agent", "claude-code"]) == 0
    printed = capsys.readouterr().out
    assert printed == "" or json.loads(printed)


def test_restart_packet_carries_the_task(halts_only, fixtures_dir, tmp_path):
    from serving.hooks.claude_code import restart_path, run_hook
    from serving.scorer import Scorer

    lines = (fixtures_dir / "claude_code_constructed_loop.jsonl").read_text().splitlines()
    prompt = {"type": "user", "message": {"role": "user", "content": "Make test_x pass"}}
    path = tmp_path / "loop.jsonl"
    path.write_text("\n".join([lines[0], json.dumps(prompt), *lines[1:]]) + "\n")
    out = run_hook(claude_event(path), Scorer.load(halts_only[0], threads=1))
    assert out["continue"] is False
    packet = json.loads(restart_path(path).read_text())
    assert packet["task"] == "Make test_x pass"
    assert packet["decision"]["restart"]["task"] == "Make test_x pass"
