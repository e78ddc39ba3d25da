"""The OpenHands SDK callback hook, with the SDK's own scripted LLM (`openhands.sdk.testing.TestLLM`)
and its built-in `think` / `finish` tools: no network, no model.

The SDK needs Python >= 3.12; this project's venv is 3.11, so in CI the test skips (pip finds
no openhands-sdk for 3.11). It was run in a side 3.12 venv (docs/USAGE.md, OpenHands).
"""

from __future__ import annotations

import json

import pytest


def _llm(calls):
    from openhands.sdk.llm import Message, MessageToolCall, TextContent
    from openhands.sdk.testing import TestLLM

    messages = [
        Message(
            role="assistant",
            content=[TextContent(text="")],
            tool_calls=[
                MessageToolCall(
                    id=f"call_{i}", name=name, arguments=json.dumps(args), origin="completion"
                )
            ],
        )
        for i, (name, args) in enumerate(calls)
    ]
    return TestLLM.from_messages(messages)


def _conversation(tmp_path, calls, hook):
    from openhands.sdk import Agent, Conversation

    agent = Agent(llm=_llm(calls), tools=[])
    conversation = Conversation(
        agent=agent,
        workspace=str(tmp_path),
        callbacks=[hook],
        stuck_detection=False,  # the SDK's own stuck detector would end the loop first
        visualizer=None,
    )
    hook.attach(conversation)
    return conversation


def test_openhands_loop_is_paused_by_the_monitor(tmp_path):
    pytest.importorskip("openhands.sdk")
    from monitor.policy import PolicyConfig
    from monitor.scripted import ScriptedScorer
    from monitor.session import Monitor
    from serving.hooks.openhands import OpenHandsHook

    monitor = Monitor(PolicyConfig(), scorer=ScriptedScorer([0.1], threshold=0.9))
    packet = tmp_path / "run.restart.json"
    hook = OpenHandsHook(monitor, "Fix the test.", restart_path=packet)
    loop = [("think", {"thought": "run the failing test again"})] * 12
    conversation = _conversation(tmp_path / "ws", [*loop, ("finish", {"message": "done"})], hook)
    conversation.send_message("Fix the test.")
    conversation.run()
    hook.end()
    assert hook.stopped is not None
    assert hook.stopped.reason == "stuck_pattern"
    assert hook.stopped.step < 12  # paused inside the loop, the finish call never came
    assert str(conversation.state.execution_status).lower().endswith("paused")
    assert json.loads(packet.read_text())["reason"] == "stuck_pattern"
    assert hook.decisions[0].step == 1


def test_openhands_clean_run_is_not_stopped(tmp_path):
    pytest.importorskip("openhands.sdk")
    from monitor.policy import PolicyConfig
    from monitor.scripted import ScriptedScorer
    from monitor.session import Monitor
    from serving.hooks.openhands import OpenHandsHook

    monitor = Monitor(PolicyConfig(), scorer=ScriptedScorer([0.1], threshold=0.9))
    hook = OpenHandsHook(monitor, "Fix the test.")
    calls = [("think", {"thought": f"idea {i}"}) for i in range(3)]
    conversation = _conversation(tmp_path / "ws", [*calls, ("finish", {"message": "done"})], hook)
    conversation.send_message("Fix the test.")
    conversation.run()
    hook.end()
    assert hook.stopped is None
    assert [d.step for d in hook.decisions] == [1, 2, 3, 4]
    assert str(conversation.state.execution_status).lower().endswith("finished")


def test_the_hook_scores_what_the_persisted_conversation_reads(tmp_path):
    """Live and replayed: the steps the hook built from the SDK's events are the steps
    `failfast score|watch` read from the conversation the SDK persisted."""
    pytest.importorskip("openhands.sdk")
    from openhands.sdk import Agent, Conversation

    from monitor.policy import PolicyConfig
    from monitor.reading import read_trajectory
    from monitor.scripted import ScriptedScorer
    from monitor.session import Monitor
    from serving.hooks.openhands import OpenHandsHook

    monitor = Monitor(PolicyConfig(), scorer=ScriptedScorer([0.1], threshold=0.9))
    hook = OpenHandsHook(monitor, "Fix the test.")
    seen = []
    step_of = hook.step_of

    def record(event):  # noqa: ANN001, ANN202
        step = step_of(event)
        if step is not None:
            seen.append(step)
        return step

    hook.step_of = record
    calls = [("think", {"thought": f"idea {i}"}) for i in range(3)]
    conversation = Conversation(
        agent=Agent(llm=_llm([*calls, ("finish", {"message": "done"})]), tools=[]),
        workspace=str(tmp_path / "ws"),
        callbacks=[hook],
        persistence_dir=str(tmp_path / "conversations"),
        stuck_detection=False,
        visualizer=None,
    )
    hook.attach(conversation)
    conversation.send_message("Fix the test.")
    conversation.run()
    hook.end()
    replay = read_trajectory(next((tmp_path / "conversations").iterdir()))

    def key(s):  # noqa: ANN001, ANN202
        return (s.kind, s.tool, s.action, s.observation, s.is_error, s.thought, s.tokens)

    assert replay.format == "openhands-sdk"
    assert replay.task == "Fix the test."
    assert [key(s) for s in seen] == [key(s) for s in replay.steps]
    assert [s.kind for s in replay.steps] == ["action"] * 3 + ["submit"]
