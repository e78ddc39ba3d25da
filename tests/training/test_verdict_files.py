"""Verdicts without transcripts (training.export.verdict_files, `failfast known-tasks
--verdicts`): one verdict per task a label file gives one, named by its submission, each file
counted once, and a plain-lists file refused without the benchmark's instance ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.errors import LabelError
from training.export.verdict_files import agent_of, read_instances, verdict_runs


def _write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_a_run_report_gives_its_named_verdicts_under_its_submission(tmp_path: Path) -> None:
    report = {"resolved_ids": ["t1"], "unresolved_ids": ["t2"], "error_ids": ["t3"]}
    f = _write(tmp_path / "20250101_agent-x" / "results" / "results.json", report)
    assert agent_of(f) == "20250101_agent-x"
    runs = verdict_runs(f)
    assert [(r.instance_id, r.agent, r.resolved) for r in runs] == [
        ("t1", "20250101_agent-x", True),
        ("t2", "20250101_agent-x", False),
    ]  # t3: a harness error, no verdict
    assert all(r.id.startswith("verdicts:20250101_agent-x:") for r in runs)
    assert [r.id for r in verdict_runs(f)] == [r.id for r in runs]  # the same file: same ids
    other = _write(tmp_path / "other" / "report.json", {**report, "x": 1})
    assert {r.id for r in verdict_runs(other, agent="20250101_agent-x")}.isdisjoint(
        r.id for r in runs
    )  # another run of the same agent counts again
    assert verdict_runs(f, agent="mine")[0].agent == "mine"
    # an explicit file ignores ids it does not name
    assert len(verdict_runs(f, instances=["t1", "t9"])) == 2


def test_plain_lists_need_the_benchmarks_instances(tmp_path: Path) -> None:
    f = _write(tmp_path / "sub" / "results.json", {"resolved": ["t1"], "no_generation": ["t2"]})
    with pytest.raises(LabelError, match="--instances"):
        verdict_runs(f)
    ids = tmp_path / "ids.txt"
    ids.write_text("# lite\nt1\nt2\n\nt3\n")
    assert read_instances(ids) == ["t1", "t2", "t3"]
    runs = verdict_runs(f, instances=read_instances(ids))
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
