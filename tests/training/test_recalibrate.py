"""`failfast calibrate`: merging thresholds, runs rebuilt from decision logs, and the command on
the tiny bundle (runs scored now, or a decision log + verdicts), with what serving says after."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from monitor.schedule import Schedule
from training.calibrate.recalibrate import recalibrate, refusals
from training.calibrate.thresholds import pick_thresholds
from training.config import ThresholdConfig
from training.data.decisions import is_decision_log, runs_from_logs
from training.data.records import RunRecord

SCHED = Schedule(min_steps=1, every=1, persist=1)


def rec(i: int, agent: str, resolved: bool, top: float) -> RunRecord:
    s = np.array([0.1, top, 0.2])
    return RunRecord(f"{agent}/{i}", f"i{i}", agent, agent, resolved, np.full(3, 5), {"monitor": s})


def group(agent: str, n: int, seed: int) -> list[RunRecord]:
    rng = np.random.default_rng(seed)
    return [rec(i, agent, i % 3 != 0, float(rng.random())) for i in range(n)]


def test_merge_keeps_absent_groups_and_replace_drops_them() -> None:
    old = pick_thresholds(
        group("a", 90, 0) + group("b", 90, 1), schedule=SCHED, targets=[0.05, 0.1]
    )
    cfg = ThresholdConfig(targets=[0.05, 0.25], group_by="agent")
    new_recs = group("a", 60, 2) + group("c", 60, 3)
    got = recalibrate(old, new_recs, cfg, schedule=SCHED)
    t = got.table
    assert sorted(t.groups) == ["a", "b", "c"]
    assert t.groups["b"] == old.groups["b"]  # kept as it was
    assert t.groups["a"] != old.groups["a"]
    assert set(got.kept) == {"b"}
    assert got.groups == {"a": {"runs": 60, "resolved": 40}, "c": {"runs": 60, "resolved": 40}}
    assert t.pooled == old.pooled
    assert got.pooled.startswith("kept from the bundle")
    assert t.targets == [0.05, 0.1, 0.25]
    assert t.calibration["per_agent"]["c"] == {"runs": 60, "resolved": 40}
    assert t.schedule == SCHED
    # the new threshold of "a" is the one picked on the new runs alone
    alone = pick_thresholds(
        new_recs, schedule=SCHED, targets=[0.05, 0.25], margin=cfg.margin, fallback=cfg.fallback
    )
    assert t.lookup("a", 0.05).stop == alone.lookup("a", 0.05).stop
    rep = recalibrate(old, new_recs, cfg, schedule=SCHED, replace=True)
    assert sorted(rep.table.groups) == ["a", "c"]
    assert rep.table.pooled == alone.pooled
    assert rep.kept == {}
    # every old group present: the pooled thresholds are recalibrated too
    both = recalibrate(old, group("a", 60, 4) + group("b", 60, 5), cfg, schedule=SCHED)
    assert both.pooled == "recalibrated"
    with pytest.raises(ValueError, match="grouped by agent"):
        recalibrate(old, new_recs, ThresholdConfig(group_by="source"), schedule=SCHED)
    with pytest.raises(ValueError, match="no labelled runs"):
        recalibrate(old, [], cfg, schedule=SCHED)


def test_refusals_name_the_count_needed() -> None:
    cfg = ThresholdConfig(targets=[0.05], margin=1.0)
    table = recalibrate(None, group("a", 12, 0), cfg, schedule=SCHED)
    why = refusals(table.table, ["a"], 0.05)
    assert "needs at least 19 resolved" in why["a"]
    assert "pooled" in why
    # the default margin 2 fits 5% at 2.5%: twice the resolved runs
    table = recalibrate(None, group("a", 12, 0), ThresholdConfig(targets=[0.05]), schedule=SCHED)
    assert "needs at least 39 resolved" in refusals(table.table, ["a"], 0.05)["a"]


def write_log(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + "not json\n")
    return path


def end(run: str, scores: list, *, stop: int | None = None, session: str = "", shadow=False):
    d = {"event": "end", "run": run, "agent": "z", "scores": scores, "tokens": [7] * len(scores)}
    return d | {"steps": len(scores), "stop_step": stop, "shadow": shadow, "session": session}


def test_runs_from_logs_rules(tmp_path) -> None:
    log = write_log(
        tmp_path / "d.jsonl",
        [
            {"event": "start", "run": "", "graphs": {}},
            {"event": "observe", "run": "r1", "score": 0.3},
            end("r1", [0.1, 0.3]),  # verdict from the file, by run id
            end("r2", [0.1, 0.9], stop=2),  # stopped, nothing after: obeyed, left out
            end("r3", [0.1, 0.9], stop=2, shadow=True),  # shadow: whole
            end("r4", [0.1, 0.9, 0.2], stop=2, session="s4"),  # steps after the stop
            end("r5", [None, None]),  # no scores
            end("r6", [0.5, 0.6]),  # no verdict
            end("r7", [0.5, 0.6], stop=2) | {"source": "z-src"},  # its source, as logged
            {"event": "verdict", "run": "r4", "session": "s4", "resolved": True},
            {"event": "verdict", "run": "r2", "resolved": False},
            {"event": "verdict", "run": "r3", "resolved": True},
            {"event": "verdict", "run": "r5", "resolved": True},
            {"event": "verdict", "run": "r7", "resolved": True, "finished": True},
        ],
    )
    assert is_decision_log(log)
    assert not is_decision_log(tmp_path / "missing.jsonl")
    verdicts = tmp_path / "v.jsonl"
    verdicts.write_text(
        json.dumps({"run_id": "r1", "resolved": False}) + "\n"
        + json.dumps({"run_id": "ghost", "resolved": True}) + "\n"
    )  # fmt: skip
    got = runs_from_logs([log], [verdicts])
    by = {r.run_id: r for r in got.records}
    assert sorted(by) == ["r1", "r3", "r7", "s4"]
    assert by["r1"].resolved is False
    assert list(by["s4"].scores["monitor"]) == [0.1, 0.9, 0.2]
    assert list(by["s4"].step_tokens) == [7, 7, 7]
    assert by["s4"].agent == "z"
    assert (by["s4"].source, by["r7"].source) == ("z", "z-src")  # no source logged: the agent
    assert got.skipped == {
        "stop obeyed": 1,
        "no scores": 1,
        "no verdict": 1,
        "verdict for no logged run": 1,
        "bad line": 1,
    }
    assert len(got.starts) == 1
    shadow = runs_from_logs([log], [verdicts], shadow_only=True)
    assert [r.run_id for r in shadow.records] == ["r3"]
    assert shadow.skipped["not a shadow run"] == 6
    as_dict = tmp_path / "v.json"
    as_dict.write_text(json.dumps({"r6": True}))
    assert "r6" in {r.run_id for r in runs_from_logs([log], [as_dict]).records}


# --- the command on the tiny bundle ----------------------------------------------------------

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def bundle(tiny_model_dir, tmp_path_factory):
    from tests.bundle_helpers import shared_bundle

    return shared_bundle(tiny_model_dir, tmp_path_factory)


def new_agent_runs(n: int = 36) -> list:
    from tests.bundle_helpers import make_run

    runs = []
    for i in range(n):
        r = make_run(4 + i % 5, agent="my-agent", seed=i)
        r.id, r.instance_id, r.resolved = f"my/{i}", f"inst-{i}", i % 4 != 0
        runs.append(r)
    return runs


def test_calibrate_command_on_runs(bundle, tmp_path, capsys, caplog) -> None:
    from monitor.corpus import write_corpus
    from serving.bundle import load_bundle
    from serving.scorer import Scorer
    from training.cli import main

    write_corpus(new_agent_runs(), tmp_path / "corpus")
    out = tmp_path / "b2"
    argv = ["calibrate", "--bundle", str(bundle), "--data", str(tmp_path / "corpus")]
    argv += ["--out", str(out), "--method", "conformal", "--no-progress"]
    argv += ["--records-out", str(tmp_path / "recs.parquet")]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "read 36 runs: 36 labelled" in printed
    assert "my-agent: 36 runs, 27 resolved -> 0.05: " in printed
    assert "mini-swe-agent: no runs of it in the calibration data" in printed
    b2 = load_bundle(out)  # every hash checked
    rec = b2.manifest.calibration
    assert rec["by"] == "failfast calibrate"
    assert rec["at"].endswith("Z")
    assert rec["command"].startswith("failfast calibrate --bundle ")
    assert rec["data"]["kind"] == "runs"
    assert rec["data"]["paths"] == [str(tmp_path / "corpus")]
    assert rec["groups"] == {"my-agent": {"runs": 36, "resolved": 27, "refused": False}}
    assert set(rec["kept"]) == {"mini-swe-agent", "swe-agent"}
    assert rec["thresholds"]["method"] == "conformal"
    assert rec["from_bundle"]["sha256"] == load_bundle(bundle).sha256
    table = b2.thresholds
    assert table.lookup("my-agent", 0.05).origin == "agent"
    assert table.groups["mini-swe-agent"] == load_bundle(bundle).thresholds.groups["mini-swe-agent"]
    assert "## Recalibrated" in (out / "README.md").read_text()
    # a --labels file that cannot be read is an error (as for ingest), not a warning
    capsys.readouterr()
    nope = ["--labels", str(tmp_path / "nope.json"), "--out", str(tmp_path / "b9")]
    assert main([*argv[:5], *nope]) == 2
    assert "nope.json: (--labels) cannot read" in capsys.readouterr().err
    assert not (tmp_path / "b9").exists()
    # the served thresholds of the new agent are those picked on its scores
    from training.data.records import load_records

    recs = load_records(tmp_path / "recs.parquet")
    alone = pick_thresholds(recs, schedule=table.schedule, targets=[0.05, 0.1], method="conformal")
    assert Scorer.load(out).thresholds("my-agent").stop == alone.lookup("my-agent", 0.05).stop
    # serving says so: score --json, and the summary without local paths
    summary = b2.calibration
    assert summary["data"]["paths"] == 1
    assert "command" not in summary
    fixture = Path(__file__).parents[1] / "fixtures" / "claude_code_constructed_session.jsonl"
    assert main(["score", "--bundle", str(out), str(fixture), "--json"]) in (0, 1)
    scored = json.loads(capsys.readouterr().out)
    assert scored["calibration"]["by"] == "failfast calibrate"
    assert scored["calibration"]["groups"]["my-agent"]["resolved"] == 27
    # the service logs it at start and states it in /v1/status
    import logging

    from fastapi.testclient import TestClient

    from serving.app import create_app

    with caplog.at_level(logging.INFO, logger="serving.verdicts"):
        client = TestClient(create_app(Scorer.load(out)))
    assert "calibrated by failfast calibrate at " + rec["at"] in caplog.text
    status = client.get("/v1/status").json()
    assert status["calibration"]["groups"]["my-agent"]["runs"] == 36
    assert sorted(status["groups"]) == ["mini-swe-agent", "my-agent", "other", "swe-agent"]
    # failfast watch writes a decision log that ends with the run's end record
    wlog = tmp_path / "watch.jsonl"
    argv_w = ["watch", "--bundle", str(out), str(fixture), "--once", "--decision-log", str(wlog)]
    assert main(argv_w) in (0, 1)
    lines = [json.loads(x) for x in wlog.read_text().splitlines()]
    assert lines[0]["event"] == "start"
    assert lines[0]["graphs"]["model.onnx"] == b2.manifest.files["model.onnx"]
    assert lines[-1]["event"] == "end"
    assert len(lines[-1]["scores"]) == lines[-1]["steps"] > 0
    # a second calibration keeps the first in its history
    out3 = tmp_path / "b3"
    argv3 = ["calibrate", "--bundle", str(out), "--data", str(tmp_path / "corpus")]
    assert main([*argv3, "--out", str(out3), "--method", "conformal", "--no-progress"]) == 0
    assert load_bundle(out3).manifest.calibration["history"][0]["at"] == rec["at"]
    assert load_bundle(out3).calibration["earlier_calibrations"] == 1


def test_calibrate_agent_flag_names_the_group_of_a_source_keyed_table(bundle, tmp_path) -> None:
    from monitor.corpus import write_corpus
    from serving.bundle import load_bundle
    from training.cli import main
    from training.data.records import load_records

    runs = new_agent_runs()
    for r in runs:  # read from a folder: the reader names the folder as the source
        r.source = "some-folder"
    write_corpus(runs, tmp_path / "corpus")
    out = tmp_path / "b2"
    argv = ["calibrate", "--bundle", str(bundle), "--data", str(tmp_path / "corpus")]
    argv += ["--out", str(out), "--no-progress", "--replace", "--group-by", "source"]
    argv += [
        "--agent",
        "my-group",
        "--records-out",
        str(tmp_path / "r.parquet"),
        "--method",
        "conformal",
    ]
    assert main(argv) == 0
    # keyed by source, --agent names the group only: the model read the runs' own agent, as
    # `failfast score --source my-group` (no --agent) will
    assert {(r.agent, r.source) for r in load_records(tmp_path / "r.parquet")} == {
        ("my-agent", "my-group")
    }
    table = load_bundle(out).thresholds
    assert table.group_by == "source"
    assert list(table.groups) == ["my-group"]
    assert table.lookup(table.group_of("anything", "my-group"), 0.1).origin == "agent"


def test_calibrate_refuses_an_uncertifiable_served_target(bundle, tmp_path, capsys) -> None:
    from monitor.corpus import write_corpus
    from training.cli import main

    write_corpus(new_agent_runs(12), tmp_path / "corpus")
    argv = ["calibrate", "--bundle", str(bundle), "--data", str(tmp_path / "corpus")]
    argv += ["--out", str(tmp_path / "b2"), "--no-progress", "--replace"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "needs at least 59 resolved validation runs, has 9" in captured.out
    assert "no bundle written" in captured.err
    assert not (tmp_path / "b2").exists()
    assert main([*argv[:-1], "--out", str(bundle), "--method", "conformal"]) == 2


def test_calibrate_from_a_decision_log_and_verdicts(bundle, tmp_path, capsys) -> None:
    from monitor.decision_log import DecisionLog
    from monitor.policy import PolicyConfig
    from monitor.session import Monitor
    from serving.bundle import load_bundle, start_record
    from serving.scorer import Scorer
    from training.cli import main

    scorer = Scorer.load(bundle)
    sink = io.StringIO()
    dlog = DecisionLog(sink)
    dlog.write(start_record(scorer))
    monitor = Monitor(PolicyConfig.model_validate(scorer.policy), scorer=scorer, log=dlog)
    runs = new_agent_runs(30)
    verdicts = []
    for r in runs:
        s = monitor.start(r.task, "my-agent", run=r.id)
        for step in r.steps:  # a dry run: stops are not obeyed
            s.observe(step)
        s.end()
        if r.id != "my/3":
            verdicts.append({"run_id": r.id, "resolved": r.resolved})
    log = tmp_path / "decisions.jsonl"
    log.write_text(sink.getvalue())
    vfile = tmp_path / "verdicts.jsonl"
    vfile.write_text("".join(json.dumps(v) + "\n" for v in verdicts))
    out = tmp_path / "b2"
    argv = ["calibrate", "--bundle", str(bundle), "--data", str(log), "--verdicts", str(vfile)]
    assert main([*argv, "--out", str(out), "--method", "conformal"]) == 0
    printed = capsys.readouterr().out
    assert "decision logs: 29 runs with a verdict; left out: 1 no verdict" in printed
    rec = load_bundle(out).manifest.calibration
    assert rec["data"]["kind"] == "decision-log"
    assert rec["data"]["log_runs"] == 29
    assert rec["groups"]["my-agent"]["resolved"] == sum(v["resolved"] for v in verdicts)
    # with a source-keyed table the logged sources are the groups (no --agent: kept as logged)
    src_log = tmp_path / "src.jsonl"
    src_log.write_text(log.read_text().replace('"event": "end"', '"event": "end", "source": "s-x"'))
    out_s = tmp_path / "b-src"
    argv_s = [
        "calibrate",
        "--bundle",
        str(bundle),
        "--data",
        str(src_log),
        "--verdicts",
        str(vfile),
    ]
    argv_s += ["--out", str(out_s), "--method", "conformal", "--replace", "--group-by", "source"]
    assert main(argv_s) == 0
    assert list(load_bundle(out_s).thresholds.groups) == ["s-x"]
    # the logged scores are the live KV scores: the same as whole-run scoring, to float error
    got = runs_from_logs([log], [vfile]).records[0]
    want = scorer.score_run(runs[0])
    assert got.scores["monitor"] == pytest.approx(want, abs=1e-4)
    # a log written by other graphs cannot calibrate this bundle
    other = json.loads(log.read_text().splitlines()[0])
    other["graphs"] = {"model.onnx": "0" * 64}
    (tmp_path / "other.jsonl").write_text(json.dumps(other) + "\n" + log.read_text())
    argv[4] = str(tmp_path / "other.jsonl")
    assert main([*argv, "--out", str(tmp_path / "b3"), "--method", "conformal"]) == 2
    assert "graphs differ" in capsys.readouterr().err
    # runs a chosen candidate scored: left out, and the note says how to calibrate their group
    tf_log = tmp_path / "tfidf.jsonl"
    tf_log.write_text(
        log.read_text().replace('"event": "end"', '"event": "end", "scorer": "tfidf_lr"')
    )
    argv[4] = str(tf_log)
    assert main([*argv, "--out", str(tmp_path / "b5"), "--method", "conformal"]) == 2
    got_io = capsys.readouterr()
    assert "left out: 1 no verdict, 29 scored by tfidf_lr, not the LM probe" in got_io.out
    assert "give its transcripts and verdicts instead (--data RUNS --labels FILE)" in got_io.err
    assert not (tmp_path / "b5").exists()
    # --verdicts without a decision log
    bad = ["calibrate", "--bundle", str(bundle), "--data", str(tmp_path / "nothing")]
    assert main([*bad, "--verdicts", str(vfile), "--out", str(tmp_path / "b4")]) == 2


def test_bench_calibrate_protocol_on_synthetic_records() -> None:
    """bench/bench_calibrate.py's protocol: the shipped table's pooled threshold is far off for a
    new agent whose scores run high; calibrated on half its runs, the other half's realized FPR
    is near the target."""
    from tests.bench_loader import load_bench

    bench = load_bench("bench_calibrate")
    rng = np.random.default_rng(1)
    old = pick_thresholds(group("a", 200, 0), schedule=SCHED, targets=[0.05])
    new = [
        RunRecord(f"n{i}", f"i{i}", "new", "new", i % 2 == 0, np.full(3, 5),
                  {"monitor": rng.uniform(0.9 + 0.03 * (i % 2), 0.99, 3)})
        for i in range(400)
    ]  # fmt: skip
    cfg = ThresholdConfig(targets=[0.05], margin=1.0, fallback="pooled", group_by="agent")
    row = bench.protocol(new, "new", old, cfg, SCHED, splits=20, seed=0)
    assert row["uncalibrated"]["fpr_mean"] > 0.3
    assert row["calibrated"]["fpr_mean"] == pytest.approx(0.05, abs=0.03)
    assert row["calibrated_threshold_from"] == ["agent"]
    assert row["resolved_cal"] + row["resolved_held"] == 200


def test_calibrate_check_splits_by_instance_and_evaluates_the_held_out_part(
    bundle, tmp_path, capsys, caplog
) -> None:
    from monitor.corpus import write_corpus
    from serving.bundle import load_bundle
    from training.cli import main

    runs = new_agent_runs(80)
    for r in runs[60:]:  # a second run of some instances: they must stay on one side
        r.instance_id = runs[r_i := int(r.id.split("/")[1]) - 60].instance_id
        assert r_i < 20
    write_corpus(runs, tmp_path / "corpus")
    out = tmp_path / "b2"
    argv = ["calibrate", "--bundle", str(bundle), "--data", str(tmp_path / "corpus")]
    argv += ["--out", str(out), "--method", "conformal", "--no-progress", "--check", "0.5"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "check: split by instance (seed 0): calibrating on " in printed
    assert "What the monitor would have done on these " in printed
    assert "separation: AUROC " in printed
    assert "group my-agent: stop threshold " in printed
    rec = load_bundle(out).manifest.calibration
    check = rec["data"]["check"]
    assert check["calibration_runs"] + check["held_out_runs"] == 80
    assert rec["groups"]["my-agent"]["runs"] == check["calibration_runs"]  # the checked bundle
    report = json.loads((tmp_path / "b2.check" / "report.json").read_text())
    assert report["monitor"]["runs"] == check["held_out_runs"]
    assert report["threshold"]["my-agent"]["from"] == "agent"
    assert "## In plain words" in (tmp_path / "b2.check" / "report.md").read_text()
    # the split is by instance: no instance on both sides
    from training.data.records import RunRecord
    from training.pipeline.check import split_for_check

    recs = [
        RunRecord(r.id, r.instance_id, r.agent, r.source, bool(r.resolved), np.ones(2))
        for r in runs
    ]
    calib, held = split_for_check(recs, 0.5, seed=0)
    assert not {r.instance_id for r in calib} & {r.instance_id for r in held}
    assert abs(len({r.instance_id for r in held}) - 30) <= 1
    with pytest.raises(ValueError, match="in \\(0, 1\\)"):
        split_for_check(recs, 1.0)
    # --recalibrate-all: checked on half, the bundle written from every run
    out2 = tmp_path / "b3"
    argv2 = ["calibrate", "--bundle", str(bundle), "--data", str(tmp_path / "corpus")]
    argv2 += ["--out", str(out2), "--method", "conformal", "--no-progress", "--check", "0.5"]
    assert main([*argv2, "--recalibrate-all"]) == 0
    rec2 = load_bundle(out2).manifest.calibration
    assert rec2["groups"]["my-agent"]["runs"] == 80
    assert rec2["data"]["check"]["held_out_runs"] == check["held_out_runs"]
    # evaluate --group finds the group wherever the runs sit
    capsys.readouterr()
    ev = ["evaluate", "--bundle", str(out), "--data", str(tmp_path / "corpus"), "--score-data"]
    assert main([*ev, "--group", "my-agent", "--json", str(tmp_path / "ev.json")]) == 0
    got = json.loads((tmp_path / "ev.json").read_text())
    assert got["threshold"]["my-agent"]["from"] == "agent"
    caplog.clear()
    assert main([*ev, "--group", "nobody", "--json", str(tmp_path / "ev2.json")]) == 0
    # this table's fallback is pooled: an unknown group gets the pooled threshold, and says so
    assert "group nobody: stop threshold 0.700 (pooled-unknown-agent)" in capsys.readouterr().out
    said = [r for r in caplog.records if "has no calibrated thresholds" in r.getMessage()]
    assert len(said) == 1  # once, not once per lookup (the summary's, the candidates')
