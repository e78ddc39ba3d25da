"""Readers on real files from ../shared/data (mini-swe-agent, SWE-agent, CodeR, AutoCodeRover)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from monitor import TranscriptError, read_trajectory
from monitor.ledger import fill_estimates, scale_to_total
from monitor.reading import detect
from monitor.types import Step

MINI = "swe-bench-verified/mini-swe-agent-gemini-3-pro/trajs"
SWEA = "swe-bench-lite/swe-agent-gpt4"
CODER = "swe-bench-lite/coder-gpt4/trajs"
ACR = "swe-bench-lite/autocoderover-gpt4/acr-run-1/applicable_patch"
ACR_TASK = "astropy__astropy-12907_2024-04-06_13-51-50"


def test_minisweagent_steps_usage_and_errors(data_dir: Path) -> None:
    t = read_trajectory(
        data_dir / MINI / "astropy__astropy-12907/astropy__astropy-12907.traj.json.gz"
    )
    assert (t.format, t.agent, t.model) == (
        "mini-swe-agent",
        "mini-swe-agent",
        "google/gemini-3-pro-preview",
    )
    assert (t.source, t.run) == ("mini-swe-agent-gemini-3-pro", "")
    assert t.id == "mini-swe-agent-gemini-3-pro/astropy__astropy-12907"
    assert t.exit_status == "Submitted"
    assert t.submission.startswith("diff --git a/astropy/modeling")
    assert t.task.startswith("Modeling's `separability_matrix` does not compute separability")
    assert "</pr_description>" not in t.task
    assert len(t.steps) == 20 == t.totals.api_calls
    first = t.steps[0]
    assert (first.kind, first.tool, first.action) == ("action", "bash", "ls -R")
    assert (first.tokens_in, first.tokens_out, first.tokens_estimated) == (1662, 106, False)
    assert first.cost_usd == pytest.approx(0.004596)
    assert first.thought.startswith("I need to explore the codebase")
    assert first.observation.startswith("<returncode>0</returncode>")
    assert t.steps[-1].kind == "submit"
    assert t.steps[-1].observation.startswith("diff --git")
    assert t.total_tokens == 263615
    assert not any(s.tokens_estimated for s in t.steps)


def test_minisweagent_format_error_and_nonzero_returncode(data_dir: Path) -> None:
    t = read_trajectory(
        data_dir / MINI / "astropy__astropy-13977/astropy__astropy-13977.traj.json.gz"
    )
    assert len(t.steps) == 28
    grep = t.steps[6]
    assert grep.kind == "action"
    assert grep.is_error
    assert grep.action.startswith("grep ")
    assert grep.observation.startswith("<returncode>1</returncode>")
    bad = t.steps[11]
    assert (bad.kind, bad.is_error, bad.action) == ("format_error", True, "")
    assert "found 3 actions" in bad.observation
    assert [s.index for s in t.steps if s.is_error] == [6, 11, 21]


def test_sweagent_2024_traj_estimated_tokens_scaled_to_totals(data_dir: Path) -> None:
    t = read_trajectory(data_dir / SWEA / "cost_2_1/astropy__astropy-12907.traj.gz")
    assert (t.format, t.agent, t.source, t.run) == (
        "swe-agent",
        "swe-agent",
        "swe-agent-gpt4",
        "cost_2_1",
    )
    assert t.id == "swe-agent-gpt4/cost_2_1/astropy__astropy-12907"
    assert [s.tool for s in t.steps] == [
        "create", "edit", "bash", "find_file", "open",
        "scroll_down", "scroll_down", "scroll_down", "goto", "submit",
    ]  # fmt: skip
    assert t.steps[0].action == "create reproduce_bug.py"
    assert t.steps[2].action == "python reproduce_bug.py"
    assert t.steps[-1].kind == "submit"
    assert (t.totals.tokens_in, t.totals.tokens_out) == (63010, 2070)
    assert sum(s.tokens_in for s in t.steps) == 63010
    assert sum(s.tokens_out for s in t.steps) == 2070
    assert all(s.tokens_estimated for s in t.steps)
    # The context grows, so the estimated prompt tokens do too.
    ins = [s.tokens_in for s in t.steps]
    assert ins == sorted(ins)
    assert t.task.startswith("Modeling's `separability_matrix`")
    assert "INSTRUCTIONS" not in t.task
    assert t.totals.cost_usd == pytest.approx(0.6922)


def test_sweagent_error_rule_and_harness_exit_skipped(data_dir: Path) -> None:
    t = read_trajectory(data_dir / SWEA / "cost_2_1/django__django-11001.traj.gz")
    assert [(s.index, s.tool) for s in t.steps if s.is_error] == [(6, "edit")]
    assert "Your proposed edit has introduced new syntax error" in t.steps[6].observation
    t = read_trajectory(data_dir / SWEA / "cost_2_3/sympy__sympy-14024.traj.gz")
    # 18 trajectory entries; the last is the harness's exit_cost autosubmission, not a model call.
    assert len(t.steps) == 17
    assert t.exit_status == "submitted (exit_cost)"
    assert not any(s.action.startswith("exit_") for s in t.steps)


def test_coder_roles(data_dir: Path) -> None:
    t = read_trajectory(data_dir / CODER / "astropy__astropy-6938.traj.gz")
    assert (t.agent, t.source, t.run, t.id) == (
        "coder",
        "coder-gpt4",
        "",
        "coder-gpt4/astropy__astropy-6938",
    )
    assert [s.role for s in t.steps] == ["Manager"] + ["Programmer"] * 5 + ["Manager"]
    assert [s.tool for s in t.steps] == [
        "plan",
        "open",
        "search_file",
        "open",
        "edit",
        "succeed",
        "submit",
    ]
    assert t.steps[-1].kind == "submit"
    # its own issue, from the Manager's "ISSUE: ... INSTRUCTION:" message; the Programmer's
    # message holds a worked example first (another issue), which 69 of 261 CodeR runs read
    assert t.task.startswith("Possible bug in io.fits related to D exponents")
    assert sum(s.tokens_in for s in t.steps) == 54159
    assert sum(s.tokens_out for s in t.steps) == 777
    # The Programmer starts with its own (shorter) context, not the Manager's.
    assert t.steps[1].tokens_in < t.steps[5].tokens_in


def test_autocoderover_task_dir(data_dir: Path) -> None:
    t = read_trajectory(data_dir / ACR / ACR_TASK)
    assert (t.format, t.agent, t.model) == ("autocoderover", "autocoderover", "gpt-4-0125-preview")
    assert (t.source, t.run, t.instance_id) == (
        "autocoderover-gpt4",
        "acr-run-1",
        "astropy__astropy-12907",
    )
    assert t.id == "autocoderover-gpt4/acr-run-1/astropy__astropy-12907"
    assert t.exit_status == "applicable_patch"
    assert [(s.kind, s.tool) for s in t.steps] == [
        ("action", "search_method"), ("message", ""), ("action", "search_method_in_file"),
        ("message", ""), ("action", "bug_locations"), ("submit", "write_patch"),
    ]  # fmt: skip
    # search_class("Pix2Sky_TAN") has call_ok false in tool_call_sequence.json.
    assert t.steps[0].is_error
    assert not t.steps[2].is_error
    assert 'search_class("Pix2Sky_TAN")' in t.steps[0].action
    assert t.steps[0].observation.startswith('Result of search_method("separability_matrix")')
    assert sum(s.tokens_in for s in t.steps) == 19305
    assert sum(s.tokens_out for s in t.steps) == 2442
    assert t.totals.cost_usd == pytest.approx(0.26631)
    assert t.task.startswith("Modeling's `separability_matrix`")
    assert t.submission.startswith("diff --git a/astropy/modeling/separable.py")


def test_plain_and_gzip_read_alike(data_dir: Path, tmp_path: Path) -> None:
    src = data_dir / SWEA / "cost_2_1/astropy__astropy-12907.traj.gz"
    plain = tmp_path / "swe-agent-gpt4" / "cost_2_1" / "astropy__astropy-12907.traj"
    plain.parent.mkdir(parents=True)
    plain.write_bytes(gzip.decompress(src.read_bytes()))
    a, b = read_trajectory(src), read_trajectory(plain)
    assert a.id == b.id
    assert [s.to_dict() for s in a.steps] == [s.to_dict() for s in b.steps]
    task = tmp_path / "acr" / "run" / "applicable_patch" / ACR_TASK
    shutil.copytree(data_dir / ACR / ACR_TASK, task)
    for f in task.iterdir():
        f.with_name(f.name[:-3]).write_bytes(gzip.decompress(f.read_bytes()))
        f.unlink()
    c = read_trajectory(task)
    assert [s.to_dict() for s in c.steps] == [
        s.to_dict() for s in read_trajectory(data_dir / ACR / ACR_TASK).steps
    ]


def test_detection_and_forcing(data_dir: Path) -> None:
    f = data_dir / CODER / "astropy__astropy-6938.traj.gz"
    assert detect(f).NAME == "swe-agent"
    assert detect(data_dir / ACR / ACR_TASK).NAME == "autocoderover"
    assert read_trajectory(f, format="swe-agent").steps
    with pytest.raises(TranscriptError, match="astropy__astropy-6938"):
        read_trajectory(f, format="mini-swe-agent")
    with pytest.raises(TranscriptError, match="unknown --format"):
        read_trajectory(f, format="nope")


def test_scale_to_total_and_fill_estimates() -> None:
    assert scale_to_total([1, 1, 1], 10) == [4, 3, 3]
    assert sum(scale_to_total([0.3, 5.5, 2.2, 0.0], 1001)) == 1001
    assert scale_to_total([0, 0], 5) == [3, 2]
    # Absurd totals (1e308 claimed tokens) stay exact integers instead of overflowing floats.
    huge = int(1e308)
    parts = scale_to_total([3.0, 1.0], huge)
    assert sum(parts) == huge
    assert parts[0] == 3 * parts[1] or parts[0] == 3 * parts[1] + 1
    with pytest.raises(ValueError, match="finite"):
        scale_to_total([1.0, float("nan")], 10)
    steps = [
        Step(index=0),
        Step(index=1, tokens_in=50, tokens_out=5, tokens_estimated=False),
        Step(index=2),
    ]
    fill_estimates(steps, [100, 200, 300], [40, 40, 120], total_in=450, total_out=25)
    assert [s.tokens_in for s in steps] == [100, 50, 300]  # 400 left over, split 1:3
    assert [s.tokens_out for s in steps] == [5, 5, 15]
    assert steps[1].tokens_estimated is False
    assert steps[0].tokens_estimated is True
    fill_estimates(steps[:1], [400], [8], total_in=None, total_out=None)
    assert (steps[0].tokens_in, steps[0].tokens_out) == (100, 2)


def test_autocoderover_imprecise_bug_locations_are_a_failed_call(data_dir: Path) -> None:
    """ACR answers bug locations it cannot find with "The buggy locations is not precise": that
    answer was read as prose with no error (469 steps in 210 runs)."""
    t = read_trajectory(data_dir / ACR / "django__django-11620_2024-04-06_13-54-49")
    located = [s for s in t.steps if s.tool == "bug_locations"]
    assert [(s.index, s.is_error) for s in located] == [(4, True), (8, True), (10, False)]
    assert all(s.kind == "action" for s in located)
    assert located[0].observation.startswith("The buggy locations is not precise")
    assert located[2].observation.startswith("Here are the code in buggy locations")


def test_a_transcript_saved_cut_short_is_said(data_dir: Path) -> None:
    """Four CodeR `.traj` files hold far fewer calls than their own `model_stats.api_calls`
    (sympy-18621: 5 of 39): each is kept and said; SWE-agent's unrecorded format-error retries
    (up to 13 of 32 calls) are not."""
    from monitor.reading import read_runs

    problems: list = []
    coder = data_dir / "swe-bench-lite" / "coder-gpt4"
    names = ["sympy__sympy-18621", "django__django-11099", "pylint-dev__pylint-7080"]
    paths = [coder / "trajs" / f"{n}.traj.gz" for n in names]
    swe = (
        data_dir
        / "swe-bench-lite"
        / "swe-agent-gpt4"
        / "cost_2_1"
        / "pytest-dev__pytest-11148.traj.gz"
    )
    runs = list(read_runs([*paths, swe], problems=problems))
    assert len(runs) == 4
    short = [p for p in problems if "model calls" in p.reason]
    assert sorted(p.path for p in short) == [str(paths[2]), str(paths[0])]
    assert any("holds 5 of the 39 model calls" in p.reason for p in short)
