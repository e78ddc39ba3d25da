"""Warm restarts inside a Python harness: `run_with_restarts` for mini-swe-agent.

    from minisweagent.agents.default import DefaultAgent
    from serving.hooks.minisweagent import monitored
    from serving.hooks.restarts import run_with_restarts

    Agent = monitored(DefaultAgent)
    def make_agent(attempt):            # a fresh agent: new model client, new conversation
        return Agent(model, LocalEnvironment(cwd=repo), monitor=monitor, **agent_config)
    out = run_with_restarts(make_agent, task, max_attempts=2, workdir=repo)
    out["exit_status"], out["attempts"]

Each attempt runs a fresh agent. When the monitor stops one (exit status "MonitorStopped") and
attempts are left, the work tree's diff since the attempt started is captured (git, untracked
files too), the repository is put back, and the next agent gets the task again with a two-line
summary of the stopped attempt and its diff offered as optional (serving.supervise.packet).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from serving.hooks.minisweagent import EXIT_STATUS
from serving.supervise import git
from serving.supervise.packet import prompt

log = logging.getLogger(__name__)


def run_with_restarts(
    agent_factory: Callable[[int], Any],
    task: str,
    *,
    max_attempts: int = 2,
    workdir: str | Path | None = None,
) -> dict[str, Any]:
    """Run `agent_factory(attempt).run(task_text)` until an attempt is not stopped.

    Args:
        agent_factory: builds the agent of attempt 1, 2, ... (a `monitored(...)` class).
        task: the task of the first attempt (restarts get it again, with the note and diff).
        max_attempts: attempts in all.
        workdir: the git work tree the agent edits (diffed and reset between attempts); None:
            the diff the monitored agent captured itself (`git diff` in its environment) and no
            reset.

    Returns:
        The last attempt's result dict plus `attempts`: per attempt its exit status, whether the
        monitor stopped it, the stop reason and step, the task text it was given and the diff it
        left (when stopped).
    """
    repo = Path(workdir) if workdir is not None and git.is_repo(Path(workdir)) else None
    text = task
    attempts: list[dict[str, Any]] = []
    result: dict[str, Any] = {}
    for n in range(1, max_attempts + 1):
        snap = git.snapshot(repo) if repo is not None else None
        agent = agent_factory(n)
        result = agent.run(text)
        stopped = result.get("exit_status") == EXIT_STATUS
        decision = getattr(getattr(agent, "monitor_session", None), "stopped", None)
        record: dict[str, Any] = {
            "attempt": n,
            "exit_status": result.get("exit_status"),
            "stopped": stopped,
            "reason": decision.reason if stopped and decision else None,
            "step": decision.step if stopped and decision else None,
            "task": text,
        }
        attempts.append(record)
        if not stopped or decision is None or n == max_attempts:
            break
        diff = decision.restart.diff if decision.restart else ""
        if repo is not None and snap is not None:
            diff = git.diff(repo, snap, git.snapshot(repo))
            git.restore(repo, snap)
        record["diff"] = diff
        text = prompt(task, n, decision, diff)
    return {**result, "attempts": attempts}
