"""Verdicts without transcripts, for `failfast known-tasks --verdicts FILE`: a label file of
another agent's benchmark run (the run report of the SWE-bench harness, a mini-swe-agent results
summary, the `results/results.json` of a SWE-bench experiments submission, a Harbor trial's
`result.json` or `verifier/reward.txt`, ...; every shape monitor.labels reads) becomes one verdict
per task, for the bundle's table of known tasks.

**The agent.** `--verdicts-agent`, else the submission: the folder above `results/` for
`<submission>/results/results.json`, the folder above `logs/` for a per-instance `report.json`,
the trial's `agent_info.name` for a Harbor trial, else the file's own folder. A name that holds
one of the table's agent families as whole words (`20240620_sweagent_claude3.5sonnet`,
`mini-swe-agent-gemini-3-pro`) is counted as that family, the longest that fits: the table keeps
a family's own verdicts out of its runs' priors, as calibration did, so a run of that family
never sees its own scaffold's verdicts on the task. Erring this way only drops evidence.

**Counted once.** A file of many tasks is its submission's run with these verdicts: the run id
is `verdicts:<sha256 of the submission folder's name and the sorted verdicts, 12 hex>:<instance
id>`, so the same run added twice (the file again, gzipped or not, under another
`--verdicts-agent`) counts once, while two submissions with the same verdicts count twice. A
copy of a file in another folder is not recognised. A file of one task (a
Harbor trial, a per-instance report) is the trial it belongs to: `verdicts:trial:<trial or
submission folder>:<instance id>`, so a trial's `result.json` and `reward.txt` count once, and two
trials of one task count twice.

A file that gives every instance it does not name a verdict (plain lists such as `{"resolved":
[...], "no_generation": [...]}`: every other instance of the run failed) says nothing of which
instances those are: it needs the benchmark's instance ids (`--instances FILE`, one per line or
a JSON list), or its unnamed failures would be left out and its verdicts would lean resolved.
Such a file is refused when it names ids that are not in `--instances` (the ids of another
benchmark would turn every task of this one into a failure) or names no id at all (counts only).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from monitor.errors import LabelError, TranscriptError
from monitor.formats.harbor import agent_in
from monitor.labels import LabelFile, load_label
from monitor.textio import read_text, strip_gz
from monitor.types import Trajectory

_SINGLE = frozenset({"harbor-trial", "harbor-reward", "swebench-instance"})


@dataclass
class VerdictFile:
    """The verdicts one label file gave.

    Attributes:
        path: the file.
        runs: one step-less labelled run per task with a verdict.
        agent: the name the file's submission goes by (`agent_of`, or `--verdicts-agent`).
        family: the table family it is counted as ("" when none fits: counted as `agent`).
        warnings: notes about the file (read leniently, ids listed twice, ...).
    """

    path: Path
    runs: list[Trajectory]
    agent: str
    family: str = ""
    warnings: list[str] = field(default_factory=list)


def read_instances(path: str | Path) -> list[str]:
    """Instance ids from a text file (one per line; blank lines and `#` comments skipped, plain
    or gzip, a byte-order mark ignored) or a JSON list of strings; ValueError naming the file
    when it holds none or a line is not an id."""
    p = Path(path)
    try:
        text = read_text(p).lstrip("\ufeff")
    except TranscriptError as e:
        raise ValueError(f"{p}: {e.reason}") from None
    stripped = text.lstrip()
    if stripped[:1] in ("[", "{"):
        try:
            data = json.loads(text)
        except ValueError:
            raise ValueError(f"{p}: starts like JSON but is not valid JSON") from None
        if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
            raise ValueError(f"{p}: JSON that is not a list of instance ids (strings)")
        ids = [x.strip() for x in data if x.strip()]
    else:
        ids = []
        for n, line in enumerate(text.splitlines(), 1):
            item = line.split("#", 1)[0].strip()
            if not item:
                continue
            if len(item.split()) > 1:
                raise ValueError(f"{p}, line {n}: {item[:60]!r} is not one instance id")
            ids.append(item)
    if not ids:
        raise ValueError(f"{p}: no instance ids (one per line, or a JSON list)")
    return ids


def agent_of(path: str | Path, lf: LabelFile | None = None) -> str:
    """The submission a label file belongs to (module docstring)."""
    p = Path(path).absolute()
    if lf is not None and lf.kind in ("harbor-trial", "harbor-reward"):
        name = agent_in(lf.scope).strip()  # as the Harbor reader names it
        if name:
            return name
    if lf is not None and lf.kind == "swebench-instance" and len(lf.verdicts) == 1:
        parts = p.parent.parts  # the harness's logs/run_evaluation/<run id>/<model>/<instance>/
        if "run_evaluation" in parts[:-2]:
            return parts[-2]
        return lf.scope.name  # the folder above logs/, or the run beside the instance folders
    folder = p.parent
    if folder.name == "results" and strip_gz(p.name) == "results.json":
        folder = folder.parent
    return folder.name


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]


def family_of(name: str, families: Iterable[str]) -> str:
    """The longest of `families` whose letters and digits equal a run of whole words of `name`
    ("" when none): `20240620_sweagent_claude3.5sonnet` -> swe-agent, `mini-swe-agent-gemini`
    -> mini-swe-agent (not swe-agent), `claude-coder` -> coder."""
    words = _words(name)
    joined = {"".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, len(words) + 1)}
    fits = [f for f in families if "".join(_words(f)) in joined]
    return max(fits, key=lambda f: (len("".join(_words(f))), f), default="")


def verdict_runs(
    path: str | Path,
    *,
    agent: str | None = None,
    instances: Sequence[str] | None = None,
    families: Iterable[str] = (),
) -> VerdictFile:
    """One step-less labelled run per task the file gives a verdict (harness errors, which have
    none, are left out), its agent counted as a table family where one fits (`family_of`).

    Raises:
        LabelError: the file cannot be read as a label file; it gives unnamed instances a
            verdict and `instances` is None, names ids not in `instances`, or names none.
    """
    lf = load_label(path, explicit=True)
    warnings = list(lf.warnings)
    if lf.default is not None:
        if instances is None:
            raise LabelError(
                lf.path,
                f"gives every instance it does not name a verdict ({lf.default}): pass the "
                "benchmark's instance ids with --instances FILE so those are counted too",
            )
        if not lf.named:
            raise LabelError(lf.path, "names no instance (counts only): no verdict to add")
        stray = sorted(lf.named - set(instances))
        if stray:
            raise LabelError(
                lf.path,
                f"names {len(stray)} ids that --instances does not list (e.g. {stray[0]}): "
                "give the instance ids of the benchmark this run was on",
            )
    where = agent_of(path, lf)  # the submission, whatever --verdicts-agent calls it
    name = agent or where
    family = family_of(name, families)
    ids = sorted(set(instances or ()) | set(lf.verdicts))
    verdicts = [(iid, v) for iid in ids if (v := lf.verdict(iid)) is not None]
    if lf.kind in _SINGLE and len(verdicts) == 1:
        key = f"trial:{lf.scope.name if lf.kind != 'swebench-instance' else where}"
    else:
        key = hashlib.sha256(json.dumps([where, verdicts]).encode()).hexdigest()[:12]
    runs = [
        Trajectory(id=f"verdicts:{key}:{iid}", instance_id=iid, agent=family or name, resolved=v)
        for iid, v in verdicts
    ]
    return VerdictFile(Path(path), runs, name, family, warnings)
