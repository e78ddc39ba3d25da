"""The per-group choice served live (serving.choice): a group whose candidates.json entry names
another candidate is scored by it, with its thresholds, the same way live and in replay."""

from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from monitor.signals import signal_matrix
from serving.candidate_run import run_pieces
from serving.candidates import PieceText
from serving.manifest import MANIFEST, read_manifest, write_manifest
from serving.runs import score_transcript
from serving.scorer import Scorer
from tests.bundle_helpers import THRESHOLDS, make_run, shared_bundle
from training.baselines.learned import fit_signals_lr, fit_tfidf_lr
from training.data.records import RunRecord
from training.export.candidates import baseline_params
from training.model.stack import fit_stack

CANDIDATES = ("signals_lr", "tfidf_lr", "step_limit", "token_limit", "stack")


def _table(threshold: float) -> dict:
    """The helper bundle's thresholds with one stop threshold for mini-swe-agent at 5%."""
    t = copy.deepcopy(THRESHOLDS)
    t["per_agent"]["mini-swe-agent"]["stop"]["0.05"]["threshold"] = threshold
    t["per_agent"]["mini-swe-agent"]["warn"] = threshold / 2
    t["groups"] = t.pop("per_agent")  # today's layout: no pooled fallback for a refused group
    t.update(group_by="agent", margin=2.0, fallback="none")
    return t


def _runs(n: int = 14) -> list:
    return [make_run(6 + i % 5, seed=i) for i in range(n)]


def _candidates(
    scorer: Scorer, chosen: str, threshold: float = 0.3, text: PieceText | None = None
) -> dict:
    """A candidates.json with real fitted baselines and stack, choosing `chosen` for
    mini-swe-agent (the other groups keep the LM probe); `text`: the TF-IDF's own pieces."""
    runs = _runs()
    y = np.array([i % 2 for i in range(len(runs))])
    feat = scorer.featuriser
    sig = fit_signals_lr(
        np.concatenate([signal_matrix(r) for r in runs]),
        np.concatenate([[label] * len(r.steps) for r, label in zip(runs, y, strict=True)]),
        np.ones(sum(len(r.steps) for r in runs)),
    )
    steps = [np.arange(1, len(r.steps) + 1) for r in runs]
    tf = fit_tfidf_lr(feat, runs, steps, list(y), [np.ones(len(s)) for s in steps], text=text)
    params = baseline_params({"signals_lr": sig, "tfidf_lr": tf})
    rng = np.random.default_rng(0)
    recs = [
        RunRecord(
            run_id=r.id,
            instance_id=r.instance_id,
            agent=r.agent,
            source=r.agent,
            resolved=not bool(label),
            step_tokens=np.array([s.tokens for s in r.steps]),
            scores={b: rng.uniform(0.05, 0.95, len(r.steps)) for b in ("signals_lr", "tfidf_lr")},
        )
        for r, label in zip(runs, y, strict=True)
    ]
    from monitor.schedule import Schedule

    stack = fit_stack(
        recs, bases=["signals_lr", "tfidf_lr"], schedule=Schedule(min_steps=1), group_by="agent"
    )
    small = {"step_limit": 4e-4, "token_limit": 4e-6}  # stop after ~4 steps / ~4k tokens
    return {
        "group_by": "agent",
        "thresholds": {c: _table(small.get(c, threshold)) for c in CANDIDATES},
        "params": params,
        "stack": stack.to_json(),
        "chosen": {
            "mini-swe-agent": {"scorer": chosen, "by_target": {"0.05": chosen}},
            "swe-agent": {"scorer": "tfidf_lr", "by_target": {"0.05": "tfidf_lr"}},
        },
    }


def _bundle(tmp_path: Path, base: Path, cands: dict | None, *, listed: bool = True) -> Path:
    out = tmp_path / "bundle"
    shutil.copytree(base, out)
    if cands is not None:
        (out / "candidates.json").write_text(json.dumps(cands))
    if listed:
        manifest = read_manifest((out / MANIFEST).read_bytes(), out / MANIFEST)
        write_manifest(out, manifest)
    return out


@pytest.fixture(scope="module")
def base(tiny_model_dir: Path, tmp_path_factory) -> Path:
    return shared_bundle(tiny_model_dir, tmp_path_factory)


@pytest.mark.parametrize("chosen", CANDIDATES)
def test_live_session_scores_equal_replay_and_use_the_candidates_thresholds(
    chosen: str, base: Path, tmp_path: Path
) -> None:
    scorer0 = Scorer.load(base, threads=1)
    bundle = _bundle(tmp_path, base, _candidates(scorer0, chosen))
    scorer = Scorer.load(bundle, threads=1)
    th = scorer.served("mini-swe-agent")
    assert th.scorer == chosen
    assert th.stop == pytest.approx({"step_limit": 4e-4, "token_limit": 4e-6}.get(chosen, 0.3))
    run = make_run(9, seed=3)
    live = scorer.start(run.task, run.agent)
    assert live.scorer_name == chosen
    assert live.threshold == th.stop
    got = [live.observe(s) for s in run.steps]
    replay, used = scorer.score_served(run)
    np.testing.assert_allclose(got, replay, rtol=1e-9, atol=1e-12)
    assert used.scorer == chosen
    # a whole-run replay stops where the live session's decisions stop
    result = score_transcript(scorer, run)
    session = scorer.session(run.task, run.agent)
    decisions = [session.observe(s) for s in run.steps]
    first = next((d.step for d in decisions if d.stop), None)
    assert result.scorer == chosen
    assert (result.stop.step if result.stop else None) == first
    if chosen != "stack":  # the monitor's KV graph never ran for a candidate without it
        assert live.tokens_encoded == 0


def test_candidate_scores_match_the_fitted_pipelines(base: Path, tmp_path: Path) -> None:
    from training.baselines.learned import signals_run_scores, tfidf_run_scores

    scorer0 = Scorer.load(base, threads=1)
    cands = _candidates(scorer0, "tfidf_lr")
    run = make_run(8, seed=5)
    runs = _runs()
    y = [i % 2 for i in range(len(runs))]
    steps = [np.arange(1, len(r.steps) + 1) for r in runs]
    tf = fit_tfidf_lr(scorer0.featuriser, runs, steps, y, [np.ones(len(s)) for s in steps])
    bundle = _bundle(tmp_path, base, cands)
    scores, _ = Scorer.load(bundle, threads=1).score_served(run)
    np.testing.assert_allclose(scores, tfidf_run_scores(tf, scorer0.featuriser, run), atol=1e-9)
    sig = fit_signals_lr(
        np.concatenate([signal_matrix(r) for r in runs]),
        np.concatenate([[lab] * len(r.steps) for r, lab in zip(runs, y, strict=True)]),
        np.ones(sum(len(r.steps) for r in runs)),
    )
    cands["chosen"]["mini-swe-agent"] = {"scorer": "signals_lr", "by_target": {}}
    bundle2 = _bundle(tmp_path / "2", base, cands)
    scores2, th = Scorer.load(bundle2, threads=1).score_served(run)
    assert th.scorer == "signals_lr"  # no per-target entry: the one choice
    np.testing.assert_allclose(scores2, signals_run_scores(sig, signal_matrix(run)), atol=1e-9)


@pytest.mark.parametrize("chosen", ["tfidf_lr", "stack"])
def test_tfidf_with_its_own_text_serves_live_as_the_pipeline_scores(
    chosen: str, base: Path, tmp_path: Path
) -> None:
    """The TF-IDF fitted on its own PieceText (not the featuriser's window pieces) carries the
    text into candidates.json; live, replay and the fitted pipeline count the same pieces."""
    from training.baselines.learned import tfidf_run_scores

    text = PieceText(
        task_chars=40, action_chars=15, obs_head_chars=10, obs_tail_chars=5, thought_chars=1000
    )
    scorer0 = Scorer.load(base, threads=1)
    run = make_run(9, seed=3)
    assert run_pieces(scorer0.featuriser, run, text) != run_pieces(scorer0.featuriser, run)
    cands = _candidates(scorer0, chosen, text=text)
    assert cands["params"]["tfidf_lr"]["text"]["action_chars"] == 15
    scorer = Scorer.load(_bundle(tmp_path, base, cands), threads=1)
    assert scorer.choice is not None
    assert scorer.choice.tfidf_text == text
    live = scorer.start(run.task, run.agent)
    got = [live.observe(s) for s in run.steps]
    replay, used = scorer.score_served(run)
    assert used.scorer == chosen
    np.testing.assert_allclose(got, replay, rtol=1e-9, atol=1e-12)
    if chosen == "tfidf_lr":
        runs = _runs()
        steps = [np.arange(1, len(r.steps) + 1) for r in runs]
        w = [np.ones(len(s)) for s in steps]
        y = [i % 2 for i in range(len(runs))]
        tf = fit_tfidf_lr(scorer0.featuriser, runs, steps, y, w, text=text)
        assert tf.piece_text == text
        np.testing.assert_allclose(replay, tfidf_run_scores(tf, scorer0.featuriser, run), atol=1e-9)


def test_the_lm_probe_serves_when_the_choice_cannot(base: Path, tmp_path: Path) -> None:
    scorer0 = Scorer.load(base, threads=1)
    monitor = scorer0.thresholds("mini-swe-agent")
    cands = _candidates(scorer0, "tfidf_lr")
    # swe-agent chose TF-IDF, whose thresholds refuse 5% for it: the LM probe's (refused too)
    bundle = _bundle(tmp_path / "a", base, cands)
    th = Scorer.load(bundle, threads=1).served("swe-agent")
    assert th.scorer == "monitor"
    assert "no threshold" in th.why
    # chosen over all targets where the held-out runs gave no evidence at the target: it says so
    evid = copy.deepcopy(cands)
    evid["chosen"]["mini-swe-agent"]["no_evidence"] = ["0.05"]
    th = Scorer.load(_bundle(tmp_path / "e", base, evid), threads=1).served("mini-swe-agent")
    assert th.scorer == "tfidf_lr"
    assert "chosen over all targets" in th.why
    th = Scorer.load(_bundle(tmp_path / "f", base, cands), threads=1).served("mini-swe-agent")
    assert "saved the most tokens" in th.why
    # an unknown group, a candidate without parameters, an unlisted file: the LM probe
    assert Scorer.load(bundle, threads=1).served("openhands").scorer == "monitor"
    no_params = {**cands, "params": {}}
    th = Scorer.load(_bundle(tmp_path / "b", base, no_params), threads=1).served("mini-swe-agent")
    assert (th.scorer, th.stop) == ("monitor", monitor.stop)
    unlisted = _bundle(tmp_path / "c", base, cands, listed=False)
    assert Scorer.load(unlisted, threads=1).choice is None
    # a group `failfast calibrate` re-calibrated keeps the LM probe
    mj = json.loads((bundle / MANIFEST).read_text())
    mj["thresholds"]["calibration"] = {
        "records": "failfast calibrate",
        "per_agent": {"mini-swe-agent": {"runs": 40, "resolved": 30}},
    }
    (bundle / MANIFEST).write_text(json.dumps(mj))
    th = Scorer.load(bundle, threads=1).served("mini-swe-agent")
    assert th.scorer == "monitor"
    assert "re-calibrated" in th.why


def test_a_corrupt_listed_candidates_file_is_a_bundle_error(base: Path, tmp_path: Path) -> None:
    from monitor.errors import BundleError

    bundle = _bundle(tmp_path, base, None)
    (bundle / "candidates.json").write_text("{not json")
    write_manifest(bundle, read_manifest((bundle / MANIFEST).read_bytes(), bundle / MANIFEST))
    with pytest.raises(BundleError, match="candidates.json"):
        Scorer.load(bundle, threads=1)


def test_runs_scored_by_a_candidate_do_not_recalibrate_the_probe(tmp_path: Path) -> None:
    from training.data.decisions import runs_from_logs

    log = tmp_path / "d.jsonl"
    end = {"event": "end", "run": "r1", "agent": "a", "action": "continue", "reason": "ok",
           "step": 3, "scores": [0.1, 0.2, 0.3], "tokens": [1, 2, 3]}  # fmt: skip
    lines = [end, {**end, "run": "r2", "scorer": "tfidf_lr"}]
    lines += [{"event": "verdict", "run": r, "resolved": True} for r in ("r1", "r2")]
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    got = runs_from_logs([log])
    assert len(got.records) == 1
    assert got.skipped["scored by tfidf_lr, not the LM probe"] == 1
    assert not math.isnan(got.records[0].scores["monitor"][0])
