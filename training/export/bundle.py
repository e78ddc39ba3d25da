"""The serving bundle of a trained classifier (docs/BUNDLE.md): graphs, tokenizer, training
outputs, monitor.json with every file's sha256, model card.

The graphs themselves are training.export.graphs (wrappers), .fused (the fused decoder),
.convert (export and checks) and .quant (int8 twins and their AUROC check); the README text is
training.export.card.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch

from monitor.atomic import atomic_dir
from monitor.errors import BundleError
from monitor.featurise import FeaturiserConfig
from monitor.policy import PolicyConfig
from monitor.thresholds import ThresholdTable
from serving.manifest import (
    MANIFEST,
    TEXT_HEAD_FILE,
    TEXT_PROBE,
    KvShape,
    Manifest,
    format_for,
    write_manifest,
)
from training.config import ExportConfig
from training.export.card import model_card
from training.export.convert import ExportReport, export_graphs
from training.export.graphs import kv_shape
from training.export.quant import int8_diff, quantize_graphs
from training.model.classifier import PrefixClassifier

log = logging.getLogger(__name__)


def _read_json(path: Path) -> Any:
    import json

    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise BundleError(f"{path}: cannot read: {e}") from e


def _train_outputs(train_dir: Path | None) -> dict[str, Any]:
    """thresholds, metrics, data summary and policy section of a training output dir (if any)."""
    import yaml

    found: dict[str, Any] = {"thresholds": {}, "metrics": {}, "data_summary": {}, "policy": {}}
    if train_dir is None:
        return found
    for key, name in (
        ("thresholds", "thresholds.json"),
        ("metrics", "metrics.json"),
        ("data_summary", "data_summary.json"),
    ):
        if (train_dir / name).is_file():
            found[key] = _read_json(train_dir / name)
        else:
            log.warning("%s: not found; the bundle has no %s", train_dir / name, key)
    if (train_dir / "config.yaml").is_file():
        cfg = yaml.safe_load((train_dir / "config.yaml").read_text()) or {}
        found["policy"] = dict(cfg.get("policy") or {}) if isinstance(cfg, dict) else {}
    return found


def _versions(opset: int, *, text_head: bool, text_probe: bool = False) -> dict[str, Any]:
    """The `versions` record; the bundle format is 3 or 4 only where an older reader would
    score wrongly (a text head it would leave out, a second logit it would misread), so every
    other bundle stays readable by it."""
    from importlib import metadata

    import onnx
    import onnxruntime
    import transformers

    try:
        ours = metadata.version("failfast-monitor")
    except metadata.PackageNotFoundError:
        ours = "unknown"
    return {
        "bundle_format": format_for(text_head=text_head, text_probe=text_probe),
        "failfast_monitor": ours,
        "onnx_opset": opset,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def _manifest(
    model: PrefixClassifier,
    meta: dict[str, Any],
    found: dict[str, Any],
    cfg: ExportConfig,
    report: ExportReport,
) -> Manifest:
    """monitor.json without the file hashes (docs/BUNDLE.md lists every field)."""
    kv_heads, head_dim = kv_shape(model.backbone.config)
    return Manifest(
        featuriser=FeaturiserConfig.model_validate(meta.get("featuriser") or {}),
        signal_names=list(model.signal_names),
        classifier={
            **{k: meta.get(k) for k in ("base", "n_layers", "hidden", "head_kind")},
            "pooling": model.pooling,
            **({"text_head": TEXT_HEAD_FILE} if model.text_head is not None else {}),
            **({"text_probe": TEXT_PROBE} if model.text_probe is not None else {}),
        },
        kv=KvShape(
            n_layers=int(model.backbone.config.num_hidden_layers),
            kv_heads=kv_heads,
            head_dim=head_dim,
            pooled_hidden=model.hidden if model.uses_mean else 0,
        ),
        label={
            "positive": "the run ends unresolved (SWE-bench harness verdict)",
            "score": "P(run ends unresolved | steps 1..k), sigmoid of the graph's logit"
            + (f" plus {TEXT_HEAD_FILE}'s" if model.text_head is not None else "")
            + (
                f"; candidate monitor_text: sigmoid of logits_text plus {TEXT_PROBE}'s"
                if model.text_probe is not None
                else ""
            ),
        },
        target=cfg.target,
        thresholds=ThresholdTable.model_validate(found["thresholds"])
        if found["thresholds"]
        else None,
        policy=PolicyConfig.model_validate(found["policy"]),
        metrics=found["metrics"],
        data_summary=found["data_summary"],
        export={
            "config": cfg.model_dump(),
            "graph": report.graph,
            "full_max_abs_diff": report.full_max_abs_diff,
            "kv_max_abs_diff": report.kv_max_abs_diff,
            "int8_max_abs_diff": report.int8_max_abs_diff,
        },
        versions=_versions(
            cfg.opset,
            text_head=model.text_head is not None,
            text_probe=model.text_probe is not None,
        ),
    )


def write_bundle(
    model_dir: str | Path,
    out: str | Path,
    *,
    cfg: ExportConfig | None = None,
    train_dir: str | Path | None = None,
) -> ExportReport:
    """Export a saved classifier folder (training OUT/model) into a serving bundle.

    Args:
        model_dir: folder written by `training.model.classifier_files.save_classifier`.
        out: bundle folder to write (must be empty, absent, or an earlier bundle).
        cfg: export options.
        train_dir: the training output dir (thresholds.json, metrics.json, data_summary.json,
            config.yaml, baselines/ are taken from it when present).

    Returns:
        The export report (largest ORT-vs-torch differences; int8 difference with --int8).
    """
    cfg = cfg or ExportConfig()
    model_dir, out = Path(model_dir), Path(out)
    tdir = Path(train_dir) if train_dir is not None else None
    if out.exists() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise BundleError(f"{out}: not empty and not a bundle; refusing to overwrite")
    # Built beside `out` and renamed into place whole: a kill leaves the previous bundle as it was.
    with atomic_dir(out) as tmp:
        report = _write(model_dir, tmp, cfg, tdir)
    log.info("bundle written to %s", out)
    return report


def _write(model_dir: Path, out: Path, cfg: ExportConfig, tdir: Path | None) -> ExportReport:
    """Every file of the bundle into the (temporary) folder `out`."""
    import shutil

    from training.model.classifier_files import load_classifier, read_classifier_meta

    meta = read_classifier_meta(model_dir)
    model = load_classifier(model_dir)
    report = export_graphs(model, out, cfg)
    if cfg.int8:
        report.files += quantize_graphs(out, cfg.int8_scheme)
        report.int8_max_abs_diff = int8_diff(model, out, cfg.check_batch, cfg.check_length)
        log.info(
            "model.int8.onnx (%s): max |int8 - fp32| = %.3g",
            cfg.int8_scheme,
            report.int8_max_abs_diff,
        )
    shutil.copyfile(model_dir / "tokenizer.json", out / "tokenizer.json")
    if model.text_head is not None:  # the probe's text part (train.probe_text), served beside
        (out / TEXT_HEAD_FILE).write_text(json.dumps(model.text_head.to_json()) + "\n")
    if model.text_probe is not None:  # the second probe's text part (train.text_candidate)
        (out / TEXT_PROBE).write_text(json.dumps(model.text_probe.text.to_json()) + "\n")
    found = _train_outputs(tdir)
    if tdir is not None and (tdir / "baselines").is_dir():
        shutil.copytree(tdir / "baselines", out / "baselines")
    if tdir is not None and (tdir / "candidates.json").is_file():  # calibrated baselines, choice
        shutil.copyfile(tdir / "candidates.json", out / "candidates.json")
    manifest = _manifest(model, meta, found, cfg, report)
    cands = out / "candidates.json"
    chosen = json.loads(cands.read_text()) if cands.is_file() else None
    (out / "README.md").write_text(model_card(manifest.to_json(), chosen))
    write_manifest(out, manifest)
    return report
