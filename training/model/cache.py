"""The feature cache: per-run boundary features on disk, keyed by what produced them.

Layout: CACHE/features/<backbone key>/<feature key>/<aa>/<run hash>.npz, where the feature key is
the featuriser config hash (+ a pooling suffix, see `feature_key`) and the run hash covers
everything the featuriser reads from a run (task, agent, steps). A second training run over the
same data and config skips the feature pass.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from monitor.types import Trajectory

log = logging.getLogger(__name__)


@dataclass
class RunFeatures:
    """Boundary features of one run.

    Attributes:
        hidden: (n_steps, F) float32; row k-1 = the head features at the boundary of prefix k
            (F = H: the last hidden state; F = 2H with pooling "last+mean": [last ; mean]).
        encoded_tokens: tokens the model encoded for this run (sum of window lengths).
    """

    hidden: np.ndarray
    encoded_tokens: int


def run_hash(traj: Trajectory) -> str:
    """A content hash of what the featuriser reads from a run (independent of its file path)."""
    payload = {
        "task": traj.task,
        "agent": traj.agent,
        "steps": [s.to_dict() for s in traj.steps],
    }
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def config_hash(config: Any) -> str:
    """A short hash of a pydantic config (or a plain dict)."""
    data = config.model_dump() if hasattr(config, "model_dump") else dict(config)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def feature_key(featuriser_config: Any, pooling: str = "last") -> str:
    """Cache key of the features: the featuriser config hash, with a suffix naming the pooling
    when it is not "last", so a cache of one pooling is never read as another."""
    key = config_hash(featuriser_config)
    return key if pooling == "last" else f"{key}-{pooling.replace('+', '-')}"


class FeatureCache:
    """Per-run feature files under one (backbone, featuriser config) key.

    Args:
        root: the cache root (e.g. training.model.backbone.cache_dir() / "features").
        model_key: key of the frozen backbone (training.model.backbone.backbone_key).
        featuriser_key: `feature_key` of the FeaturiserConfig and pooling.
    """

    def __init__(self, root: str | Path, model_key: str, featuriser_key: str) -> None:
        self.dir = Path(root) / model_key / featuriser_key

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.npz"

    def get(self, key: str) -> RunFeatures | None:
        """The cached features of a run, or None (a damaged file counts as missing)."""
        p = self._path(key)
        if not p.is_file():
            return None
        try:
            with np.load(p) as z:
                return RunFeatures(z["hidden"].astype(np.float32), int(z["encoded_tokens"]))
        except (OSError, ValueError, KeyError) as e:
            log.warning("%s: unreadable feature cache entry (%s); recomputing", p, e)
            return None

    def put(self, key: str, feats: RunFeatures) -> None:
        p = self._path(key)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.stem + ".tmp.npz")
        np.savez(tmp, hidden=feats.hidden, encoded_tokens=np.int64(feats.encoded_tokens))
        tmp.replace(p)
