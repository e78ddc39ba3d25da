"""docs/USAGE.md, "Your own runs, start to finish": its `bash walkthrough` blocks run as written
on a copy of one source of ../shared/data, with the tiny test bundle (made source-keyed like the
quick bundle) in place of runs/quick/bundle and a free port in place of 8765."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bundle_helpers import free_port, shared_bundle

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Your own runs, start to finish"


def walkthrough_blocks() -> list[str]:
    text = (ROOT / "docs" / "USAGE.md").read_text()
    start = text.index(SECTION)
    end = text.index("\n## ", start + len(SECTION))
    return re.findall(r"```bash walkthrough\n(.*?)```", text[start:end], flags=re.S)


def quick_like(bundle: Path, root: Path) -> Path:
    """A copy of the tiny bundle keyed by source with fallback none and margin 2 (the quick
    config's settings), whose only group is a source the walk-through's runs are not from."""
    copy = root / "bundle"
    shutil.copytree(bundle, copy)
    manifest = json.loads((copy / "monitor.json").read_text())
    th = manifest["thresholds"]
    th |= {"group_by": "source", "fallback": "none", "margin": 2.0, "method": "conformal"}
    th["groups"] = {"swe-agent-gpt4": th["groups"]["mini-swe-agent"]}
    (copy / "monitor.json").write_text(json.dumps(manifest))
    return copy


@pytest.mark.slow  # a pass over 300 real runs: 3-7 minutes on 2 shared cores
def test_walkthrough_runs_as_written(data_dir, tiny_model_dir, tmp_path_factory, tmp_path):
    if not shutil.which("curl") or not shutil.which("jq"):
        pytest.skip("the walk-through's HTTP block needs curl and jq")
    bundle = quick_like(
        shared_bundle(tiny_model_dir, tmp_path_factory), tmp_path_factory.mktemp("q")
    )
    port = str(free_port())
    blocks = walkthrough_blocks()
    assert len(blocks) == 2
    script = "\n".join(blocks)
    assert "BUNDLE=runs/quick/bundle\n" in script
    script = script.replace("BUNDLE=runs/quick/bundle\n", f"BUNDLE={bundle}\n")
    script = script.replace("../shared/data", str(data_dir)).replace("8765", port)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    work = tmp_path / "work"
    work.mkdir()
    p = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    out = p.stdout
    if os.environ.get("FAILFAST_WALKTHROUGH_LOG"):  # keep what it printed, to read the figures
        Path(os.environ["FAILFAST_WALKTHROUGH_LOG"]).write_text(out + "\n--- stderr\n" + p.stderr)
    assert p.returncode == 0, (out[-4000:], p.stderr[-4000:])
    # inspect and ingest
    assert "mini-swe-agent" in out
    assert "300 runs" in out
    # calibrate --check: the split, the held-out report in plain words, the bundle written
    assert "check: split by instance (seed 0): calibrating on " in out
    assert "What the monitor would have done on these " in out
    assert "group my-agent: stop threshold " in out
    assert "recalibrating on all 300 runs (--recalibrate-all)" in out
    assert "recalibrated bundle: my-bundle" in out
    assert (work / "my-bundle.check" / "report.md").is_file()
    assert sorted(p.name for p in (work / "my-bundle.check" / "plots").glob("*.png")) == [
        "roc_by_fraction.png",
        "score_over_steps.png",
        "tokens_saved_vs_fpr.png",
    ]
    card = (work / "my-bundle" / "README.md").read_text()
    assert "keyed by **source**" in card
    assert "my-agent (" in card
    assert "checked first (`--check 0.5`)" in card
    # score --source finds the calibrated group
    line = next(x for x in out.splitlines() if x.startswith("run="))
    assert "source=my-agent" in line
    assert "group=my-agent" in line
    assert "(agent)" in line
    # serve: the listening line, and the step answers
    assert f"failfast serve: listening on http://127.0.0.1:{port}" in out
    answers = [json.loads(x) for x in out.splitlines() if x.startswith('{"action"')]
    assert len(answers) >= 4
    assert all(a["action"] in ("continue", "warn", "stop") for a in answers)
