"""Harness hooks: mini-swe-agent (real package, scripted model, local environment) and Claude Code."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from monitor.scripted import ScriptedScorer
from monitor.session import Monitor
from tests.bundle_helpers import claude_event
from tests.git_helpers import git_repo

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")


class ScriptedRunScorer(ScriptedScorer):
    """The scripted scorer plus what whole-run scoring needs (thresholds, policy)."""

    policy: dict = {"min_steps": 2, "persist": 1}  # one checked score stops, as scripted

    def score_run(self, traj):
        return [self.scores[min(k, len(self.scores)) - 1] for k in range(1, len(traj.steps) + 1)]

    def thresholds(self, agent, source=""):
        from serving.bundle import Thresholds

        return Thresholds(self.threshold, self.warn_threshold, "agent")


# ---------------------------------------------------------------- mini-swe-agent


def _agent(tmp_path, scores, commands, **kw):
    pytest.importorskip("minisweagent")
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.test_models import DeterministicModel, make_output

    from monitor.policy import PolicyConfig
    from serving.hooks.minisweagent import monitored

    outputs = [
        make_output(f"Run it.\n```bash\n{c}\n```", [{"command": c}], cost=0.01) for c in commands
    ]
    work = git_repo(tmp_path / "repo")
    (work / "a.py").write_text("x = 2\n")  # an uncommitted change the restart packet must carry
    Agent = monitored(DefaultAgent)
    monitor = Monitor(
        PolicyConfig(min_steps=2, every=1, persist=1),
        scorer=ScriptedScorer(scores, threshold=0.8, warn_threshold=0.5),
    )
    agent = Agent(
        DeterministicModel(outputs=outputs),
        LocalEnvironment(cwd=str(work)),
        monitor=monitor,
        system_template="You fix bugs.",
        instance_template="Task: {{task}}",
        step_limit=20,
        **{"output_path": tmp_path / "out" / "inst-1" / "inst-1.traj.json", **kw},
    )
    return agent


def test_minisweagent_stopped_by_score(tmp_path):
    cmds = ["ls", "cat a.py", "python -c 'import sys; sys.exit(1)'", "ls", "ls", "ls"]
    agent = _agent(tmp_path, [0.1, 0.3, 0.6, 0.9, 0.95], cmds)
    result = agent.run("make x equal 3")
    assert result["exit_status"] == "MonitorStopped"
    # steps 1-3 observed before the 4th model call; the 4th step scores 0.9 >= 0.8 at k=4
    assert [d.action for d in agent.decisions] == ["continue", "continue", "warn", "stop"]
    assert agent.model.current_index == 3  # the 5th model call never happened
    traj = json.loads((tmp_path / "out" / "inst-1" / "inst-1.traj.json").read_text())
    assert traj["info"]["exit_status"] == "MonitorStopped"
    packet = json.loads((tmp_path / "out" / "inst-1" / "inst-1.restart.json").read_text())
    assert packet["reason"] == "predicted_failure"
    assert packet["step"] == 4
    assert "-x = 1" in packet["diff"]
    assert "+x = 2" in packet["diff"]
    assert "Stopped after 4 steps" in packet["summary"]
    # the offline reader sees the same steps the wrapper observed
    from monitor.formats.minisweagent import read

    assert len(read(tmp_path / "out" / "inst-1" / "inst-1.traj.json").steps) == 4


def test_minisweagent_stop_without_output_path_says_no_packet_file(tmp_path, caplog):
    cmds = ["ls", "cat a.py", "ls", "ls", "ls", "ls"]
    agent = _agent(tmp_path, [0.1, 0.3, 0.9, 0.95], cmds, output_path=None)
    with caplog.at_level("WARNING", logger="serving.hooks.minisweagent"):
        result = agent.run("make x equal 3")
    assert result["exit_status"] == "MonitorStopped"
    assert "no restart packet file written" in caplog.text
    assert not list(tmp_path.rglob("*.restart.json"))


def test_minisweagent_submits_when_scores_stay_low(tmp_path):
    cmds = ["ls", "cat a.py", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    agent = _agent(tmp_path, [0.1, 0.2, 0.2], cmds)
    result = agent.run("make x equal 3")
    assert result["exit_status"] == "Submitted"
    assert [d.action for d in agent.decisions] == ["continue", "continue"]
    assert not (tmp_path / "out" / "inst-1" / "inst-1.restart.json").exists()


# ---------------------------------------------------------------- Claude Code


def test_claude_code_stop_by_score(fixtures_dir, tmp_path):
    from serving.hooks.claude_code import restart_path, run_hook

    path = tmp_path / "session.jsonl"
    shutil.copyfile(fixtures_dir / "claude_code_constructed_session.jsonl", path)
    out = run_hook(claude_event(path), ScriptedRunScorer([0.1, 0.2, 0.95], threshold=0.9))
    assert out["continue"] is False
    assert "predicted_failure" in out["stopReason"]
    assert "after 3 steps" in out["stopReason"]
    hso = out["hookSpecificOutput"]
    assert (hso["hookEventName"], hso["permissionDecision"]) == ("PreToolUse", "deny")
    packet = json.loads(restart_path(path).read_text())
    assert packet["step"] == 3
    assert packet["agent"] == "claude-code"


def test_claude_code_warn_continue_and_failures(fixtures_dir, tmp_path):
    from serving.hooks.claude_code import run_hook

    path = fixtures_dir / "claude_code_constructed_session.jsonl"
    warn = run_hook(
        claude_event(path, "PostToolUse"),
        ScriptedRunScorer([0.1, 0.6], threshold=0.9, warn_threshold=0.5),
    )
    assert set(warn) == {"systemMessage"}
    assert "warning" in warn["systemMessage"]
    assert (
        run_hook(claude_event(path), ScriptedRunScorer([0.1], threshold=0.9, warn_threshold=0.5))
        == {}
    )
    # a missing transcript or a failing scorer never blocks the session
    assert run_hook(claude_event(tmp_path / "missing.jsonl"), ScriptedRunScorer([0.99])) == {}
    assert run_hook({"hook_event_name": "Stop"}, ScriptedRunScorer([0.99])) == {}


def test_claude_code_cli_with_bundle(tiny_model_dir, tmp_path_factory, fixtures_dir, tmp_path):
    """`failfast hook claude-code` end to end: a loop transcript is stopped by the stuck pattern."""
    pytest.importorskip("torch")
    from tests.bundle_helpers import shared_bundle

    # A copy whose pooled stop threshold is refused (no stop by score, as in a real bundle without
    # enough resolved runs), so only the heuristic halt can stop the loop, whatever the random
    # tiny head scores.
    bundle = tmp_path / "bundle"
    shutil.copytree(shared_bundle(tiny_model_dir, tmp_path_factory), bundle)
    manifest = json.loads((bundle / "monitor.json").read_text())
    manifest["thresholds"]["pooled"]["stop"] = {"0.05": {"refused": "test: halts only"}}
    (bundle / "monitor.json").write_text(json.dumps(manifest))
    path = tmp_path / "loop.jsonl"
    shutil.copyfile(fixtures_dir / "claude_code_constructed_loop.jsonl", path)
    cmd = [sys.executable, "-m", "training.cli", "hook", "claude-code", "--bundle", str(bundle)]
    p = subprocess.run(
        cmd, input=json.dumps(claude_event(path)), capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["continue"] is False
    assert "stuck_pattern" in out["stopReason"]
    assert out["hookSpecificOutput"]["permissionDecision"] == "deny"
    # bad stdin: exit 0, nothing on stdout, the reason on stderr
    p = subprocess.run(cmd, input="not json", capture_output=True, text=True, timeout=120)
    assert p.returncode == 0
    assert p.stdout == ""
    assert "not JSON" in p.stderr
    # watch: the same transcript, a Decision line per step, exit 1 at the stop
    w = [
        sys.executable,
        "-m",
        "training.cli",
        "watch",
        "--bundle",
        str(bundle),
        str(path),
        "--once",
    ]
    p = subprocess.run(w, capture_output=True, text=True, timeout=120)
    lines = [json.loads(x) for x in p.stdout.splitlines()]
    assert p.returncode == 1
    assert lines[-1]["action"] == "stop"
    assert lines[-1]["step"] == len(lines)
    # score: exit 1 on stop, JSON with every decision
    s = [
        sys.executable,
        "-m",
        "training.cli",
        "score",
        "--bundle",
        str(bundle),
        str(path),
        "--json",
    ]
    p = subprocess.run(s, capture_output=True, text=True, timeout=120)
    body = json.loads(p.stdout)
    assert p.returncode == 1
    assert body["stop_step"] == len(lines)
    assert len(body["decisions"]) == body["n_steps"]
