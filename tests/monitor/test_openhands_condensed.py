"""A folder of OpenHands call files whose history a condenser shortened reads as the whole run.

The call files are shaped as OpenHands writes them (`openhands/llm/llm.py`, log_completions:
`{messages, response, args, kwargs, timestamp, cost}`, native function calling) and condensed
as its condensers condense (`openhands/memory/view.py`, `conversation_memory.py`,
`memory/condenser/impl/`): the system prompt and the task always first, then a summary user
message (LLMSummarizingCondenser), `<MASKED>` user messages (ObservationMaskingCondenser) or
nothing (RecentEventsCondenser), then the latest steps.
"""

from __future__ import annotations

import json
from pathlib import Path

from monitor.formats import openhands_completions
from monitor.formats.openhands_condensed import continuation
from monitor.types import Step

IID = "astropy__astropy-12907"
SYSTEM = "You are OpenHands agent, a helpful AI assistant that can interact with a computer."
TASK = (
    "<uploaded_files>\n/workspace/astropy__astropy__4.3\n</uploaded_files>\n"
    "I've uploaded a python code repository in the directory astropy__astropy__4.3. "
    "Consider the following issue description:\n\n<issue_description>\n"
    "Modeling's `separability_matrix` does not compute separability correctly for nested "
    "CompoundModels\n</issue_description>\n\nCan you help me implement the necessary changes?"
)
CONTINUE = (
    "Please continue working on the task on whatever approach you think is suitable.\n"
    "If you think you have solved the task, please first send your answer to user through "
    "message and then finish the interaction.\nIMPORTANT: YOU SHOULD NEVER ASK FOR HUMAN HELP.\n"
)
SUMMARY = (
    "USER_CONTEXT: Fix separability_matrix for nested CompoundModels\n"
    "COMPLETED: Reproduced the bug\nPENDING: Fix _cstack in separable.py"
)
START = 1743400000


def _text(text: str) -> list[dict]:
    return [{"type": "text", "text": text}]


def _assistant(k: int) -> dict:
    """Call k's answer: `execute_bash` with command `cmd k` (step 7 answers with prose)."""
    if k == 7:
        return {"role": "assistant", "content": "I have looked around; next, the fix."}
    call = {
        "id": f"toolu_{k:02d}",
        "type": "function",
        "function": {"name": "execute_bash", "arguments": json.dumps({"command": f"cmd {k}"})},
    }
    return {"role": "assistant", "content": f"Step {k}.", "tool_calls": [call]}


def _result(k: int) -> dict:
    if k == 7:
        return {"role": "user", "content": _text(CONTINUE)}
    out = f"output {k}\n[The command completed with exit code 0.]"
    return {
        "role": "tool",
        "content": _text(out),
        "tool_call_id": f"toolu_{k:02d}",
        "name": "execute_bash",
    }


def _call(k: int, kept: list[int], between: list[str] = (), *, task: bool = True) -> dict:
    """Call k's file: the history it was sent (system, task, `between` user messages, the kept
    steps with their results) and its answer, step k."""
    messages = [{"role": "system", "content": _text(SYSTEM)}]
    if task:
        messages.append({"role": "user", "content": _text(TASK)})
    # consecutive user messages: OpenHands puts "\n\n" before the later one's text
    messages += [{"role": "user", "content": _text("\n\n" + t)} for t in between]
    for j in kept:
        messages += [_assistant(j), _result(j)]
    response = {
        "id": f"chatcmpl-{k}",
        "model": "claude-3-5-sonnet-20241022",
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": _assistant(k)}],
    }
    kwargs = {"tools": [{"type": "function", "function": {"name": "execute_bash"}}]}
    return {
        "messages": messages,
        "response": response,
        "args": [],
        "kwargs": kwargs,
        "timestamp": START + k,
        "cost": 0.01,
    }


def _write(folder: Path, k: int, doc: dict, start: int = START, frac: str = "5") -> Path:
    """Call k's file, named `<model>-<unix time>.json` as OpenHands names it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"claude-3-5-sonnet-20241022-{start + k}.{frac}.json"
    path.write_text(json.dumps(doc))
    return path


def _whole(folder: Path, n: int) -> None:
    """The folder reads as the run's n steps, each with its own result."""
    run = openhands_completions.read(folder)
    assert [s.index for s in run.steps] == list(range(n))
    assert [s.action for s in run.steps if s.kind != "message"] == [
        f"cmd {k}" for k in range(n) if k != 7
    ]
    assert [s.observation.split("\n")[0] for s in run.steps[:-1] if s.kind != "message"] == [
        f"output {k}" for k in range(n - 1) if k != 7
    ]
    assert run.task.startswith("Modeling's `separability_matrix`")
    assert run.totals.api_calls == n


def test_a_summarized_history_reads_as_the_whole_run(tmp_path: Path) -> None:
    """LLMSummarizingCondenser at calls 12 and 24 (the summary after the task, the latest four
    steps kept): the latest file alone holds 10 steps; the folder gives all 30."""
    folder = tmp_path / "llm_completions" / IID
    for k in range(30):
        start = 0 if k < 12 else (8 if k < 24 else 20)
        path = _write(folder, k, _call(k, list(range(start, k)), [SUMMARY] if start else []))
    assert len(openhands_completions.read(path).steps) == 10  # the condensed view
    _whole(folder, 30)


def test_a_summary_without_a_known_form_needs_two_latest_steps(tmp_path: Path) -> None:
    """A summary in the summarizing LLM's own words is no mark; two latest steps kept tell."""
    folder = tmp_path / "llm_completions" / IID
    for k in range(16):
        start = 0 if k < 12 else 10
        _write(
            folder, k, _call(k, list(range(start, k)), ["The agent ran cmd 0 to 9."] * bool(start))
        )
    _whole(folder, 16)


def test_masked_observations_read_as_the_whole_run(tmp_path: Path) -> None:
    """ObservationMaskingCondenser: each observation outside the window becomes `<MASKED>` and
    its call is left out with it; the window slides one step per call."""
    folder = tmp_path / "llm_completions" / IID
    for k in range(20):
        start = max(0, k - 5)
        _write(folder, k, _call(k, list(range(start, k)), ["<MASKED>"] * start))
    _whole(folder, 20)


def test_a_window_without_a_mark_reads_as_the_whole_run(tmp_path: Path) -> None:
    """RecentEventsCondenser (keep_first=1): the system prompt, the task put back, the latest
    steps; when the window starts at the harness's reply to a message, that reply stands in
    the task's place (OpenHands keeps it) and the run is still the same."""
    folder = tmp_path / "llm_completions" / IID
    for k in range(20):
        start = max(0, k - 4)
        if k == 12:  # the window starts at step 7's reply: no task sent
            doc = _call(k, list(range(8, k)), [], task=False)
            doc["messages"].insert(1, {"role": "user", "content": _text(CONTINUE)})
        else:
            doc = _call(k, list(range(start, k)))
        _write(folder, k, doc)
    _whole(folder, 20)


def test_a_condensers_own_call_in_the_folder_is_no_attempt(tmp_path: Path) -> None:
    """The summarizing LLM's call, logged beside the agent's (the CLI's default condenser shares
    the agent's LLM config), is skipped."""
    folder = tmp_path / "llm_completions" / IID
    for k in range(14):
        start = 0 if k < 12 else 8
        _write(folder, k, _call(k, list(range(start, k)), [SUMMARY] if start else []))
    prompt = "You are maintaining a context-aware state summary for an interactive agent.\n..."
    summarize = {
        "messages": [{"role": "user", "content": _text(prompt)}],
        "response": {"choices": [{"message": {"role": "assistant", "content": SUMMARY}}]},
    }
    _write(folder, 11, summarize, frac="9")  # between calls 11 and 12
    _whole(folder, 14)


def test_a_rerun_whose_first_step_repeats_the_last_is_another_attempt(tmp_path: Path) -> None:
    """A crashed attempt's 10 calls, then a rerun whose first call answers like the crashed
    attempt's last: one step alike, no mark, is no evidence of a condensed history."""
    folder = tmp_path / "llm_completions" / IID
    for k in range(10):
        _write(folder, k, _call(k, list(range(k))))
    rerun = _call(9, [])  # the rerun's first call: no history, answered `cmd 9`
    _write(folder, 100, rerun)
    run = openhands_completions.read(folder)
    assert [s.action for s in run.steps] == ["cmd 9"]


def _proxied(doc: dict, sid: str) -> dict:
    """The call as logged for a LiteLLM proxy model: `kwargs.extra_body.metadata` kept
    (codeact_agent.py sends `state.to_llm_metadata(...)`; llm.py drops it for other models)."""
    meta = {"session_id": sid, "trace_version": "0.59.0", "tags": ["agent:CodeActAgent"]}
    return {**doc, "kwargs": {**doc["kwargs"], "extra_body": {"metadata": meta}}}


def test_a_session_id_tells_a_rerun_and_a_one_step_window(tmp_path: Path) -> None:
    """Where the files carry the session id: a rerun is another attempt even where its first
    call repeats the crashed attempt's, and a window of one latest step with no mark (too
    little to tell from the steps alone) is the run."""
    rerun = tmp_path / "rerun" / IID
    for k in range(2):  # crashed after its second call, which the rerun's first call repeats
        _write(rerun, k, _proxied(_call(k, list(range(k))), "a1b2"))
    again = json.loads(json.dumps(_call(0, [])).replace("Step ", "Again, step "))
    _write(rerun, 100, _proxied(again, "c3d4"))  # the rerun's first call
    run = openhands_completions.read(rerun)
    assert [(s.thought, s.observation) for s in run.steps] == [("Again, step 0.", "")]
    window = tmp_path / "window" / IID
    for k in range(12):
        _write(window, k, _proxied(_call(k, list(range(max(0, k - 1), k))), "a1b2"))
    _whole(window, 12)


def test_a_crashed_attempts_cut_file_is_skipped(tmp_path: Path) -> None:
    """A call file cut short (the process killed while writing it) is not the run's end."""
    folder = tmp_path / "llm_completions" / IID
    for k in range(6):
        _write(folder, k, _call(k, list(range(k))))
    _write(folder, 3, {}, frac="7").write_text('{"messages": [')
    assert len(openhands_completions.read(folder).steps) == 6


def _steps(actions: str, answered: bool = True) -> list[Step]:
    out = [
        Step(index=i, tool="execute_bash", action=a, observation="out")
        for i, a in enumerate(actions)
    ]
    if not answered:
        out[-1].observation = ""
    return out


def test_continuation_places_grown_condensed_and_dropped_calls() -> None:
    old = _steps("abcdef", answered=False)
    assert continuation(old, _steps("abcdefg")) == 5  # grown
    assert continuation(old, _steps("aefg")) == 2  # first kept, then the latest two
    assert continuation(old, _steps("abcdeg")) == 5  # f never sent back (an invalid call)
    assert continuation(old, _steps("fg")) is None  # one step alike, no mark
    assert continuation(old, _steps("fg"), marked=True) == 0
    assert continuation(old, _steps("xyz")) is None  # another attempt
