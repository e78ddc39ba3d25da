"""What a user points ingest at: a folder of label files beside a folder of runs labels them
(`ingest runs/ labels/`, as USAGE shows), a run a covering label file does not name is listed,
a path with no run leaves the previous corpus whole, an unusable `--labels` file is an error,
a corpus inside the walk is not read as transcripts, and one source of several agents is
warned about."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from monitor.corpus import ingest, load_corpus
from training.cli import main

IDS = ["astropy__astropy-12907", "astropy__astropy-14182", "astropy__astropy-14365"]


def _copy_runs(data_dir: Path, folder: Path) -> Path:
    """`folder` with the SWE-agent runs of IDS copied in."""
    folder.mkdir()
    for iid in IDS:
        src = data_dir / "swe-bench-lite" / "swe-agent-gpt4" / "cost_2_1" / f"{iid}.traj.gz"
        shutil.copy(src, folder / src.name)
    return folder


@pytest.fixture
def layout(data_dir: Path, tmp_path: Path) -> Path:
    _copy_runs(data_dir, tmp_path / "my-runs")
    labels = tmp_path / "my-labels"
    labels.mkdir()
    report = {"resolved_ids": [IDS[0]], "unresolved_ids": [IDS[1]]}  # IDS[2] not named
    (labels / "report.json").write_text(json.dumps(report))
    return tmp_path


def test_a_labels_folder_beside_the_runs_labels_them(
    layout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = layout / "corpus"
    rc = main(["ingest", str(layout / "my-runs"), str(layout / "my-labels"), "--out", str(out)])
    assert rc == 0
    got = {r.instance_id: r.resolved for r in load_corpus(out)}
    assert got == {IDS[0]: True, IDS[1]: False, IDS[2]: None}
    printed = capsys.readouterr()
    assert (
        "1 run(s) that the label files here do not name (no verdict)" in printed.out + printed.err
    )
    # the same again with nothing readable: the corpus stays as it was
    assert main(["ingest", str(layout / "typo"), "--out", str(out)]) == 2
    assert "left as it was" in capsys.readouterr().err
    assert len(load_corpus(out)) == 3


def test_an_out_folder_holding_other_files_or_the_runs_is_refused(layout: Path, capsys) -> None:
    """`--out` that would replace the user's runs or another tool's files: exit 2, nothing lost."""
    runs = layout / "my-runs"
    before = sorted(p.name for p in runs.iterdir())
    assert main(["ingest", str(runs), "--out", str(runs)]) == 2
    assert "would replace them" in capsys.readouterr().err
    other = layout / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine\n")
    assert main(["ingest", str(runs), "--out", str(other)]) == 2
    assert "not empty and not a corpus" in capsys.readouterr().err
    assert (other / "notes.txt").read_text() == "mine\n"
    assert main(["ingest", str(runs / IDS[0]) + ".traj.gz", "--out", str(layout)]) == 2
    (layout / "afile").write_text("x\n")
    assert main(["ingest", str(runs), "--out", str(layout / "afile")]) == 2
    assert "--out is a file" in capsys.readouterr().err
    assert sorted(p.name for p in runs.iterdir()) == before
    # an empty folder, and a corpus written before, are replaced as ever
    (layout / "empty").mkdir()
    assert main(["ingest", str(runs), "--out", str(layout / "empty")]) == 0
    assert main(["ingest", str(runs), "--out", str(layout / "empty")]) == 0
    # nothing readable and no --out before: nothing was written, and it says so
    capsys.readouterr()
    assert main(["ingest", str(layout / "typo"), "--out", str(layout / "new")]) == 2
    assert "nothing was written" in capsys.readouterr().err
    assert not (layout / "new").exists()


def test_an_unusable_labels_file_is_an_error(layout: Path, capsys) -> None:
    argv = ["ingest", str(layout / "my-runs"), "--labels", str(layout / "nope.json")]
    assert main([*argv, "--out", str(layout / "c")]) == 2
    assert "nope.json" in capsys.readouterr().err
    assert not (layout / "c").exists()


def test_a_corpus_inside_the_walk_is_not_read_as_transcripts(layout: Path) -> None:
    ingest([layout / "my-runs"], layout / "my-runs" / "corpus", progress=False)
    again = ingest([layout / "my-runs"], layout / "my-runs" / "corpus", progress=False)
    assert again.runs == 3
    inside = str(layout / "my-runs" / "corpus")
    assert not [p for p in again.problems if p.path.startswith(inside)]


def test_one_source_of_several_agents_is_warned_about(data_dir: Path, tmp_path: Path) -> None:
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(
        next((data_dir / "swe-bench-lite" / "swe-agent-gpt4" / "cost_2_1").iterdir()), mixed
    )
    mini = next((data_dir / "swe-bench-verified" / "mini-swe-agent-gemini-3-pro").glob("trajs/*/*"))
    shutil.copy(mini, mixed)
    summary = ingest([mixed], tmp_path / "c", progress=False)
    assert any("holds runs of 2 agents" in w for w in summary.warnings)


def test_commands_reading_raw_runs_say_which_files_they_skipped(
    layout: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from training.data.runs import load_runs

    bad = layout / "my-runs" / "broken.traj"
    bad.write_bytes(b"\x00\x01 not a transcript")
    with caplog.at_level(logging.WARNING):
        runs = load_runs([layout / "my-runs"], labels=[layout / "my-labels" / "report.json"])
    assert len(runs) == 3
    assert f"{bad}:" in caplog.text


def test_a_run_renamed_through_a_link_gets_no_default_verdict(layout: Path) -> None:
    """The link's target folder has plain lists (every unnamed run failed): the run reached
    under another name is not one they left out, so it gets no verdict rather than a failure."""
    real = layout / "my-runs"
    (real / "final_report.json").write_text(json.dumps({"resolved": [IDS[0]]}))
    links = layout / "linked"
    links.mkdir()
    (links / "renamed.traj.gz").symlink_to(real / f"{IDS[0]}.traj.gz")
    (links / f"{IDS[1]}.traj.gz").symlink_to(real / f"{IDS[1]}.traj.gz")
    ingest([links, real], layout / "c", progress=False)  # the real folder's labels are found
    got = {r.instance_id: r.resolved for r in load_corpus(layout / "c") if "linked" in r.path}
    assert got == {"renamed": None, IDS[1]: False}  # the same name: the default still applies


def test_a_link_to_a_folder_above_the_given_one_is_a_loop(layout: Path) -> None:
    (layout / "my-runs" / "up").symlink_to(layout)  # above the path given: not walked into
    summary = ingest([layout / "my-runs"], layout / "c", progress=False)
    assert summary.runs == 3
    assert any("symbolic link loop" in p.reason for p in summary.problems)


def test_a_folder_holding_one_run_reads_as_it(data_dir: Path, tmp_path: Path) -> None:
    from monitor.errors import TranscriptError
    from monitor.reading import read_trajectory

    folder = next((data_dir / "swe-bench-verified" / "mini-swe-agent-gemini-3-pro").glob("trajs/*"))
    assert read_trajectory(folder).instance_id == folder.name  # its <instance>.traj.json
    with pytest.raises(TranscriptError, match="a folder of 3 runs"):
        read_trajectory(_copy_runs(data_dir, tmp_path / "three"))


def test_inspect_finds_a_submission_results_folder_as_ingest_does(data_dir: Path, capsys) -> None:
    """`<submission>/results/results.json` labels `<submission>/trajs/<id>`: ingest joins it,
    and inspect, which looks for label files near the run, now finds it too."""
    sub = data_dir / "swe-bench-verified" / "openhands-claude-3.5-sonnet"
    run = sorted((sub / "trajs").iterdir())[0]
    assert main(["inspect", str(run), "--steps", "0"]) == 0
    label = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("label:"))
    assert "results/results.json" in label
    assert "unknown" not in label


def test_a_label_file_in_a_sibling_folder_says_how_to_reach_its_runs(
    data_dir: Path, tmp_path: Path, capsys
) -> None:
    proj = tmp_path / "proj"
    proj.mkdir()
    _copy_runs(data_dir, proj / "runs")
    (proj / "labels").mkdir()
    (proj / "labels" / "results.json").write_text(json.dumps({"resolved_ids": IDS[:2]}))
    assert main(["ingest", str(proj), "--out", str(tmp_path / "c")]) == 0
    err = capsys.readouterr()
    said = err.out + err.err
    assert "2 of them are runs outside" in said
    assert "pass it with --labels" in said
    argv = ["ingest", str(proj / "runs"), "--labels", str(proj / "labels" / "results.json")]
    assert main([*argv, "--out", str(tmp_path / "c")]) == 0
    got = {r.instance_id: r.resolved for r in load_corpus(tmp_path / "c")}
    assert got == {IDS[0]: True, IDS[1]: True, IDS[2]: None}  # named by neither list


def test_a_sibling_submission_labelled_by_its_own_file_gets_no_hint(
    data_dir: Path, tmp_path: Path, capsys
) -> None:
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        _copy_runs(data_dir, tmp_path / sub / "runs")
        (tmp_path / sub / "results.json").write_text(json.dumps({"resolved_ids": IDS}))
    assert (
        main(["ingest", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "c")])
        == 0
    )
    got = capsys.readouterr()
    assert "runs outside" not in got.out + got.err
    assert all(r.resolved for r in load_corpus(tmp_path / "c"))
