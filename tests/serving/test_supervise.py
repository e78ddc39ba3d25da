"""`failfast supervise` end to end: a stand-in agent writing Claude Code stream-json, the tiny
test bundle, a git repository in a temporary folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.git_helpers import git

STANDIN = Path(__file__).with_name("standin_agent.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "x.py").write_text("def f():\n    return 1\n")
    git(repo, "add", "x.py")
    git(repo, "commit", "-qm", "init")
    return repo


@pytest.fixture(scope="module")
def bundle(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny bundle with no stop by score (its random head would stop anything): only the
    model-free halts (the stuck patterns) stop, so the tests do not depend on random scores."""
    pytest.importorskip("torch")
    from tests.bundle_helpers import shared_bundle

    out = tmp_path_factory.mktemp("supervise") / "bundle"
    shutil.copytree(shared_bundle(tiny_model_dir, tmp_path_factory), out)
    manifest = json.loads((out / "monitor.json").read_text())
    manifest["thresholds"]["pooled"]["stop"] = {"0.05": {"refused": "test: halts only"}}
    (out / "monitor.json").write_text(json.dumps(manifest))
    return out


def _supervise(
    tmp_path: Path, repo: Path, source: list[str], mode: str, *extra: str, steps=200, inside=False
):
    transcript = (repo if inside else tmp_path) / "run.jsonl"
    seen = tmp_path / "seen.jsonl"
    summary = (repo if inside else tmp_path) / "summary.json"
    cmd = [sys.executable, "-m", "training.cli", "supervise", *source]
    cmd += ["--transcript", str(transcript), "--summary", str(summary), "--workdir", str(repo)]
    cmd += ["--interval", "0.2", "--grace", "5", "--task", "Make test_x pass.", *extra, "--"]
    cmd += [sys.executable, str(STANDIN), mode, str(transcript), str(repo), str(seen)]
    cmd += ["{restart}", "--steps", str(steps), "--delay", "0.1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    took = time.monotonic() - t0
    seen_lines = [json.loads(x) for x in seen.read_text().splitlines()] if seen.exists() else []
    body = json.loads(summary.read_text()) if summary.exists() else None
    return p, body, seen_lines, took, transcript


def _seconds(attempt: dict) -> float:
    from datetime import datetime

    t = [datetime.fromisoformat(attempt[k]) for k in ("started", "ended")]
    return (t[1] - t[0]).total_seconds()


def test_looping_agent_is_stopped_twice(bundle, repo, tmp_path):
    p, body, seen, _, transcript = _supervise(
        tmp_path, repo, ["--bundle", str(bundle)], "loop", "--max-attempts", "2"
    )
    assert p.returncode == 1, p.stderr
    # each attempt ends within a few of its 200 steps (20 s of sleeps alone at 0.1 s a step)
    assert all(_seconds(a) < 15 for a in body["attempts"])
    assert [a["attempt"] for a in body["attempts"]] == [1, 2]
    assert all(a["stopped"] for a in body["attempts"])
    assert {a["reason"] for a in body["attempts"]} == {"stuck_pattern"}
    assert all(a["steps"] < 20 for a in body["attempts"])
    assert body["outcome"] == "stopped"
    assert body["exit_code"] == 1
    assert body["totals"]["attempts"] == 2
    assert body["totals"]["steps"] == sum(a["steps"] for a in body["attempts"])
    # the second attempt sees the restart packet and the prompt with the task, summary and diff
    assert seen[0]["restart"] is None
    assert seen[0]["prompt"].startswith("Make test_x pass.")
    packet_1 = body["attempts"][0]["restart_packet"]
    assert seen[1]["restart"] == packet_1
    packet = json.loads(Path(packet_1).read_text())
    assert packet["reason"] == "stuck_pattern"
    assert "+    return 2  # attempt 1" in packet["diff"]
    assert "Attempt 1 was stopped" in seen[1]["prompt"]
    assert "you may apply it if it helps" in seen[1]["prompt"]
    assert "+    return 2  # attempt 1" in seen[1]["prompt"]
    assert len(packet["summary"].splitlines()) == 2
    # the repository was reset before attempt 2: its diff starts from the original file
    packet_2 = json.loads(Path(body["attempts"][1]["restart_packet"]).read_text())
    assert "-    return 1" in packet_2["diff"]
    assert "attempt 1" not in packet_2["diff"]
    # the stopped transcripts are kept beside each other, never fed on
    assert not transcript.exists()
    for n in (1, 2):
        kept = Path(f"{transcript}.attempt-{n}")
        assert kept.exists()
        assert body["attempts"][n - 1]["transcript"] == str(kept)
    assert body["warm_restart"]["restarts"] == 1
    # the last attempt's changes stay in place (nothing follows it)
    assert "attempt 2" in (repo / "x.py").read_text()


def test_own_files_inside_the_repository_survive_the_reset(bundle, repo, tmp_path):
    """USAGE's example writes the transcript and summary inside the work tree: the reset keeps
    them (and the packets and prompts beside them), and no diff or prompt carries them."""
    p, body, seen, _, transcript = _supervise(
        tmp_path, repo, ["--bundle", str(bundle)], "loop", "--max-attempts", "2", inside=True
    )
    assert p.returncode == 1, p.stderr
    for a in body["attempts"]:
        for key in ("transcript", "restart_packet", "prompt"):
            assert Path(a[key]).exists(), (key, a[key])
        packet = json.loads(Path(a["restart_packet"]).read_text())
        assert "run.jsonl" not in packet["diff"]
        assert "summary.json" not in packet["diff"]
        assert "return 2  # attempt" in packet["diff"]
    assert seen[1]["restart"] == body["attempts"][0]["restart_packet"]
    assert "run.jsonl" not in seen[1]["prompt"]


def test_clean_agent_exits_0_after_one_attempt(bundle, repo, tmp_path):
    p, body, seen, _, transcript = _supervise(
        tmp_path, repo, ["--bundle", str(bundle)], "clean", "--max-attempts", "3", steps=4
    )
    assert p.returncode == 0, p.stderr
    assert len(body["attempts"]) == 1
    assert body["attempts"][0]["stopped"] is False
    assert body["attempts"][0]["exit_code"] == 0
    assert body["attempts"][0]["steps"] == 4
    assert (body["outcome"], body["reason"]) == ("finished", "ok")  # exit 0: no agent error
    assert len(seen) == 1
    assert transcript.exists()  # a finished attempt's transcript stays where the agent wrote it
    assert (repo / "x.py").read_text() == "def f():\n    return 3\n"


def test_budget_running_out_mid_attempt(bundle, repo, tmp_path):
    p, body, seen, _, _ = _supervise(
        tmp_path,
        repo,
        ["--bundle", str(bundle)],
        "clean",
        "--max-attempts",
        "3",
        "--budget-steps",
        "10",
        steps=200,
    )
    assert p.returncode == 1, p.stderr
    assert _seconds(body["attempts"][0]) < 15  # of the stand-in's 20 s
    assert len(body["attempts"]) == 1  # out of budget: no restart
    a = body["attempts"][0]
    assert a["stopped"] is True
    assert a["reason"] == "step_budget"
    assert 10 <= a["steps"] < 30
    assert body["outcome"] == "budget"
    assert body["reason"] == "step_budget"
    caps = body["budgets"]["caps"]["max_steps"]
    assert caps["cap"] == 10
    assert caps["warned_at"] is not None  # the warn band (60%) was reported on the way
    assert "warning: steps" in p.stderr


def test_monitor_down_never_ends_the_agent(repo, tmp_path):
    """--url to a port nothing listens on: every step is monitor_error, the agent finishes."""
    from tests.bundle_helpers import free_port

    url = f"http://127.0.0.1:{free_port()}"
    p, body, seen, _, _ = _supervise(
        tmp_path, repo, ["--url", url, "--timeout", "1"], "clean", steps=3
    )
    assert p.returncode == 0, p.stderr
    assert body["attempts"][0]["stopped"] is False
    assert body["attempts"][0]["reason"] == "monitor_error"
    assert body["attempts"][0]["steps"] == 3
    assert body["attempts"][0]["monitor_errors"] == 3  # counted, not only shown
    assert "could not open a session" in body["attempts"][0]["monitor_error"]


def test_usage_problems_exit_2(repo, tmp_path):
    base = [sys.executable, "-m", "training.cli", "supervise", "--url", "http://127.0.0.1:9"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = lambda *a: subprocess.run(  # noqa: E731
        [*base, *a], capture_output=True, text=True, timeout=60, env=env
    )
    t = tmp_path / "t.jsonl"
    p = run("--transcript", str(t))
    assert p.returncode == 2
    assert "no agent command" in p.stderr
    bad = tmp_path / "caps.yaml"
    bad.write_text("budget: {max_steps: -3}\n")
    p = run("--transcript", str(t), "--budget-file", str(bad), "--", "true")
    assert p.returncode == 2
    assert "max_steps must be a positive number" in p.stderr
    t.write_text("old run\n")
    p = run("--transcript", str(t), "--", "true")
    assert p.returncode == 2
    assert "already exists" in p.stderr
    # a transcript nobody writes: the agent ran unwatched, said with exit 2
    p = run("--transcript", str(tmp_path / "never.jsonl"), "--workdir", str(repo), "--", "true")
    assert p.returncode == 2
    assert "never readable" in p.stderr


def test_budget_file_from_fit_budget(tmp_path):
    from serving.supervise.budget import Budgets, read_caps

    f = tmp_path / "caps.yaml"
    f.write_text("budget:\n  max_steps: 40\n  max_tokens: 1000\n  max_cost_usd: null\n")
    caps = read_caps(f)
    assert caps == {"max_steps": 40.0, "max_tokens": 1000.0}
    b = Budgets(caps)
    assert b.hit({"steps": 39, "tokens": 10}) is None
    assert b.new_warnings({"steps": 30, "tokens": 10}) == ["steps 30 is 75% of max_steps 40"]
    assert b.new_warnings({"steps": 31, "tokens": 10}) == []  # once per budget
    assert b.hit({"steps": 10, "tokens": 1000})[0] == "token_budget"
    f.write_text("budget:\n  max_steps: 40\n  max_step: 3\n")  # misspelt: refused, not ignored
    with pytest.raises(ValueError, match="unknown budget field"):
        read_caps(f)


def test_cli_watch_does_not_splice_a_rotated_file(bundle, fixtures_dir, tmp_path):
    """`failfast watch` following a file that is replaced by another run (issue 25, item 5)."""
    path = tmp_path / "live.jsonl"
    log = tmp_path / "decisions.jsonl"
    shutil.copyfile(fixtures_dir / "claude_code_constructed_session.jsonl", path)
    cmd = [sys.executable, "-m", "training.cli", "watch", "--bundle", str(bundle), str(path)]
    cmd += ["--interval", "0.2", "--idle", "4", "--decision-log", str(log)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    # until the first run's 4 calls are scored (its 5th step, its closing reply, is held until
    # a later step or the run's end: a reply's tool call may still follow it)
    while time.monotonic() < deadline:
        if log.exists() and log.read_text().count('"event": "observe"') >= 4:
            break
        time.sleep(0.2)
    new = tmp_path / "rotated.jsonl"
    shutil.copyfile(fixtures_dir / "claude_code_constructed_stream.jsonl", new)
    os.replace(new, path)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    steps = [json.loads(x)["step"] for x in out.splitlines()]
    assert steps == [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 6, 7]  # the new run counted from its start
    ends = [r for r in map(json.loads, log.read_text().splitlines()) if r.get("event") == "end"]
    assert [(e["run"], e["steps"]) for e in ends] == [
        ("5e0d8c1b-2a3f-4e6d-9b8a-1c2d3e4f5a6b", 5),
        ("3f1c2a9e-5b7d-4c11-9e0a-0c2b7d4e8f10", 7),
    ]
    assert "new inode" in err


def test_url_mode_stops_through_a_running_service(bundle, repo, tmp_path):
    """--url: live sessions in `failfast serve` (POST /v1/sessions, steps, DELETE)."""
    from tests.bundle_helpers import serve

    service = serve(bundle, tmp_path / "serve.log")
    url = next(service)
    try:
        p, body, seen, _, _ = _supervise(
            tmp_path, repo, ["--url", url], "loop", "--max-attempts", "1"
        )
    finally:
        next(service, None)  # stops the service
    assert p.returncode == 1, p.stderr
    a = body["attempts"][0]
    assert a["stopped"] is True
    assert a["reason"] == "stuck_pattern"
    assert a["monitor_errors"] == 0
    assert a["steps"] < 20
    assert len(seen) == 1
