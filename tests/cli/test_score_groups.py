"""`failfast score` on a user's own .gz run: its source is its folder (not the temporary folder
it used to be unpacked into), `--source` finds the calibrated group without changing the scores,
`--agent` changes what the model reads, and an unknown group is called so, not "refused"."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.bundle_helpers import shared_bundle
from tests.cli.test_walkthrough import quick_like

pytest.importorskip("torch")


def _strict(name: str) -> None:
    raise AssertionError(f"{name} is not JSON")


RUN = "swe-bench-verified/mini-swe-agent-gemini-3-pro/trajs/{i}/{i}.traj.json.gz"


def test_score_source_flag_and_gz_runs(
    data_dir, tiny_model_dir, tmp_path_factory, tmp_path, capsys
):
    from training.cli import main

    bundle = quick_like(shared_bundle(tiny_model_dir, tmp_path_factory), tmp_path / "b")
    inst = "django__django-11099"
    run = tmp_path / "my-runs" / "trajs" / inst / f"{inst}.traj.json.gz"
    run.parent.mkdir(parents=True)
    shutil.copyfile(data_dir / RUN.format(i=inst), run)
    argv = ["score", "--bundle", str(bundle), "--threads", "1", str(run)]

    assert main(argv) in (0, 1)
    head = capsys.readouterr().out.splitlines()[0]
    assert f"run=my-runs/{inst} " in head
    assert "source=my-runs " in head
    assert "unknown-group" in head
    assert "refused" not in head
    assert "its groups (source): swe-agent-gpt4" in head

    def scored(*extra: str) -> dict:
        assert main([*argv, "--json", *extra]) in (0, 1)
        return json.loads(capsys.readouterr().out, parse_constant=_strict)  # no Infinity

    plain = scored()
    assert (plain["threshold"], plain["threshold_origin"]) == (None, "unknown-group")
    grouped = scored("--source", "swe-agent-gpt4")
    assert (grouped["threshold"], grouped["threshold_origin"]) == (0.61, "agent")
    assert grouped["scores"] == plain["scores"]  # --source names the group only
    other = scored("--source", "swe-agent-gpt4", "--agent", "someone-else")
    assert other["scores"] != pytest.approx(plain["scores"])  # the header the model reads


def test_score_says_a_target_never_fitted_from_one_refused() -> None:
    """`score --target T` where the group was calibrated at other targets is not "too few
    runs"; a refusal quotes what it needs."""
    from monitor.schedule import Schedule
    from monitor.thresholds import GroupThresholds, StopThreshold, ThresholdTable
    from serving.runs import RunResult
    from training.cli.serving import _threshold_text

    need = "cannot certify ...: needs at least 39 resolved validation runs, has 25"
    group = GroupThresholds(
        n_resolved=25,
        warn=0.5,
        stop={"0.1": StopThreshold(threshold=0.9), "0.05": StopThreshold(refused=need)},
    )
    table = ThresholdTable(
        mode="x", confidence=0.95, method="conformal", schedule=Schedule(), targets=[0.05, 0.1],
        groups={"mine": group}, pooled=group, group_by="source", fallback="none",
    )  # fmt: skip
    result = RunResult(threshold_origin="refused", group="mine")
    assert f"refused: {need}" in _threshold_text(result, table, 0.05)
    text = _threshold_text(result, table, 0.25)
    assert "not calibrated at the target 0.25; its targets: 0.05, 0.1" in text
    assert "too few" not in text
