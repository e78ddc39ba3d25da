"""A PrefixClassifier saved as a folder and loaded back: the saved folder (OUT/model, docs/BUNDLE.md):

model/  config.json + model.safetensors   the backbone as a HF folder (truncated, LoRA merged)
        tokenizer.json (+ tokenizer_config.json)
        head.safetensors                  head.weight, head.bias, signal_mean, signal_std
        classifier.json                   {n_layers, hidden, signal_names, signal_transform,
                                           pooling, head_kind, base, featuriser, text_head}
        text_head.json                    only with train.probe_text: the text columns'
                                           weights, added to the head's logit
        text_probe.json                   only with train.text_candidate: the second
                                           probe's text part (head.safetensors then also
                                           holds text_probe.weight, text_probe.bias)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from monitor.errors import BundleError
from training.model.backbone import load_backbone
from training.model.classifier import PrefixClassifier, TextProbe

TEXT_HEAD = "text_head.json"
"""The probe's text columns' weights (train.probe_text) in a saved model folder."""
TEXT_PROBE = "text_probe.json"
"""The second probe's text part (train.text_candidate) in a saved model folder."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def save_classifier(
    model: PrefixClassifier,
    out: str | Path,
    *,
    tokenizer_dir: str | Path,
    base: str,
    head_kind: str,
    featuriser: dict[str, Any],
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write `model` as the folder described in the module docstring.

    Args:
        model: the classifier (a LoRA backbone must already be merged).
        out: destination folder (created).
        tokenizer_dir: folder holding tokenizer.json of the base.
        base: `model.base` as configured (recorded, not used to load).
        head_kind: "probe", "lora" or "full".
        featuriser: the FeaturiserConfig as a dict.
        extra: more keys for classifier.json (e.g. how the head was fitted).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.backbone.save_pretrained(out, safe_serialization=True)
    for name in TOKENIZER_FILES:
        src = Path(tokenizer_dir) / name
        if src.is_file():
            shutil.copyfile(src, out / name)
    if not (out / "tokenizer.json").is_file():
        raise BundleError(f"{tokenizer_dir}: no tokenizer.json to save beside the model")
    tensors = {
        "head.weight": model.head.weight.detach().float().contiguous(),
        "head.bias": model.head.bias.detach().float().contiguous(),
        "signal_mean": model.signal_mean.detach().float().contiguous(),
        "signal_std": model.signal_std.detach().float().contiguous(),
    }
    if model.text_probe is not None:
        tensors["text_probe.weight"] = model.text_probe.head.weight.detach().float().contiguous()
        tensors["text_probe.bias"] = model.text_probe.head.bias.detach().float().contiguous()
    save_file(tensors, str(out / "head.safetensors"))
    meta = {
        "n_layers": int(model.backbone.config.num_hidden_layers),
        "hidden": model.hidden,
        "signal_names": model.signal_names,
        "signal_transform": model.signal_transform,
        "pooling": model.pooling,
        "head_kind": head_kind,
        "base": base,
        "featuriser": featuriser,
        **(extra or {}),
    }
    if model.text_head is not None:
        (out / TEXT_HEAD).write_text(json.dumps(model.text_head.to_json()) + "\n")
        meta["text_head"] = TEXT_HEAD
    if model.text_probe is not None:
        (out / TEXT_PROBE).write_text(json.dumps(model.text_probe.text.to_json()) + "\n")
        meta["text_probe"] = TEXT_PROBE
    (out / "classifier.json").write_text(json.dumps(meta, indent=1) + "\n")
    return out


def read_classifier_meta(path: str | Path) -> dict[str, Any]:
    """classifier.json of a saved model folder, with a clear error when it is missing."""
    f = Path(path) / "classifier.json"
    try:
        return dict(json.loads(f.read_text()))
    except (OSError, ValueError) as e:
        raise BundleError(f"{f}: cannot read classifier metadata: {e}") from e


def load_classifier(path: str | Path, dtype: str = "float32") -> PrefixClassifier:
    """Load a folder written by `save_classifier` (eval mode)."""
    path = Path(path)
    meta = read_classifier_meta(path)
    backbone = load_backbone(path, None, dtype)
    model = PrefixClassifier(
        backbone, meta["signal_names"], meta["signal_transform"], meta["pooling"]
    )
    try:
        tensors = load_file(str(path / "head.safetensors"))
    except (OSError, ValueError) as e:
        raise BundleError(f"{path / 'head.safetensors'}: cannot read head: {e}") from e
    want = {"head.weight", "head.bias", "signal_mean", "signal_std"}
    if meta.get("text_probe"):
        want |= {"text_probe.weight", "text_probe.bias"}
    if set(tensors) != want:
        raise BundleError(f"{path / 'head.safetensors'}: expected tensors {sorted(want)}")
    with torch.no_grad():
        model.head.weight.copy_(tensors["head.weight"])
        model.head.bias.copy_(tensors["head.bias"])
        model.signal_mean.copy_(tensors["signal_mean"])
        model.signal_std.copy_(tensors["signal_std"])
    if meta.get("text_head"):
        from serving.candidates import read_text_head

        model.text_head = read_text_head(path / str(meta["text_head"]))
    if meta.get("text_probe"):
        from serving.candidates import read_text_head

        w = tensors["text_probe.weight"]
        if w.shape != tensors["head.weight"].shape:
            raise BundleError(
                f"{path / 'head.safetensors'}: text_probe.weight {tuple(w.shape)} does not match "
                f"head.weight {tuple(tensors['head.weight'].shape)}"
            )
        head = torch.nn.Linear(w.shape[1], 1)
        with torch.no_grad():
            head.weight.copy_(w)
            head.bias.copy_(tensors["text_probe.bias"])
        model.text_probe = TextProbe(head.eval(), read_text_head(path / str(meta["text_probe"])))
    return model.eval()
