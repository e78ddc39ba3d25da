"""The Moatless Tools and OpenHands completion-log readers, and their labels, on the real files."""

from __future__ import annotations

import copy
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from monitor.formats import moatless, openhands_completions
from monitor.reading import Problem, detect, read_runs, read_trajectory

LITE = "swe-bench-lite"
OH = "swe-bench-verified/openhands-claude-3.5-sonnet"
IID = "astropy__astropy-12907"


def _oh_file(data_dir: Path, iid: str = IID) -> Path:
    return next((data_dir / OH / "trajs" / iid).glob("*.json.gz"))


def test_moatless_0609_steps_states_and_cost_tokens(data_dir: Path) -> None:
    path = data_dir / LITE / "moatless-gpt4o-0609" / "trajs" / f"{IID}.json.gz"
    assert detect(path) is moatless
    t = read_trajectory(path)
    assert (t.id, t.agent, t.source, t.model) == (
        f"moatless-gpt4o-0609/{IID}",
        "moatless",
        "moatless-gpt4o-0609",
        "gpt-4o-2024-05-13",
    )
    assert [s.role for s in t.steps] == [
        "SearchLoop_Searching",
        "SearchLoop_Searching",
        "SearchLoop_Searching",
        "CodeLoop_Pending",
        "CodeLoop_CodeChange",
        "CodeLoop_Pending",
    ]
    assert [s.tool for s in t.steps] == [
        "search",
        "search",
        "identify",
        "request_for_change",
        "search_replace",
        "finish",
    ]
    assert t.steps[0].action == 'search({"class_name":"separability_matrix"})'
    assert "No classes found" in t.steps[0].observation
    assert t.steps[-1].kind == "submit"
    assert t.exit_status == "finish"
    assert t.task.startswith("Modeling's `separability_matrix`")
    assert t.submission.startswith("diff --git a/astropy/modeling/separable.py")
    # Only dollars per call: tokens estimated from the cost at gpt-4o's list price ($5/$15 per M).
    first = t.steps[0]
    assert first.tokens_estimated
    assert first.cost_usd == pytest.approx(0.00637)
    assert first.tokens_in * 5 + first.tokens_out * 15 == pytest.approx(0.00637e6, rel=1e-3)
    assert sum(s.cost_usd or 0 for s in t.steps) == pytest.approx(t.totals.cost_usd)


def test_moatless_agenticloop_recorded_tokens_and_phases(data_dir: Path) -> None:
    path = data_dir / LITE / "moatless-claude-3.5-sonnet" / "trajs" / f"{IID}.json.gz"
    t = read_trajectory(path)
    assert [s.role for s in t.steps] == [
        "SearchCode",
        "IdentifyCode",
        "DecideRelevance",
        "PlanToCode",
        "EditCode",
        "PlanToCode",
    ]
    assert [s.tool for s in t.steps] == ["search", "identify", "decide", "plan", "edit", "finish"]
    assert not any(s.tokens_estimated for s in t.steps)
    assert (t.steps[0].tokens_in, t.steps[0].tokens_out) == (2859, 264)
    assert t.steps[0].thought.startswith("To address this issue")
    assert "scratch_pad" not in t.steps[0].action
    assert t.exit_status == "finished"
    assert t.steps[-1].kind == "submit"


def test_moatless_cost_estimate_matches_recorded_tokens(data_dir: Path) -> None:
    """The cost-based ledger, tried on the run that records tokens: run totals within 10%."""
    rel = []
    for path in sorted((data_dir / LITE / "moatless-claude-3.5-sonnet" / "trajs").glob("*"))[:60]:
        t = read_trajectory(path)
        pairs = []
        for s in t.steps:
            c = copy.copy(s)
            c.tokens_estimated = True
            pairs.append((c, s.cost_usd))
        moatless._estimate_tokens(pairs, t.model)
        rel.append(abs(sum(c.tokens for c, _ in pairs) - t.total_tokens) / t.total_tokens)
    assert np.median(rel) < 0.10


def test_moatless_retried_call_is_an_error(data_dir: Path) -> None:
    runs = [
        read_trajectory(p)
        for p in sorted((data_dir / LITE / "moatless-gpt4o-0617" / "trajs").glob("*"))[:80]
    ]
    errors = [s for t in runs for s in t.steps if s.is_error]
    assert errors
    refusals = {
        a["retry_message"]
        for p in sorted((data_dir / LITE / "moatless-gpt4o-0617" / "trajs").glob("*"))[:80]
        for t in json.loads(gzip.decompress(p.read_bytes()))["transitions"]
        for a in t.get("actions") or []
        if a.get("output") is None and a.get("retry_message")
    }
    assert refusals
    # an error: a call retried (its output, if any, lists errors) or refused (its feedback)
    assert all(s.observation in ("", *refusals) or "errors" in s.observation for s in errors)
    assert sum(s.observation in refusals for s in errors) > 10


def test_openhands_completion_log_steps(data_dir: Path) -> None:
    path = _oh_file(data_dir)
    assert detect(path) is openhands_completions
    assert detect(path.parent) is openhands_completions
    raw = json.loads(gzip.decompress(path.read_bytes()))
    turns = sum(m["role"] == "assistant" for m in raw["messages"])
    t = read_trajectory(path)
    assert (t.id, t.agent, t.source, t.instance_id) == (
        f"openhands-claude-3.5-sonnet/{IID}",
        "openhands",
        "openhands-claude-3.5-sonnet",
        IID,
    )
    assert t.model == "Claude-3.5-Sonnet(Oct)"
    assert len(t.steps) == turns + 1  # every call, then the logged call's own response
    first = t.steps[0]
    assert (first.tool, first.action) == ("execute_bash", "ls -R /workspace/astropy__astropy__4.3")
    assert first.thought.startswith("I'll help you resolve this issue")
    assert first.observation.startswith("/workspace/astropy__astropy__4.3:")
    assert not first.is_error
    assert t.steps[-1].tool == "finish"
    assert t.steps[-1].kind == "submit"
    assert t.exit_status == "finish"
    # The task is the issue text; the in-context example ("pwd && ls") is no step.
    assert t.task.startswith("Modeling's `separability_matrix` does not compute")
    assert "START OF EXAMPLE" not in t.task
    assert not any("pwd && ls" in s.action for s in t.steps)
    assert all(s.tokens_estimated and s.tokens_in > 0 for s in t.steps)
    assert [s.tokens_in for s in t.steps] == sorted(s.tokens_in for s in t.steps)


def test_openhands_errors_from_exit_codes_and_error_results(data_dir: Path) -> None:
    runs = [read_trajectory(p) for p in sorted((data_dir / OH / "trajs").iterdir())[:30]]
    steps = [s for t in runs for s in t.steps]
    bash_errors = [s for s in steps if s.tool == "execute_bash" and s.is_error]
    assert bash_errors
    assert all("exit code 0]" not in s.observation[-60:] for s in bash_errors)
    editor_errors = [s for s in steps if s.tool == "str_replace_editor" and s.is_error]
    assert editor_errors
    assert all(s.observation.startswith("ERROR") for s in editor_errors)


def test_openhands_native_tool_calls_read_like_text_calls(data_dir: Path, tmp_path: Path) -> None:
    """`fncall_messages` (OpenAI tool-call form) gives the same actions as the text form."""
    raw = json.loads(gzip.decompress(_oh_file(data_dir).read_bytes()))
    native = {"messages": raw["fncall_messages"], "response": raw["fncall_response"]}
    folder = tmp_path / "llm_completions" / IID
    folder.mkdir(parents=True)
    (folder / "native-1743405761.3.json").write_text(json.dumps(native))
    a = read_trajectory(_oh_file(data_dir))
    b = read_trajectory(folder / "native-1743405761.3.json")
    assert (b.source, b.instance_id) == (tmp_path.name, IID)  # llm_completions: a container
    assert [s.action for s in b.steps[:-1]] == [s.action for s in a.steps[:-1]]
    assert [s.is_error for s in b.steps[:-1]] == [s.is_error for s in a.steps[:-1]]


def test_openhands_folder_of_calls_is_one_run(data_dir: Path, tmp_path: Path) -> None:
    """One file per call: the folder is the run, read from its longest conversation."""
    raw = json.loads(gzip.decompress(_oh_file(data_dir).read_bytes()))
    folder = tmp_path / "mine" / "llm_completions" / IID
    folder.mkdir(parents=True)
    for n in (10, 30, len(raw["messages"])):
        call = dict(raw, messages=raw["messages"][:n])
        (folder / f"model-17434057{n:02d}.5.json").write_text(json.dumps(call))
    problems: list[Problem] = []
    runs = list(read_runs([tmp_path / "mine"], problems=problems))
    assert len(runs) == 1
    assert runs[0].source == "mine"
    assert len(runs[0].steps) == len(read_trajectory(_oh_file(data_dir)).steps)
    assert [p.reason for p in problems] == [
        f"1 run(s) that no label file covers (no verdict): mine/{IID}"
    ]


def _submission(data_dir: Path, tmp_path: Path, iids: list[str]) -> Path:
    """A SWE-bench experiments layout: <sub>/trajs/<id>/<file> and <sub>/results/."""
    sub = tmp_path / "evaluation" / "verified" / "20250329_OpenHands"
    for iid in iids:
        shutil.copytree(data_dir / OH / "trajs" / iid, sub / "trajs" / iid)
    (sub / "results").mkdir()
    return sub


def test_results_folder_labels_its_submission(data_dir: Path, tmp_path: Path) -> None:
    iids = sorted(p.name for p in (data_dir / OH / "trajs").iterdir())[:6]
    sub = _submission(data_dir, tmp_path, iids)
    report = {
        "resolved": iids[:2],  # `resolved` as a list, not `resolved_ids`
        "unresolved_ids": iids[2:4],
        "empty_error_patch_ids": [iids[4], "ghost__ghost-1"],
        "completed_ids": iids[:4],
    }
    (sub / "results" / "results.json").write_text(json.dumps(report))
    problems: list[Problem] = []
    verdicts = {t.instance_id: t.resolved for t in read_runs([sub], problems=problems)}
    assert verdicts == {
        iids[0]: True,
        iids[1]: True,
        iids[2]: False,
        iids[3]: False,
        iids[4]: False,
        iids[5]: None,  # named by no list: no verdict
    }
    assert [Path(p.path).name for p in problems] == ["results.json", sub.name]
    assert "ghost__ghost-1" in problems[0].reason
    assert "do not name" in problems[1].reason  # the run with no verdict is listed
    assert iids[5] in problems[1].reason


def test_explicit_label_file_labels_runs_anywhere(data_dir: Path, tmp_path: Path) -> None:
    iids = sorted(p.name for p in (data_dir / OH / "trajs").iterdir())[:3]
    sub = _submission(data_dir, tmp_path, iids)
    elsewhere = tmp_path / "labels" / "my-report.json"
    elsewhere.parent.mkdir()
    elsewhere.write_text(json.dumps({"resolved_ids": [iids[0]], "unresolved_ids": iids[1:]}))
    problems: list[Problem] = []
    unlabelled = list(read_runs([sub], problems=problems))
    assert all(t.resolved is None for t in unlabelled)
    assert problems
    assert "no label file covers" in problems[-1].reason
    problems = []
    verdicts = {
        t.instance_id: t.resolved for t in read_runs([sub], labels=[elsewhere], problems=problems)
    }
    assert verdicts == {iids[0]: True, iids[1]: False, iids[2]: False}
    assert problems == []


def test_moatless_result_json_labels(data_dir: Path) -> None:
    runs = list(read_runs([data_dir / LITE / "moatless-gpt4o-0617"]))
    assert len(runs) == 300
    assert sum(t.resolved is True for t in runs) == 74
    assert all(t.resolved is not None for t in runs)


def test_moatless_refused_calls_read_their_feedback_as_errors(data_dir: Path) -> None:
    """A call the AgenticLoop refused has no `output`, only the `retry_message` sent back to the
    model: it was read as an empty, successful answer (156 steps of 0617, 88 of claude)."""
    t = read_trajectory(
        data_dir / LITE / "moatless-gpt4o-0617" / "trajs" / "django__django-11019.json.gz"
    )
    refused = t.steps[4]
    assert refused.tool == "search"
    assert refused.observation == "It's not possible to search for test files."
    assert refused.is_error


def test_moatless_plan_that_finished_is_a_submission(data_dir: Path) -> None:
    """gpt-4o's PlanToCode finish is often a bare `{"action": {"message": ...}}` (223 runs read it
    as a plan): a change request names its file and span, a finish does not. The call tells it,
    not the `Finished` transition written after it, so a watch reads the step as it ends."""
    t = read_trajectory(data_dir / LITE / "moatless-gpt4o-0617" / "trajs" / f"{IID}.json.gz")
    assert [s.tool for s in t.steps][-3:] == ["plan", "edit", "finish"]
    assert t.steps[-1].kind == "submit"
    assert t.steps[-1].action.startswith('finish({"action":{"message":')


def test_moatless_0609_refused_edits_are_errors(data_dir: Path) -> None:
    """0609's search_replace says why an edit was refused in `output.error`, and a change
    request naming a span that does not exist is answered `Span not found`: no step of that
    source was ever an error."""
    t = read_trajectory(
        data_dir / LITE / "moatless-gpt4o-0609" / "trajs" / "django__django-12184.json.gz"
    )
    errors = [s for s in t.steps if s.is_error]
    assert [s.tool for s in errors] == ["request_for_change", "search_replace", "search_replace"]
    assert errors[0].observation.startswith("Span not found: modules.")
    assert "error: " in errors[1].observation
    assert "placeholder" in errors[1].observation
