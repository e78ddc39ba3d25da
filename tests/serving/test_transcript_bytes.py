"""Transcripts sent over HTTP are read from a temporary file: no name may come from its folder
(a source named after it picks no calibrated group), and `serve` listens before it says so."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from serving.server import bind
from serving.transcripts import read_transcript_bytes


@pytest.mark.parametrize(
    "name",
    [
        "claude_code_constructed_loop.jsonl",
        "codex_constructed_exec.jsonl",
        "aider_constructed_history.md",
    ],
)
def test_no_name_comes_from_the_temporary_folder(fixtures_dir: Path, name: str) -> None:
    traj = read_transcript_bytes((fixtures_dir / name).read_bytes(), filename=name)
    for value in (traj.source, traj.run, traj.id, traj.instance_id):
        assert "failfast-" not in value
        assert value not in ("tmp", "T")
    assert traj.source == ""


@pytest.mark.parametrize(
    "name", ["claude_code_constructed_loop.jsonl", "codex_constructed_exec.jsonl"]
)
def test_a_file_read_in_place_is_named_by_its_folder_as_ingest_names_it(
    fixtures_dir: Path, tmp_path: Path, name: str
) -> None:
    """score / watch / the hooks read a live file: its source is the folder ingest gives it,
    so the group calibrated from the same files is the one served."""
    from monitor.reading import read_runs
    from serving.transcripts import read_transcript

    run = tmp_path / "my-project" / "logs" / name  # `logs` names no source
    run.parent.mkdir(parents=True)
    run.write_bytes((fixtures_dir / name).read_bytes())
    assert read_transcript(run).source == "my-project"
    assert [t.source for t in read_runs([tmp_path / "my-project"])] == ["my-project"]


def test_a_default_file_name_gives_no_task(data_dir: Path) -> None:
    path = next(data_dir.glob("swe-bench-lite/coder-gpt4/trajs/*.traj.gz"))
    traj = read_transcript_bytes(path.read_bytes(), filename="transcript.json")
    assert traj.instance_id == ""
    named = read_transcript_bytes(path.read_bytes(), filename=path.name[:-3])
    assert named.instance_id == path.name.split(".")[0]  # the reader's name for it, kept


def test_bind_listens_at_once_and_a_second_bind_fails() -> None:
    sock = bind("127.0.0.1", 0)
    try:
        port = sock.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # queued by the listening socket before any server runs
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            bind("127.0.0.1", port)
    finally:
        sock.close()
