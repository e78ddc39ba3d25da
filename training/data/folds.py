"""Cross-fitting folds and shift views: which runs train (and calibrate) and which are scored.

Every view keeps all runs of one instance (whatever the agent) on the same side, so a run is
always scored by a model that never saw its task. A view is a list of (train, test) index pairs
over one list of runs:

- `instance`: K folds of instances (seeded); every run is scored once. The in-distribution view.
- `repo`: K folds of repositories (the `owner__repo` of the instance id), balanced by runs:
  every run is scored by a model and thresholds that never saw its repository.
- `time`: within each repository, instances ordered by their issue/PR number; the earlier half
  trains and calibrates, the later half is scored (tasks that came later, as a deployment meets).
- `benchmark`: one benchmark's runs train (SWE-bench Lite), the other's are scored (Verified),
  and the reverse. The benchmark of a run is the `swe-bench-*` folder above its transcript.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from monitor.types import Trajectory

VIEWS = ("instance", "repo", "time", "benchmark")
Pair = tuple[np.ndarray, np.ndarray]
_NUMBER = re.compile(r"(\d+)$")


def instance_folds(runs: Sequence[Trajectory], k: int, *, seed: int = 0) -> np.ndarray:
    """Fold (0..k-1) of each run; runs of one instance share a fold (seeded, balanced)."""
    if k < 2:
        raise ValueError(f"cross-fitting needs at least 2 folds (got {k})")
    ids = sorted({r.instance_id for r in runs})
    if len(ids) < k:
        raise ValueError(f"cross-fitting: {len(ids)} instances for {k} folds")
    random.Random(seed).shuffle(ids)
    fold_of = {iid: i % k for i, iid in enumerate(ids)}
    return np.array([fold_of[r.instance_id] for r in runs], dtype=np.int64)


def repo_of(instance_id: str) -> str:
    """`django__django-11001` -> `django__django` (the id itself when it has no number)."""
    return _NUMBER.sub("", instance_id).rstrip("-_") or instance_id


def repo_folds(runs: Sequence[Trajectory], k: int) -> np.ndarray:
    """Fold of each run such that each repository is in one fold; the largest repositories are
    placed first, each in the fold with the fewest runs so far."""
    sizes = Counter(repo_of(r.instance_id) for r in runs)
    if len(sizes) < k:
        raise ValueError(f"{len(sizes)} repositories for {k} repository folds")
    load = [0] * k
    fold_of: dict[str, int] = {}
    for repo, n in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])):
        f = min(range(k), key=lambda i: (load[i], i))
        fold_of[repo] = f
        load[f] += n
    return np.array([fold_of[repo_of(r.instance_id)] for r in runs], dtype=np.int64)


def _number(instance_id: str) -> int:
    m = _NUMBER.search(instance_id)
    return int(m.group(1)) if m else 0


def time_halves(runs: Sequence[Trajectory]) -> np.ndarray:
    """0 for the earlier half of each repository's instances (by issue/PR number), 1 for the
    later half."""
    by_repo: dict[str, set[str]] = {}
    for r in runs:
        by_repo.setdefault(repo_of(r.instance_id), set()).add(r.instance_id)
    half: dict[str, int] = {}
    for ids in by_repo.values():
        ordered = sorted(ids, key=lambda i: (_number(i), i))
        for j, iid in enumerate(ordered):
            half[iid] = int(j >= len(ordered) / 2)
    return np.array([half[r.instance_id] for r in runs], dtype=np.int64)


def benchmark_of(run: Trajectory) -> str:
    """The `swe-bench-*` folder above the run's transcript ("" when there is none)."""
    return next((p for p in Path(run.path).parts if p.startswith("swe-bench-")), "")


def view_pairs(view: str, runs: Sequence[Trajectory], *, k: int = 5, seed: int = 0) -> list[Pair]:
    """The (train, test) index pairs of a view (see the module docstring)."""
    if view == "instance":
        fold = instance_folds(runs, k, seed=seed)
    elif view == "repo":
        fold = repo_folds(runs, k)
    elif view == "time":
        half = time_halves(runs)
        return [(np.flatnonzero(half == 0), np.flatnonzero(half == 1))]
    elif view == "benchmark":
        bench = np.array([benchmark_of(r) for r in runs])
        names = sorted(set(bench) - {""})
        if len(names) != 2:
            raise ValueError(f"the benchmark view needs runs of two benchmarks, found {names}")
        return [
            (np.flatnonzero(bench == a), np.flatnonzero(bench == b))
            for a, b in (names, names[::-1])
        ]
    else:
        raise ValueError(f"unknown view {view!r} (known: {', '.join(VIEWS)})")
    return [(np.flatnonzero(fold != f), np.flatnonzero(fold == f)) for f in range(k)]
