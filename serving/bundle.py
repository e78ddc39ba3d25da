"""A model bundle on disk: load it, verify file hashes and versions, look up thresholds.

Layout (docs/BUNDLE.md): model.onnx (+ .data), model_kv.onnx (+ .data), optional
model.int8.onnx / model_kv.int8.onnx, tokenizer.json, monitor.json, README.md, baselines/.
monitor.json holds everything the scorer needs besides the graphs (featuriser config, signal
names, thresholds, policy, versions) and the sha256 of every other file in the bundle.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitor.errors import BundleError
from monitor.protocols import Scorer as ScorerProtocol
from monitor.thresholds import Thresholds, ThresholdTable
from serving.manifest import BUNDLE_FORMAT, MANIFEST, Manifest, read_manifest, sha256_file
from serving.trust import verify_manifest

__all__ = [
    "BUNDLE_FORMAT",
    "MANIFEST",
    "Bundle",
    "load_bundle",
    "read_policy",
    "sha256_file",
    "start_record",
]
MIN_ONNXRUNTIME = (1, 16)
"""Oldest onnxruntime that runs the exported opsets (17)."""
REQUIRED = ("model.onnx", "model_kv.onnx", "tokenizer.json")
CANDIDATES = "candidates.json"
"""The calibrated candidates and the per-group choice (serving.choice)."""
log = logging.getLogger(__name__)


def _version_tuple(v: str) -> tuple[int, ...]:
    out = []
    for part in v.split(".")[:3]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


@dataclass
class Bundle:
    """A loaded, verified bundle.

    Attributes:
        path: the bundle folder.
        manifest: monitor.json, typed.
        sha256: sha256 of monitor.json as read (it lists the sha256 of every other file, so it
            names the whole bundle; what `--bundle-sha256` pins).
    """

    path: Path
    manifest: Manifest = field(default_factory=Manifest)
    sha256: str = ""

    @property
    def featuriser(self) -> dict[str, Any]:
        return self.manifest.featuriser.model_dump()

    @property
    def signal_names(self) -> list[str]:
        return list(self.manifest.signal_names)

    @property
    def thresholds(self) -> ThresholdTable | None:
        """thresholds.json as exported (None: the bundle was exported without thresholds)."""
        return self.manifest.thresholds

    @property
    def policy(self) -> dict[str, Any]:
        """The PolicyConfig dict; its schedule is the one the thresholds were calibrated for."""
        return self.manifest.policy.model_dump()

    @property
    def target(self) -> float:
        return self.manifest.target

    @property
    def calibration(self) -> dict[str, Any]:
        """Where the served thresholds come from, without local paths (what serving states):
        the `failfast calibrate` record of monitor.json (docs/BUNDLE.md) less its command line,
        data paths and history; else the training run's (thresholds.json `calibration`)."""
        rec = self.manifest.calibration
        if rec is not None:
            out = {k: v for k, v in rec.items() if k not in ("command", "history")}
            if isinstance(out.get("data"), dict):
                out["data"] = {
                    k: (
                        len(v)
                        if k in ("paths", "verdicts", "labels") and isinstance(v, list)
                        else v
                    )
                    for k, v in out["data"].items()
                }
            out["earlier_calibrations"] = len(rec.get("history") or [])
            return out
        table = self.manifest.thresholds
        if table is None:
            return {"by": None, "note": "exported without thresholds: no stop by score"}
        return {"by": "failfast train", **(table.calibration or {})}

    @property
    def kv(self) -> dict[str, int]:
        """{"n_layers", "kv_heads", "head_dim", "pooled_hidden"} of the KV graph's caches."""
        return self.manifest.kv.model_dump() if self.manifest.kv is not None else {}

    @property
    def graph_hashes(self) -> dict[str, str]:
        """sha256 of each ONNX graph, by file name (what scored a decision log's runs)."""
        return {k: v for k, v in self.manifest.files.items() if k.endswith(".onnx")}

    def graph(self, name: str, *, int8: bool = False) -> Path:
        """Path of a graph ("model.onnx" or "model_kv.onnx"), its int8 twin when asked."""
        if int8:
            name = name[: -len(".onnx")] + ".int8.onnx"
        p = self.path / name
        if not p.is_file():
            hint = " (export with --int8)" if int8 else ""
            raise BundleError(f"{p}: graph missing from the bundle{hint}")
        if name not in self.manifest.files:
            # only files listed with a hash were verified at load: never run an unverified graph
            raise BundleError(f"{p}: not listed in monitor.json, so not verified; re-export")
        return p

    def candidates(self) -> dict[str, Any] | None:
        """candidates.json as JSON, None when monitor.json does not list (hash) it: what
        `choice` serves from, for the tools that rewrite it (`failfast calibrate`,
        `failfast known-tasks`).

        Raises:
            BundleError: the listed file is unreadable or not JSON.
        """
        if CANDIDATES not in self.manifest.files:
            return None
        p = self.path / CANDIDATES
        try:
            data: dict[str, Any] = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise BundleError(f"{p}: not a readable candidates file: {e}") from e
        return data

    def choice(self) -> Any:
        """candidates.json as a serving.choice.Choice, None when the bundle has none; a file
        not listed (hashed) in monitor.json is never read (warned once, the LM probe serves).

        Raises:
            BundleError: the listed file is not a readable candidates file.
        """
        from serving.choice import Choice

        p = self.path / CANDIDATES
        data = self.candidates()
        if data is None:
            if p.is_file():
                log.warning("%s: not listed in monitor.json, so not verified; ignored", p)
            return None
        try:
            choice = Choice.from_json(data, self.thresholds)
        except (ValueError, KeyError, TypeError) as e:
            raise BundleError(f"{p}: not a readable candidates file: {e}") from e
        choice.text_probe = bool(self.manifest.classifier.get("text_probe"))
        if choice.known is not None:  # the known-task choice scores with the same graphs
            choice.known.text_probe = choice.text_probe
        return choice

    def text_head(self) -> Any:
        """The LM probe's text part (serving.candidates.TfidfLR, intercept 0) when monitor.json
        names one (`classifier.text_head`), else None.

        Raises:
            BundleError: it is named but not listed (hashed) in monitor.json, or unreadable:
                scoring without it would serve other scores than the thresholds were set on.
        """
        return self._text_part("text_head", "the probe's text head")

    def text_probe(self) -> Any:
        """The second probe's text part (serving.candidates.TfidfLR, intercept 0) when
        monitor.json names one (`classifier.text_probe`; the graphs then output "logits_text"),
        else None.

        Raises:
            BundleError: as for `text_head`.
        """
        return self._text_part("text_probe", "the second probe's text part")

    def _text_part(self, key: str, what: str) -> Any:
        from serving.candidates import read_text_head

        name = self.manifest.classifier.get(key)
        if not name:
            return None
        p = self.path / str(name)
        if str(name) not in self.manifest.files:
            raise BundleError(f"{p}: {what} is not listed in monitor.json")
        return read_text_head(p)

    def group_of(self, agent: str | None, source: str = "") -> str:
        """The threshold group a run of `agent` / `source` belongs to (ThresholdTable.group_of;
        "" when the bundle has no thresholds)."""
        table = self.thresholds
        return table.group_of(agent or "", source) if table is not None else ""

    def thresholds_for(
        self, agent: str | None, target: float | None = None, source: str = ""
    ) -> Thresholds:
        """Stop/warn thresholds for a run of `agent` (and `source`, the data source name a
        table keyed by source is looked up under) at `target` (default: the bundle's), by the one
        lookup rule (monitor.thresholds.ThresholdTable.lookup); no thresholds: no stop by score."""
        table = self.thresholds
        if table is None:
            return Thresholds(math.inf, math.inf, "refused")
        return table.lookup(
            self.group_of(agent, source) or None, self.target if target is None else target
        )


def start_record(scorer: ScorerProtocol) -> dict[str, Any]:
    """The first line a decision log gets from a scorer: which bundle and graphs score its runs
    (`failfast calibrate` checks that the graphs of --bundle are the ones that scored the log)."""
    import time

    bundle = scorer.bundle
    return {
        "ts": round(time.time(), 3),
        "event": "start",
        "run": "",
        "bundle": bundle.path.name if bundle is not None else None,
        "bundle_sha256": bundle.sha256 if bundle is not None else None,
        "graphs": bundle.graph_hashes if bundle is not None else {},
        "int8": bool(scorer.int8),
        "target": scorer.target,
    }


def load_bundle(
    path: str | Path,
    *,
    verify: bool = True,
    sha256: str | None = None,
    trust: Sequence[str | Path] = (),
) -> Bundle:
    """Load and check a bundle folder.

    Args:
        path: the bundle folder (holding monitor.json).
        verify: check the sha256 of every listed file (reads every byte once).
        sha256: the expected sha256 (hex) of monitor.json, pinned by whoever deploys the
            bundle; None: not checked. The file hashes inside monitor.json only detect
            corruption; the pin also detects a bundle whose hashes were recomputed after a change.
        trust: public key files (`--trust`); when given, monitor.json must carry a signature of
            one of them (serving/trust.py) and every file's hash is checked.

    Raises:
        BundleError: missing folder/files, unreadable monitor.json, a monitor.json other than
            the pinned one or not signed by a trusted key (TrustError), a field of the wrong
            type, a hash mismatch, an unknown bundle format, an onnxruntime too old, or signals
            this monitor does not compute.
    """
    root = Path(path)
    mpath = root / MANIFEST
    if not root.is_dir():
        raise BundleError(f"{root}: bundle folder not found")
    try:
        raw = mpath.read_bytes()
    except OSError as e:
        raise BundleError(f"{mpath}: cannot read bundle manifest: {e.strerror or e}") from e
    manifest_sha256 = hashlib.sha256(raw).hexdigest()
    if sha256 is not None and manifest_sha256 != sha256.strip().lower():
        raise BundleError(
            f"{mpath}: sha256 is {manifest_sha256}, not the pinned {sha256.strip().lower()} "
            "(--bundle-sha256): the bundle was changed or is not the one you deployed"
        )
    if trust:  # over the bytes parsed below, read once: no swap between check and use
        verify_manifest(root, raw, trust)
        verify = True  # the signature vouches for the hashes; only a check of them covers files
    manifest = read_manifest(raw, mpath, bundle_format=BUNDLE_FORMAT)
    import onnxruntime

    if _version_tuple(onnxruntime.__version__) < MIN_ONNXRUNTIME:
        need = ".".join(map(str, MIN_ONNXRUNTIME))
        raise BundleError(
            f"{root}: onnxruntime {onnxruntime.__version__} is too old, need >= {need}"
        )
    if not manifest.files:
        raise BundleError(f"{mpath}: no file hashes ('files') in the manifest")
    for name in REQUIRED:
        if name not in manifest.files:
            raise BundleError(f"{mpath}: required file {name} is not listed")
    for name, digest in manifest.files.items():
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise BundleError(f"{mpath}: listed file {name!r} points outside the bundle")
        p = root / name
        if not p.is_file():
            raise BundleError(f"{p}: listed in monitor.json but missing")
        if verify and sha256_file(p) != digest:
            raise BundleError(f"{p}: sha256 does not match monitor.json (file changed or corrupt)")
    return Bundle(root, manifest, manifest_sha256)


def read_policy(path: str | Path) -> dict[str, Any]:
    """The bundle's PolicyConfig dict, read leniently (no hash check): what a hook whose bundle
    failed to load still applies (loops, budgets). {} when even that cannot be read."""
    import json

    from monitor.policy import PolicyConfig

    try:
        policy = json.loads((Path(path) / MANIFEST).read_bytes()).get("policy") or {}
        return PolicyConfig.model_validate(policy).model_dump() if policy else {}
    except Exception:  # noqa: BLE001 - a broken manifest just means the default policy
        return {}
