"""Property test: every reader meets any input with a Trajectory or a TranscriptError naming it.

Inputs: arbitrary bytes, and mutations (truncation, flipped bytes, deleted keys, values of the
wrong type, gzip or not) of the constructed fixtures and of a few small real files of each real
format from ../shared/data. Every reader in monitor.formats.FORMATS, and
monitor.reading.read_trajectory when it exists, gets every input; `sniff` must answer a bool.
"""

from __future__ import annotations

import gzip
import importlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.errors import TranscriptError
from monitor.formats import FORMATS
from monitor.types import Trajectory

FIXTURES = Path(__file__).parents[1] / "fixtures"
CONSTRUCTED = sorted(p.name for p in FIXTURES.glob("*constructed*"))
OPS = ("truncate", "flip", "delete_keys", "retype", "drop_lines", "as_is")
# Derandomised so that CI runs the same examples every time; the slow variant explores.
FAST = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SLOW = settings(
    max_examples=600,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
ODD_VALUES: list[Any] = [None, 0, -1, 1e308, "", "x", [], {}, True, [None], {"": None}]


def _entry_points() -> list[tuple[str, Callable[[Path], Any], Callable[[Path, bytes], Any] | None]]:
    out: list[tuple[str, Callable[[Path], Any], Callable[[Path, bytes], Any] | None]] = [
        (name, mod.read, mod.sniff) for name, mod in FORMATS.items()
    ]
    try:
        reading = importlib.import_module("monitor.reading")
    except ModuleNotFoundError:
        return out
    out.append(("read_trajectory", reading.read_trajectory, None))
    return out


def _head(path: Path) -> bytes:
    if not path.is_file():
        return b""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError):
            pass
    return data[: 64 * 1024]


def _check(path: Path) -> None:
    """Every entry point answers `path` with a Trajectory or a TranscriptError naming it."""
    head = _head(path)
    for name, read, sniff in _entry_points():
        if sniff is not None:
            assert isinstance(sniff(path, head), bool), name
        error: TranscriptError | None = None
        try:
            traj = read(path)
        except TranscriptError as e:
            error = e
        if error is not None:
            # a directory run may name the file inside it that is wrong
            assert error.path == str(path) or Path(error.path).is_relative_to(path), (name, error)
            assert str(path) in str(error)
        else:
            assert isinstance(traj, Trajectory), name
            assert all(s.tokens_in >= 0 and s.tokens_out >= 0 for s in traj.steps), name


def _mutate_json(obj: Any, rng: random.Random, op: str) -> Any:
    """Delete keys from, or retype values of, about one node in five."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            roll = rng.random()
            if op == "delete_keys" and roll < 0.2:
                continue
            if op == "retype" and roll < 0.2:
                out[k] = rng.choice(ODD_VALUES)
                continue
            out[k] = _mutate_json(v, rng, op)
        return out
    if isinstance(obj, list):
        return [
            _mutate_json(v, rng, op)
            for v in obj
            if not (op == "delete_keys" and rng.random() < 0.1)
        ]
    return obj


def _mutate_text(data: bytes, rng: random.Random, op: str) -> bytes:
    if op == "truncate":
        return data[: rng.randrange(len(data) + 1)]
    if op == "flip":
        buf = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            if buf:
                buf[rng.randrange(len(buf))] = rng.randrange(256)
        return bytes(buf)
    if op == "drop_lines":
        lines = data.split(b"\n")
        return b"\n".join(line for line in lines if rng.random() > 0.3)
    if op in ("delete_keys", "retype"):
        text = data.decode("utf-8", errors="replace")
        try:  # one JSON document
            return json.dumps(_mutate_json(json.loads(text), rng, op)).encode()
        except ValueError:
            pass
        lines = []
        for line in text.split("\n"):  # JSON lines
            try:
                lines.append(json.dumps(_mutate_json(json.loads(line), rng, op)))
            except ValueError:
                lines.append(line)
        return "\n".join(lines).encode()
    return data


def _plain(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _write(path: Path, data: bytes, compress: bool) -> None:
    path.write_bytes(gzip.compress(data, mtime=0) if compress else data)


def _real_seeds(data_dir: Path) -> list[Path]:
    """A few of the smallest real files (and one task directory) of each real format."""

    def smallest(pattern: str, n: int) -> list[Path]:
        return sorted(data_dir.glob(pattern), key=lambda p: p.stat().st_size)[:n]

    seeds = smallest("swe-bench-verified/mini-swe-agent-gemini-3-pro/trajs/*/*.traj.json.gz", 2)
    seeds += smallest("swe-bench-lite/swe-agent-gpt4/*/*.traj.gz", 2)
    seeds += smallest("swe-bench-lite/coder-gpt4/trajs/*.traj.gz", 1)
    acr = sorted(data_dir.glob("swe-bench-lite/autocoderover-gpt4/acr-run-1/*/*/cost.json.gz"))
    seeds += [p.parent for p in acr[:1]]
    seeds += smallest("swe-bench-lite/moatless-gpt4o-0609/trajs/*.json.gz", 1)
    seeds += smallest("swe-bench-lite/moatless-claude-3.5-sonnet/trajs/*.json.gz", 1)
    openhands = smallest("swe-bench-verified/openhands-claude-3.5-sonnet/trajs/*/*.json.gz", 1)
    seeds += openhands + [p.parent for p in openhands]  # a completion log, and its folder
    return seeds


def _mutated_copy(src: Path, dst_dir: Path, seed: int, op: str, compress: bool) -> Path:
    rng = random.Random(seed)
    if src.is_dir():  # a run directory (ACR task, Harbor trial): mutate one of its files
        dst = dst_dir / src.name
        shutil.copytree(src, dst)
        files = sorted(p for p in dst.rglob("*") if p.is_file())
        victim = rng.choice(files)
        _write(victim, _mutate_text(_plain(victim), rng, op), compress)
        return dst
    dst = dst_dir / src.name
    _write(dst, _mutate_text(_plain(src), rng, op), compress)
    return dst


@pytest.fixture(scope="module")
def real_seeds(data_dir: Path) -> list[Path]:
    seeds = _real_seeds(data_dir)
    assert len(seeds) == 10, seeds
    return seeds


def _arbitrary_bytes(data: bytes, name: str, compress: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        _write(path, data, compress)
        _check(path)


@FAST
@given(
    data=st.binary(max_size=3000)
    | st.builds(
        lambda p, b: p + b,
        st.sampled_from([b'{"type":"assistant",', b"[", b"{"]),
        st.binary(max_size=500),
    ),
    name=st.sampled_from(["run.jsonl", "run.json", "run.traj", "output.jsonl.gz"]),
    compress=st.booleans(),
)
def test_arbitrary_bytes(data: bytes, name: str, compress: bool) -> None:
    _arbitrary_bytes(data, name, compress)


def test_pathological_inputs(tmp_path: Path) -> None:
    """Cases random bytes rarely reach: deep nesting, NUL bytes, bad gzip, a directory, no file."""
    cases = {
        "deep.json": b"[" * 5000,
        "deep.jsonl": b'{"a":' * 3000 + b"\n",
        "nul.jsonl": b'{"type":"assistant"}\x00\n',
        "badgz.jsonl.gz": b"\x1f\x8b\x08\x00garbage",
        "latin1.jsonl": '{"type":"user","message":"\xe9"}\n'.encode("latin-1"),
        "u2028.jsonl": '{"type":"result","result":"a\u2028b","session_id":"s"}\n'.encode(),
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        _check(tmp_path / name)
    (tmp_path / "emptydir").mkdir()
    _check(tmp_path / "emptydir")
    _check(tmp_path / "missing.jsonl")


@FAST
@given(
    name=st.sampled_from(CONSTRUCTED),
    seed=st.integers(0, 2**32 - 1),
    op=st.sampled_from(OPS),
    compress=st.booleans(),
)
def test_mutated_constructed_fixtures(name: str, seed: int, op: str, compress: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _check(_mutated_copy(FIXTURES / name, Path(tmp), seed, op, compress))


@FAST
@given(
    which=st.integers(0, 9),
    seed=st.integers(0, 2**32 - 1),
    op=st.sampled_from(OPS),
    compress=st.booleans(),
)
def test_mutated_real_files(
    real_seeds: list[Path], which: int, seed: int, op: str, compress: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _check(_mutated_copy(real_seeds[which], Path(tmp), seed, op, compress))


@pytest.mark.slow
@SLOW
@given(
    which=st.integers(0, 9 + len(CONSTRUCTED)),
    seed=st.integers(0, 2**32 - 1),
    op=st.sampled_from(OPS),
    compress=st.booleans(),
)
def test_mutated_inputs_many(
    real_seeds: list[Path], which: int, seed: int, op: str, compress: bool
) -> None:
    seeds = real_seeds + [FIXTURES / n for n in CONSTRUCTED]
    with tempfile.TemporaryDirectory() as tmp:
        _check(_mutated_copy(seeds[which % len(seeds)], Path(tmp), seed, op, compress))


# --- label files and the folder walk (issue 21: Harbor, SWE-bench harness trees, links) -------

LABEL_SEEDS: dict[str, bytes] = {
    "result.json": (FIXTURES / "harbor_constructed_trial" / "result.json").read_bytes(),
    "reward.txt": b"1\n",
    "report.json": json.dumps(
        {"astropy__astropy-12907": {"resolved": True, "patch_exists": True, "tests_status": {}}}
    ).encode(),
    "results.json": json.dumps({"resolved": ["a__a-1"], "no_generation": ["b__b-2"]}).encode(),
    "results_summary.json": json.dumps(
        {"instances": [{"instance_id": "a__a-1", "resolved": True}]}
    ).encode(),
}


@FAST
@given(
    name=st.sampled_from(sorted(LABEL_SEEDS)),
    seed=st.integers(0, 2**32 - 1),
    op=st.sampled_from(OPS),
    compress=st.booleans(),
)
def test_mutated_label_files(name: str, seed: int, op: str, compress: bool) -> None:
    """A label file, however broken, gives a LabelFile or a LabelError naming it; ingest of its
    folder never raises."""
    from monitor.errors import LabelError
    from monitor.labels import LabelFile, load_label
    from monitor.reading import Problem, read_runs

    with tempfile.TemporaryDirectory() as tmp:
        trial = Path(tmp) / "job" / "task-a__t1"  # a Harbor trial folder around it
        (trial / "verifier").mkdir(parents=True)
        (trial / "agent").mkdir()
        shutil.copy(FIXTURES / "atif_constructed_v1.json", trial / "agent" / "trajectory.json")
        (trial / "config.json").write_text(json.dumps({"trial_name": trial.name, "task": {}}))
        where = trial / "verifier" if name == "reward.txt" else trial
        path = where / (name + (".gz" if compress and name != "reward.txt" else ""))
        data = _mutate_text(LABEL_SEEDS[name], random.Random(seed), op)
        _write(path, data, compress and name != "reward.txt")
        try:
            got: LabelFile | LabelError = load_label(path)
        except LabelError as e:
            got = e
        assert isinstance(got, LabelFile) or str(path) in str(got)
        problems: list[Problem] = []
        runs = list(read_runs([Path(tmp)], problems=problems))
        assert all(isinstance(t, Trajectory) for t in runs)
        assert all(isinstance(p.reason, str) and p.path for p in problems)


@FAST
@given(
    links=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 6)), min_size=0, max_size=8),
    runs_in=st.lists(st.integers(0, 5), min_size=1, max_size=4),
)
def test_random_symlink_trees_end_and_read_each_folder_once(
    links: list[tuple[int, int]], runs_in: list[int]
) -> None:
    """Links anywhere (loops, repeats, dangling): the walk ends, every run is read once."""
    from monitor.reading import Problem, Scan, read_runs

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        dirs = [root, root / "a", root / "a" / "b", root / "c", root / "c" / "d", root / "e"]
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
        for n, i in enumerate(sorted(set(runs_in))):
            shutil.copy(FIXTURES / "codex_constructed_exec.jsonl", dirs[i] / f"run{n}.jsonl")
        for n, (at, to) in enumerate(links):
            target = dirs[to] if to < len(dirs) else Path(tmp) / "nowhere"
            (dirs[at] / f"link{n}").symlink_to(target, target_is_directory=True)
        scanned = Scan()
        problems: list[Problem] = []
        runs = list(read_runs([root], problems=problems, scanned=scanned))
        real = [os.path.realpath(t.path) for t in runs]
        assert len(real) == len(set(real)) == len(set(runs_in))
        assert scanned.links <= len(links)
