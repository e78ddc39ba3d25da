"""Verdicts without transcripts (training.export.verdict_files, `failfast known-tasks
--verdicts`): one verdict per task a label file gives one, named by its submission, each file
counted once, and a plain-lists file refused without the benchmark's instance ids."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from monitor.errors import LabelError
from training.export.verdict_files import agent_of, family_of, read_instances, verdict_runs


def _write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_a_run_report_gives_its_named_verdicts_under_its_submission(tmp_path: Path) -> None:
    report = {"resolved_ids": ["t1"], "unresolved_ids": ["t2"], "error_ids": ["t3"]}
    f = _write(tmp_path / "20250101_agent-x" / "results" / "results.json", report)
    assert agent_of(f) == "20250101_agent-x"
    runs = verdict_runs(f).runs
    assert [(r.instance_id, r.agent, r.resolved) for r in runs] == [
        ("t1", "20250101_agent-x", True),
        ("t2", "20250101_agent-x", False),
    ]  # t3: a harness error, no verdict
    assert [r.id for r in verdict_runs(f).runs] == [r.id for r in runs]  # the same file: same ids
    # the same run under another name, or gzipped, is the same run
    assert [r.id for r in verdict_runs(f, agent="mine").runs] == [r.id for r in runs]
    gz = f.with_name("results.json.gz")
    gz.write_bytes(gzip.compress(json.dumps(report, indent=2).encode()))
    assert [r.id for r in verdict_runs(gz).runs] == [r.id for r in runs]
    other = _write(tmp_path / "other" / "report.json", {**report, "resolved_ids": ["t2"]})
    assert {r.id for r in verdict_runs(other).runs}.isdisjoint(r.id for r in runs)
    twin = _write(tmp_path / "twin" / "report.json", report)  # another agent, same verdicts
    assert {r.id for r in verdict_runs(twin).runs}.isdisjoint(r.id for r in runs)
    assert verdict_runs(f, agent="mine").runs[0].agent == "mine"
    # an explicit file ignores ids it does not name
    assert len(verdict_runs(f, instances=["t1", "t9"]).runs) == 2


def test_a_submission_that_is_a_known_family_is_counted_as_it(tmp_path: Path) -> None:
    fams = ["swe-agent", "mini-swe-agent", "coder", "autocoderover", "openhands"]
    assert family_of("20240620_sweagent_claude3.5sonnet", fams) == "swe-agent"
    assert family_of("mini-swe-agent-gemini-3-pro", fams) == "mini-swe-agent"
    assert family_of("autocoderover-v2", fams) == "autocoderover"  # not coder: whole words
    assert family_of("claude-coder", fams) == "coder"
    assert family_of("20240509_amazon-q-developer-agent", fams) == ""
    f = _write(
        tmp_path / "mini-swe-agent-gemini-3-pro" / "results_summary.json",
        {"instances": [{"instance_id": "t1", "resolved": True}]},
    )
    vf = verdict_runs(f, families=fams)
    assert (vf.agent, vf.family, vf.runs[0].agent) == (
        "mini-swe-agent-gemini-3-pro",
        "mini-swe-agent",
        "mini-swe-agent",
    )


def test_one_trial_counts_once_by_its_trial_and_agent(tmp_path: Path) -> None:
    trial = tmp_path / "job" / "astropy__astropy-1__abc"
    result = {
        "task_name": "astropy__astropy-1",
        "trial_name": "astropy__astropy-1__abc",
        "agent_info": {"name": "terminus-2"},
        "verifier_result": {"rewards": {"reward": 1.0}},
    }
    res = _write(trial / "result.json", result)
    reward = trial / "verifier" / "reward.txt"
    reward.parent.mkdir()
    reward.write_text("1\n")
    a, b = verdict_runs(res), verdict_runs(reward)
    assert a.agent == b.agent == "terminus-2"
    assert [r.id for r in a.runs] == [r.id for r in b.runs]
    assert [(r.instance_id, r.resolved) for r in a.runs] == [("astropy__astropy-1", True)]
    other = _write(tmp_path / "job" / "astropy__astropy-1__def" / "result.json", result)
    assert verdict_runs(other).runs[0].id != a.runs[0].id  # a second trial counts again
    inst = "django__django-1"
    rep = tmp_path / "logs" / "run_evaluation" / "r1" / "20250101_sub" / inst / "report.json"
    _write(rep, {inst: {"resolved": False}})
    got = verdict_runs(rep)
    assert (got.agent, [(r.instance_id, r.resolved) for r in got.runs]) == (
        "20250101_sub",
        [(inst, False)],
    )


def test_ids_listed_as_resolved_and_unresolved_are_reported(tmp_path: Path) -> None:
    f = _write(tmp_path / "s" / "report.json", {"resolved_ids": ["t1"], "unresolved_ids": ["t1"]})
    vf = verdict_runs(f)
    assert [r.resolved for r in vf.runs] == [True]
    assert any("resolved and as unresolved" in w for w in vf.warnings)


def test_plain_lists_need_the_benchmarks_instances(tmp_path: Path) -> None:
    f = _write(tmp_path / "sub" / "results.json", {"resolved": ["t1"], "no_generation": ["t2"]})
    with pytest.raises(LabelError, match="--instances"):
        verdict_runs(f)
    ids = tmp_path / "ids.txt"
    ids.write_text("# lite\nt1\nt2\n\nt3\n")
    assert read_instances(ids) == ["t1", "t2", "t3"]
    runs = verdict_runs(f, instances=read_instances(ids)).runs
    assert [(r.instance_id, r.resolved) for r in runs] == [
        ("t1", True),
        ("t2", False),
        ("t3", False),
    ]
    as_json = _write(tmp_path / "ids.json", ["t1", "t2"])
    assert read_instances(as_json) == ["t1", "t2"]
    empty = tmp_path / "none.txt"
    empty.write_text("# nothing\n")
    with pytest.raises(ValueError, match="no instance ids"):
        read_instances(empty)


def test_plain_lists_refuse_ids_of_another_benchmark_and_counts(tmp_path: Path) -> None:
    f = _write(tmp_path / "sub" / "results.json", {"resolved": ["x1"], "no_generation": []})
    with pytest.raises(LabelError, match="does not list"):
        verdict_runs(f, instances=["t1", "t2"])
    counts = _write(tmp_path / "c" / "results.json", {"resolved": 120, "total": 300})
    with pytest.raises(LabelError, match="names no instance"):
        verdict_runs(counts, instances=["t1"])


def test_instance_files_are_read_strictly(tmp_path: Path) -> None:
    bom = tmp_path / "bom.txt"
    bom.write_bytes("\ufefft1\nt2  # a note\n".encode())
    assert read_instances(bom) == ["t1", "t2"]
    gz = tmp_path / "ids.txt.gz"
    gz.write_bytes(gzip.compress(b"t1\nt2\n"))
    assert read_instances(gz) == ["t1", "t2"]
    jl = tmp_path / "ids.jsonl"
    jl.write_text('{"instance_id": "t1"}\n')
    with pytest.raises(ValueError, match="not a list"):
        read_instances(jl)
    spaced = tmp_path / "spaced.txt"
    spaced.write_text("t1\nt2 resolved\n")
    with pytest.raises(ValueError, match="line 2"):
        read_instances(spaced)
