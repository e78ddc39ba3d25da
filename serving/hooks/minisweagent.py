"""mini-swe-agent integration: an agent class that asks the monitor before every model call.

Against the documented seams of mini-swe-agent 2.x (src/minisweagent/agents/default.py):
`DefaultAgent.query()` is the one place a model call happens ("Override to add hooks"), and a
flow exception derived from `InterruptAgentFlow` ends `run()` with the exit message it carries.

    from minisweagent.agents.default import DefaultAgent
    Agent = monitored(DefaultAgent)
    agent = Agent(model, env, monitor=Monitor(policy, scorer=Scorer.load(bundle)), **agent_config)
    result = agent.run(task)        # {"exit_status": "MonitorStopped", ...} when stopped

Before each model call the wrapper turns the messages so far into Steps (with the same code as
the offline reader), observes every step not yet seen, then calls `check()`. On a stop it writes
the restart packet beside the trajectory (`<output_path stem>.restart.json`) and raises
`MonitorStopped`, so the run ends with its own exit status and the trajectory is saved as usual.
When `run()` returns, the session's end record (per-step scores) goes to the monitor's decision
log; once the run is evaluated, `agent.monitor_session.verdict(resolved)` reports its verdict to
`monitor.feedback` (realized FPR per agent, drift).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from monitor.atomic import atomic_write_text
from monitor.formats.minisweagent import _steps as steps_from_messages
from monitor.textio import json_safe
from monitor.types import Decision

log = logging.getLogger(__name__)

EXIT_STATUS = "MonitorStopped"


def restart_path(output_path: str | Path | None) -> Path | None:
    """Where the restart packet of a trajectory goes: `x.traj.json` -> `x.restart.json`."""
    if output_path is None:
        return None
    p = Path(output_path)
    name = p.name.split(".")[0] or "run"
    return p.with_name(f"{name}.restart.json")


def write_restart(path: Path, decision: Decision, *, agent: str, task: str) -> None:
    """Write the restart packet and the stop decision as JSON."""
    packet = decision.restart
    data = {
        "exit_status": EXIT_STATUS,
        "agent": agent,
        "task": task,
        "reason": decision.reason,
        "step": decision.step,
        "score": decision.score,
        "threshold": decision.threshold,
        "diff": packet.diff if packet else "",
        "summary": packet.summary if packet else "",
        "decision": decision.to_dict(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    # strict JSON (an infinite threshold is null) written beside and renamed into place
    atomic_write_text(path, json.dumps(json_safe(data), indent=1, default=str) + "\n")


def monitored(agent_cls: type) -> type:
    """Subclass a mini-swe-agent agent class so that a Monitor watches every run.

    The returned class takes the base class's arguments plus `monitor` (a monitor.session.Monitor),
    `agent_name` (the agent family for thresholds, default "mini-swe-agent"), `source` (the
    threshold group when the bundle's thresholds are keyed by source), `instance_id` (the task's
    id, e.g. the SWE-bench instance: a bundle that serves known tasks looks it up) and
    `diff_command` (run in the environment to capture the current diff on a stop; "" to skip).

    Long: the subclass is built here, closing over the mini-swe-agent imports, which load only
    when the hook is used.
    """
    from minisweagent.exceptions import InterruptAgentFlow

    class MonitorStopped(InterruptAgentFlow):
        """The monitor stopped the run (exit status "MonitorStopped")."""

    class Monitored(agent_cls):  # type: ignore[misc, valid-type]
        def __init__(
            self,
            *args: Any,
            monitor: Any,
            agent_name: str = "mini-swe-agent",
            source: str = "",
            instance_id: str = "",
            diff_command: str = "git diff",
            **kwargs: Any,
        ) -> None:
            super().__init__(*args, **kwargs)
            self.monitor = monitor
            self.agent_name = agent_name
            self.source = source
            self.instance_id = instance_id
            self.diff_command = diff_command
            self.monitor_session: Any = None
            self.decisions: list[Decision] = []
            self._task = ""

        def run(self, task: str = "", **kwargs: Any) -> dict:
            self._task = task
            self.monitor_session = self.monitor.start(
                task, self.agent_name, source=self.source, instance_id=self.instance_id
            )
            self.decisions = []
            try:
                return super().run(task, **kwargs)
            finally:  # the end record (per-step scores) goes to the monitor's decision log
                try:
                    self.monitor_session.end()
                except Exception:  # logging must not change how the run ends
                    log.exception("monitor_error: could not log the end of the run")

        def query(self) -> dict:
            try:
                steps = steps_from_messages(self.messages)[0]
            except Exception:  # an unexpected message shape must not end the agent's run
                log.exception("monitor_error: could not turn the messages into steps")
                steps = []
            for step in steps[len(self.decisions) :]:
                decision = self.monitor_session.observe(step)
                self.decisions.append(decision)
                if decision.stop:
                    self._halt(decision)
            decision = self.monitor_session.check()
            if decision.stop:
                self._halt(decision)
            return super().query()

        def _current_diff(self) -> str:
            if not self.diff_command:
                return ""
            try:
                out = self.env.execute({"command": self.diff_command})
            except Exception:  # the environment may be gone; the packet is best effort
                log.exception("could not capture the diff for the restart packet")
                return ""
            return str(out.get("output", "")) if isinstance(out, dict) else ""

        def _halt(self, decision: Decision) -> None:
            if decision.restart is not None and not decision.restart.diff:
                decision.restart.diff = self._current_diff()
            path = restart_path(getattr(self.config, "output_path", None))
            if path is not None:
                try:
                    write_restart(path, decision, agent=self.agent_name, task=self._task)
                except OSError:  # the stop still happens; only the packet file is lost
                    log.exception("could not write the restart packet to %s", path)
                    path = None
            else:  # the decision, its packet included, is still in the exit message's extra
                log.warning(
                    "no restart packet file written: the agent's config has no output_path "
                    "(the packet is x.restart.json beside the trajectory x.traj.json)"
                )
            summary = decision.restart.summary if decision.restart else decision.reason
            raise MonitorStopped(
                {
                    "role": "exit",
                    "content": f"Stopped by the failfast monitor ({decision.reason}). {summary}",
                    "extra": {
                        "exit_status": EXIT_STATUS,
                        "submission": "",
                        "monitor": decision.to_dict(),
                        "restart_path": str(path) if path else None,
                    },
                }
            )

    Monitored.__name__ = Monitored.__qualname__ = f"Monitored{agent_cls.__name__}"
    Monitored.MonitorStopped = MonitorStopped  # type: ignore[attr-defined]
    return Monitored
