"""`failfast calibrate` re-makes the per-group choice for the groups it calibrates (training.
calibrate.candidates): every candidate scored as served and calibrated on the user's runs, the
choice made on inner folds of them, and the bundle serves it (before, such a group was always
served by the LM probe, whatever its check found)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.bundle_helpers import make_run, shared_bundle
from tests.serving.test_choice import _bundle, _candidates

pytest.importorskip("torch")


def _my_runs(n: int = 48) -> list:
    """A new agent whose failing runs are long: the length rules have something to save."""
    runs = []
    for i in range(n):
        bad = i % 3 == 0
        r = make_run(14 + i % 4 if bad else 4 + i % 3, agent="my-agent", seed=i)
        r.id, r.instance_id, r.resolved = f"my/{i}", f"inst-{i}", not bad
        r.source = "my-source"
        runs.append(r)
    return runs


@pytest.fixture(scope="module")
def with_candidates(tiny_model_dir, tmp_path_factory) -> Path:
    from serving.scorer import Scorer

    base = shared_bundle(tiny_model_dir, tmp_path_factory)
    scorer0 = Scorer.load(base, threads=1)
    return _bundle(tmp_path_factory.mktemp("cands"), base, _candidates(scorer0, "tfidf_lr"))


def test_calibrate_serves_the_choice_it_made_on_the_users_runs(
    with_candidates: Path, tmp_path: Path, capsys
) -> None:
    from monitor.corpus import write_corpus
    from serving.scorer import Scorer
    from training.cli import main

    runs = _my_runs()
    write_corpus(runs, tmp_path / "corpus")
    out = tmp_path / "b2"
    argv = ["calibrate", "--bundle", str(with_candidates), "--data", str(tmp_path / "corpus")]
    argv += ["--out", str(out), "--method", "conformal", "--no-progress", "--target-fpr", "0.1"]
    argv += ["--serve-target", "0.1"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "candidates scored as served: signals_lr, tfidf_lr, step_limit, token_limit, stack" in (
        printed
    )
    cands = json.loads((out / "candidates.json").read_text())
    entry = cands["chosen"]["my-agent"]
    assert entry["calibrated_by"] == "failfast calibrate"
    assert set(entry["held_out_saved"]) <= {"monitor", *cands["thresholds"]}
    for name, table in cands["thresholds"].items():
        assert "my-agent" in table["groups"], name
    # the groups of the training run keep their entries and thresholds
    old = json.loads((with_candidates / "candidates.json").read_text())
    assert cands["chosen"]["mini-swe-agent"] == old["chosen"]["mini-swe-agent"]
    name = entry["by_target"]["0.1"]
    assert f"served for my-agent at 0.1: {name}" in printed
    scorer = Scorer.load(out, threads=1)
    th = scorer.served("my-agent")
    assert name != "monitor"  # the failing runs are long: a length-aware candidate saves more
    assert np.isfinite(cands["thresholds"][name]["groups"]["my-agent"]["stop"]["0.1"]["threshold"])
    assert th.scorer == name
    assert "failfast calibrate" in th.why
    # served live as replayed: the candidate's scores of a run equal those calibration used
    run = runs[0]
    run.agent = "my-agent"
    scores, served = scorer.score_served(run)
    assert served.scorer == th.scorer
    live = scorer.start(run.task, run.agent)
    got = [live.observe(s) for s in run.steps]
    assert got == pytest.approx(scores, abs=1e-6)
    # the card names what the group is served with
    assert f"- my-agent: {th.scorer}" in (out / "README.md").read_text()


def test_the_check_reports_what_the_checked_bundle_serves(
    with_candidates: Path, tmp_path: Path, capsys
) -> None:
    from monitor.corpus import write_corpus
    from training.cli import main

    write_corpus(_my_runs(60), tmp_path / "corpus")
    out = tmp_path / "b3"
    argv = ["calibrate", "--bundle", str(with_candidates), "--data", str(tmp_path / "corpus")]
    argv += ["--out", str(out), "--method", "conformal", "--no-progress", "--target-fpr", "0.1"]
    argv += ["--serve-target", "0.1", "--check", "0.5"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "b3.check" / "report.json").read_text())
    served = json.loads((out / "candidates.json").read_text())["chosen"]["my-agent"]
    sel = report["calibrated_baselines"]["selected"]["choice"]["my-agent"]["chosen"]
    assert sel == served["by_target"]["0.1"] or (sel == "monitor")
    assert "re-made on the calibration runs, as `failfast calibrate` ships them" in json.dumps(
        report
    )
    rec = json.loads((out / "monitor.json").read_text())["calibration"]
    assert rec["data"]["check"]["served"]["scorer_per_group"]["my-agent"] == sel
    assert rec["candidates"].startswith("per-group choice re-made")
    assert "- served per group (my-agent: " in (out / "README.md").read_text()
    assert sel != "monitor"  # long failing runs: a length-aware candidate wins here
    # the plain summary says what is served, beside the probe alone
    assert f"served as the bundle serves it (the per-group choice: my-agent: {sel}" in printed


def test_a_group_recalibrated_from_probe_scores_alone_goes_back_to_the_probe() -> None:
    """Decision logs hold the LM probe's scores only: the choice an earlier calibrate made for
    the group no longer stands beside its new probe thresholds."""
    from monitor.schedule import Schedule
    from training.config import ThresholdConfig
    from training.data.records import RunRecord
    from training.evaluate.recalibrate_choice import recalibrate_candidates

    old = {
        "thresholds": {"step_limit": {}},
        "chosen": {"g": {"scorer": "step_limit", "calibrated_by": "failfast calibrate"}},
    }
    recs = [
        RunRecord(
            run_id=f"r{i}", instance_id=f"i{i}", agent="g", source="g", resolved=i % 2 == 0,
            step_tokens=np.ones(5, dtype=np.int64), scores={"monitor": np.full(5, 0.5)},
        )
        for i in range(10)
    ]  # fmt: skip
    cfg = ThresholdConfig(targets=[0.1], group_by="agent")
    new, choice = recalibrate_candidates(old, recs, cfg, Schedule(), ["g"])
    assert choice == {}
    assert "calibrated_by" not in new["chosen"]["g"]
    assert old["chosen"]["g"]["calibrated_by"] == "failfast calibrate"  # a copy was changed


def _recs(group: str, n: int, *, candidate: bool) -> list:
    from training.data.records import RunRecord

    rng = np.random.default_rng(len(group))
    out = []
    for i in range(n):
        bad = i % 3 == 0
        steps = 12 if bad else 5
        scores = {"monitor": rng.uniform(0.1, 0.9, steps)}
        if candidate:
            scores["step_limit"] = np.arange(1, steps + 1) / 20.0
        out.append(
            RunRecord(
                run_id=f"{group}/{i}", instance_id=f"{group}-{i}", agent=group, source=group,
                resolved=not bad, step_tokens=np.full(steps, 100, dtype=np.int64), scores=scores,
            )
        )  # fmt: skip
    return out


def test_groups_are_judged_one_by_one_and_replace_drops_the_others() -> None:
    """A log-calibrated group (probe scores only) beside a transcript one: the latter still
    gets its choice; --replace drops the choices of groups no longer in the table."""
    from monitor.schedule import Schedule
    from training.config import ThresholdConfig
    from training.evaluate.recalibrate_choice import recalibrate_candidates

    old = {
        "thresholds": {"step_limit": {"groups": {"old": {"n_resolved": 1, "warn": 0.5}}}},
        "chosen": {
            "old": {"scorer": "step_limit"},
            "logged": {"scorer": "step_limit", "calibrated_by": "failfast calibrate"},
        },
    }
    from monitor.thresholds import GroupThresholds, ThresholdTable

    g = GroupThresholds(n_resolved=1, warn=0.5)
    old["thresholds"]["step_limit"] = ThresholdTable(
        mode="bound", confidence=0.95, method="conformal", schedule=Schedule(), targets=[0.1],
        groups={"old": g}, pooled=g,
    ).to_json()  # fmt: skip
    recs = _recs("fresh", 90, candidate=True) + _recs("logged", 30, candidate=False)
    cfg = ThresholdConfig(targets=[0.1], group_by="agent", method="conformal")
    new, choice = recalibrate_candidates(old, recs, cfg, Schedule(), ["fresh", "logged"])
    assert set(choice) == {"fresh"}
    assert new["chosen"]["fresh"]["calibrated_by"] == "failfast calibrate"
    assert "calibrated_by" not in new["chosen"]["logged"]
    assert "fresh" in new["thresholds"]["step_limit"]["groups"]
    assert "old" in new["chosen"]
    replaced, _ = recalibrate_candidates(
        old, recs, cfg, Schedule(), ["fresh", "logged"], replace=True
    )
    assert "old" not in replaced["chosen"]
    assert "old" not in replaced["thresholds"]["step_limit"]["groups"]
