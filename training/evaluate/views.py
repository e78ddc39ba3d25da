"""Which records calibrate the as-shipped comparison of a cross-fitted view.

The K-fold views (instance, repo) calibrate each test fold on the other folds' records
(`view_folds`); the views with other (train, test) pairs (time, benchmark) keep each pair's
training runs scored out of fold by every candidate, as OUT/<view>/calibration-<i>.parquet with
the test run ids of each pair in pairs.json (`view_calibration`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from training.data.records import RunRecord, load_records

K_FOLD_VIEWS = ("instance", "repo")
"""Views whose test folds calibrate each other (training.evaluate.candidates); the others keep
each pair's out-of-fold training records to calibrate on."""
PAIRS_JSON = "pairs.json"
"""The test run ids of each pair of a view without K folds, in pair order."""


def calibration_file(folder: Path, i: int) -> Path:
    """Pair i's calibration records (its training runs scored out of fold) in a view's folder."""
    return folder / f"calibration-{i}.parquet"


def calibration_files(folder: Path) -> list[Path]:
    """The calibration records a view's folder holds, in pair order (none for a K-fold view)."""
    out: list[Path] = []
    while calibration_file(folder, len(out)).exists():
        out.append(calibration_file(folder, len(out)))
    return out


def view_folds(view: str, records: Sequence[RunRecord], k: int, seed: int) -> np.ndarray | None:
    """The fold of each record under a K-fold view (instance, repo), as `failfast crossfit`
    drew them (both read only instance ids); None for the views without K folds."""
    from training.data.folds import instance_folds, repo_folds

    if view == "instance":
        return instance_folds(cast(Any, records), k, seed=seed)
    if view == "repo":
        return repo_folds(cast(Any, records), k)
    return None


def view_calibration(
    folder: Path, records: Sequence[RunRecord]
) -> list[tuple[list[RunRecord], list[RunRecord]]] | None:
    """(calibration, test) records of each pair of a view without K folds, from FOLDER's
    calibration-<i>.parquet and pairs.json (None when the view did not write them: a K-fold
    view, or one cross-fitted before they were kept)."""
    if not (folder / PAIRS_JSON).exists():
        return None
    by_id = {r.run_id: r for r in records}
    tests = json.loads((folder / PAIRS_JSON).read_text())
    return [
        (load_records(calibration_file(folder, i)), [by_id[x] for x in ids])
        for i, ids in enumerate(tests)
    ]
