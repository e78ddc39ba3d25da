"""Issue 16, item 6: a symlink loop among runs is one problem, not the end of the ingest."""

from __future__ import annotations

import json
import shutil

from monitor.corpus import ingest
from training.cli import main

RUNS = ("claude_code_constructed_loop.jsonl", "codex_constructed_exec.jsonl")


def test_symlink_loops_are_problems_and_the_rest_is_ingested(fixtures_dir, tmp_path, capsys):
    runs = tmp_path / "runs"
    runs.mkdir()
    for name in RUNS:
        shutil.copy(fixtures_dir / name, runs)
    (runs / "self").symlink_to("self")  # a link to itself
    (runs / "a").symlink_to("b")  # two links pointing at each other
    (runs / "b").symlink_to("a")
    (runs / "dangling").symlink_to("nowhere")
    summary = ingest([runs], tmp_path / "out", progress=False)
    assert summary.runs == 2
    reasons = {p.path.rsplit("/", 1)[1]: p.reason for p in summary.problems}
    assert reasons == {
        "self": "symbolic link loop (skipped)",
        "a": "symbolic link loop (skipped)",
        "b": "symbolic link loop (skipped)",
        "dangling": "broken symbolic link to 'nowhere' (skipped)",
        # `runs` is a container name, never a source: the folder above it names the source
        tmp_path.name: "2 run(s) that no label file covers (no verdict): "
        "0199a213-81c0-7800-8aa1-bbab2a035a53, 9a7e0f44-1d2b-4b3a-8c55-7e6f1a2b3c4d",
    }
    # the CLI: exit 0 (runs were read), the corpus written, the problems listed
    assert main(["ingest", str(runs), "--out", str(tmp_path / "cli")]) == 0
    written = json.loads((tmp_path / "cli" / "summary.json").read_text())
    assert len(written["problems"]) == 5
    assert "symbolic link loop" in capsys.readouterr().out
