"""The OpenHands SDK conversation reader, on a conversation the SDK itself persisted
(tests/fixtures/openhands_sdk_conversation: openhands-sdk 1.58.2 with its scripted LLM and its
real terminal and file-editor tools; a failing command, a call whose arguments did not validate,
two calls of one response, `finish`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from monitor.errors import TranscriptError
from monitor.formats import openhands_sdk, openhands_sdk_steps
from monitor.reading import detect, read_trajectory
from serving.hooks.openhands import OpenHandsHook

CONVERSATION = "28ae3e9c486e479781a66de71b29f574"


@pytest.fixture
def conversation(fixtures_dir: Path) -> Path:
    return fixtures_dir / "openhands_sdk_conversation" / CONVERSATION


def _events(conversation: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in openhands_sdk._event_files(conversation)]


def _key(step) -> tuple:  # noqa: ANN001
    return (
        step.kind,
        step.tool,
        step.action,
        step.observation,
        step.is_error,
        step.thought,
        step.tokens_in,
        step.tokens_out,
    )


def test_a_persisted_conversation_reads_as_its_calls(conversation: Path) -> None:
    assert detect(conversation) is openhands_sdk
    t = read_trajectory(conversation)
    assert (t.format, t.agent, t.instance_id, t.model) == (
        "openhands-sdk",
        "openhands",
        CONVERSATION,
        "test-model",
    )
    assert t.task == "Fix add() in calc.py: add(2, 2) should be 4."
    assert t.exit_status == "finished"
    assert [s.kind for s in t.steps] == ["action"] * 7 + ["submit"]
    assert [s.tool for s in t.steps] == ["terminal"] * 3 + ["file_editor"] * 2 + [
        "terminal"
    ] * 2 + ["finish"]
    assert t.steps[0].action == "ls -la"
    assert t.steps[0].thought == "I'll look at the repository first."
    assert t.steps[0].observation.startswith("total ")
    assert not t.steps[0].is_error
    # exit code 1 (the SDK's is_error stays false for a command that ran): an error
    assert "AssertionError" in t.steps[1].observation
    assert t.steps[1].is_error
    # arguments that did not validate: the raw call, answered by an AgentErrorEvent that names
    # only the tool call id
    assert t.steps[2].action == 'terminal({"security_risk":"LOW"})'
    assert t.steps[2].is_error
    assert t.steps[2].observation.startswith("Error validating tool")
    assert t.steps[3].action.startswith('file_editor({"command":"view"')
    assert t.steps[5].observation == "ok"
    assert t.steps[6].observation.startswith("fatal:")
    assert all(s.tokens_estimated and s.tokens_in > 0 for s in t.steps)


def test_its_events_folder_and_a_jsonl_of_its_events_read_the_same(
    conversation: Path, tmp_path: Path
) -> None:
    whole = [_key(s) for s in read_trajectory(conversation).steps]
    assert detect(conversation / "events") is openhands_sdk
    assert [_key(s) for s in read_trajectory(conversation / "events").steps] == whole
    jsonl = tmp_path / "events.jsonl"
    jsonl.write_text("".join(json.dumps(e) + "\n" for e in _events(conversation)))
    assert detect(jsonl) is openhands_sdk
    assert [_key(s) for s in read_trajectory(jsonl).steps] == whole


def test_tokens_are_the_calls_recorded_usage(conversation: Path, tmp_path: Path) -> None:
    """base_state.json's per-response usage, charged once per response (two tool calls of one
    response: the first carries it)."""
    copy = tmp_path / CONVERSATION
    shutil.copytree(conversation, copy)
    events = _events(copy)
    responses = [e["llm_response_id"] for e in events if e["kind"] == "ActionEvent"]
    usages = [
        {"response_id": r, "prompt_tokens": 1000 * (i + 1), "completion_tokens": 10 * (i + 1)}
        for i, r in enumerate(dict.fromkeys(responses))
    ]
    state = json.loads((copy / "base_state.json").read_text())
    state["stats"] = {
        "usage_to_metrics": {
            "agent": {
                "accumulated_cost": 0.25,
                "accumulated_token_usage": {"prompt_tokens": 28000, "completion_tokens": 280},
                "token_usages": usages,
            }
        }
    }
    (copy / "base_state.json").write_text(json.dumps(state))
    t = read_trajectory(copy)
    assert len(set(responses)) == 7  # steps 6 and 7 are one response's two calls
    assert [s.tokens_in for s in t.steps] == [1000, 2000, 3000, 4000, 5000, 6000, 0, 7000]
    assert not any(s.tokens_estimated for s in t.steps)
    assert (t.totals.tokens_in, t.totals.tokens_out, t.totals.cost_usd) == (28000, 280, 0.25)


def test_the_hook_scores_the_steps_the_reader_reads(conversation: Path) -> None:
    """Live (the hook, fed the SDK's event objects) and replayed (the persisted folder) runs
    give the same steps. The events here are stand-ins named as the SDK's classes, whose
    model_dump is the persisted JSON; tests/serving/test_openhands_hook.py checks the same
    with the SDK's own objects where it is installed."""

    class _Recorder:
        def __init__(self) -> None:
            self.steps: list = []

        def start(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204
            return self

        def observe(self, step):  # noqa: ANN001, ANN201
            self.steps.append(step)
            from monitor.types import Decision

            return Decision(action="continue", score=0.0, step=len(self.steps))

    kinds: dict[str, type] = {}
    rec = _Recorder()
    hook = OpenHandsHook(rec, "Fix add() in calc.py.")
    for ev in _events(conversation):
        cls = kinds.setdefault(ev["kind"], type(ev["kind"], (), {}))
        obj = cls()
        obj.model_dump = lambda mode="json", _ev=ev: {k: v for k, v in _ev.items() if k != "kind"}
        hook(obj)
    assert [_key(s) for s in rec.steps] == [_key(s) for s in read_trajectory(conversation).steps]
    assert [s.index for s in rec.steps] == list(range(8))


def test_a_folder_without_events_is_said(tmp_path: Path) -> None:
    (tmp_path / "conv" / "events").mkdir(parents=True)
    (tmp_path / "conv" / "base_state.json").write_text("{}")
    assert not openhands_sdk.sniff(tmp_path / "conv", b"")
    with pytest.raises(TranscriptError, match="conv: no OpenHands event files"):
        openhands_sdk.read(tmp_path / "conv")


def _jsonl(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_a_branch_the_conversation_left_is_not_read(conversation: Path, tmp_path: Path) -> None:
    """An SDK conversation is a tree (`parent_id`); a branch left by `navigate_to` stays on disk
    and must not be spliced into the run."""
    events = _events(conversation)
    assert all(e.get("parent_id") for e in events[1:])
    left = []
    for k, e in enumerate(events[4:6]):  # the second call and its answer, again, as a branch
        e = {**e, "id": f"left-{k}", "parent_id": events[3]["id"] if k == 0 else "left-0"}
        if "action_id" in e:
            e["action_id"] = "left-0"
        left.append({**e, "tool_call_id": "left-call"})
    live = _jsonl(tmp_path / "branch.jsonl", [*events[:4], *left, *events[4:]])
    assert [_key(s) for s in read_trajectory(live).steps] == [
        _key(s) for s in read_trajectory(conversation).steps
    ]


def test_a_condensation_is_a_compaction_step(conversation: Path, tmp_path: Path) -> None:
    events = _events(conversation)
    condensed = {
        "kind": "Condensation",
        "source": "environment",
        "id": "cond-1",
        "parent_id": events[5]["id"],
        "forgotten_event_ids": [events[2]["id"], events[3]["id"]],
        "summary": "Looked at the repository; the check fails.",
    }
    after = {**events[6], "parent_id": "cond-1"}
    t = read_trajectory(_jsonl(tmp_path / "c.jsonl", [*events[:6], condensed, after, *events[7:]]))
    assert [s.kind for s in t.steps][:4] == ["action", "action", "compaction", "action"]
    assert t.steps[2].observation == "Looked at the repository; the check fails."
    assert len(t.steps) == 9


def test_steps_are_built_the_same_one_event_at_a_time(conversation: Path) -> None:
    """What the hook does live (each step scored when its answer arrives, tokens then) gives
    the steps the reader gives for the whole conversation."""
    build = openhands_sdk_steps.Steps()
    done = []
    for ev in _events(conversation):
        step = build.add(ev)
        if step is not None:
            build.tokens(step, {})
            done.append(_key(step))
    assert done == [_key(s) for s in read_trajectory(conversation).steps]


def test_a_finish_that_did_not_validate_ends_nothing(conversation: Path, tmp_path: Path) -> None:
    """A `finish` call whose arguments the SDK refused (its `action` null, answered by an
    AgentErrorEvent) is an action that failed, not a submission: the run goes on, live and
    replayed alike."""
    events = _events(conversation)
    finish, last = events[16], events[17]
    refused = {**finish, "id": "bad-finish", "action": None, "tool_call_id": "call_bad"}
    refused["tool_call"] = {**finish["tool_call"], "id": "call_bad", "arguments": "{}"}
    error = {
        "kind": "AgentErrorEvent",
        "source": "agent",
        "id": "bad-finish-error",
        "parent_id": "bad-finish",
        "tool_name": "finish",
        "tool_call_id": "call_bad",
        "error": "Error validating tool 'finish': message is required",
    }
    events = [*events[:16], refused, error, {**finish, "parent_id": "bad-finish-error"}, last]
    t = read_trajectory(_jsonl(tmp_path / "f.jsonl", events))
    assert [s.kind for s in t.steps][-2:] == ["action", "submit"]
    assert t.steps[-2].is_error
    assert t.steps[-2].tool == "finish"
    # a validated finish the tool answered with an error is not an end either
    answered = {**last, "observation": {**last["observation"], "is_error": True}}
    t = read_trajectory(_jsonl(tmp_path / "g.jsonl", [*_events(conversation)[:17], answered]))
    assert t.steps[-1].kind == "action"
    assert t.steps[-1].is_error
    assert t.exit_status != "finish"
