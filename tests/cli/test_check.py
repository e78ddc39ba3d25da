"""`failfast check`, `fit-budget` and `reasons` through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from training.cli import main

pytest.importorskip("monitor.reading")


def test_check_constructed_loop_stops(fixtures_dir: Path, capsys: pytest.CaptureFixture) -> None:
    rc = main(["check", str(fixtures_dir / "claude_code_constructed_loop.jsonl")])
    out = capsys.readouterr().out.splitlines()
    assert rc == 1
    assert out[0] == "turns=7 tool_calls=7 tool_results=7 max_repeat=5 error_streak=4 cost_usd=1.42"
    assert out[1] == "most repeated call (5x): python -m pytest tests/test_x.py"
    assert out[2] == ("STOP: repeat_loop (max_repeat=5 >= 3), error_streak (error_streak=4 >= 4)")


def test_check_continue_with_raised_limits(
    fixtures_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    path = fixtures_dir / "claude_code_constructed_loop.jsonl"
    rc = main(["check", str(path), "--max-repeats", "6", "--max-error-streak", "5"])
    assert rc == 0
    assert capsys.readouterr().out.splitlines()[-1] == "CONTINUE: no stop signal"


def test_check_unreadable_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\x00\x01 not a transcript")
    assert main(["check", str(bad)]) == 2
    assert str(bad) in capsys.readouterr().err
    assert main(["check", str(tmp_path / "missing.json")]) == 2


@pytest.mark.data
def test_check_reads_every_real_format(data_dir: Path, capsys: pytest.CaptureFixture) -> None:
    paths = [
        next(
            (data_dir / "swe-bench-verified/mini-swe-agent-gemini-3-pro/trajs").glob(
                "*/*.traj.json.gz"
            )
        ),
        next((data_dir / "swe-bench-lite/swe-agent-gpt4/cost_2_1").glob("*.traj.gz")),
        next((data_dir / "swe-bench-lite/coder-gpt4/trajs").glob("*.traj.gz")),
        next(
            p
            for p in (
                data_dir / "swe-bench-lite/autocoderover-gpt4/acr-run-1/applicable_patch"
            ).iterdir()
        ),
    ]
    for p in paths:
        rc = main(["check", str(p)])
        out = capsys.readouterr().out.splitlines()
        assert rc in (0, 1), p
        assert out[0].startswith("turns=")
        turns = int(out[0].split()[0].removeprefix("turns="))
        assert turns > 0, p
        assert out[-1].startswith("STOP: ") == (rc == 1)


@pytest.mark.data
def test_fit_budget_on_real_runs(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "budget.yaml"
    src = data_dir / "swe-bench-verified/mini-swe-agent-gemini-3-pro"
    assert main(["fit-budget", str(src), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "runs=300 resolved=223 unresolved=77 unknown=0" in text
    budget = yaml.safe_load(out.read_text())["budget"]
    assert 20 < budget["max_steps"] < 250
    assert budget["max_cost_usd"] > 0
    from monitor.config import load_config
    from monitor.policy import PolicyConfig

    cfg = load_config(PolicyConfig, out)
    assert cfg.budget.max_steps == budget["max_steps"]


@pytest.mark.parametrize("command", [["reasons", "--audit"], ["fit-budget"]])
def test_nothing_to_read_exits_2_naming_the_path(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for path in (tmp_path / "missing", empty):
        with pytest.raises(SystemExit) as e:
            main([command[0], str(path), *command[1:]])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert f"no run could be read from {path}" in err
        if path.name == "missing":  # the problem reads as "path: what is wrong"
            assert f"warning: {path}: no such file" in err


def test_evaluate_names_a_bad_path_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "notes.parquet").write_text("not parquet")
    cases = [
        (["--bundle", str(tmp_path / "nope")], "--bundle"),
        (["--data", str(tmp_path), "--score-data"], "--score-data needs --bundle"),
        (
            ["--bundle", str(tmp_path / "b"), "--data", str(tmp_path / "x"), "--score-data"],
            "--data",
        ),
        (["--records", str(tmp_path / "x.parquet")], "no such file"),
        (["--records", str(tmp_path / "notes.parquet"), "--json", str(tmp_path)], "is a folder"),
        (
            ["--labels", str(tmp_path / "l.json"), "--records", str(tmp_path / "notes.parquet")],
            "--labels",
        ),
    ]
    for argv, says in cases:
        assert main(["evaluate", *argv]) == 2, argv
        assert says in capsys.readouterr().err, argv
