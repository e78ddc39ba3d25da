"""A recalibrated copy of a bundle: the same graphs and tokenizer, new thresholds and a
`calibration` record in monitor.json, every file re-hashed (`failfast calibrate --out`)."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from monitor.errors import BundleError
from monitor.thresholds import ThresholdTable

log = logging.getLogger(__name__)


def write_calibrated_bundle(
    bundle: Any,
    out: str | Path,
    table: ThresholdTable,
    record: dict[str, Any],
    *,
    target: float,
) -> Path:
    """Copy the loaded `bundle` (serving.bundle.Bundle) to `out` with `table` as its thresholds,
    `target` as the served default and `record` as its `calibration`; the model card gets a
    section saying so. monitor.json is written last, and the copy is loaded back (hashes checked).

    Raises:
        BundleError: `out` is the source bundle, or not empty and not a bundle.
    """
    from serving.bundle import load_bundle
    from serving.manifest import MANIFEST, write_manifest

    src, dst = Path(bundle.path), Path(out)
    if dst.resolve() == src.resolve():
        raise BundleError(f"{dst}: --out must not be the bundle being recalibrated")
    if dst.exists() and any(dst.iterdir()):
        if not (dst / MANIFEST).is_file():
            raise BundleError(f"{dst}: not empty and not a bundle; refusing to overwrite")
        shutil.rmtree(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for name in bundle.manifest.files:
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / name, dst / name)
    manifest = bundle.manifest.model_copy(
        update={"thresholds": table, "target": float(target), "calibration": record}
    )
    card = dst / "README.md"
    if card.is_file():
        card.write_text(card.read_text() + _card_section(record))
    write_manifest(dst, manifest)
    load_bundle(dst)
    log.info("recalibrated bundle written to %s", dst)
    return dst


def _card_section(record: dict[str, Any]) -> str:
    th = record["thresholds"]
    lines = [
        "",
        "## Recalibrated",
        "",
        f"Thresholds recalibrated by `failfast calibrate` at {record['at']} "
        f"({th['mode']}, {th['method']}; served target {th['served_target']:g}) on "
        f"{record['data'].get('kind')} data, without retraining:",
        "",
    ]
    for g, c in record["groups"].items():
        lines.append(f"- {g}: {c['runs']} runs, {c['resolved']} resolved")
    for g, why in record["kept"].items():
        lines.append(f"- {g}: {why}")
    lines.append(f"- pooled: {record['pooled']}")
    return "\n".join(lines) + "\n"
