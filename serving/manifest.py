"""monitor.json as one type: what a bundle promises its scorer (docs/BUNDLE.md lists every field).

`Manifest` is read by `read_manifest` (serving.bundle.load_bundle, and leniently by the hooks'
`read_policy`) and written by `write_manifest` (`failfast export` and `failfast calibrate --out`);
nothing else parses or writes the file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from monitor.errors import BundleError
from monitor.featurise import FeaturiserConfig
from monitor.policy import PolicyConfig
from monitor.thresholds import DEFAULT_TARGET, ThresholdTable
from serving.trust import SIGNATURE

MANIFEST = "monitor.json"
TEXT_HEAD_FILE = "monitor_text.json"
"""The LM probe's text part in a bundle (train.probe_text), named by `classifier.text_head`."""
TEXT_PROBE = "text_probe.json"
"""The second probe's text part (train.text_candidate), named by `classifier.text_probe`."""
BUNDLE_FORMAT = 4
"""The newest bundle layout (written where a second probe needs it; a loader refuses formats
outside READABLE_FORMATS).
2: model_kv.onnx takes several sessions as rows (left-padded past, right-padded new tokens,
per-row positions and last token); format 1 graphs assumed one unpadded row and would score a
batched row wrongly. 3: the LM probe's score may add a text part (`classifier.text_head` names
the file, monitor_text.json), which a format-2 loader would silently leave out. 4: the graphs
may carry a second logit ("logits_text", the second probe served as candidate monitor_text;
`classifier.text_probe` names its text part), which a format-3 loader would take for a cache
tensor."""
TEXT_HEAD_FORMAT = 3
"""The format written for a bundle whose LM probe has a text part and no second probe."""
TEXTLESS_FORMAT = 2
"""The format written for a bundle without a text part (what format 2 readers read alike)."""
READABLE_FORMATS = (TEXTLESS_FORMAT, TEXT_HEAD_FORMAT, BUNDLE_FORMAT)
"""Formats this loader reads: a format-2 bundle has no text part and scores as it always did."""


def format_for(*, text_head: bool, text_probe: bool) -> int:
    """The oldest format whose readers score a bundle with these parts rightly."""
    if text_probe:
        return BUNDLE_FORMAT
    return TEXT_HEAD_FORMAT if text_head else TEXTLESS_FORMAT


class KvShape(BaseModel):
    """The cache tensors of model_kv.onnx."""

    model_config = ConfigDict(extra="forbid")

    n_layers: int
    """Decoder layers (one past_key_i / past_value_i pair each)."""
    kv_heads: int
    """Key/value heads per layer."""
    head_dim: int
    """Width of one head."""
    pooled_hidden: int = 0
    """Width of the running hidden sum carried by the KV graph (0: pooling "last")."""


class Manifest(BaseModel):
    """monitor.json: everything the scorer needs besides the graphs, and every file's sha256."""

    model_config = ConfigDict(extra="forbid")

    featuriser: FeaturiserConfig = Field(default_factory=FeaturiserConfig)
    """The featuriser config the graphs were trained with (window tokens, character cuts)."""
    signal_names: list[str] = Field(default_factory=list)
    """The signal columns the graphs read, in order (each one monitor.signals computes)."""
    classifier: dict[str, Any] = Field(default_factory=dict)
    """`base`, `n_layers`, `hidden`, `head_kind`, `pooling` of the trained classifier, and
    `text_head` (format 3): the file whose text logit the LM probe's score adds (absent: none),
    `text_probe` (format 4): the second probe's text part, added to the graphs' "logits_text"."""
    kv: KvShape | None = None
    """The KV graph's cache shape."""
    label: dict[str, str] = Field(default_factory=dict)
    """What the positive class and the score mean."""
    target: float = Field(DEFAULT_TARGET, gt=0, lt=1, strict=True)
    """The run-level FPR target served by default (`--target` overrides it)."""
    thresholds: ThresholdTable | None = None
    """thresholds.json; None (written `{}`): exported without thresholds, no stop by score."""
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    """The decision policy; its schedule is always the thresholds' (they hold only for it)."""
    metrics: dict[str, Any] = Field(default_factory=dict)
    """metrics.json of the training run."""
    data_summary: dict[str, Any] = Field(default_factory=dict)
    """data_summary.json of the training run."""
    export: dict[str, Any] = Field(default_factory=dict)
    """The ExportConfig used, the graph kind and the largest onnxruntime - torch differences."""
    versions: dict[str, Any] = Field(default_factory=dict)
    """bundle_format and the versions of the packages that wrote the bundle."""
    calibration: dict[str, Any] | None = None
    """Only in a bundle written by `failfast calibrate`: what recalibrated its thresholds."""
    files: dict[str, str] = Field(default_factory=dict)
    """sha256 of every other file, keyed by POSIX path relative to the bundle."""

    @field_validator("thresholds", mode="before")
    @classmethod
    def _empty_is_none(cls, v: Any) -> Any:
        return None if v == {} else v

    @field_validator("signal_names")
    @classmethod
    def _known_signals(cls, v: list[str]) -> list[str]:
        from monitor.signals import SIGNAL_NAMES

        if unknown := [s for s in v if s not in SIGNAL_NAMES]:
            raise ValueError(f"signals {unknown} are not computed by this monitor version")
        return v

    @model_validator(mode="after")
    def _policy_follows_thresholds(self) -> Manifest:
        if self.thresholds is not None:
            merged = {**self.policy.model_dump(), **self.thresholds.schedule.model_dump()}
            self.policy = PolicyConfig.model_validate(merged)
        return self

    def to_json(self) -> dict[str, Any]:
        """The monitor.json dict (no calibration record unless recalibrated)."""
        out = self.model_dump(mode="json", exclude={"calibration"})
        out["thresholds"] = self.thresholds.to_json() if self.thresholds is not None else {}
        if self.calibration is not None:
            out = {
                **{k: v for k, v in out.items() if k != "files"},
                "calibration": self.calibration,
            }
            out["files"] = self.files
        return out


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


def write_manifest(root: Path, manifest: Manifest) -> Manifest:
    """Hash every file of `root` into `manifest` and write it as root/monitor.json: last, after
    every file it hashes, beside the old one and renamed into place."""
    manifest = Manifest.model_validate({**manifest.to_json(), "files": file_hashes(root)})
    tmp = root / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest.to_json(), indent=1) + "\n")
    tmp.replace(root / MANIFEST)
    return manifest


def read_manifest(raw: bytes, where: Path, *, bundle_format: int | None = None) -> Manifest:
    """Parse monitor.json's bytes; BundleError naming `where` and the first malformed field, or
    (checked first: an older layout has other fields) a bundle format other than `bundle_format`."""
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise BundleError(f"{where}: invalid JSON: {e}") from e
    if not isinstance(data, dict):
        raise BundleError(f"{where}: manifest must be a JSON object")
    versions = data.get("versions")
    fmt = versions.get("bundle_format") if isinstance(versions, dict) else None
    readable: tuple[int, ...] = (
        READABLE_FORMATS if bundle_format in (None, BUNDLE_FORMAT) else (int(bundle_format),)
    )
    if bundle_format is not None and isinstance(versions, dict | None) and fmt not in readable:
        hint = (
            " (an older export: run `failfast export --train-dir OUT --out NEW` on the training "
            "output it came from)"
            if isinstance(fmt, int) and fmt < min(readable)
            else ""
        )
        raise BundleError(
            f"{where}: bundle format {fmt!r}, this failfast-monitor reads format "
            f"{' or '.join(map(str, readable))}{hint}"
        )
    try:
        return Manifest.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else "?"
        value = json.dumps(data.get(name), default=str)[:120]
        where_in = ".".join(str(p) for p in err["loc"][1:])
        raise BundleError(
            f"{where}: field {name!r} is malformed ({where_in + ': ' if where_in else ''}"
            f"{err['msg']}); it holds {value}"
        ) from e
