"""Joining label files to runs: finding the files beside a run, indexing them by instance,
loading them, setting each run's `resolved`, and the Problems (disagreeing labels, label ids with
no run, runs no label file covers) `read_runs` reports."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from pathlib import Path

from monitor.errors import LabelError
from monitor.labels import PRIORITY, RESULTS_FOLDER, LabelFile, is_label_name, load_label
from monitor.problems import Problem
from monitor.types import Trajectory


def find_labels_near(run_path: Path, *, instance_id: str = "", levels: int = 4) -> list[Path]:
    """Label files beside a run: in its folder and up to `levels` folders above it (as written
    and with links resolved), and the SWE-bench harness reports of `instance_id` in those
    folders (`logs/.../<instance>/report.json`, `<tree>/<model>/<instance>/report.json`), and
    the files of a `results/` folder in them (a submission's `results/results.json`)."""
    found: list[Path] = []
    run_path = Path(os.path.abspath(run_path))
    folders = list(run_path.parents)[:levels]
    folders += [
        f for f in list(Path(os.path.realpath(run_path)).parents)[:levels] if f not in folders
    ]
    for folder in folders:
        try:
            children = list(folder.iterdir())
        except OSError:
            continue
        results = folder / RESULTS_FOLDER  # `<submission>/results/` labels `<submission>/`
        try:
            children += [c for c in results.iterdir() if c not in children]
        except OSError:  # none, or unreadable: as for the folder itself
            pass
        for child in children:
            if child.is_file() and is_label_name(child) and child not in found:
                found.append(child)
        logs = folder / "logs"
        if logs.is_dir():
            found.extend(p for p in logs.glob("*/report.json*") if is_label_name(p))
        if instance_id and not any(c in instance_id for c in "*?["):
            for pattern in (
                f"*/*/{instance_id}/report.json*",
                f"logs/*/*/*/{instance_id}/report.json*",
            ):
                found.extend(p for p in folder.glob(pattern) if is_label_name(p) and p not in found)
    return found


class LabelIndex:
    """All label files of a corpus, indexed by instance id for fast joins."""

    def __init__(self, labels: list[LabelFile]) -> None:
        self.labels = labels
        self._by_id: dict[str, list[LabelFile]] = {}
        for lf in labels:
            for iid in lf.verdicts:
                self._by_id.setdefault(iid, []).append(lf)
        self._defaults = [lf for lf in labels if lf.default is not None]
        self._naming: dict[str, list[LabelFile]] = {}
        for lf in labels:
            for iid in lf.named:
                self._naming.setdefault(iid, []).append(lf)

    def naming(self, instance_id: str) -> list[LabelFile]:
        """The label files that name `instance_id`."""
        return self._naming.get(instance_id, [])

    def pick(
        self, run_path: Path, instance_id: str, *, defaults: bool = True
    ) -> tuple[bool | None, LabelFile | None, LabelFile | None]:
        """The verdict for one run, the label file it came from, and a file that disagrees.

        Files that name the instance beat files that only give a default; then the deepest
        scope; then the kind order per-instance report > run report > summary > plain lists.
        A disagreeing file is one that also names the instance with the opposite verdict.
        `defaults=False`: only files that name the instance (a run reached through a link
        under another name is not one its real folder's plain lists left out).
        """
        run_path = Path(os.path.abspath(run_path))
        fallback = self._defaults if defaults else []
        candidates = {id(lf): lf for lf in self._by_id.get(instance_id, []) + fallback}
        applicable = [lf for lf in candidates.values() if lf.covers(run_path)]
        if not applicable:
            return None, None, None
        applicable.sort(
            key=lambda lf: (
                instance_id not in lf.verdicts,
                not lf.explicit,
                -len(lf.scope.parts),
                PRIORITY.get(lf.kind, 9),
            )
        )
        best = applicable[0]
        verdict = best.verdict(instance_id)
        if verdict is None and instance_id not in best.verdicts:
            return None, None, None
        other = next(
            (
                lf
                for lf in applicable[1:]
                if instance_id in lf.verdicts and lf.verdicts[instance_id] not in (None, verdict)
            ),
            None,
        )
        return verdict, best, other


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
        self.unnamed: dict[str, list[str]] = {}  # source folder -> covered runs with no verdict
        # label file -> ids it names of runs read outside the folder it labels, and one folder
        self.elsewhere: dict[int, tuple[set[str], str]] = {}

    def label(self, traj: Trajectory, path: Path, problems: list[Problem]) -> None:
        """Set `traj.resolved` from the label files; note disagreements as Problems."""
        # The run as walked (through links) and as it really lies: a label file beside either
        # labels it (`ln -s /data/runs/* .` puts the runs beside the label file only as links).
        walked = Path(os.path.abspath(traj.path or path))
        run_paths = [walked, Path(os.path.realpath(walked))]
        outside = []  # files naming the run's id that do not label its folder
        for named in self.index.naming(traj.instance_id):  # label files whose ids have a run
            if any(named.covers(p) for p in run_paths):
                self.matched[id(named)].add(traj.instance_id)
            else:
                outside.append(named)
        verdict, lf, other = self.index.pick(run_paths[0], traj.instance_id)
        if lf is None and run_paths[1] != run_paths[0]:
            # Through the link's target folder only a file naming the run labels it: a link
            # may rename the run, and that folder's plain lists would call the new name failed.
            renamed = run_paths[1].name != walked.name
            verdict, lf, other = self.index.pick(
                run_paths[1], traj.instance_id, defaults=not renamed
            )
        traj.resolved = verdict
        if lf is None:  # only a run left without a verdict is a hint (not another's labelled run)
            for named in outside:
                ids, _ = self.elsewhere.setdefault(id(named), (set(), str(walked.parent)))
                ids.add(traj.instance_id)
            root = next((p for p in walked.parents if p.name == traj.source), walked.parent)
            covered = any(f.covers(p) for f in self.labels for p in run_paths)
            (self.unnamed if covered else self.uncovered).setdefault(str(root), []).append(traj.id)
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
                why = f"names {len(missing)} instance(s) with no run here: {_shown(missing)}"
                seen, folder = self.elsewhere.get(id(lf), (set(), ""))
                if seen & set(missing):  # the runs are there, only not under its folder
                    why += (
                        f"; {len(seen & set(missing))} of them are runs outside {lf.scope}, the "
                        f"folder this file labels (e.g. in {folder}): a label file beside the "
                        "runs labels them, or pass it with --labels to label runs wherever they lie"
                    )
                problems.append(Problem(str(lf.path), why))
        for root, ids in sorted(self.uncovered.items()):
            problems.append(
                Problem(
                    root,
                    f"{len(ids)} run(s) that no label file covers (no verdict): {_shown(sorted(ids))}",
                )
            )
        for root, ids in sorted(self.unnamed.items()):
            problems.append(
                Problem(
                    root,
                    f"{len(ids)} run(s) that the label files here do not name (no verdict): "
                    f"{_shown(sorted(ids))}",
                )
            )


def _shown(ids: list[str]) -> str:
    return ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
