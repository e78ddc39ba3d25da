"""Ingest: finding runs + labels, corpus round trip, bad input, and the full-corpus counts."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

from monitor.corpus import ingest, is_corpus, load_corpus
from monitor.reading import Problem, read_runs
from training.cli import main

SWEA = "swe-bench-lite/swe-agent-gpt4/cost_2_2"
ACR = "swe-bench-lite/autocoderover-gpt4/acr-run-1/applicable_patch"
ACR_TASK = "astropy__astropy-12907_2024-04-06_13-51-50"
MINI = "swe-bench-verified/mini-swe-agent-gemini-3-pro"
SWEA_IDS = ("django__django-11001", "django__django-11019", "astropy__astropy-12907")


@pytest.fixture
def small_tree(data_dir: Path, tmp_path: Path) -> Path:
    """Three SWE-agent runs (one resolved), one ACR run and one mini-swe-agent run, with labels."""
    root = tmp_path / "data"
    run = root / "swe-agent-gpt4" / "cost_2_2"
    run.mkdir(parents=True)
    for iid in SWEA_IDS:
        shutil.copy(data_dir / SWEA / f"{iid}.traj.gz", run)
    (run / "final_report.json").write_text(
        json.dumps(
            {"resolved": 1, "resolved_per_project": {"django/django": ["django__django-11001"]}}
        )
    )
    acr = root / "autocoderover-gpt4" / "acr-run-1"
    shutil.copytree(data_dir / ACR / ACR_TASK, acr / "applicable_patch" / ACR_TASK)
    (acr / "report.json").write_text(
        json.dumps({"resolved": [], "generated": ["astropy__astropy-12907"]})
    )
    mini = root / "mini-swe-agent-gemini-3-pro"
    iid = "astropy__astropy-12907"
    (mini / "trajs" / iid).mkdir(parents=True)
    shutil.copy(data_dir / MINI / "trajs" / iid / f"{iid}.traj.json.gz", mini / "trajs" / iid)
    shutil.copy(data_dir / MINI / "results_summary.json.gz", mini)  # names 299 others: a problem
    return root


def test_ingest_small_tree_and_round_trip(small_tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "corpus"
    summary = ingest([small_tree], out, progress=False)
    assert is_corpus(out)
    written = json.loads((out / "summary.json").read_text())
    swe = written["sources"]["swe-agent-gpt4"]
    assert (swe["runs"], swe["instances"], swe["resolved"], swe["unresolved"], swe["unknown"]) == (
        3,
        3,
        1,
        2,
        0,
    )
    acr = written["sources"]["autocoderover-gpt4"]
    assert (acr["runs"], acr["resolved"], acr["unresolved"]) == (1, 0, 1)
    mini = written["sources"]["mini-swe-agent-gemini-3-pro"]
    assert (mini["runs"], mini["resolved"]) == (1, 1)
    reasons = [p["reason"] for p in written["problems"]]
    assert len(reasons) == 1
    assert reasons[0].startswith("names 299 instance(s) with no run here")
    assert summary.runs == 5

    runs = {t.id: t for t in load_corpus(out)}
    assert set(runs) == {
        *(f"swe-agent-gpt4/cost_2_2/{i}" for i in SWEA_IDS),
        "autocoderover-gpt4/acr-run-1/astropy__astropy-12907",
        "mini-swe-agent-gemini-3-pro/astropy__astropy-12907",
    }
    original = {t.id: t for t in read_runs([small_tree])}
    for rid, t in runs.items():
        assert t.to_dict() == original[rid].to_dict()
    assert runs["swe-agent-gpt4/cost_2_2/django__django-11001"].resolved is True
    # The same folder is a Hugging Face `datasets` Dataset with typed steps.
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_from_disk(str(out))
    row = ds.filter(lambda r: r["id"] == "mini-swe-agent-gemini-3-pro/astropy__astropy-12907")[0]
    mini = runs["mini-swe-agent-gemini-3-pro/astropy__astropy-12907"]
    assert row["resolved"] is True
    assert len(row["steps"]) == len(mini.steps)
    assert row["steps"][1]["action"] == mini.steps[1].action
    assert row["steps"][1]["tokens_in"] == mini.steps[1].tokens_in


@pytest.fixture
def bad_tree(data_dir: Path, tmp_path: Path) -> Path:
    """A folder with one good run and every kind of bad input the issue lists."""
    root = tmp_path / "bad" / "src" / "run1"
    root.mkdir(parents=True)
    good = gzip.decompress((data_dir / SWEA / "django__django-11001.traj.gz").read_bytes())
    (root / "django__django-11001.traj").write_bytes(good)
    (root / "django__django-11001.traj.gz").write_bytes(gzip.compress(good))  # same run twice
    (root / "truncated.traj").write_bytes(good[:5000])
    (root / "empty.json").write_bytes(b"")
    (root / "blob.bin").write_bytes(bytes(range(256)) * 8)
    (root / "unknown.json").write_text(json.dumps({"hello": "world", "items": [1, 2]}))
    (root / "final_report.json").write_text(
        json.dumps(
            {"resolved": ["django__django-11001", "ghost__ghost-1"], "applied": ["ghost__ghost-2"]}
        )
    )
    return root.parent.parent


def test_bad_input_is_listed_and_ingest_finishes(
    bad_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["ingest", str(bad_tree), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    written = json.loads((out / "summary.json").read_text())
    problems = {Path(p["path"]).name: p["reason"] for p in written["problems"]}
    assert set(problems) == {
        "django__django-11001.traj.gz",
        "truncated.traj",
        "empty.json",
        "blob.bin",
        "unknown.json",
        "final_report.json",
    }
    assert problems["django__django-11001.traj.gz"].startswith(
        "duplicate run src/run1/django__django-11001"
    )
    assert "invalid JSON" in problems["truncated.traj"]
    assert problems["empty.json"] == "empty file"
    assert "binary" in problems["blob.bin"]
    assert problems["unknown.json"].startswith("unknown format")
    assert "ghost__ghost-1" in problems["final_report.json"]
    assert "ghost__ghost-2" in problems["final_report.json"]
    for name, reason in problems.items():
        assert f"{name}: {reason}" in printed
    src = written["sources"]["src"]
    assert (src["runs"], src["resolved"], src["problems"]) == (1, 1, 6)
    assert main(["ingest", str(bad_tree), "--out", str(out), "--strict"]) == 1


def test_ingest_of_nothing_readable_fails(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "x.json").write_text("{")
    assert main(["ingest", str(tmp_path / "in"), "--out", str(tmp_path / "out")]) == 2


def test_inspect(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["inspect", str(data_dir / SWEA / "django__django-11001.traj.gz"), "--steps", "2"])
        == 0
    )
    out = capsys.readouterr().out
    assert "format:   swe-agent" in out
    assert "label:    resolved" in out
    assert "tokens:   55080 (in 53623, out 1457; estimated)" in out
    assert main(["inspect", str(data_dir / ACR / ACR_TASK), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["format"], d["resolved"], len(d["steps"])) == ("autocoderover", False, 6)
    assert main(["inspect", str(data_dir / "README.md")]) == 2


def _readme_table(data_dir: Path) -> dict[str, tuple[int, int, int]]:
    """folder -> (runs, instances, resolved) from the data README's table. A row may list two
    folders (`a/, b/`) with `300 + 300` runs and `70, 74` resolved."""
    rows = {}
    for line in (data_dir / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 7 or not cells[0].startswith("swe-bench-"):
            continue
        folders = [
            f.strip().rstrip("/").split("/")[0] for f in cells[0].split("/", 1)[1].split(",")
        ]
        runs = [int(x) for x in re.split(r"\s*\+\s*", cells[-4])]
        resolved = [int(x) for x in re.split(r"\s*,\s*", cells[-2])]
        for i, folder in enumerate(folders):
            rows[folder] = (runs[i], int(cells[-3]), resolved[i])
    return rows


SOURCES = 8
RUNS = 4078
RESOLVED = 289 + 89 + 80 + 223 + 70 + 74 + 80 + 120


def test_all_data_matches_readme_counts(data_dir: Path) -> None:
    expected = _readme_table(data_dir)
    assert len(expected) == SOURCES
    assert sum(v[0] for v in expected.values()) == RUNS
    problems: list[Problem] = []
    got: dict[str, list] = {}
    with pytest.warns(UserWarning, match="trailing commas"):
        runs = list(read_runs([data_dir], problems=problems))
    for t in runs:
        g = got.setdefault(t.source, [0, set(), 0, 0])
        g[0] += 1
        g[1].add(t.instance_id)
        g[2] += t.resolved is True
        g[3] += t.resolved is None
    assert {k: (v[0], len(v[1]), v[2]) for k, v in got.items()} == expected
    assert all(v[3] == 0 for v in got.values())  # every run has a verdict
    # The problems: CodeR's results.json names instances with no trajectory, and four CodeR
    # transcripts hold fewer than half the calls their own totals count (kept, and said).
    assert sorted(Path(p.path).name for p in problems) == [
        "django__django-14017.traj.gz",
        "django__django-15347.traj.gz",
        "pylint-dev__pylint-7080.traj.gz",
        "results.json.gz",
        "sympy__sympy-18621.traj.gz",
    ]


@pytest.mark.slow
def test_full_ingest_command(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "corpus"
    assert main(["ingest", str(data_dir), "--out", str(out)]) == 0
    written = json.loads((out / "summary.json").read_text())
    assert written["runs"] == RUNS
    assert any("trailing commas" in w for w in written["warnings"])
    runs = load_corpus(out)
    assert len(runs) == RUNS
    assert sum(t.resolved is True for t in runs) == RESOLVED
    datasets = pytest.importorskip("datasets")
    ds = datasets.load_from_disk(str(out))
    assert ds.num_rows == RUNS
    assert sum(r is True for r in ds["resolved"]) == RESOLVED
    assert sorted(set(ds["source"])) == sorted(written["sources"])
