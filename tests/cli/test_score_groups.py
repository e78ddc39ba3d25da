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
