"""Joining label files to runs: loading them, setting each run's `resolved`, and the Problems
(disagreeing labels, label ids with no run, runs no label file covers) `read_runs` reports."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from pathlib import Path

from monitor.errors import LabelError
from monitor.labels import LabelFile, LabelIndex, load_label
from monitor.problems import Problem
from monitor.types import Trajectory


def load_labels(paths: Iterable[Path], problems: list[Problem]) -> list[LabelFile]:
    """Load label files; each one that cannot be used becomes a Problem.

    Notes about usable files (e.g. read leniently) are re-issued as warnings.
    """
    out = []
    for p in paths:
        try:
            lf = load_label(p)
        except LabelError as e:
            problems.append(Problem(e.path, e.reason))
            continue
        for note in lf.warnings:
            warnings.warn(note, stacklevel=2)
        out.append(lf)
    return out


def load_explicit(paths: Iterable[str | Path], problems: list[Problem]) -> list[LabelFile]:
    """Label files the user named (`--labels`); each one that cannot be used is a Problem."""
    out = []
    for p in map(Path, paths):
        try:
            out.append(load_label(p, explicit=True))
        except LabelError as e:
            problems.append(Problem(e.path, e.reason))
    return out


class LabelJoin:
    """Joins verdicts to runs and remembers what to report once every run was read."""

    def __init__(self, labels: list[LabelFile]) -> None:
        self.labels = labels
        self.index = LabelIndex(labels)
        self.matched: dict[int, set[str]] = {id(lf): set() for lf in labels}
        self.uncovered: dict[str, list[str]] = {}  # source folder -> runs no label file covers

    def label(self, traj: Trajectory, path: Path, problems: list[Problem]) -> None:
        """Set `traj.resolved` from the label files; note disagreements as Problems."""
        # The run as walked (through links) and as it really lies: a label file beside either
        # labels it (`ln -s /data/runs/* .` puts the runs beside the label file only as links).
        walked = Path(os.path.abspath(traj.path or path))
        run_paths = [walked, Path(os.path.realpath(walked))]
        for named in self.index.naming(traj.instance_id):  # label files whose ids have a run
            if any(named.covers(p) for p in run_paths):
                self.matched[id(named)].add(traj.instance_id)
        verdict, lf, other = self.index.pick(run_paths[0], traj.instance_id)
        if lf is None and run_paths[1] != run_paths[0]:
            verdict, lf, other = self.index.pick(run_paths[1], traj.instance_id)
        traj.resolved = verdict
        if lf is None and not any(f.covers(p) for f in self.labels for p in run_paths):
            root = next((p for p in walked.parents if p.name == traj.source), walked.parent)
            self.uncovered.setdefault(str(root), []).append(traj.id)
        if lf is not None and other is not None:
            problems.append(
                Problem(
                    str(path),
                    f"labels disagree: {lf.path} says {verdict}, {other.path} says {other.verdicts[traj.instance_id]}; used {lf.path.name}",
                )
            )

    def report(self, problems: list[Problem]) -> None:
        """Problems for label ids with no run, and for runs no label file covers."""
        for lf in self.labels:
            missing = sorted(lf.named - self.matched[id(lf)])
            if missing:
                problems.append(
                    Problem(
                        str(lf.path),
                        f"names {len(missing)} instance(s) with no run here: {_shown(missing)}",
                    )
                )
        for root, ids in sorted(self.uncovered.items()):
            problems.append(
                Problem(
                    root,
                    f"{len(ids)} run(s) that no label file covers (no verdict): {_shown(sorted(ids))}",
                )
            )


def _shown(ids: list[str]) -> str:
    return ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
