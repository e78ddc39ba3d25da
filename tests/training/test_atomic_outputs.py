"""Issue 25, items 1-2: a writer killed with SIGKILL mid-write (ingest, calibrate, export) leaves
the previous output loadable, and the rerun succeeds with no clean-up.

Each writer runs in a subprocess with one function patched to leave a file half-written and
then SIGKILL its own process: the kill lands mid-write, every time, on the real code path.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from monitor.atomic import atomic_dir, recover

ROOT = Path(__file__).resolve().parents[2]

HALF_THEN_KILL = """
import os, signal
def half_then_kill(path):
    path = str(path)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def killed(patch: str, argv: list[str]) -> subprocess.CompletedProcess:
    """Run `failfast ARGV` in a subprocess after `patch` (Python source) has run."""
    code = (
        HALF_THEN_KILL
        + textwrap.dedent(patch)
        + (f"\nfrom training.cli import main\nraise SystemExit(main({argv!r}))\n")
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env
    )
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stderr[-3000:])
    return p


def siblings(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


# --- the helper -------------------------------------------------------------------------------


def test_atomic_dir_replaces_whole_or_not_at_all(tmp_path):
    out = tmp_path / "out"
    with atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("one")
    assert (out / "a.txt").read_text() == "one"

    def dies_mid_write() -> None:
        with atomic_dir(out) as tmp:
            (tmp / "a.txt").write_text("two, half")
            raise RuntimeError("died mid-write")

    with pytest.raises(RuntimeError):
        dies_mid_write()
    assert (out / "a.txt").read_text() == "one"
    assert siblings(out) == []
    with atomic_dir(out) as tmp:
        (tmp / "b.txt").write_text("two")
    assert sorted(p.name for p in out.iterdir()) == ["b.txt"]  # replaced, not merged


def test_leftovers_of_a_killed_writer_are_cleared_or_put_back(tmp_path):
    out = tmp_path / "out"
    dead = 2**22 + 12345  # above the default pid_max: no such process
    (tmp_path / f".out.tmp-{dead}-abcd1234").mkdir()
    (tmp_path / f".out.tmp-{dead}-abcd1234" / "half").write_text("x")
    # killed between its two renames: the old output is under its .old name, `out` is gone
    (tmp_path / f".out.old-{dead}-abcd1234").mkdir()
    (tmp_path / f".out.old-{dead}-abcd1234" / "a.txt").write_text("old")
    recover(out)
    assert (out / "a.txt").read_text() == "old"
    assert siblings(out) == []
    live = tmp_path / f".out.tmp-{os.getpid()}-live0000"  # a writer still running: left alone
    live.mkdir()
    with atomic_dir(out) as tmp:
        (tmp / "a.txt").write_text("new")
    assert (out / "a.txt").read_text() == "new"
    assert live.is_dir()


def test_atomic_dir_refuses_a_file(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError), atomic_dir(tmp_path / "f"):
        pass


# --- ingest -----------------------------------------------------------------------------------


def _tree(data_dir: Path, root: Path, ids: tuple[str, ...]) -> Path:
    src = data_dir / "swe-bench-lite" / "swe-agent-gpt4" / "cost_2_2"
    run = root / "swe-agent-gpt4" / "cost_2_2"
    run.mkdir(parents=True)
    for iid in ids:
        shutil.copy(src / f"{iid}.traj.gz", run)
    report = {"resolved": 1, "resolved_per_project": {"django/django": [ids[0]]}}
    (run / "final_report.json").write_text(json.dumps(report))
    return root


IDS = ("django__django-11001", "django__django-11019", "astropy__astropy-12907")


def test_ingest_killed_mid_write_keeps_the_old_corpus(data_dir, tmp_path):
    from monitor.corpus import load_corpus
    from training.cli import main

    if not (data_dir / "swe-bench-lite" / "swe-agent-gpt4").is_dir():
        pytest.skip("the SWE-agent runs of the shared data are not there")
    out = tmp_path / "corpus"
    assert main(["ingest", str(_tree(data_dir, tmp_path / "a", IDS[:1])), "--out", str(out)]) == 0
    before = {t.id for t in load_corpus(out)}
    assert len(before) == 1
    bigger = str(_tree(data_dir, tmp_path / "b", IDS))
    patches = {
        # the data file half-written
        "data file": """
            import datasets
            _save = datasets.Dataset.save_to_disk
            def save(self, path, **kw):
                _save(self, path, **kw)
                import glob
                half_then_kill(sorted(glob.glob(str(path) + "/*.arrow"))[0])
            datasets.Dataset.save_to_disk = save
        """,
        # everything written, killed before the rename
        "before rename": """
            import monitor.atomic as a
            def fsync_tree(root):
                os.kill(os.getpid(), signal.SIGKILL)
            a._fsync_tree = fsync_tree
        """,
    }
    for why, patch in patches.items():
        killed(patch, ["ingest", bigger, "--out", str(out)])
        assert {t.id for t in load_corpus(out)} == before, why
        assert siblings(out), why  # the dead writer's temporary folder is there
    assert main(["ingest", bigger, "--out", str(out)]) == 0  # no clean-up first
    assert len(load_corpus(out)) == 3
    assert siblings(out) == []


def test_a_corpus_with_fewer_runs_than_recorded_says_so(data_dir, tmp_path):
    import pyarrow as pa

    from monitor.corpus import _read_table, load_corpus
    from monitor.errors import TranscriptError
    from training.cli import main

    if not (data_dir / "swe-bench-lite" / "swe-agent-gpt4").is_dir():
        pytest.skip("the SWE-agent runs of the shared data are not there")
    out = tmp_path / "corpus"
    assert main(["ingest", str(_tree(data_dir, tmp_path / "a", IDS)), "--out", str(out)]) == 0
    table = _read_table(out)
    arrow = next(out.glob("*.arrow"))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table.slice(0, 2))  # a whole, valid file cut at a record boundary
    arrow.unlink()  # the table maps the old file: write a new one, never over the mapping
    arrow.write_bytes(sink.getvalue().to_pybytes())
    with pytest.raises(TranscriptError, match="differ from what was written"):
        load_corpus(out)
    (out / "content.json").unlink()  # an older corpus: summary.json's count still holds
    with pytest.raises(TranscriptError, match="2 runs found, 3 recorded"):
        load_corpus(out)
    p = subprocess.run(
        [sys.executable, "-m", "training.cli", "fit-budget", str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert p.returncode == 2
    assert "2 runs found, 3 recorded" in p.stderr
    assert "Traceback" not in p.stderr


# --- calibrate and export ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def bundle(tiny_model_dir, tmp_path_factory):
    pytest.importorskip("torch")
    from tests.bundle_helpers import shared_bundle

    return shared_bundle(tiny_model_dir, tmp_path_factory)


def test_calibrate_killed_mid_copy_keeps_the_old_bundle(bundle, tmp_path):
    from monitor.corpus import write_corpus
    from serving.bundle import load_bundle
    from tests.training.test_recalibrate import new_agent_runs
    from training.cli import main

    write_corpus(new_agent_runs(), tmp_path / "corpus")
    out = tmp_path / "b2"
    argv = ["calibrate", "--bundle", str(bundle), "--data", str(tmp_path / "corpus")]
    argv += ["--out", str(out), "--method", "conformal", "--no-progress"]
    assert main(argv) == 0
    old = load_bundle(out).sha256
    patch = """
        import shutil
        _copy2 = shutil.copy2
        def copy2(src, dst, **kw):
            _copy2(src, dst, **kw)
            if str(dst).endswith("model_kv.onnx"):
                half_then_kill(dst)
        shutil.copy2 = copy2
    """
    killed(patch, argv)
    assert load_bundle(out).sha256 == old  # every hash checked: the old bundle, whole
    assert siblings(out)
    assert main(argv) == 0  # no clean-up first (the old code left a half bundle, then refused)
    assert load_bundle(out).manifest.calibration["thresholds"]["method"] == "conformal"
    assert siblings(out) == []


def test_export_killed_mid_write_keeps_the_old_bundle(bundle, tmp_path):
    from serving.bundle import load_bundle
    from training.cli import main

    model = str(bundle.parent / "model")
    out = tmp_path / "b3"
    assert main(["export", "--model", model, "--out", str(out)]) == 0
    old = load_bundle(out).sha256
    patch = """
        import shutil
        _copyfile = shutil.copyfile
        def copyfile(src, dst, **kw):
            _copyfile(src, dst, **kw)
            if str(dst).endswith("tokenizer.json"):  # the graphs are written by now
                half_then_kill(dst)
        shutil.copyfile = copyfile
    """
    killed(patch, ["export", "--model", model, "--out", str(out)])
    assert load_bundle(out).sha256 == old
    assert siblings(out)
    assert main(["export", "--model", model, "--out", str(out)]) == 0
    load_bundle(out)
    assert siblings(out) == []
