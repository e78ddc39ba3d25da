"""Calibrated baselines, live-run AUROC, the stack and the per-group choice on synthetic runs."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from monitor.schedule import Schedule
from serving.stack import StackBag, stack_from_json
from training.config import ThresholdConfig
from training.data.records import RunRecord
from training.evaluate.calibrated import (
    STEP_LIMIT,
    TOKEN_LIMIT,
    add_length_scores,
    calibrated_stops,
    calibrated_tables,
    live_auroc,
)
from training.evaluate.candidates import SELECTED, crossfit_candidates
from training.evaluate.select import STACK, oof_stack, select_per_group, with_score
from training.model.stack import StackModel, stack_model_from_json

SCHED = Schedule(min_steps=3, every=1, persist=2)


def _runs(agent: str, n: int, *, informative: str, seed: int) -> list[RunRecord]:
    """Runs of one agent: failing runs are long; `informative` names the one learned score
    that separates them from step 3 on (the others are noise)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        resolved = bool(i % 2)
        steps = int(rng.integers(8, 20)) if resolved else int(rng.integers(8, 60))
        scores = {}
        for name in ("monitor", "signals_lr", "tfidf_lr"):
            s = rng.uniform(0.2, 0.6, steps)
            if name == informative and not resolved:
                s[2:] += 0.35
            scores[name] = s
        out.append(
            RunRecord(
                f"{agent}/{i}",
                f"{agent}-i{i}",
                agent,
                agent,
                resolved,
                np.full(steps, 100, dtype=np.int64),
                scores,
            )  # fmt: skip
        )
    return out


@pytest.fixture(scope="module")
def records() -> list[RunRecord]:
    return _runs("a", 240, informative="monitor", seed=0) + _runs(
        "b", 240, informative="tfidf_lr", seed=1
    )


def _tcfg() -> ThresholdConfig:
    return ThresholdConfig(group_by="agent", margin=2.0, targets=[0.05, 0.1])


def test_length_scores_are_steps_and_tokens(records: list[RunRecord]) -> None:
    r = records[0]
    add_length_scores([r])
    assert np.allclose(r.scores[STEP_LIMIT] * 1e4, np.arange(1, r.n_steps + 1))
    assert np.allclose(r.scores[TOKEN_LIMIT] * 1e9, np.cumsum(r.step_tokens))


def test_calibrated_baselines_use_the_monitor_procedure(records: list[RunRecord]) -> None:
    """Each scorer's table is the monitor's procedure with only the scorer changed, and its
    stops are its own scores against its own thresholds."""
    add_length_scores(records)
    cal = [r for i, r in enumerate(records) if i % 4 < 2]
    test = [r for i, r in enumerate(records) if i % 4 >= 2]
    tables = calibrated_tables(cal, ["monitor", "tfidf_lr", STEP_LIMIT], _tcfg(), SCHED)
    assert {t.margin for t in tables.values()} == {2.0}
    per = calibrated_stops(test, tables, 0.1)
    for name, (stops, used) in per.items():
        th = used["a"]["threshold"]
        r = next(r for r in test if r.agent == "a")
        assert stops[r.run_id] == SCHED.first_stop(r.scores[name], th)
    # a step limit set on calibration runs stops failing (long) runs of the test half
    st, _ = per[STEP_LIMIT]
    assert sum(st[r.run_id] is not None for r in test if not r.resolved) > 10


def test_live_auroc_counts_only_runs_still_going(records: list[RunRecord]) -> None:
    a = [r for r in records if r.agent == "a"]
    out = live_auroc(a, "monitor", steps=(5, 30), tokens=(1000,))
    assert out["step:5"]["runs"] == sum(r.n_steps > 5 for r in a)
    assert out["step:30"]["runs"] == sum(r.n_steps > 30 for r in a)
    assert out["step:5"]["auroc"] > 0.9  # the monitor separates agent a from step 3
    # at step 30 only failing runs are alive: one class, no AUROC
    assert out["step:30"]["auroc"] is None
    assert out["tokens:1000"]["runs"] == sum(r.n_steps > 11 for r in a)


def test_stack_scores_out_of_fold_and_learns_the_informative_base(
    records: list[RunRecord],
) -> None:
    cal, model = oof_stack(records, schedule=SCHED, group_by="agent")
    assert all(STACK in r.scores for r in cal)
    assert all(STACK not in r.scores for r in records)
    # served: the bag of the fold stacks whose out-of-fold scores the thresholds are set on
    assert len(model.members) == 5
    for m in model.members:
        assert set(m.models) >= {"shared", "own:a", "own:b"}
    r0 = records[0]
    logits = [m.logits_for(r0.agent, r0.scores, np.asarray(r0.step_tokens)) for m in model.members]
    assert np.allclose(model.scores(r0), 1 / (1 + np.exp(-np.mean(logits, axis=0))))
    own = [c for c in cal if c.run_id == r0.run_id][0].scores[STACK]  # one member scored it
    assert any(np.allclose(own, m.scores(r0)) for m in model.members)
    d = model.to_json()
    assert d["kind"] == "stack_bag"
    for again in (stack_model_from_json(d), stack_from_json(json.loads(json.dumps(d)))):
        assert np.allclose(
            again.scores_for(r0.agent, r0.scores, np.asarray(r0.step_tokens)), model.scores(r0)
        )
    old = stack_model_from_json(model.members[0].to_json())  # a bundle from before the bag
    assert isinstance(old, StackModel)
    assert np.allclose(old.scores(r0), model.members[0].scores(r0))
    with pytest.raises(ValueError, match="unknown stack kind"):
        stack_from_json({"kind": "forest"})
    with pytest.raises(ValueError, match="share their bases"):
        StackBag([model.members[0], dataclasses.replace(model.members[1], bases=["monitor"])])
    b = [r for r in cal if r.agent == "b"]
    assert live_auroc(b, STACK, steps=(5,), tokens=())["step:5"]["auroc"] > 0.9


def test_selection_picks_each_groups_informative_scorer(records: list[RunRecord]) -> None:
    add_length_scores(records)
    cal, _ = oof_stack(records, schedule=SCHED, group_by="agent")
    cands = [STEP_LIMIT, TOKEN_LIMIT, "signals_lr", "tfidf_lr", "monitor", STACK]
    choice = select_per_group(cal, cands, _tcfg(), SCHED, targets=[0.05, 0.1])
    assert choice["a"]["chosen"] in ("monitor", STACK)
    assert choice["b"]["chosen"] in ("tfidf_lr", STACK)
    # the noise-only signals LR saves less than the winner on both groups
    for g in ("a", "b"):
        ms = choice[g]["mean_saved"]
        assert ms["signals_lr"] < ms[choice[g]["chosen"]]
    # repeated fold draws average the held-out rates: the first draw's alone when repeats is 1
    again = select_per_group(cal, cands, _tcfg(), SCHED, targets=[0.05, 0.1], repeats=2)
    other = select_per_group(cal, cands, _tcfg(), SCHED, targets=[0.05, 0.1], seed=2)
    for g in ("a", "b"):
        for c, v in again[g]["mean_saved"].items():
            assert v == pytest.approx((choice[g]["mean_saved"][c] + other[g]["mean_saved"][c]) / 2)
        assert again[g]["chosen"] in ("monitor", "tfidf_lr", STACK)
    # shrunk all the way to the mean over groups, both groups choose the same candidate
    pooled = select_per_group(cal, cands, _tcfg(), SCHED, targets=[0.05, 0.1], shrink=1e9)
    assert pooled["a"]["chosen_by_target"] == pooled["b"]["chosen_by_target"]
    assert pooled["a"]["inner"] == choice["a"]["inner"]  # the held-out rates themselves unchanged


def test_crossfit_candidates_reports_every_candidate_and_the_choice(
    records: list[RunRecord],
) -> None:
    rep = crossfit_candidates(records, _tcfg(), SCHED, n_boot=20)
    assert SELECTED in rep["mean_per_agent"]["0.05"]
    assert "selected_per_target" in rep["mean_per_agent"]["0.05"]
    assert set(rep["candidates"]) >= {"monitor", "tfidf_lr", STEP_LIMIT, STACK}
    a = rep["per_agent"]["a"]["targets"]["0.1"]
    b = rep["per_agent"]["b"]["targets"]["0.1"]
    # per group the choice does about as well as the best single candidate there
    assert a[SELECTED]["saved"] >= a["signals_lr"]["saved"]
    assert b[SELECTED]["saved"] >= b["monitor"]["saved"]
    assert rep["mean_per_agent"]["0.1"][SELECTED]["fpr_max"] < 0.2
    assert "step:5" in rep["mean_per_agent_live_auroc"]["monitor"]


def test_evaluate_json_has_calibrated_baselines_beside_the_monitor(
    records: list[RunRecord],
) -> None:
    from training.calibrate.thresholds import pick_thresholds
    from training.config import EvalConfig
    from training.evaluate.report import evaluate, markdown_table

    cal = [r for i, r in enumerate(records) if i % 4 < 2]
    test = [r for i, r in enumerate(records) if i % 4 >= 2]
    table = pick_thresholds(cal, schedule=SCHED, targets=[0.1], margin=2.0, fallback="none")
    out = evaluate(test, table, config=EvalConfig(target_fpr=0.1), calibration=cal)
    for sec in (out, *out["per_source"].values()):
        cb = sec["calibrated_baselines"]
        assert {"signals_lr", "tfidf_lr", STEP_LIMIT, TOKEN_LIMIT, STACK, "selected"} <= set(cb)
        assert "monitor" not in cb
        for entry in cb.values():
            assert set(sec["monitor"]) - {"net_token_savings", "monitor_cost"} <= set(entry)
            assert "refused_groups" in entry
        assert "step:5" in sec["auroc_live"]["monitor"]
    # the length rules are calibrated on the calibration runs, not matched on the test runs
    th = out["calibrated_baselines"][STEP_LIMIT]["threshold"]["a"]["threshold"]
    tab = calibrated_tables(cal, [STEP_LIMIT], _tcfg(), SCHED)[STEP_LIMIT]
    assert th == tab.lookup("a", 0.1).stop
    assert out["calibrated_baselines"]["selected"]["choice"]["b"]["chosen"] in ("tfidf_lr", STACK)
    table = markdown_table(out)
    assert "| overall | tfidf_lr (calibrated as shipped) |" in table
    assert "| overall | tfidf_lr (tuned on these runs) |" in table


def test_evaluate_without_calibration_runs_uses_the_bundles_shipped_candidates(
    records: list[RunRecord],
) -> None:
    """On new runs with only the bundle at hand, the calibrated baselines and the served choice
    are the thresholds candidates.json ships: the same stops as recalibrating on the runs that
    made them."""
    from training.calibrate.thresholds import pick_thresholds
    from training.config import EvalConfig
    from training.evaluate.report import evaluate
    from training.evaluate.shipped import shipped_candidates

    cal = [r for i, r in enumerate(records) if i % 4 < 2]
    test = [r for i, r in enumerate(records) if i % 4 >= 2]
    table = pick_thresholds(cal, schedule=SCHED, targets=[0.1], margin=2.0, fallback="none")
    table = table.model_copy(update={"group_by": "agent"})
    cands = shipped_candidates(cal, table, scorers=["monitor", "signals_lr", "tfidf_lr"])
    cfg = EvalConfig(target_fpr=0.1)
    shipped = evaluate(test, table, config=cfg, candidates=cands)
    again = evaluate(test, table, config=cfg, calibration=cal)
    for name in ("tfidf_lr", STEP_LIMIT, "selected"):
        a, b = shipped["calibrated_baselines"][name], again["calibrated_baselines"][name]
        assert a["token_savings"] == pytest.approx(b["token_savings"])
        assert a["realized_fpr"] == pytest.approx(b["realized_fpr"])
    sel = shipped["calibrated_baselines"]["selected"]
    assert sel["choice"]["b"]["chosen"] == cands["chosen"]["b"]["by_target"]["0.1"]
    assert any("candidates.json" in n for n in shipped["notes"])


def test_stop_rule_variants_are_compared_on_a_views_saved_records(
    records: list[RunRecord], tmp_path
) -> None:
    from training.config import PipelineConfig
    from training.data.records import save_records
    from training.experiments.stop_rules import compare

    cfg = PipelineConfig.model_validate(
        {"thresholds": {"group_by": "agent", "targets": [0.05, 0.1]}}
    )
    folder = tmp_path / "instance"
    folder.mkdir()
    with pytest.raises(ValueError, match="no records.parquet"):
        compare(cfg, folder, ["base"], folds=3)
    save_records(folder / "records.parquet", records)
    md = compare(
        cfg, folder, ["base", "margin1", "choice3", "margin2", "adaptive8"], folds=3, n_boot=20
    )
    assert "| base |" in md
    assert "| margin1 |" in md
    assert "| choice3 |" in md
    import json

    got = json.loads((folder / "stop_rules.json").read_text())
    # fitting each target at the target (margin 1) never saves less than at half of it
    for key in ("0.05", "0.1"):
        assert got["margin1"][key]["monitor"]["saved"] >= got["base"][key]["monitor"]["saved"]
        # a repeated choice changes only the choice: every single candidate stops the same runs
        for name, row in got["base"][key].items():
            if not name.startswith("selected"):
                assert got["choice3"][key][name] == row
        # the config's margin is 2 without adaptive_margin: margin2 is the base itself, and the
        # adaptive margin (never above 2) never saves less
        assert got["margin2"][key] == got["base"][key]
        assert got["adaptive8"][key]["monitor"]["saved"] >= got["base"][key]["monitor"]["saved"]


def test_pair_candidates_on_the_folds_equal_the_k_fold_comparison(
    records: list[RunRecord],
) -> None:
    from training.evaluate.candidates import pair_candidates

    fold = (np.arange(len(records)) // 2) % 2  # both labels on each side
    pairs = [
        ([r for r, g in zip(records, fold, strict=True) if g != f],
         [r for r, g in zip(records, fold, strict=True) if g == f])
        for f in (0, 1)
    ]  # fmt: skip
    k_fold = crossfit_candidates(records, _tcfg(), SCHED, n_boot=20, fold=fold)
    paired = pair_candidates(pairs, _tcfg(), SCHED, n_boot=20)
    assert paired["per_agent"] == k_fold["per_agent"]
    assert paired["choices"] == k_fold["choices"]
    assert paired["calibration"] != k_fold["calibration"]  # says where its thresholds came from
    # one pair (a time view): calibrated on its own calibration runs, each group's choice does
    # about as well as the best single candidate there
    one = pair_candidates(pairs[:1], _tcfg(), SCHED, n_boot=20)
    assert {r["runs"] for r in one["per_agent"].values()} == {120}
    b = one["per_agent"]["b"]["targets"]["0.1"]
    assert b[SELECTED]["saved"] >= b["monitor"]["saved"]


def test_stop_rule_variants_run_on_a_time_views_calibration_records(
    records: list[RunRecord], tmp_path
) -> None:
    from training.config import PipelineConfig
    from training.data.records import save_records
    from training.experiments.stop_rules import compare

    cfg = PipelineConfig.model_validate(
        {"thresholds": {"group_by": "agent", "targets": [0.05, 0.1]}}
    )
    folder = tmp_path / "time"
    folder.mkdir()
    side = (np.arange(len(records)) // 2) % 2  # both labels on each side
    cal = [r for r, g in zip(records, side, strict=True) if g == 0]
    test = [r for r, g in zip(records, side, strict=True) if g == 1]
    save_records(folder / "records.parquet", test)
    with pytest.raises(ValueError, match="calibration records"):
        compare(cfg, folder, ["base"], folds=3)
    save_records(folder / "calibration-0.parquet", cal)
    (folder / "pairs.json").write_text(json.dumps([[r.run_id for r in test]]))
    compare(cfg, folder, ["base", "margin1"], folds=3, n_boot=20)
    got = json.loads((folder / "stop_rules.json").read_text())
    for key in ("0.05", "0.1"):
        assert got["margin1"][key]["monitor"]["saved"] >= got["base"][key]["monitor"]["saved"]
        assert got["base"][key]["selected"]["fpr_max"] <= 1.0


def test_a_target_no_inner_fold_can_fit_takes_the_groups_choice_over_targets() -> None:
    # 30 resolved runs: an inner fold's 24 fit 10% at margin 2 (5% of them) but not 5% (2.5%):
    # at 5% every candidate is refused held out and saves 0, which is no evidence for the
    # simplest rule; the group's choice over the targets (the informative LM probe) serves there
    cal = _runs("a", 60, informative="monitor", seed=3)
    add_length_scores(cal)
    cands = [STEP_LIMIT, TOKEN_LIMIT, "signals_lr", "tfidf_lr", "monitor"]
    choice = select_per_group(cal, cands, _tcfg(), SCHED, targets=[0.05, 0.1])["a"]
    assert all(v["0.05"]["saved"] == 0.0 for v in choice["inner"].values())
    assert choice["chosen"] == "monitor"
    assert choice["no_evidence"] == ["0.05"]
    assert choice["chosen_by_target"] == {"0.05": "monitor", "0.1": "monitor"}


def test_tilted_scores_move_the_threshold_with_the_step() -> None:
    from training.experiments.stop_rules import VARIANTS, tilted

    s = np.array([0.5, 0.7, 0.7, 0.9, 0.2])
    np.testing.assert_allclose(tilted(s, 0.0), s, atol=1e-9)
    up = tilted(s, 0.5)
    assert up[0] == pytest.approx(0.5)  # log 1 = 0: step 1 keeps its score
    assert np.all(up[1:] < s[1:])  # later steps need a higher raw score to stop
    z = np.log(up[3] / (1 - up[3])) - np.log(0.9 / 0.1)
    assert z == pytest.approx(-0.5 * np.log(4))
    assert np.all(tilted(s, -0.25)[1:] > s[1:])
    assert np.all(np.isfinite(tilted(np.array([0.0, 1.0, 1.0]), 1.0)))
    assert {"tilt0.25", "tilt0.5", "tilt1", "tilt-0.25"} <= set(VARIANTS)


def test_an_extra_candidate_from_another_crossfit_is_offered_to_the_choice(
    records: list[RunRecord], tmp_path
) -> None:
    # B's LM probe separates agent b's runs (A's separates agent a's): added to A's records as
    # an extra candidate, the choice serves it for b and keeps A's probe for a
    from training.data.records import load_records, save_records
    from training.evaluate.candidates import candidate_stops
    from training.experiments.extra_candidate import main as merge_main

    other = {r.run_id: r for r in _runs("b", 240, informative="monitor", seed=1)}
    b_recs = [
        dataclasses.replace(
            r, scores={**r.scores, "monitor": other[r.run_id].scores["monitor"]}
        ) if r.agent == "b" else r
        for r in records
    ]  # fmt: skip
    half = (np.arange(len(records)) // 2) % 2  # both agents and labels on each side
    test_ids = [r.run_id for r, h in zip(records, half, strict=True) if h == 1]
    for side, recs in (("A", records), ("B", b_recs)):
        (tmp_path / side / "time").mkdir(parents=True)
        test = [r for r, h in zip(recs, half, strict=True) if h == 1]
        if side == "B":
            test = test[:-1]  # B lacks one run
        save_records(tmp_path / side / "time" / "records.parquet", test)
        save_records(
            tmp_path / side / "time" / "calibration-0.parquet",
            [r for r, h in zip(recs, half, strict=True) if h == 0],
        )
        (tmp_path / side / "time" / "pairs.json").write_text(json.dumps([test_ids]))
    a, b, c = (tmp_path / s for s in "ABC")
    assert merge_main([str(a), str(b), str(c), "--views", "time"]) == 0
    merged = load_records(c / "time" / "records.parquet")
    assert len(merged) == len(test_ids) - 1  # the run B lacks is left out
    by_id = {r.run_id: r for r in b_recs}
    a_by_id = {r.run_id: r for r in records}
    for r in merged:
        np.testing.assert_array_equal(r.scores["monitor_text"], by_id[r.run_id].scores["monitor"])
        np.testing.assert_array_equal(r.scores["monitor"], a_by_id[r.run_id].scores["monitor"])
    cal = load_records(c / "time" / "calibration-0.parquet")
    assert all("monitor_text" in r.scores for r in cal)
    from training.evaluate.views import view_calibration

    pairs = view_calibration(c / "time", merged)  # pairs.json names only the runs C kept
    assert pairs is not None
    assert [r.run_id for r in pairs[0][1]] == [r.run_id for r in merged]

    for rs in (cal, merged):
        add_length_scores(rs)
    served = candidate_stops([(cal, merged)], _tcfg(), SCHED, extra=["monitor_text"])
    assert "monitor_text" in served.stops
    chosen = served.choices[0]
    assert chosen["b"]["chosen"] in ("monitor_text", "stack")  # b's informative scores
    assert chosen["a"]["chosen"] in ("monitor", "stack")
    # monitor_text is a shipped candidate (train.text_candidate); a score under another name
    # is offered only when named as an extra
    renamed = [
        [with_score(r, "probe_b", r.scores["monitor_text"]) for r in rs] for rs in (cal, merged)
    ]
    assert "probe_b" not in candidate_stops([tuple(renamed)], _tcfg(), SCHED).stops
    assert "probe_b" in candidate_stops([tuple(renamed)], _tcfg(), SCHED, extra=["probe_b"]).stops


def test_paired_compares_the_live_auroc_of_named_scores(tmp_path) -> None:
    # `paired --live monitor monitor_text` on one cross-fit: the second probe's live AUROC gain
    # over the LM probe on the same runs, with its paired interval; the default compares monitor
    from training.config import PipelineConfig
    from training.data.records import save_records
    from training.experiments.paired import compare_view
    from training.experiments.paired_markdown import markdown

    recs = [
        with_score(r, "monitor_text", r.scores["tfidf_lr"])  # informative; monitor is noise
        for r in _runs("a", 160, informative="tfidf_lr", seed=3)
        + _runs("b", 160, informative="tfidf_lr", seed=4)
    ]
    half = (np.arange(len(recs)) // 2) % 2
    folder = tmp_path / "A" / "time"
    folder.mkdir(parents=True)
    test = [r for r, h in zip(recs, half, strict=True) if h == 1]
    save_records(folder / "records.parquet", test)
    save_records(
        folder / "calibration-0.parquet", [r for r, h in zip(recs, half, strict=True) if h == 0]
    )
    (folder / "pairs.json").write_text(json.dumps([[r.run_id for r in test]]))
    cfg = PipelineConfig.model_validate(
        {"thresholds": {"group_by": "agent", "margin": 2.0, "targets": [0.05, 0.1]}}
    )
    a = tmp_path / "A"
    same = compare_view(cfg, a, a, "time", folds=5, draws=50)
    assert same["live_auroc"]["step:5"]["delta"] == 0.0
    res = compare_view(
        cfg, a, a, "time", folds=5, draws=50, live_scores=("monitor", "monitor_text")
    )
    live = res["live_auroc"]["step:5"]
    assert live["delta"] > 0.2
    assert live["ci"][0] > 0
    assert "A monitor / B monitor_text AUROC among runs live at step:5" in markdown([res], "A", "A")
