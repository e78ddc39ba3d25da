"""Issue 25: the Claude Code hook has an overall deadline with --bundle too, reads stdin with a
bounded wait, and answers a malformed event (`transcript_path: 5`) without a traceback."""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.bundle_helpers import claude_event, shared_bundle

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def bundle(tiny_model_dir, tmp_path_factory):
    return shared_bundle(tiny_model_dir, tmp_path_factory)


@pytest.fixture
def loop(fixtures_dir, tmp_path):
    path = tmp_path / "loop.jsonl"
    shutil.copyfile(fixtures_dir / "claude_code_constructed_loop.jsonl", path)
    return path


def hook_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "training.cli", "hook", "claude-code", *args]


def test_transcript_path_of_the_wrong_type_is_a_logged_problem_not_a_traceback(bundle):
    for path in (5, ["a"], {"x": 1}):
        event = {"hook_event_name": "PreToolUse", "transcript_path": path}
        p = subprocess.run(
            hook_cmd("--bundle", str(bundle)),
            input=json.dumps(event), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert (p.returncode, p.stdout) == (0, "")
        assert "Traceback" not in p.stderr
        assert "transcript_path is" in p.stderr


def test_bundle_hook_gives_up_at_its_deadline(bundle, loop):
    t0 = time.monotonic()
    p = subprocess.run(
        hook_cmd("--bundle", str(bundle), "--threads", "1", "--timeout", "0.01"),
        input=json.dumps(claude_event(loop)), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (p.returncode, p.stdout) == (0, "")  # no decision in time: the session goes on
    assert "no decision within the deadline" in p.stderr
    assert "Traceback" not in p.stderr
    assert time.monotonic() - t0 < 60
    # with time enough the same hook still stops the loop
    p = subprocess.run(
        hook_cmd("--bundle", str(bundle), "--threads", "1"),
        input=json.dumps(claude_event(loop)), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert json.loads(p.stdout)["continue"] is False


def test_run_hook_deadline_in_process(bundle, loop, caplog):
    from serving.hooks.claude_code import run_hook
    from serving.scorer import Scorer

    scorer = Scorer.load(bundle, threads=1)
    with caplog.at_level(logging.ERROR):
        assert run_hook(claude_event(loop), scorer, deadline=time.monotonic() - 1) == {}
    assert "no decision within the deadline" in caplog.text
    assert run_hook(claude_event(loop), scorer, deadline=time.monotonic() + 60)["continue"] is False


def test_stdin_left_open_after_the_event_does_not_hold_the_hook(bundle, loop):
    proc = subprocess.Popen(
        hook_cmd("--bundle", str(bundle), "--threads", "1"),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(claude_event(loop)).encode())
        proc.stdin.flush()  # and never closed
        proc.wait(timeout=90)
        assert proc.stdout is not None
        assert json.loads(proc.stdout.read())["continue"] is False
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_an_incomplete_event_on_an_open_stdin_gives_up_after_the_wait():
    from serving.hooks.stdin import read_event_within

    r, w = os.pipe()
    try:
        os.write(w, b'{"transcript_path": "/x", "hook_event_name": "PreTo')
        t0 = time.monotonic()
        with open(r, "rb", buffering=0, closefd=False) as stream:
            with pytest.raises(ValueError, match="stdin still open after 0.5 s"):
                read_event_within(stream, 0.5)
        assert time.monotonic() - t0 < 3
    finally:
        os.close(r)
        os.close(w)
    r, w = os.pipe()
    try:  # a whole event on a pipe left open: answered at once, not at the deadline
        os.write(w, b'{"transcript_path": "/x",\n "hook_event_name": "PreToolUse"}\n')
        t0 = time.monotonic()
        with open(r, "rb", buffering=0, closefd=False) as stream:
            assert read_event_within(stream, 30)["hook_event_name"] == "PreToolUse"
        assert time.monotonic() - t0 < 3
    finally:
        os.close(r)
        os.close(w)
    r, w = os.pipe()
    try:
        with open(r, "rb", buffering=0, closefd=False) as stream:
            with pytest.raises(ValueError, match="no hook event on stdin within"):
                read_event_within(stream, 0.3)
    finally:
        os.close(r)
        os.close(w)
    with pytest.raises(ValueError, match="over 10 bytes"):
        read_event_within(io.BytesIO(b'{"a": "' + b"x" * 50 + b'"}'), 1, max_bytes=10)
