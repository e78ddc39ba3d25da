"""Issue 25, item 6 and the DELETE race: client-chosen names cannot add a line to /metrics, a
report or the terminal, the API refuses unusable names with a 422 saying why, a decision log
with hostile names and malformed lines calibrates (line-numbered problems, exit 0) or exits 2,
never with a traceback; a verdict racing the DELETE of its session is taken, never a 404."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

from monitor.escape import check_name, md, prom_label, visible
from monitor.policy import PolicyConfig
from monitor.scripted import ScriptedScorer

pytest.importorskip("httpx")
from fastapi.testclient import TestClient  # noqa: E402

from serving.app import create_app  # noqa: E402
from serving.limits import ServiceConfig  # noqa: E402

EVIL = 'evil"} 0\nfailfast_fpr_drift{group="legit"} 0\n# TYPE x gauge\n\x1b[2J'
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:\\.|[^"\\\n])*"'
SERIES = re.compile(rf"^[a-zA-Z_:][a-zA-Z0-9_:]*(?:\{{{LABEL}(?:,{LABEL})*\}})? \S+$")


def assert_exposition(text: str) -> None:
    """Every line a comment or one well-formed series; nothing forged."""
    for line in text.splitlines():
        assert line.startswith("# ") or SERIES.match(line), line
        assert not line.startswith('failfast_fpr_drift{group="legit"}'), line
        assert not line.startswith("# TYPE x"), line


def test_escape_rules():
    assert prom_label('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    assert visible("run\n\x1b[2Jproblem: x") == "run\\x0a\\x1b[2Jproblem: x"
    assert visible("\u202eevil") == "\\u202eevil"
    assert (
        visible("mini-swe-agent / django__django-11099") == "mini-swe-agent / django__django-11099"
    )
    assert "\n" not in md(EVIL)
    assert md("a|b`c<d>") == "a\\|b\\`c&lt;d&gt;"
    assert check_name("mini-swe-agent") is None
    assert "U+000A" in (check_name("a\nb") or "")
    assert "over the limit" in (check_name("x" * 201) or "")


def test_feedback_and_decision_counters_escape_their_labels():
    from monitor.decision_log import DecisionLog
    from monitor.feedback import Feedback
    from monitor.types import Decision, Flag

    fb = Feedback(0.05, [EVIL, "mini-swe-agent"])
    dlog = DecisionLog()
    dlog.record(Decision("stop", EVIL, step=3, flags=[Flag(EVIL, 3, {})]))
    assert_exposition(fb.prometheus_text() + dlog.prometheus_text())


def client(tmp_path: Path, **cfg) -> TestClient:
    scorer = ScriptedScorer([0.1, 0.2, 0.3], threshold=0.5)
    scorer.policy = {}  # type: ignore[attr-defined]
    config = ServiceConfig(decision_log=str(tmp_path / "decisions.jsonl"), **cfg)
    return TestClient(create_app(scorer, config, PolicyConfig(min_steps=2, persist=1)))


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({"agent": "a\nb"}, "agent: Value error, not a usable name: contains the control character U+000A"),
        ({"source": "s\x1b[2J"}, "source: Value error, not a usable name: contains the control character U+001B"),
        ({"agent": "x" * 201}, "agent: Value error, not a usable name: 201 characters, over the limit of 200"),
        ({"run": "r\r"}, "run: Value error, not a usable run id: contains the control character U+000D"),
    ],
)  # fmt: skip
def test_unusable_names_are_422_saying_why(tmp_path, body, why):
    c = client(tmp_path)
    r = c.post("/v1/sessions", json={"task": "t", **body})
    assert r.status_code == 422
    assert why in r.json()["error"]
    r = c.post("/v1/score", json={"steps": [{}], **{k: v for k, v in body.items() if k != "run"}})
    assert r.status_code == (422 if "run" not in body else 200)


def test_a_quote_in_a_name_is_accepted_and_metrics_stay_well_formed(tmp_path):
    c = client(tmp_path)
    r = c.post("/v1/sessions", json={"task": "t", "agent": 'a"} 1', "run": 'r"x'})
    assert r.status_code == 201
    sid = r.json()["session_id"]
    c.post(f"/v1/sessions/{sid}/steps", json={"action": "ls"})
    assert c.delete(f"/v1/sessions/{sid}").status_code == 204
    assert_exposition(c.get("/metrics").text)


def test_a_verdict_racing_delete_is_taken_not_404(tmp_path, monkeypatch):
    import time

    from monitor.session import Session

    end = Session.end

    def slow_end(self, *a, **kw):  # widen the window between the DELETE and its end record
        time.sleep(0.05)
        return end(self, *a, **kw)

    monkeypatch.setattr(Session, "end", slow_end)
    c = client(tmp_path)
    answers: list[tuple[int, int]] = []
    for _ in range(30):
        sid = c.post("/v1/sessions", json={"task": "t", "agent": "a"}).json()["session_id"]
        c.post(f"/v1/sessions/{sid}/steps", json={"action": "ls"})
        go = threading.Barrier(2)
        got: dict[str, int] = {}

        def delete(sid: str = sid, go: threading.Barrier = go, got: dict = got) -> None:
            go.wait()
            got["delete"] = c.delete(f"/v1/sessions/{sid}").status_code

        def verdict(sid: str = sid, go: threading.Barrier = go, got: dict = got) -> None:
            go.wait()
            got["verdict"] = c.post(
                f"/v1/sessions/{sid}/verdict", json={"resolved": True}
            ).status_code

        threads = [threading.Thread(target=delete), threading.Thread(target=verdict)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        answers.append((got["delete"], got["verdict"]))
    assert set(answers) == {(204, 200)}
    # each run counted once, with its verdict, in the decision log and the feedback
    status = c.get("/v1/status").json()
    groups = status["groups"]
    assert sum(g["resolved"] for g in groups.values()) == 30


# --- hostile names through `failfast calibrate --data decisions.jsonl` into a bundle ----------


@pytest.fixture(scope="module")
def bundle(tiny_model_dir, tmp_path_factory):
    pytest.importorskip("torch")
    from tests.bundle_helpers import shared_bundle

    return shared_bundle(tiny_model_dir, tmp_path_factory)


def _log(path: Path, agent: str, n: int, bad_lines: bool) -> Path:
    lines = [json.dumps({"event": "start", "run": "", "graphs": {}})]
    for i in range(n):
        resolved = i % 5 != 0
        scores = [0.1, 0.2, 0.15] if resolved else [0.2, 0.8, 0.9]
        end = {"event": "end", "run": f"r{i}", "agent": agent, "scores": scores}
        lines.append(json.dumps(end | {"tokens": [5, 5, 5], "stop_step": None, "shadow": True}))
        lines.append(json.dumps({"event": "verdict", "run": f"r{i}", "resolved": resolved}))
    if bad_lines:
        lines += [
            json.dumps({"event": "end", "run": "x1", "agent": "a", "tokens": [None], "scores": [0.1]}),
            json.dumps({"event": "end", "run": "x2", "agent": "a", "scores": 5}),
            json.dumps({"event": "end", "run": "x3", "agent": "a", "scores": [-1e300]}),
            json.dumps({"event": "end", "run": "x4", "agent": "a", "scores": [float("nan")]}),
            json.dumps({"event": "verdict", "run": "x1", "resolved": "yes"}),
            json.dumps({"event": "end", "run": "r1", "agent": agent, "scores": [0.1]}),  # again
            "not json",
            "[1, 2]",
        ]  # fmt: skip
    data = ("\n".join(lines) + "\n").encode()
    if bad_lines:
        data += b'{"event": "end", "run": "\xff\xfe"}\n'
    path.write_bytes(data)
    return path


def test_hostile_decision_log_calibrates_with_line_numbered_problems(bundle, tmp_path, capsys):
    from serving.bundle import load_bundle
    from serving.scorer import Scorer
    from training.cli import main
    from training.data.decisions import runs_from_logs

    log = _log(tmp_path / "d.jsonl", EVIL, 150, bad_lines=True)
    got = runs_from_logs([log])
    where = {p.line: p.reason for p in got.problems}
    n = 1 + 2 * 150  # the good lines
    assert "tokens.0" in where[n + 1]
    assert "must be a list of scores" in where[n + 2]
    assert "outside [0, 1]" in where[n + 3]
    assert "outside [0, 1]" in where[n + 4]  # NaN
    assert "resolved" in where[n + 5]
    assert "a second end record of 'r1'" in where[n + 6]
    assert "not JSON" in where[n + 7]
    assert "not a JSON object" in where[n + 8]
    assert "not valid UTF-8" in where[n + 9]
    out = tmp_path / "b2"
    argv = ["calibrate", "--bundle", str(bundle), "--data", str(log), "--out", str(out)]
    assert main([*argv, "--method", "conformal"]) == 0
    err = capsys.readouterr().err
    assert f"problem: {log}:{n + 1}: bad end record: tokens.0" in err
    assert "Traceback" not in err
    b2 = load_bundle(out)
    assert EVIL in b2.thresholds.groups  # the name is kept as it is; only shown escaped
    for line in (out / "README.md").read_text().splitlines():
        assert not line.startswith(("failfast_fpr_drift", "# TYPE x"))
        assert "\x1b" not in line
    c = TestClient(create_app(Scorer.load(out, threads=1)))
    assert_exposition(c.get("/metrics").text)


def test_a_decision_log_with_nothing_usable_exits_2_without_a_traceback(bundle, tmp_path, capsys):
    from training.cli import main

    log = tmp_path / "d.jsonl"
    log.write_bytes(
        b'{"event": "start", "run": "", "graphs": {}}\n'
        b'{"event": "end", "run": "a", "scores": 5}\n'
        b'{"event": "end", "run": "b", "tokens": [null], "scores": [0.5]}\n\xff\n'
    )
    argv = ["calibrate", "--bundle", str(bundle), "--data", str(log), "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"problem: {log}:2: bad end record: scores" in err
    assert f"problem: {log}:4: not valid UTF-8" in err
    assert "error: " in err
    assert "Traceback" not in err
    assert not (tmp_path / "o").exists()
