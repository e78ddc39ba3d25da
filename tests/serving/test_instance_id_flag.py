"""`--instance-id` on the commands that read a transcript (score, watch, supervise, the Claude
Code hook): the task's id a bundle with a table of known tasks looks up, over the transcript's
own (a Claude Code or Codex transcript names no benchmark task)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from monitor.decision_log import DecisionLog
from monitor.policy import PolicyConfig
from monitor.scripted import ScriptedScorer
from monitor.session import Monitor
from serving.scorer import Scorer
from serving.watch import TranscriptWatch
from tests.bundle_helpers import claude_event, shared_bundle
from tests.serving.test_choice import _bundle
from tests.serving.test_known_tasks import _known_candidates

pytest.importorskip("torch")

LOOP = "claude_code_constructed_loop.jsonl"
KNOWN = "inst-3"  # in the helper table: 4 runs by other agents than mini-swe-agent


@pytest.fixture(scope="module")
def known_bundle(tiny_model_dir: Path, tmp_path_factory) -> Path:
    base = shared_bundle(tiny_model_dir, tmp_path_factory)
    cands = _known_candidates(Scorer.load(base), "monitor_prior")  # unknown tasks: signals_lr
    return _bundle(tmp_path_factory.mktemp("known"), base, cands)


def test_score_serves_the_named_task_by_the_known_choice(
    known_bundle: Path, fixtures_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from training.cli import main

    argv = ["score", "--bundle", str(known_bundle), "--threads", "1", "--json"]
    argv += ["--agent", "mini-swe-agent", str(fixtures_dir / LOOP)]

    def scored(*extra: str) -> dict[str, Any]:
        assert main([*argv, *extra]) in (0, 1)
        return json.loads(capsys.readouterr().out)

    assert scored()["scorer"] == "signals_lr"  # the transcript's own id: no known task
    assert scored("--instance-id", KNOWN)["scorer"] == "monitor_prior"
    assert scored("--instance-id", "never-run")["scorer"] == "signals_lr"


def test_the_hook_looks_the_named_task_up_locally_and_sends_it_to_the_service(
    known_bundle: Path, fixtures_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from serving.hooks import claude_code
    from serving.hooks.claude_code import ServiceError, decide, read_run, run_hook

    event = claude_event(fixtures_dir / LOOP)
    assert read_run(event, instance_id=KNOWN).instance_id == KNOWN
    scorer = Scorer.load(known_bundle, threads=1)
    plain = decide(event, scorer, agent="mini-swe-agent")
    known = decide(event, scorer, agent="mini-swe-agent", instance_id=KNOWN)
    assert known.threshold == pytest.approx(0.5)  # the known choice's own threshold
    assert plain.threshold != pytest.approx(0.5)
    sent: list[dict[str, Any]] = []

    def post(request: Any, timeout: float) -> bytes:
        sent.append(json.loads(request.data))
        raise ServiceError("test: no service")

    monkeypatch.setattr(claude_code, "_post_within", post)
    assert run_hook(event, url="http://127.0.0.1:9", instance_id=KNOWN) == {}
    assert run_hook(event, url="http://127.0.0.1:9") == {}
    assert sent[0]["instance_id"] == KNOWN
    assert "instance_id" not in sent[1]  # a session uuid is not sent as a task id


class _Opener:
    """Records what each session was opened with."""

    def __init__(self) -> None:
        self.monitor = Monitor(
            PolicyConfig(stuck={"enabled": False}),
            scorer=ScriptedScorer([0.1]),
            log=DecisionLog(io.StringIO()),
        )
        self.opened: list[dict[str, Any]] = []

    def start(self, task: str = "", agent: str | None = None, **kw: Any) -> Any:
        self.opened.append(kw)
        return self.monitor.start(task, agent, **kw)


def test_watch_opens_each_run_with_the_named_task(fixtures_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text((fixtures_dir / LOOP).read_text())
    for named, want in ((KNOWN, KNOWN), (None, "run")):  # the reader: the file stem
        opener = _Opener()
        watch = TranscriptWatch(path, opener, fmt="claude-code", instance_id=named)
        assert len(watch.poll()) == 7
        assert opener.opened[0]["instance_id"] == want


def test_supervise_passes_the_named_task_to_its_watch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from training.cli import main

    got: list[Any] = []

    class Recorder:
        def __init__(self, cfg: Any, monitor: Any) -> None:
            got.append(cfg)

        def run(self) -> int:
            return 0

    monkeypatch.setattr("serving.supervise.Supervisor", Recorder)
    monkeypatch.setattr("training.cli.supervise._local_monitor", lambda args: None)
    argv = ["supervise", "--bundle", "b", "--transcript", str(tmp_path / "t.jsonl")]
    argv += ["--workdir", str(tmp_path), "--instance-id", KNOWN, "--", "true"]
    assert main(argv) == 0
    assert got[0].instance_id == KNOWN
