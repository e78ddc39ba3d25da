"""A model bundle on disk: load it, verify file hashes and versions, look up thresholds.

Layout (docs/BUNDLE.md): model.onnx (+ .data), model_kv.onnx (+ .data), optional
model.int8.onnx / model_kv.int8.onnx, tokenizer.json, monitor.json, README.md, baselines/.
monitor.json holds everything the scorer needs besides the graphs (featuriser config, signal
names, thresholds, policy, versions) and the sha256 of every other file in the bundle.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitor.errors import BundleError
from monitor.thresholds import Thresholds, ThresholdTable
from serving.trust import SIGNATURE, verify_manifest

MANIFEST = "monitor.json"
BUNDLE_FORMAT = 2
"""Version of the bundle layout; a loader refuses other versions. 2: model_kv.onnx takes several
sessions as rows (left-padded past, right-padded new tokens, per-row positions and last token);
format 1 graphs assumed one unpadded row and would score a batched row wrongly."""
MIN_ONNXRUNTIME = (1, 16)
"""Oldest onnxruntime that runs the exported opsets (17)."""
REQUIRED = ("model.onnx", "model_kv.onnx", "tokenizer.json")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def file_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under `root` except monitor.json and its signature, keyed by POSIX
    relative path."""
    return {
        p.relative_to(root).as_posix(): sha256_file(p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).as_posix() not in (MANIFEST, SIGNATURE)
    }


def write_manifest(root: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Add the file hashes to `manifest` and write it as root/monitor.json (last, after every file)."""
    manifest = dict(manifest)
    manifest["files"] = file_hashes(root)
    (root / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")
    return manifest


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
        manifest: monitor.json as a dict.
        sha256: sha256 of monitor.json as read (it lists the sha256 of every other file, so it
            names the whole bundle; what `--bundle-sha256` pins).
    """

    path: Path
    manifest: dict[str, Any] = field(default_factory=dict)
    sha256: str = ""

    @property
    def featuriser(self) -> dict[str, Any]:
        return dict(self.manifest.get("featuriser") or {})

    @property
    def signal_names(self) -> list[str]:
        return list(self.manifest.get("signal_names") or [])

    @property
    def thresholds(self) -> ThresholdTable | None:
        """thresholds.json as exported (None: the bundle was exported without thresholds)."""
        th = self.manifest.get("thresholds")
        return ThresholdTable.model_validate(th) if th else None

    @property
    def policy(self) -> dict[str, Any]:
        """The PolicyConfig dict; its schedule is the one the thresholds were calibrated for."""
        return dict(self.manifest.get("policy") or {})

    @property
    def target(self) -> float:
        return float(self.manifest.get("target", 0.05))

    @property
    def calibration(self) -> dict[str, Any]:
        """Where the served thresholds come from, without local paths (what serving states):
        the `failfast calibrate` record of monitor.json (docs/BUNDLE.md) less its command line,
        data paths and history; else the training run's (thresholds.json `calibration`)."""
        rec = self.manifest.get("calibration")
        if isinstance(rec, dict):
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
        table = self.manifest.get("thresholds") or {}
        if not table:
            return {"by": None, "note": "exported without thresholds: no stop by score"}
        return {"by": "failfast train", **(table.get("calibration") or {})}

    @property
    def kv(self) -> dict[str, int]:
        """{"n_layers", "kv_heads", "head_dim"} of the KV graph's cache tensors."""
        return {k: int(v) for k, v in (self.manifest.get("kv") or {}).items()}

    def graph(self, name: str, *, int8: bool = False) -> Path:
        """Path of a graph ("model.onnx" or "model_kv.onnx"), its int8 twin when asked."""
        if int8:
            name = name[: -len(".onnx")] + ".int8.onnx"
        p = self.path / name
        if not p.is_file():
            hint = " (export with --int8)" if int8 else ""
            raise BundleError(f"{p}: graph missing from the bundle{hint}")
        if name not in (self.manifest.get("files") or {}):
            # only files listed with a hash were verified at load: never run an unverified graph
            raise BundleError(f"{p}: not listed in monitor.json, so not verified; re-export")
        return p

    def thresholds_for(
        self, agent: str | None, target: float | None = None, source: str = ""
    ) -> Thresholds:
        """Stop/warn thresholds for a run of `agent` (and `source`, the data source name a
        table keyed by source is looked up under) at `target` (default: the bundle's), by the one
        lookup rule (monitor.thresholds.ThresholdTable.lookup); no thresholds: no stop by score."""
        table = self.thresholds
        if table is None:
            return Thresholds(math.inf, math.inf, "refused")
        group = table.group_of(agent or "", source) or None
        return table.lookup(group, self.target if target is None else target)


def start_record(scorer: Any) -> dict[str, Any]:
    """The first line a decision log gets from a scorer: which bundle and graphs score its runs
    (`failfast calibrate` checks that the graphs of --bundle are the ones that scored the log)."""
    import time

    bundle: Bundle | None = getattr(scorer, "bundle", None)
    files = (bundle.manifest.get("files") or {}) if bundle is not None else {}
    return {
        "ts": round(time.time(), 3),
        "event": "start",
        "run": "",
        "bundle": bundle.path.name if bundle is not None else None,
        "bundle_sha256": bundle.sha256 if bundle is not None else None,
        "graphs": {k: v for k, v in files.items() if k.endswith(".onnx")},
        "int8": bool(getattr(scorer, "int8", False)),
        "target": getattr(scorer, "target", None),
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
    try:
        manifest = json.loads(raw)
    except ValueError as e:
        raise BundleError(f"{mpath}: invalid JSON: {e}") from e
    if not isinstance(manifest, dict):
        raise BundleError(f"{mpath}: manifest must be a JSON object")
    for name, kind in _FIELD_TYPES.items():
        if manifest.get(name) is not None and not isinstance(manifest[name], kind):
            raise BundleError(
                f"{mpath}: field {name!r} must be {_KIND_NAMES[kind]}, not "
                f"{type(manifest[name]).__name__} ({json.dumps(manifest[name], default=str)[:80]})"
            )
    versions = manifest.get("versions") or {}
    fmt = versions.get("bundle_format")
    if fmt != BUNDLE_FORMAT:
        hint = (
            " (an older export: run `failfast export --train-dir OUT --out NEW` on the training "
            "output it came from)"
            if isinstance(fmt, int) and fmt < BUNDLE_FORMAT
            else ""
        )
        raise BundleError(
            f"{mpath}: bundle format {fmt!r}, this failfast-monitor reads format "
            f"{BUNDLE_FORMAT}{hint}"
        )
    import onnxruntime

    if _version_tuple(onnxruntime.__version__) < MIN_ONNXRUNTIME:
        need = ".".join(map(str, MIN_ONNXRUNTIME))
        raise BundleError(
            f"{root}: onnxruntime {onnxruntime.__version__} is too old, need >= {need}"
        )
    from monitor.signals import SIGNAL_NAMES

    unknown = [s for s in manifest.get("signal_names") or [] if s not in SIGNAL_NAMES]
    if unknown:
        raise BundleError(f"{mpath}: signals {unknown} are not computed by this monitor version")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise BundleError(f"{mpath}: no file hashes ('files') in the manifest")
    if not all(isinstance(v, str) for v in files.values()):
        raise BundleError(f"{mpath}: 'files' must map file names to sha256 strings")
    for name in REQUIRED:
        if name not in files:
            raise BundleError(f"{mpath}: required file {name} is not listed")
    for name, digest in files.items():
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise BundleError(f"{mpath}: listed file {name!r} points outside the bundle")
        p = root / name
        if not p.is_file():
            raise BundleError(f"{p}: listed in monitor.json but missing")
        if verify and sha256_file(p) != digest:
            raise BundleError(f"{p}: sha256 does not match monitor.json (file changed or corrupt)")
    bundle = Bundle(root, manifest, manifest_sha256)
    check_manifest(bundle, mpath)
    return bundle


def _check_thresholds(bundle: Bundle) -> None:
    """Look every calibrated group up at every target (a malformed table raises here)."""
    table = bundle.thresholds
    agents = [None, *(table.per_agent if table else {})]
    targets = [bundle.target, *(table.targets if table else [])]
    for agent in agents:
        for target in targets:
            bundle.thresholds_for(agent, float(target))


def check_manifest(bundle: Bundle, mpath: Path) -> None:
    """Every field the scorer will read, read once now: a wrong type is a BundleError naming the
    field at load time, not an exception in the middle of a run (where `failfast watch` would
    exit 1, the stop code).
    """
    from monitor.featurise import FeaturiserConfig
    from monitor.policy import PolicyConfig

    m = bundle.manifest
    checks: dict[str, Any] = {  # in dependency order: policy reads the thresholds' schedule
        "thresholds": lambda: _check_thresholds(bundle),
        "featuriser": lambda: FeaturiserConfig.model_validate(bundle.featuriser),
        "policy": lambda: PolicyConfig.model_validate(bundle.policy),
        "target": lambda: 0 < bundle.target < 1 or _bad("a number between 0 and 1"),
        "kv": lambda: (
            all(k in bundle.kv for k in ("n_layers", "kv_heads", "head_dim"))
            or _bad("an object with n_layers, kv_heads and head_dim")
        ),
    }
    for name, check in checks.items():
        try:
            check()
        except Exception as e:  # noqa: BLE001 - any failure here is a malformed field
            value = json.dumps(m.get(name), default=str)[:120]
            raise BundleError(
                f"{mpath}: field {name!r} is malformed ({e}); it holds {value}"
            ) from e


_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "versions": dict,
    "files": dict,
    "featuriser": dict,
    "thresholds": dict,
    "policy": dict,
    "kv": dict,
    "signal_names": list,
    "target": (int, float),
}
_KIND_NAMES = {dict: "an object", list: "a list", (int, float): "a number"}


def _bad(what: str) -> bool:
    raise ValueError(f"must be {what}")


def read_policy(path: str | Path) -> dict[str, Any]:
    """The bundle's PolicyConfig dict, read leniently (no hash check): what a hook whose bundle
    failed to load still applies (loops, budgets). {} when even that cannot be read."""
    from monitor.policy import PolicyConfig

    try:
        manifest = json.loads((Path(path) / MANIFEST).read_bytes())
        policy = Bundle(Path(path), manifest).policy
        PolicyConfig.model_validate(policy)
    except Exception:  # noqa: BLE001 - a broken manifest just means the default policy
        return {}
    return policy
