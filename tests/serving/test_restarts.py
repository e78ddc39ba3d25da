"""`run_with_restarts` with the real mini-swe-agent: a DefaultAgent on its local environment in
a temporary git repository; a scripted model loops on attempt 1 and finishes on attempt 2."""

from __future__ import annotations

import os

import pytest

from tests.git_helpers import git_repo

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")

LOOP = "python -c 'import sys; print(\"FAILED test_a\"); sys.exit(1)'"


def test_minisweagent_restarts_after_a_loop(tmp_path):
    pytest.importorskip("minisweagent")
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.test_models import DeterministicModel, make_output

    from monitor.policy import PolicyConfig
    from monitor.scripted import ScriptedScorer
    from monitor.session import Monitor
    from serving.hooks.minisweagent import monitored
    from serving.hooks.restarts import run_with_restarts

    work = git_repo(tmp_path / "repo")
    scripts = {
        1: ["echo 'x = 2' > a.py", "echo new > b.py", *[LOOP] * 10],  # stuck: same failing call
        2: ["cat a.py", "ls", "echo 'x = 3' > a.py", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"],
    }
    # low scores: only the stuck-pattern halt can stop a run
    monitor = Monitor(PolicyConfig(), scorer=ScriptedScorer([0.1], threshold=0.9))
    agents = []

    def make_agent(attempt: int):
        outputs = [
            make_output(f"Run it.\n```bash\n{c}\n```", [{"command": c}], cost=0.01)
            for c in scripts[attempt]
        ]
        agent = monitored(DefaultAgent)(
            DeterministicModel(outputs=outputs),
            LocalEnvironment(cwd=str(work)),
            monitor=monitor,
            system_template="You fix bugs.",
            instance_template="Task: {{task}}",
            step_limit=30,
            output_path=tmp_path / "out" / f"attempt-{attempt}.traj.json",
        )
        agents.append(agent)
        return agent

    out = run_with_restarts(make_agent, "Make x equal 3.", max_attempts=3, workdir=work)
    assert out["exit_status"] == "Submitted"
    first, second = out["attempts"]
    assert first["stopped"] is True
    assert first["reason"] == "stuck_pattern"
    assert first["step"] < 10  # stopped inside the loop, not at its end
    assert "+x = 2" in first["diff"]
    assert "+new" in first["diff"]  # an untracked file is part of the diff
    assert second["stopped"] is False
    # attempt 2: a fresh conversation whose task has the note and the optional diff
    task_2 = second["task"]
    assert task_2.startswith("Make x equal 3.")
    assert "Attempt 1 was stopped by the failfast monitor" in task_2
    assert "you may apply it if it helps" in task_2
    assert "+x = 2" in task_2
    assert LOOP not in str(agents[1].messages[:2])  # the transcript is not carried over
    # the repository was reset before attempt 2: `cat a.py` saw the original file, b.py gone
    observations = [str(m.get("content")) for m in agents[1].messages if m.get("role") == "user"]
    assert any("x = 1" in o for o in observations[1:2])
    assert "b.py" not in observations[2]
    assert (work / "a.py").read_text() == "x = 3\n"
    assert not (work / "b.py").exists()
