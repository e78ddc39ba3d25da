"""The feature cache: per-run boundary features on disk, keyed by what produced them.

Layout: CACHE/features/<backbone key>/<feature key>/<aa>/<run hash>.npz, where the feature key is
the featuriser config hash (+ a pooling suffix, see `feature_key`) and the run hash covers
everything the featuriser reads from a run (task, agent, steps). A second training run over the
same data and config skips the feature pass.

Every entry carries a sha256 of its bytes; `get` verifies it, then the shape, dtype and finite
values, so a half-written, bit-flipped, empty, wrong-shaped or NaN entry is a miss (recomputed),
never a crash or a silently wrong feature. Entries written before the checksum existed are read
when their shape, dtype and values pass (their zip CRC-32 guards the arrays' bytes).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from monitor.atomic import atomic_write_bytes
from monitor.types import Trajectory

log = logging.getLogger(__name__)

MAGIC = b"FFC1"
"""An entry: MAGIC, the sha256 of the rest (32 bytes), then the .npz bytes."""


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


# Fields added to a hashed config after caches were written: left out of the hash while at
# this value (their default), so the features cached before they existed stay valid.
_ADDED_LATER = {"pin_edit_chars": 0}


def config_hash(config: Any) -> str:
    """A short hash of a pydantic config (or a plain dict)."""
    data = config.model_dump() if hasattr(config, "model_dump") else dict(config)
    data = {k: v for k, v in data.items() if not (k in _ADDED_LATER and v == _ADDED_LATER[k])}
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
        self.damaged = 0  # damaged entries met (each a miss)

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.npz"

    def get(self, key: str) -> RunFeatures | None:
        """The cached features of a run, or None: missing, or damaged in any way (unreadable,
        truncated, a flipped byte, a wrong shape or dtype, non-finite values), which is a miss
        that the next `put` overwrites."""
        p = self._path(key)
        if not p.is_file():
            return None
        try:
            return _verified(p)
        # np.load of a damaged file raises any of these (BadZipFile, EOFError, pickle refusal)
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as e:
            self._damaged(p, str(e) or type(e).__name__)
            return None

    def _damaged(self, p: Path, why: str) -> None:
        """Log the first damaged entry as a warning, the rest at debug (one line per pass, not
        one per run); `damaged` counts them."""
        self.damaged += 1
        level = logging.WARNING if self.damaged == 1 else logging.DEBUG
        log.log(level, "%s: damaged feature cache entry (%s); recomputing it", p, why)
        if self.damaged == 1:
            log.warning("further damaged entries of %s are logged at debug level", self.dir)

    def put(self, key: str, feats: RunFeatures) -> None:
        """Store a run's features whole or not at all (temporary file, fsync, rename)."""
        p = self._path(key)
        p.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        hidden = np.ascontiguousarray(feats.hidden, dtype=np.float32)
        np.savez(buf, hidden=hidden, encoded_tokens=np.int64(feats.encoded_tokens))
        payload = buf.getvalue()
        # whole or absent (the feature pass writes thousands: no folder fsync per entry)
        atomic_write_bytes(p, MAGIC + hashlib.sha256(payload).digest() + payload, sync_dir=False)


def _verified(p: Path) -> RunFeatures:
    """An entry's features once every check holds; ValueError saying which failed otherwise."""
    blob = p.read_bytes()
    if blob.startswith(MAGIC):
        digest, payload = blob[len(MAGIC) : len(MAGIC) + 32], blob[len(MAGIC) + 32 :]
        if hashlib.sha256(payload).digest() != digest:
            raise ValueError("checksum mismatch (truncated or altered)")
    elif blob.startswith(b"PK"):
        # A bare .npz from before the checksum: kept (its zip CRC-32 guards the arrays' bytes),
        # so an existing cache is not recomputed; every new entry carries the checksum.
        payload = blob
    else:
        raise ValueError("neither a checksummed entry nor an .npz" if blob else "empty file")
    with np.load(io.BytesIO(payload), allow_pickle=False) as z:
        hidden, tokens = z["hidden"], z["encoded_tokens"]
    if hidden.dtype != np.float32 or hidden.ndim != 2:
        raise ValueError(f"hidden is {hidden.dtype} {hidden.shape}, not 2-D float32")
    if tokens.shape != () or tokens.dtype.kind not in "iu" or int(tokens) < 0:
        raise ValueError(f"encoded_tokens is {tokens.dtype} {tokens.shape}")
    if not np.isfinite(hidden).all():
        raise ValueError("non-finite values")
    return RunFeatures(hidden, int(tokens))
