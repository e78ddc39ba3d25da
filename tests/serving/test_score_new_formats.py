"""An OpenHands completion log and a Moatless run score through `failfast score` and over HTTP,
with the same scores as the Python scorer (tiny bundle)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.bundle_helpers import serve, shared_bundle

httpx = pytest.importorskip("httpx")
pytest.importorskip("torch")

IID = "astropy__astropy-12907"


@pytest.fixture(scope="module")
def bundle(tiny_model_dir, tmp_path_factory):
    return shared_bundle(tiny_model_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def server(bundle, tmp_path_factory):
    log = tmp_path_factory.mktemp("log") / "server.log"
    yield from serve(bundle, log)


def _files(data_dir: Path) -> dict[str, Path]:
    oh = data_dir / "swe-bench-verified" / "openhands-claude-3.5-sonnet" / "trajs" / IID
    return {
        "openhands": next(oh.glob("*.json.gz")),
        "moatless": data_dir
        / "swe-bench-lite"
        / "moatless-gpt4o-0617"
        / "trajs"
        / f"{IID}.json.gz",
    }


@pytest.mark.parametrize("agent", ["openhands", "moatless"])
def test_score_cli_and_http(agent, bundle, server, data_dir, capsys):
    from serving.scorer import Scorer
    from serving.transcripts import read_transcript
    from training.cli import main

    path = _files(data_dir)[agent]
    traj = read_transcript(path)
    assert traj.agent == agent
    want = Scorer.load(bundle).score_run(traj)
    assert len(want) == len(traj.steps) > 3

    assert main(["score", "--bundle", str(bundle), str(path), "--json"]) in (0, 1)
    cli = json.loads(capsys.readouterr().out)
    assert cli["scores"] == pytest.approx(want, abs=1e-5)

    body = {"transcript": base64.b64encode(path.read_bytes()).decode(), "encoding": "base64"}
    r = httpx.post(f"{server}/v1/score", json=body, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["n_steps"] == len(traj.steps)
    assert r.json()["scores"] == pytest.approx(want, abs=1e-5)


def test_evaluate_with_labels_given_explicitly(bundle, data_dir, tmp_path, capsys):
    """`failfast evaluate --labels FILE`: runs whose label file is elsewhere are evaluated."""
    import shutil

    from training.cli import main

    trajs = data_dir / "swe-bench-verified" / "openhands-claude-3.5-sonnet" / "trajs"
    ids = sorted(p.name for p in trajs.iterdir())[:8]
    for iid in ids:
        shutil.copytree(trajs / iid, tmp_path / "sub" / "trajs" / iid)
    labels = tmp_path / "elsewhere.json"
    labels.write_text(json.dumps({"resolved_ids": ids[:4], "unresolved_ids": ids[4:]}))
    args = ["evaluate", "--bundle", str(bundle), "--data", str(tmp_path / "sub"), "--score-data"]
    with pytest.raises(SystemExit, match="--labels FILE"):
        main(args)
    assert main([*args, "--labels", str(labels), "--json", str(tmp_path / "r.json")]) == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["monitor"]["runs"], report["monitor"]["resolved_runs"]) == (8, 4)
