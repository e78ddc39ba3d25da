"""A per-job memo keyed by run object: computed once per run, forgotten when the run is freed.

Runs (monitor.types.Trajectory) are unhashable dataclasses, so entries are keyed by `id(run)` and
hold a weak reference that both checks the identity on a hit and drops the entry when the run is
garbage-collected (an id can then be reused by another object).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from monitor.types import Trajectory

V = TypeVar("V")


class RunMemo(Generic[V]):
    """`memo.get(run, compute)`: `compute(run)` the first time, the stored value afterwards."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref, V]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, run: object) -> bool:
        hit = self._entries.get(id(run))
        return hit is not None and hit[0]() is run

    def get(self, run: Trajectory, compute: Callable[[Trajectory], V]) -> V:
        hit = self._entries.get(id(run))
        if hit is not None and hit[0]() is run:
            return hit[1]
        value = compute(run)
        key, entries = id(run), self._entries

        def forget(_: weakref.ref) -> None:
            entries.pop(key, None)

        entries[key] = (weakref.ref(run, forget), value)
        return value
