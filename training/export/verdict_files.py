"""Verdicts without transcripts, for `failfast known-tasks --verdicts FILE`: a label file of
another agent's whole benchmark run (the run report of the SWE-bench harness, a mini-swe-agent
results summary, the `results/results.json` of a SWE-bench experiments submission, ...; every
shape monitor.labels reads) becomes one verdict per task, for the bundle's table of known tasks.

The agent is named by `--verdicts-agent`, else by the submission folder: the folder above
`results/` for `<submission>/results/results.json`, else the file's own folder. Each verdict gets
the run id `verdicts:<agent>:<sha256 of the file, 12 hex>:<instance id>`, so adding the same file
twice counts it once, and two runs of one agent (two files) count twice.

A file that gives every instance it does not name a verdict (plain lists such as `{"resolved":
[...], "no_generation": [...]}`: every other instance of the run failed) says nothing of which
instances those are: it needs the benchmark's instance ids (`--instances FILE`, one per line or
a JSON list), or its unnamed failures would be left out and its verdicts would lean resolved.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from monitor.errors import LabelError
from monitor.labels import load_label
from monitor.textio import strip_gz
from monitor.types import Trajectory


def read_instances(path: str | Path) -> list[str]:
    """Instance ids from a text file (one per line; blank lines and # comments skipped) or a JSON
    list; ValueError naming the file when it holds none."""
    p = Path(path)
    text = p.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, list):
        ids = [str(x) for x in data if isinstance(x, str) and x.strip()]
    else:
        lines = (line.strip() for line in text.splitlines())
        ids = [line for line in lines if line and not line.startswith("#")]
    if not ids:
        raise ValueError(f"{p}: no instance ids (one per line, or a JSON list)")
    return ids


def agent_of(path: str | Path) -> str:
    """The submission a label file belongs to (module docstring)."""
    p = Path(path).absolute()
    folder = p.parent
    if folder.name == "results" and strip_gz(p.name) == "results.json":
        folder = folder.parent
    return folder.name


def verdict_runs(
    path: str | Path, *, agent: str | None = None, instances: Sequence[str] | None = None
) -> list[Trajectory]:
    """One step-less labelled run per task the file gives a verdict (harness errors, which have
    none, are left out).

    Raises:
        LabelError: the file cannot be read as a label file, or gives unnamed instances a verdict
            and `instances` is None.
    """
    lf = load_label(path, explicit=True)
    if lf.default is not None and instances is None:
        raise LabelError(
            lf.path,
            f"gives every instance it does not name a verdict ({lf.default}): pass the "
            "benchmark's instance ids with --instances FILE so those are counted too",
        )
    name = agent or agent_of(path)
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]
    ids = sorted(set(instances or ()) | set(lf.verdicts))
    out = []
    for iid in ids:
        v = lf.verdict(iid)
        if v is None:
            continue
        out.append(
            Trajectory(
                id=f"verdicts:{name}:{digest}:{iid}", instance_id=iid, agent=name, resolved=v
            )
        )
    return out
