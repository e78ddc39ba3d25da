"""OpenHands SDK integration: a conversation callback that feeds each event to a monitor session
and pauses the conversation on a stop (restart packet as with the other hooks).

Against the OpenHands SDK (`openhands-sdk` 1.x, Python >= 3.12): `Conversation(agent=...,
callbacks=[hook])` calls `hook(event)` for every event; an `ActionEvent` (a tool call) is paired
with the `ObservationEvent` / `AgentErrorEvent` / `UserRejectObservation` that answers it (by
`action_id`, else the tool call's id: an agent error names only that) into one Step; agent
`MessageEvent`s are message steps. Steps are built by monitor.formats.openhands_sdk_steps, as the
reader of the persisted conversation builds them (`failfast score|watch <persistence_dir>/<id>`),
so a live run and its replay score the same steps. On a stop the hook writes the restart packet
and calls `conversation.pause()`: the run loop ends before the next step.

    from serving.hooks.openhands import OpenHandsHook
    hook = OpenHandsHook(Monitor(policy, scorer=Scorer.load(bundle)), task, restart_path="x.restart.json",
                         workdir="/path/to/repo")
    conversation = Conversation(agent=agent, workspace="/path/to/repo", callbacks=[hook])
    hook.attach(conversation)
    conversation.send_message(task); conversation.run()
    hook.stopped                       # the stop Decision, or None; hook.end() logs the end record

Nothing here imports the SDK: events are read by their class names and documented fields, so
this module imports (and its tests of the pairing run) without it. A failing monitor never
stops the conversation (`monitor_error`, logged).
"""

from __future__ import annotations

import copy
import logging
import subprocess
from pathlib import Path
from typing import Any

from monitor.formats.openhands_sdk_steps import Steps, usage
from monitor.types import Decision, Step

log = logging.getLogger(__name__)

AGENT = "openhands"


def event_dict(event: Any) -> dict[str, Any]:
    """An SDK event as the JSON the SDK persists it as (`kind` = its class name)."""
    dump = getattr(event, "model_dump", None)
    data = dump(mode="json") if callable(dump) else {}
    return {**(data if isinstance(data, dict) else {}), "kind": type(event).__name__}


class OpenHandsHook:
    """A conversation callback; one monitored run per hook.

    Args:
        monitor: a monitor.session.Monitor (or serving.remote.RemoteMonitor).
        task: the task (for the scorer's header and the restart packet).
        agent: agent family for thresholds.
        source: threshold group when thresholds are keyed by source.
        instance_id: the task's id (e.g. the SWE-bench instance): a bundle with a verdict table
            of known tasks serves a task other agents have run by its known-task choice.
        restart_path: where the restart packet goes on a stop (None: not written).
        workdir: git work tree whose `git diff` goes into the packet (None: no diff).
    """

    def __init__(
        self,
        monitor: Any,
        task: str = "",
        *,
        agent: str = AGENT,
        source: str = "",
        instance_id: str = "",
        restart_path: str | Path | None = None,
        workdir: str | Path | None = None,
    ) -> None:
        self.session = monitor.start(task, agent, source=source, instance_id=instance_id)
        self.task = task
        self.agent = agent
        self.restart_path = Path(restart_path) if restart_path is not None else None
        self.workdir = Path(workdir) if workdir is not None else None
        self.conversation: Any = None
        self.decisions: list[Decision] = []
        self.stopped: Decision | None = None
        self._steps = Steps()  # the run's steps so far, as the persisted conversation reads
        self._ended = False

    def attach(self, conversation: Any) -> None:
        """The conversation to pause on a stop (created with this hook among its callbacks)."""
        self.conversation = conversation

    def __call__(self, event: Any) -> None:
        try:
            step = self.step_of(event)
            if step is None:
                return
            decision = self.session.observe(step)
        except Exception:  # a broken monitor never stops the conversation
            log.exception("monitor_error: could not observe OpenHands event %s", type(event))
            return
        self.decisions.append(decision)
        if decision.stop and self.stopped is None:
            self.stopped = decision
            self._halt(decision)

    def step_of(self, event: Any) -> Step | None:
        """The Step an event completes (None: it completes none, e.g. an action awaiting its
        observation, a user message, an internal state update). Built by monitor.formats.
        openhands_sdk_steps, as the reader of the persisted conversation builds it, so live and
        replayed steps agree; tokens from the conversation's recorded usage, else estimated."""
        step = self._steps.add(event_dict(event))
        if step is None:
            return None
        self._steps.tokens(step, self._usage())
        scored = copy.copy(step)
        scored.index = len(self.decisions)
        return scored

    def _usage(self) -> dict[str, tuple[int, int]]:
        """Per response id its recorded (prompt, completion) tokens, from the attached
        conversation's stats ({} before `attach`, or when they cannot be read)."""
        state = getattr(self.conversation, "state", None)
        stats = getattr(state, "stats", None)
        dump = getattr(stats, "model_dump", None)
        if not callable(dump):
            return {}
        try:
            return usage({"stats": dump(mode="json")})[0]
        except Exception:  # noqa: BLE001 - usage is a nicety: estimates stand in
            log.debug("could not read the conversation's usage", exc_info=True)
            return {}

    def _diff(self) -> str:
        if self.workdir is None:
            return ""
        try:
            p = subprocess.run(
                ["git", "diff"], cwd=self.workdir, capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired):
            log.exception("could not capture the diff for the restart packet")
            return ""
        return p.stdout if p.returncode == 0 else ""

    def _halt(self, decision: Decision) -> None:
        from serving.hooks.minisweagent import write_restart

        if decision.restart is not None and not decision.restart.diff:
            decision.restart.diff = self._diff()
        if self.restart_path is not None:
            try:
                write_restart(self.restart_path, decision, agent=self.agent, task=self.task)
            except OSError:  # the stop still happens; only the packet file is lost
                log.exception("could not write the restart packet to %s", self.restart_path)
        if self.conversation is None:
            log.error("failfast: stop (%s) but no conversation attached", decision.reason)
            return
        try:
            self.conversation.pause()
        except Exception:
            log.exception("could not pause the conversation")

    def end(self) -> None:
        """The conversation is over: log the run's end record (once)."""
        if not self._ended:
            self._ended = True
            self.session.end()
