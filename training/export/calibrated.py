"""A recalibrated copy of a bundle: the same graphs and tokenizer, new thresholds and a
`calibration` record in monitor.json, every file re-hashed (`failfast calibrate --out`)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from monitor.atomic import atomic_dir
from monitor.errors import BundleError
from monitor.escape import md
from monitor.thresholds import ThresholdTable
from training.export.card import model_card

log = logging.getLogger(__name__)


def write_calibrated_bundle(
    bundle: Any,
    out: str | Path,
    table: ThresholdTable,
    record: dict[str, Any],
    *,
    target: float,
    candidates: dict[str, Any] | None = None,
) -> Path:
    """Copy the loaded `bundle` (serving.bundle.Bundle) to `out` with `table` as its thresholds,
    `target` as the served default and `record` as its `calibration`, and `candidates` as its
    candidates.json when given (the per-group choice re-made, training.evaluate.recalibrate_choice);
    the model card gets a section saying so. monitor.json is written last, and the copy is
    loaded back (hashes checked).

    Raises:
        BundleError: `out` is the source bundle, or not empty and not a bundle.
    """
    src, dst = Path(bundle.path), Path(out)
    check_out_dir(src, dst, "the bundle being recalibrated")
    # Built beside `out` and renamed into place whole: a kill leaves the previous bundle as it was.
    with atomic_dir(dst) as tmp:
        _copy(bundle, src, tmp, table, record, target, candidates)
    log.info("recalibrated bundle written to %s", dst)
    return dst


def check_out_dir(src: Path, dst: Path, what: str) -> None:
    """Refuse to write a new bundle at `dst` when it is `src` (`what`, in the message) or a
    folder that is not empty and not a bundle.

    Raises:
        BundleError: either.
    """
    from serving.manifest import MANIFEST

    if dst.resolve() == src.resolve():
        raise BundleError(f"{dst}: --out must not be {what}")
    if dst.exists() and any(dst.iterdir()) and not (dst / MANIFEST).is_file():
        raise BundleError(f"{dst}: not empty and not a bundle; refusing to overwrite")


def copy_listed(bundle: Any, src: Path, dst: Path) -> None:
    """Copy every file monitor.json lists from the bundle at `src` to `dst`."""
    for name in bundle.manifest.files:
        (dst / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / name, dst / name)


def _copy(
    bundle: Any,
    src: Path,
    dst: Path,
    table: ThresholdTable,
    record: dict[str, Any],
    target: float,
    candidates: dict[str, Any] | None = None,
) -> None:
    from serving.bundle import load_bundle
    from serving.manifest import Manifest, write_manifest

    copy_listed(bundle, src, dst)
    if candidates is not None:  # hashed with the rest by write_manifest below
        (dst / "candidates.json").write_text(json.dumps(candidates, indent=1) + "\n")
    # validated (not model_copy): the policy takes the new table's schedule
    manifest = Manifest.model_validate(
        {
            **bundle.manifest.to_json(),
            "thresholds": table.to_json(),
            "target": float(target),
            "calibration": record,
        }
    )
    # the card is rendered again from the new manifest (the copied one states the old thresholds)
    cands = dst / "candidates.json"  # the card names the re-calibrated groups' LM probe
    chosen = json.loads(cands.read_text()) if cands.is_file() else None
    (dst / "README.md").write_text(model_card(manifest.to_json(), chosen) + _card_section(record))
    write_manifest(dst, manifest)
    load_bundle(dst)  # the hashes hold before the copy replaces anything


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
        lines.append(f"- {md(g)}: {c['runs']} runs, {c['resolved']} resolved")
    for g, why in record["kept"].items():
        lines.append(f"- {md(g)}: {md(why)}")
    lines.append(f"- pooled: {record['pooled']}")
    check = record["data"].get("check")
    if check:
        lines.append(
            f"- checked first (`--check {check['held_out_fraction']:g}`): calibrated on "
            f"{check['calibration_runs']} runs, measured on {check['held_out_runs']} held-out runs "
            f"at {check['target_fpr']:g}: realized FPR {_pct(check['realized_fpr'])}, tokens saved "
            f"{_pct(check['token_savings'])}; this bundle is {check['bundle']}"
        )
        served = check.get("served")
        if served:
            names = ", ".join(
                f"{md(g)}: {md(str(c))}" for g, c in served["scorer_per_group"].items()
            )
            lines.append(
                f"- served per group ({names}), on the same held-out runs: realized FPR "
                f"{_pct(served['realized_fpr'])}, tokens saved {_pct(served['token_savings'])} "
                "(the LM probe's line above is the probe alone)"
            )
    return "\n".join(lines) + "\n"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"
