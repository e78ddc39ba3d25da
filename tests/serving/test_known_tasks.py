"""Known tasks served (serving.task_prior, serving.choice's known-task choice): a run whose task
other agents have run often enough is scored by the known-task choice, the same live, in replay
and over HTTP; every other run is served exactly as before."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest

from monitor.types import Trajectory
from serving.numeric import logit, sigmoid
from serving.scorer import Scorer
from serving.task_prior import TaskPrior
from tests.bundle_helpers import make_run, shared_bundle, start_server
from tests.serving.test_choice import _bundle, _candidates, _table
from training.experiments.task_prior import leave_agent_out_priors

RUN = make_run(9, seed=3)  # instance "inst-3", agent mini-swe-agent
OTHERS = [("inst-3", a, ok) for a, ok in [("A", False), ("B", False), ("C", True), ("D", False)]]
OWN = [("inst-3", "mini-swe-agent", True)] * 6  # the run's own agent: never counted
P0_RUNS = [("inst-9", "A", True), ("inst-9", "B", False)]


def _prior(min_runs: int = 4) -> TaskPrior:
    return TaskPrior.from_verdicts([*OTHERS, *OWN, *P0_RUNS], min_runs=min_runs)


def test_the_prior_counts_other_agents_verdicts_only_and_needs_min_runs() -> None:
    t = _prior()
    p0 = 4 / 12  # unresolved among the 12 verdicts
    assert t.p0 == pytest.approx(p0)
    assert t.others("inst-3", "mini-swe-agent") == (4, 3)
    assert t.prior("inst-3", "mini-swe-agent") == pytest.approx((3 + p0) / 5)
    assert t.prior("inst-3", "A") == pytest.approx((2 + p0) / 10)  # B, C, D, 6 mini runs
    assert _prior(10).prior("inst-3", "A") is None
    assert _prior(9).prior("inst-3", "A") is not None
    assert t.prior("inst-9", "A") is None  # one other run < 4
    assert t.prior("", "A") is None
    assert t.prior("never-run", "A") is None
    assert TaskPrior.from_json(json.loads(json.dumps(t.to_json()))) == t
    assert t.combine(0.3, 0.6) == pytest.approx(
        float(sigmoid(logit(np.array([0.3]))[0] + logit(np.array([0.6]))[0]))
    )


def test_more_other_runs_than_the_cap_count_as_the_cap_at_their_own_rate() -> None:
    t = _prior()
    p0 = t.p0
    t.max_others = 5  # inst-3 for agent A: 9 other runs, 2 unresolved
    assert t.prior("inst-3", "A") == pytest.approx((2 * 5 / 9 + p0) / 6)
    assert t.prior("inst-3", "mini-swe-agent") == pytest.approx((3 + p0) / 5)  # 4 <= 5: as is
    assert TaskPrior.from_json(json.loads(json.dumps(t.to_json()))) == t
    assert TaskPrior.from_json({k: v for k, v in t.to_json().items() if k != "max_others"}) == (
        TaskPrior(t.counts, p0, t.min_runs, t.weight, t.families, t.seen)  # older tables: no cap
    )
    with pytest.raises(ValueError, match="max_others"):
        TaskPrior({}, 0.5, 4, max_others=3)


def test_the_served_table_equals_the_measured_leave_agent_out_prior() -> None:
    verdicts = [*OTHERS, *OWN, *P0_RUNS]
    runs = [
        Trajectory(id=f"r{i}", instance_id=inst, agent=a, resolved=ok)
        for i, (inst, a, ok) in enumerate(verdicts)
    ]
    measured = leave_agent_out_priors(runs, min_runs=4)
    table = TaskPrior.from_verdicts(verdicts, min_runs=4)
    for r in runs:
        served = table.prior(r.instance_id, r.agent)
        assert measured[r.id] == pytest.approx(table.p0 if served is None else served)


def test_one_kind_of_verdict_is_refused() -> None:
    with pytest.raises(ValueError, match="resolved and unresolved"):
        TaskPrior.from_verdicts([("t", "A", True), ("t", "B", True)])


def _known_candidates(scorer: Scorer, chosen: str, threshold: float = 0.5) -> dict:
    """A candidates.json choosing signals_lr for mini-swe-agent on unknown tasks and `chosen`
    on known ones (its own thresholds at `threshold`)."""
    cands = _candidates(scorer, "signals_lr")
    known = copy.deepcopy({k: cands[k] for k in ("group_by", "stack")})
    known["thresholds"] = {
        c: _table(threshold) for c in ("monitor", "monitor_prior", "prior", "signals_lr")
    }
    known["chosen"] = {"mini-swe-agent": {"scorer": chosen, "by_target": {"0.05": chosen}}}
    known["prior"] = _prior().to_json()
    return {**cands, "known_tasks": known}


@pytest.fixture(scope="module")
def base(tiny_model_dir: Path, tmp_path_factory) -> Path:
    return shared_bundle(tiny_model_dir, tmp_path_factory)


@pytest.mark.parametrize("chosen", ["monitor_prior", "prior", "monitor", "signals_lr"])
def test_a_known_task_is_served_by_the_known_choice_live_as_in_replay(
    chosen: str, base: Path, tmp_path: Path
) -> None:
    scorer = Scorer.load(_bundle(tmp_path, base, _known_candidates(Scorer.load(base), chosen)))
    p = _prior().prior(RUN.instance_id, RUN.agent)
    th = scorer.served(RUN.agent, instance_id=RUN.instance_id)
    assert (th.scorer, th.stop, th.task_prior) == (chosen, 0.5, p)
    assert "known task" in th.why
    live = scorer.start(RUN.task, RUN.agent, instance_id=RUN.instance_id)
    assert (live.scorer_name, live.threshold, live.task_prior) == (chosen, 0.5, p)
    got = [live.observe(s) for s in RUN.steps]
    replay, used = scorer.score_served(RUN)  # the run's own instance_id
    np.testing.assert_allclose(got, replay, rtol=1e-9, atol=1e-12)
    assert used.scorer == chosen
    probe = np.asarray(scorer.score_run(RUN))
    want = {
        "monitor_prior": sigmoid(logit(probe) + logit(np.full(len(probe), p))),
        "prior": np.full(len(probe), p),
        "monitor": probe,
    }.get(chosen)
    if want is not None:
        np.testing.assert_allclose(replay, want, rtol=1e-9, atol=1e-12)
    # the monitor Session opened with the task id decides on the same scores
    session = scorer.session(RUN.task, RUN.agent, instance_id=RUN.instance_id)
    scores = [session.observe(s).score for s in RUN.steps[:3]]
    np.testing.assert_allclose(scores, replay[:3], rtol=1e-9, atol=1e-12)


def test_an_unknown_task_is_served_as_before(base: Path, tmp_path: Path) -> None:
    plain = Scorer.load(_bundle(tmp_path / "a", base, _candidates(Scorer.load(base), "signals_lr")))
    scorer = Scorer.load(
        _bundle(tmp_path / "b", base, _known_candidates(Scorer.load(base), "monitor_prior"))
    )
    for inst in ("", "never-run", "inst-9"):  # no id, not in the table, too few other runs
        th = scorer.served(RUN.agent, instance_id=inst)
        assert (th.scorer, th.task_prior) == ("signals_lr", None)
        assert th == plain.served(RUN.agent)
    other = Trajectory(**{**RUN.__dict__, "instance_id": "never-run"})
    np.testing.assert_allclose(scorer.score_served(other)[0], plain.score_served(other)[0])
    # a group the known choice does not hold is served as an unknown task's
    swe = make_run(7, agent="swe-agent", seed=3)
    th = scorer.served(swe.agent, instance_id=swe.instance_id)
    assert th.task_prior is None
    assert th == plain.served(swe.agent)


def test_a_known_choice_without_a_threshold_falls_back_to_the_ordinary_one(
    base: Path, tmp_path: Path
) -> None:
    cands = _known_candidates(Scorer.load(base), "monitor_prior", threshold=math.inf)
    scorer = Scorer.load(_bundle(tmp_path, base, cands))
    th = scorer.served(RUN.agent, instance_id=RUN.instance_id)
    assert (th.scorer, th.task_prior) == ("signals_lr", None)


def test_http_sessions_take_the_task_id(base: Path, tmp_path: Path) -> None:
    httpx = pytest.importorskip("httpx")
    bundle = _bundle(tmp_path, base, _known_candidates(Scorer.load(base), "monitor_prior"))
    want, _ = Scorer.load(bundle).score_served(RUN)
    url, proc = start_server(["--bundle", str(bundle), "--threads", "1"], tmp_path / "log")
    try:
        body = {"task": RUN.task, "agent": RUN.agent, "instance_id": RUN.instance_id}
        r = httpx.post(f"{url}/v1/sessions", json=body)
        assert r.status_code == 201, r.text
        opened = r.json()
        assert opened["scorer"] == "monitor_prior"
        assert opened["task_prior"] == pytest.approx(_prior().prior(RUN.instance_id, RUN.agent))
        sid = opened["session_id"]
        got = []
        for step in RUN.steps[:4]:
            d = step.to_dict()
            d.pop("index")
            got.append(httpx.post(f"{url}/v1/sessions/{sid}/steps", json=d).json()["score"])
        assert got == pytest.approx(want[:4], abs=1e-5)
        steps = []
        for step in RUN.steps:
            d = step.to_dict()
            d.pop("index")
            steps.append(d)
        whole = {"steps": steps, "task": RUN.task, "agent": RUN.agent}
        r = httpx.post(f"{url}/v1/score", json={**whole, "instance_id": RUN.instance_id})
        assert r.status_code == 200, r.text
        assert r.json()["scorer"] == "monitor_prior"
        assert r.json()["scores"] == pytest.approx(want, abs=1e-5)
        assert httpx.post(f"{url}/v1/score", json=whole).json()["scorer"] == "signals_lr"
        bad = httpx.post(f"{url}/v1/sessions", json={**body, "instance_id": "a\nb"})
        assert bad.status_code == 422
        assert "instance id" in bad.text
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_target_the_gate_sends_to_the_ordinary_choice_is_served_as_unknown(
    base: Path, tmp_path: Path
) -> None:
    cands = _known_candidates(Scorer.load(base), "monitor_prior")
    cands["known_tasks"]["chosen"]["mini-swe-agent"]["as_unknown"] = ["0.05"]
    scorer = Scorer.load(_bundle(tmp_path, base, cands))
    th = scorer.served(RUN.agent, instance_id=RUN.instance_id)
    assert (th.scorer, th.task_prior) == ("signals_lr", None)
    assert scorer.choice is not None
    assert scorer.choice.known is not None
    assert scorer.choice.known.text_probe == scorer.choice.text_probe


def test_a_run_is_kept_out_of_its_own_prior_when_its_agent_is_named_by_group_or_not_at_all() -> (
    None
):
    from serving.choice import Choice

    t = TaskPrior.from_verdicts(
        [*OTHERS, *OWN, *P0_RUNS], min_runs=4, families={"mini-gemini": "mini-swe-agent"}
    )
    choice = Choice(chosen={}, tables={}, task_prior=t)
    own_left_out = t.prior("inst-3", "mini-swe-agent")
    assert choice.prior_of("inst-3", "mini-swe-agent") == own_left_out
    assert choice.prior_of("inst-3", "mini-gemini", "mini-gemini") == own_left_out
    assert choice.prior_of("inst-3", None, "mini-gemini") == own_left_out
    assert choice.prior_of("inst-3", None) is None  # no family: its own runs could count
    assert choice.prior_of("inst-3", "") is None
    assert TaskPrior.from_json(json.loads(json.dumps(t.to_json()))).families == t.families


def test_a_scorer_without_instance_id_still_scores_a_run_that_names_its_task() -> None:
    from monitor.policy import PolicyConfig
    from monitor.protocols import takes_keyword
    from monitor.scripted import ScriptedScorer
    from monitor.session import Monitor

    scorer = ScriptedScorer([0.99], threshold=0.5)
    assert not takes_keyword(scorer.start, "instance_id")
    assert takes_keyword(Scorer.start, "instance_id")
    session = Monitor(PolicyConfig(), scorer=scorer).start(RUN.task, RUN.agent, instance_id="x")
    assert session.scorer is not None
    assert session.observe(RUN.steps[0]).score == pytest.approx(0.99)


def _bundle_of_others(base: Path, tmp_path: Path) -> tuple[Path, TaskPrior]:
    """A bundle serving known tasks whose table counts OTHERS and P0_RUNS (six run ids)."""
    cands = _known_candidates(Scorer.load(base), "monitor_prior")
    table = TaskPrior.from_verdicts(
        [*OTHERS, *P0_RUNS], min_runs=4, run_ids=[f"r{i}" for i in range(6)]
    )
    cands["known_tasks"]["prior"] = table.to_json()
    return _bundle(tmp_path, base, cands), table


def test_known_tasks_command_adds_verdicts_once_and_makes_a_task_known(
    base: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from training.cli import main as cli

    bundle, table = _bundle_of_others(base, tmp_path)
    (bundle / "monitor.json.sig").write_text("stale")
    new_task = make_run(9, seed=11)  # instance "inst-11": no verdicts yet
    assert Scorer.load(bundle).served(new_task.agent, instance_id="inst-11").task_prior is None
    others = [
        Trajectory(id=f"n{i}", instance_id="inst-11", agent=f"other-{i}", resolved=i % 2 == 0,
                   steps=new_task.steps, task=new_task.task)
        for i in range(4)
    ]  # fmt: skip
    # the readers are tested elsewhere: the command gets these runs, n0 twice
    monkeypatch.setattr(
        "training.data.runs.load_runs", lambda paths, labels=(): [*others, others[0]]
    )
    out = tmp_path / "new"
    assert cli(["known-tasks", str(bundle), "--data", "runs", "--out", str(out)]) == 0
    assert cli(["known-tasks", str(bundle), "--data", "runs", "--out", str(bundle)]) == 2
    scorer = Scorer.load(out)
    th = scorer.served(new_task.agent, instance_id="inst-11")
    assert th.scorer == "monitor_prior"
    assert th.task_prior == pytest.approx((2 + table.p0) / 5)  # n1, n3 unresolved; n0 once
    assert not (out / "monitor.json.sig").exists()
    assert "Verdicts added" in (out / "README.md").read_text()
    again = json.loads((out / "candidates.json").read_text())["known_tasks"]["prior"]
    assert len(again["seen"]) == 6 + 4


def test_known_tasks_command_refuses_a_table_that_cannot_tell_runs_apart(
    base: Path, tmp_path: Path
) -> None:
    from monitor.errors import BundleError
    from training.export.known_tasks import add_verdicts

    bundle = _bundle(tmp_path, base, _known_candidates(Scorer.load(base), "monitor_prior"))
    with pytest.raises(BundleError, match="does not record which runs"):
        add_verdicts(bundle, tmp_path / "new", [RUN])
    plain = _bundle(tmp_path / "p", base, _candidates(Scorer.load(base), "signals_lr"))
    with pytest.raises(BundleError, match="no known-task table"):
        add_verdicts(plain, tmp_path / "new2", [RUN])
    assert not (tmp_path / "new").exists()


def test_known_tasks_command_caps_a_task_given_more_runs_than_calibration_saw(
    base: Path, tmp_path: Path
) -> None:
    from training.export.known_tasks import add_verdicts

    cands = _known_candidates(Scorer.load(base), "monitor_prior")
    table = TaskPrior.from_verdicts(
        [*OTHERS, *P0_RUNS], min_runs=4, run_ids=[f"r{i}" for i in range(6)]
    )
    table.max_others = 4
    cands["known_tasks"]["prior"] = table.to_json()
    bundle = _bundle(tmp_path, base, cands)
    new_task = make_run(9, seed=11)
    many = [
        Trajectory(id=f"n{i}", instance_id="inst-11", agent=f"other-{i}", resolved=i < 2)
        for i in range(8)
    ]  # 8 other-agent runs, 6 unresolved: counted as 4 runs, 3 unresolved
    done = add_verdicts(bundle, tmp_path / "new", many)
    assert (done.added, done.over_calibration, done.over_before, done.most_runs_before) == (
        8, 1, 0, 4
    )  # fmt: skip
    assert any("counts them as 4 at their own failure rate" in line for line in done.lines())
    th = Scorer.load(tmp_path / "new").served(new_task.agent, instance_id="inst-11")
    assert th.task_prior == pytest.approx((3 + table.p0) / 5)


def test_a_known_task_runs_verdict_counts_in_its_groups_known_task_watch(
    base: Path, tmp_path: Path
) -> None:
    import io

    from monitor.decision_log import DecisionLog
    from monitor.session import Monitor
    from serving.history import closed_sessions

    scorer = Scorer.load(_bundle(tmp_path, base, _known_candidates(Scorer.load(base), "prior")))
    sink = io.StringIO()
    monitor = Monitor(scorer=scorer, log=DecisionLog(sink))
    known = monitor.start(RUN.task, RUN.agent, instance_id=RUN.instance_id, run="k")
    plain = monitor.start(RUN.task, RUN.agent, instance_id="never-run", run="p")
    for s in RUN.steps:
        known.observe(s)
        plain.observe(s)
    known.end()
    plain.end()
    assert (known.known_task, plain.known_task) == (True, False)
    assert known.verdict(True)["known_task"] is True
    assert "known_task" not in plain.verdict(True)
    group = monitor.feedback.status()["groups"]["mini-swe-agent"]
    assert (group["resolved"], group["known_tasks"]["resolved"]) == (2, 1)
    ends = [json.loads(x) for x in sink.getvalue().splitlines()]
    ends = [e for e in ends if e.get("event") == "end"]
    assert [e.get("known_task") for e in ends] == [True, None]
    # a service restarted on this log remembers which closed session was a known task's
    log = tmp_path / "decisions.jsonl"
    start = {"event": "start", "bundle_sha256": "x"}
    lines = [start, *({**e, "session": e["run"]} for e in ends)]
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    restored = {o.run: o.known_task for o in closed_sessions(log, "x", 10)}
    assert restored == {"k": True, "p": False}


def test_known_tasks_command_takes_label_files_of_other_agents_runs(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from training.cli import main as cli

    bundle, table = _bundle_of_others(base, tmp_path)
    files = []
    for i in range(4):  # four other agents' whole runs: inst-11 failed by three of them
        report = {"resolved_ids": ["inst-11"] if i == 0 else [], "unresolved_ids": ["inst-12"]}
        if i:
            report["unresolved_ids"].append("inst-11")
        f = tmp_path / f"sub-{i}" / "results" / "results.json"
        f.parent.mkdir(parents=True)
        f.write_text(json.dumps(report))
        files.append(str(f))
    out = tmp_path / "new"
    argv = ["known-tasks", str(bundle), "--verdicts", *files, "--out", str(out)]
    assert cli(argv) == 0
    printed = capsys.readouterr().out
    assert "2 verdicts of sub-0" in printed
    assert "verdicts added: 8 runs" in printed
    th = Scorer.load(out).served("mini-swe-agent", instance_id="inst-11")
    assert th.task_prior == pytest.approx((3 + table.p0) / 5)
    # the same files again on the new bundle: each verdict counted once; no input: an error
    assert cli(["known-tasks", str(out), "--verdicts", *files, "--out", str(tmp_path / "x")]) == 0
    assert "verdicts added: 0 runs (8 already counted" in capsys.readouterr().out
    assert cli(["known-tasks", str(bundle), "--out", str(tmp_path / "y")]) == 2
    assert "--verdicts" in capsys.readouterr().err


def test_known_tasks_command_counts_a_known_family_as_itself_and_warns(
    base: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from training.cli import main as cli

    bundle, _ = _bundle_of_others(base, tmp_path)
    sub = tmp_path / "20250101_b_model" / "results" / "results.json"
    sub.parent.mkdir(parents=True)
    sub.write_text(json.dumps({"resolved_ids": ["inst-9"], "unresolved_ids": ["inst-12"]}))
    out = tmp_path / "new"
    assert cli(["known-tasks", str(bundle), "--verdicts", str(sub), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "2 verdicts of 20250101_b_model (counted as agent family B)" in printed
    assert "1 verdicts from label files are of a task and agent family" in printed
    new = TaskPrior.from_json(
        json.loads((out / "candidates.json").read_text())["known_tasks"]["prior"]
    )
    assert new.counts["inst-9"]["B"] == [2, 1]  # B's own run and the file's resolved one
    # an empty harness job file gives nothing: an error, no bundle written
    job = tmp_path / "job" / "result.json"
    job.parent.mkdir()
    job.write_text(json.dumps({"n_total_trials": 3}))
    argv = ["known-tasks", str(bundle), "--verdicts", str(job), "--out", str(tmp_path / "z")]
    assert cli(argv) == 2
    assert "no verdict" in capsys.readouterr().err
    assert not (tmp_path / "z").exists()
    argv = ["known-tasks", str(bundle), "--data", str(sub), "--instances", str(sub), "--out", "q"]
    assert cli(argv) == 2
    assert "go with --verdicts" in capsys.readouterr().err
