"""The corpus: normalised runs on disk as a Hugging Face `datasets` Dataset, and `summary.json`.

`failfast ingest ... --out DIR` writes DIR with `Dataset.save_to_disk`, so
`datasets.load_from_disk(DIR)` gives one row per run: the scalar fields of `Trajectory.to_dict()`
as columns (id, instance_id, agent, source, run, model, format, path, task, submission,
exit_status, resolved), `n_steps`, `total_tokens`, `totals` as a struct, and `steps` as a list
of typed structs (a step's free-form tool `args` is JSON text). No split column: splits are
drawn by instance at training time (training.data.splits) and written to the run's splits.json.
`load_corpus` reads the same Arrow files with pyarrow alone and turns them back into
Trajectories.

`summary.json`: `{"sources": {NAME: {"runs", "instances", "resolved", "unresolved", "unknown",
"agent", "median_steps", "median_tokens", "problems"}}, "problems": [{"path", "reason"}],
"warnings": [...], "runs": N}`. `content.json`: `{"runs": N, "sha256": ...}` over the Arrow files;
`load_corpus` refuses a corpus whose files differ from it or that holds fewer runs.

The folder is written beside its final place and renamed into it when whole
(monitor.atomic): a kill mid-ingest leaves the previous corpus as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from monitor.atomic import atomic_dir
from monitor.corpus_summary import SourceStats, Summary
from monitor.errors import CorpusError, TranscriptError
from monitor.reading import Scan, read_runs
from monitor.types import Step, Trajectory

STATE_FILE = "state.json"  # what `save_to_disk` writes beside the Arrow files
SUMMARY_FILE = "summary.json"
CONTENT_FILE = "content.json"  # {"runs": N, "sha256": of the Arrow files in state order}
_SCALARS = (
    "id", "instance_id", "agent", "source", "run", "model", "format", "path", "task",
    "submission", "exit_status",
)  # fmt: skip
_TOTALS = ("tokens_in", "tokens_out", "cost_usd", "api_calls", "wall_seconds")


def ingest(
    paths: Iterable[str | Path],
    out: str | Path,
    *,
    format: str | None = None,
    labels: Iterable[str | Path] = (),
    progress: bool = True,
) -> Summary:
    """Read every run under `paths`, join labels, write the corpus and summary.json to `out`.

    Args:
        paths: files or folders holding runs and label files.
        out: output folder (created).
        format: force one reader (None: detect per file).
        labels: label files given explicitly (`--labels`), joined wherever their runs lie.
        progress: show a progress bar on stderr (only on a terminal).

    Returns:
        The Summary (also written to `out/summary.json`).
    """
    check_out(out, paths)
    summary = Summary()
    runs: list[Trajectory] = []
    scanned = Scan()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for t in read_runs(
            paths,
            format=format,
            labels=labels,
            problems=summary.problems,
            progress=progress,
            scanned=scanned,
        ):
            summary.sources.setdefault(t.source, SourceStats()).add(t)
            runs.append(t)
    summary.links_followed = scanned.links
    summary.warnings = sorted({str(w.message) for w in caught})
    for p in summary.problems:
        for s in summary.sources.values():
            # realpath, not resolve(): a problem may be a symlink loop, which resolve() raises on
            if s.root is not None and Path(os.path.realpath(p.path)).is_relative_to(
                s.root.resolve()
            ):
                s.problems += 1
                break
    for name, stats in sorted(summary.sources.items()):
        if len(stats.agents) > 1:  # thresholds are per source: one group for several agents
            summary.warnings.append(
                f"source {name!r} holds runs of {len(stats.agents)} agents "
                f"({', '.join(sorted(stats.agents))}): thresholds are fitted per source, so put "
                "each agent's runs in a folder of its own (docs/USAGE.md, layouts and names)"
            )
    if not runs:  # a mistyped or unmounted path must not replace a corpus with an empty one
        return summary
    with atomic_dir(out) as tmp:  # a kill mid-write leaves the previous corpus whole
        write_corpus(runs, tmp)
        (tmp / SUMMARY_FILE).write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
    return summary


def check_out(out: str | Path, paths: Iterable[str | Path] = ()) -> None:
    """Refuse an `--out` that writing the corpus would destroy: a folder holding anything but a
    corpus (the runs themselves, another tool's files), or one the runs are read from.

    Raises:
        CorpusError: naming the folder and what is wrong.
    """
    where = Path(out)
    for path in paths:
        inside = Path(os.path.realpath(path))
        if inside == Path(os.path.realpath(where)) or inside.is_relative_to(
            os.path.realpath(where)
        ):
            raise CorpusError(
                f"{where}: --out is where the runs {path} are read from; writing the corpus "
                "there would replace them (give another folder)"
            )
    if where.exists() and not where.is_dir():
        raise CorpusError(f"{where}: --out is a file, not a folder")
    if where.is_dir() and any(where.iterdir()) and not is_corpus(where):
        raise CorpusError(
            f"{where}: not empty and not a corpus written by `failfast ingest`; refusing to "
            "replace it (give a new or empty folder)"
        )


def _schema() -> Any:
    """The Arrow schema of a corpus row (one run); steps are typed structs, `args` JSON text."""
    import pyarrow as pa

    step = pa.struct(
        [
            ("index", pa.int64()),
            ("kind", pa.string()),
            ("thought", pa.string()),
            ("tool", pa.string()),
            ("action", pa.string()),
            ("args", pa.string()),
            ("observation", pa.string()),
            ("is_error", pa.bool_()),
            ("tokens_in", pa.int64()),
            ("tokens_out", pa.int64()),
            ("tokens_estimated", pa.bool_()),
            ("cost_usd", pa.float64()),
            ("timestamp", pa.float64()),
            ("role", pa.string()),
        ]  # fmt: skip
    )
    totals = pa.struct(
        [
            ("tokens_in", pa.int64()),
            ("tokens_out", pa.int64()),
            ("cost_usd", pa.float64()),
            ("api_calls", pa.int64()),
            ("wall_seconds", pa.float64()),
        ]  # fmt: skip
    )
    return pa.schema(
        [(k, pa.string()) for k in _SCALARS]
        + [
            ("resolved", pa.bool_()),
            ("n_steps", pa.int64()),
            ("total_tokens", pa.int64()),
            ("totals", totals),
            ("steps", pa.large_list(step)),
        ]  # fmt: skip
    )


def _step_row(step: Step) -> dict[str, Any]:
    d = step.to_dict()
    d["args"] = (
        None if step.args is None else json.dumps(step.args, ensure_ascii=False, default=str)
    )
    return d


def runs_table(runs: list[Trajectory]) -> Any:
    """The runs as one pyarrow Table (one row per run) in the corpus schema."""
    import pyarrow as pa

    cols: dict[str, list[Any]] = {k: [getattr(t, k) for t in runs] for k in _SCALARS}
    cols["resolved"] = [t.resolved for t in runs]
    cols["n_steps"] = [len(t.steps) for t in runs]
    cols["total_tokens"] = [t.total_tokens for t in runs]
    cols["totals"] = [{k: getattr(t.totals, k) for k in _TOTALS} for t in runs]
    cols["steps"] = [[_step_row(s) for s in t.steps] for t in runs]
    return pa.Table.from_pydict(cols, schema=_schema())


def write_corpus(runs: list[Trajectory], out: str | Path) -> None:
    """Write runs as a Hugging Face `datasets` Dataset (`save_to_disk`) in the folder `out`.

    Raises:
        ImportError: naming the extra to install when `datasets` is missing.
    """
    try:
        import datasets
    except ImportError as e:  # an optional extra: say which one
        raise ImportError(
            "writing a corpus needs the `datasets` package: pip install 'failfast-monitor[train]'"
        ) from e
    datasets.disable_progress_bars()
    datasets.Dataset(runs_table(runs)).save_to_disk(str(out))
    record = {"runs": len(runs), "sha256": _content_hash(Path(out))}
    (Path(out) / CONTENT_FILE).write_text(json.dumps(record, indent=1) + "\n")


def _content_hash(folder: Path) -> str:
    """sha256 over the corpus's Arrow files, in the order state.json lists them."""
    state = json.loads((folder / STATE_FILE).read_text())
    h = hashlib.sha256()
    for entry in state["_data_files"]:
        with open(folder / entry["filename"], "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def _recorded(folder: Path) -> tuple[int | None, str | None]:
    """(runs, content hash) the writer recorded: content.json, else summary.json's run count
    (corpora written before content.json existed), else (None, None)."""
    for name, hashed in ((CONTENT_FILE, True), (SUMMARY_FILE, False)):
        try:
            rec = json.loads((folder / name).read_text())
        except (OSError, ValueError):
            continue
        runs = rec.get("runs") if isinstance(rec, dict) else None
        if isinstance(runs, int):
            sha = rec.get("sha256") if hashed else None
            return runs, sha if isinstance(sha, str) else None
    return None, None


def is_corpus(path: str | Path) -> bool:
    """True when `path` is a folder written by `ingest` (a saved `datasets` Dataset)."""
    return (Path(path) / STATE_FILE).is_file()


def _read_table(folder: Path) -> Any:
    """The corpus as one pyarrow Table, read straight from the Arrow files `datasets` wrote."""
    import pyarrow as pa

    state = json.loads((folder / STATE_FILE).read_text())
    tables = []
    for entry in state["_data_files"]:
        with pa.memory_map(str(folder / entry["filename"])) as source:
            tables.append(pa.ipc.open_stream(source).read_all())
    return pa.concat_tables(tables)


def load_corpus(path: str | Path) -> list[Trajectory]:
    """Load the runs of a corpus written by `ingest`.

    Reads the Arrow files with pyarrow (no `datasets` import: scoring-only installs can read a
    corpus); `datasets.load_from_disk(path)` reads the same folder.

    Raises:
        TranscriptError: when the corpus is missing or unreadable.
    """
    folder = Path(path)
    want, sha = _recorded(folder)
    try:
        if sha is not None and _content_hash(folder) != sha:
            raise ValueError(
                f"its Arrow files differ from what was written ({CONTENT_FILE} sha256); "
                "re-run `failfast ingest`"
            )
        rows = _read_table(folder).to_pylist()
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TranscriptError(folder, f"cannot read corpus: {e}") from e
    if want is not None and len(rows) != want:
        raise TranscriptError(
            folder,
            f"cannot read corpus: {len(rows)} runs found, {want} recorded (a truncated or "
            "damaged data file); re-run `failfast ingest`",
        )
    runs = []
    for row in rows:
        for step in row["steps"]:
            step["args"] = None if step["args"] is None else json.loads(step["args"])
        runs.append(Trajectory.from_dict(row))
    return runs
