"""Seeded train / validation / test splits by instance_id.

All runs of one instance (several attempts, several agents) land in the same split, so no task is
seen in training and scored in evaluation. Instances are stratified by the set of agents that ran
them, so each agent keeps roughly the configured fractions in every split.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from monitor.errors import ConfigError
from monitor.types import Trajectory

SPLIT_NAMES = ("train", "val", "test")


@dataclass
class Splits:
    """Instance ids per split.

    Attributes:
        seed: the seed used.
        fractions: (train, val, test) fractions.
        train, val, test: sorted instance ids.
    """

    seed: int
    fractions: tuple[float, float, float]
    train: list[str]
    val: list[str]
    test: list[str]

    def of(self, instance_id: str) -> str | None:
        """The split an instance belongs to, or None when it is in none."""
        return self._index().get(instance_id)

    def _index(self) -> dict[str, str]:
        return {i: name for name in SPLIT_NAMES for i in getattr(self, name)}

    def select(self, runs: Sequence[Trajectory], name: str) -> list[Trajectory]:
        """The runs whose instance is in split `name`, in input order."""
        ids = set(getattr(self, name))
        return [r for r in runs if r.instance_id in ids]

    def to_dict(self) -> dict:
        return {
            "seed": self.seed,
            "fractions": list(self.fractions),
            "train": self.train,
            "val": self.val,
            "test": self.test,
        }


def make_splits(
    runs: Sequence[Trajectory], *, fractions: Sequence[float] = (0.6, 0.2, 0.2), seed: int = 0
) -> Splits:
    """Split the instances of `runs` (seeded, stratified by the agents that ran each instance).

    Args:
        runs: the runs (only instance_id and agent are read).
        fractions: train, val, test fractions (summing to 1).
        seed: RNG seed; the same runs and seed always give the same splits.
    """
    fr = tuple(float(f) for f in fractions)
    if len(fr) != 3 or min(fr) < 0 or abs(sum(fr) - 1.0) > 1e-6:
        raise ConfigError(f"split fractions must be three non-negative numbers summing to 1: {fr}")
    agents: dict[str, set[str]] = {}
    for r in runs:
        agents.setdefault(r.instance_id, set()).add(r.agent)
    groups: dict[tuple[str, ...], list[str]] = {}
    for inst in sorted(agents):
        groups.setdefault(tuple(sorted(agents[inst])), []).append(inst)
    rng = np.random.default_rng(seed)
    out: dict[str, list[str]] = {n: [] for n in SPLIT_NAMES}
    carry = np.zeros(3)  # fractional remainders carried across groups, so small groups add up
    for key in sorted(groups):
        ids = list(groups[key])
        rng.shuffle(ids)
        want = np.array(fr) * len(ids) + carry
        n_train = int(np.floor(want[0]))
        n_val = int(np.floor(want[1]))
        n_train = min(n_train, len(ids))
        n_val = min(n_val, len(ids) - n_train)
        carry = want - np.array([n_train, n_val, len(ids) - n_train - n_val])
        carry[2] = 0.0
        out["train"] += ids[:n_train]
        out["val"] += ids[n_train : n_train + n_val]
        out["test"] += ids[n_train + n_val :]
    return Splits(seed, fr, sorted(out["train"]), sorted(out["val"]), sorted(out["test"]))  # type: ignore[arg-type]


def save_splits(path: str | Path, splits: Splits) -> None:
    """Write splits.json."""
    Path(path).write_text(json.dumps(splits.to_dict(), indent=1) + "\n")


def load_splits(path: str | Path) -> Splits:
    """Read splits.json; raises ConfigError naming the file when it is malformed or leaks."""
    p = Path(path)
    try:
        d = json.loads(p.read_text())
        s = Splits(
            int(d["seed"]),
            tuple(d["fractions"]),  # type: ignore[arg-type]
            list(d["train"]),
            list(d["val"]),
            list(d["test"]),
        )
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{p}: not a splits file: {e}") from e
    seen: dict[str, str] = {}
    for name in SPLIT_NAMES:
        for inst in getattr(s, name):
            if inst in seen:
                raise ConfigError(f"{p}: instance {inst!r} is in both {seen[inst]} and {name}")
            seen[inst] = name
    return s
