"""Labelled runs: read them, keep those with a verdict and steps, and subsample the training split.

Runs with an unknown verdict (`resolved is None`) or no steps are dropped and counted per source,
never turned into failures.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from monitor.types import Trajectory

log = logging.getLogger(__name__)


@dataclass
class Labelled:
    """Runs kept for training and evaluation, and what was dropped.

    Attributes:
        runs: runs with a verdict and at least one step.
        unknown: source -> runs dropped for an unknown verdict.
        empty: source -> runs dropped for having no steps.
    """

    runs: list[Trajectory]
    unknown: dict[str, int]
    empty: dict[str, int]


def label_of(traj: Trajectory) -> int:
    """1 when the run ended unresolved (the positive class), 0 when resolved."""
    if traj.resolved is None:
        raise ValueError(f"run {traj.id} has no verdict")
    return 0 if traj.resolved else 1


def labelled_runs(runs: Sequence[Trajectory]) -> Labelled:
    """Keep runs with a verdict and steps; count the rest per source."""
    unknown: Counter[str] = Counter()
    empty: Counter[str] = Counter()
    kept = []
    for r in runs:
        if r.resolved is None:
            unknown[r.source or r.agent] += 1
        elif not r.steps:
            empty[r.source or r.agent] += 1
        else:
            kept.append(r)
    return Labelled(kept, dict(unknown), dict(empty))


def stratified_subsample(
    runs: Sequence[Trajectory], max_runs: int, *, seed: int
) -> list[Trajectory]:
    """At most `max_runs` runs, keeping each (agent, label) cell's share (seeded).

    Used only on the training split, to bound the feature pass; validation and test are never
    subsampled.
    """
    if max_runs <= 0 or len(runs) <= max_runs:
        return list(runs)
    rng = np.random.default_rng(seed)
    cells: dict[tuple[str, int], list[int]] = {}
    for i, r in enumerate(runs):
        cells.setdefault((r.agent, label_of(r)), []).append(i)
    frac = max_runs / len(runs)
    keep: list[int] = []
    for key in sorted(cells):
        idx = cells[key]
        n = max(1, int(round(frac * len(idx))))
        keep.extend(rng.choice(idx, size=min(n, len(idx)), replace=False).tolist())
    return [runs[i] for i in sorted(keep)]


def balanced_subset(runs: Sequence[Trajectory], per_label: int, *, seed: int) -> list[Trajectory]:
    """At most `per_label` resolved and `per_label` unresolved runs of each agent (seeded): a
    quicker paired comparison of featuriser or backbone settings (`failfast crossfit
    --per-label`) in which every agent weighs alike and has resolved runs to calibrate on."""
    cells: dict[tuple[str, bool], list[Trajectory]] = {}
    for r in sorted(runs, key=lambda r: r.id):
        cells.setdefault((r.agent, bool(r.resolved)), []).append(r)
    rng = random.Random(seed)
    keep: list[Trajectory] = []
    for key in sorted(cells):
        cell = cells[key][:]
        rng.shuffle(cell)
        keep += cell[:per_label]
    return keep


def load_runs(
    paths: Sequence[str | Path], *, labels: Sequence[str | Path] = ()
) -> list[Trajectory]:
    """Runs from `--data` paths: an ingest output folder (monitor.corpus) or raw transcripts and
    label files (monitor.reading.read_runs; `labels` are `--labels` files, joined wherever their
    runs lie). Unreadable files are reported by the readers, not raised, so one bad file never
    stops training; they are logged as warnings, "path: what is wrong". A `labels` file that
    cannot be read as one raises LabelError naming it."""
    from monitor import corpus, reading
    from monitor.errors import LabelError
    from monitor.labels import load_label

    for f in labels:  # a file a flag names must be usable, or nothing it names gets a verdict
        try:
            load_label(f, explicit=True)
        except LabelError as e:
            raise LabelError(e.path, f"(--labels) {e.reason}") from e
    runs: list[Trajectory] = []
    raw: list[Path] = []
    for p in map(Path, paths):
        if corpus.is_corpus(p):
            runs.extend(corpus.load_corpus(p))
        else:
            raw.append(p)
    if raw:
        problems: list = []
        runs.extend(reading.read_runs(raw, labels=labels, problems=problems))
        for prob in problems[:20]:  # skipped files and label notes: said, never silent
            log.warning("%s", prob)
        if len(problems) > 20:
            log.warning(
                "... %d more problems reading %s", len(problems) - 20, ", ".join(map(str, raw))
            )
    return runs
