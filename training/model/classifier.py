"""PrefixClassifier: P(run ends unresolved | prefix) from a causal LM's hidden state at a step boundary.

A (possibly truncated) decoder-only backbone encodes a run's rendering once; the hidden state at the
last token of step k (pooling "last"), or that state followed by the causal mean of the last hidden
states of every token of the window up to and including that boundary (pooling "last+mean"),
concatenated with the standardised loop signals after step k (asinh first, by default), goes
through one linear layer. sigmoid(logit) is the score. The saved folder (OUT/model, docs/BUNDLE.md):

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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from monitor.errors import BundleError
from training.model.backbone import load_backbone, resolve_base

SIGNAL_TRANSFORMS = ("asinh", "none")
POOLINGS = ("last", "last+mean")
TEXT_HEAD = "text_head.json"
"""The probe's text columns' weights (train.probe_text) in a saved model folder."""
TEXT_PROBE = "text_probe.json"
"""The second probe's text part (train.text_candidate) in a saved model folder."""
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


class PrefixClassifier(torch.nn.Module):
    """Backbone + linear head over [boundary features ; standardised signals].

    Args:
        backbone: a transformers base model (AutoModel, e.g. LlamaModel) returning
            `last_hidden_state`.
        signal_names: names of the signal columns appended to the hidden state (may be empty).
        signal_transform: "asinh" (a signed log: counts such as tokens span orders of magnitude)
            or "none", applied to the raw signals before standardising them.
        pooling: "last" (the hidden state at the boundary, H columns) or "last+mean" (that
            state, then the mean of the hidden states of the window's tokens up to and
            including the boundary: 2H columns).
    """

    def __init__(
        self,
        backbone: Any,
        signal_names: Sequence[str] = (),
        signal_transform: str = "asinh",
        pooling: str = "last",
    ) -> None:
        super().__init__()
        if signal_transform not in SIGNAL_TRANSFORMS:
            raise ValueError(f"signal_transform must be one of {SIGNAL_TRANSFORMS}")
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}")
        self.backbone: Any = backbone  # a transformers model (or a peft wrapper of one)
        self.signal_names = list(signal_names)
        self.signal_transform = signal_transform
        self.pooling = pooling
        n_signals = len(self.signal_names)
        self.hidden = int(backbone.config.hidden_size)
        self.head: torch.nn.Linear = torch.nn.Linear(self.n_features + n_signals, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)
        self.signal_mean: torch.Tensor
        self.signal_std: torch.Tensor
        self.register_buffer("signal_mean", torch.zeros(n_signals))
        self.register_buffer("signal_std", torch.ones(n_signals))
        self.text_head: Any = None
        """The text's part of the logit (train.probe_text), added to the head's by head_scores
        and by the served scorer: `run_logits(traj)`, `to_json()` (serving.candidates.TfidfLR
        JSON, intercept 0); None: the head reads the hidden state and the signals only."""
        self.text_probe: TextProbe | None = None
        """A second probe over the same input that also reads the TF-IDF text, served as the
        candidate "monitor_text" (train.text_candidate); None: none. A plain attribute, not a
        submodule: the first head's fits save and restore the module's state alone. Set by
        training.model.text_probe.fold_text_probe."""

    @property
    def n_signals(self) -> int:
        return len(self.signal_names)

    @property
    def uses_mean(self) -> bool:
        """Whether the head also reads the causal mean of the hidden states."""
        return self.pooling == "last+mean"

    @property
    def n_features(self) -> int:
        """Width of the boundary features the head reads before the signals (H or 2H)."""
        return self.hidden * (2 if self.uses_mean else 1)

    def features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Last hidden state (after the final norm): (B, T) ids -> (B, T, H)."""
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        return out.last_hidden_state

    def token_features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Per-token head features: (B, T) ids -> (B, T, n_features).

        "last": the last hidden state. "last+mean": [hidden_t ; mean of hidden_1..t over the
        real tokens] (padding masked out; right padding only affects padded slots).
        """
        h = self.features(input_ids, attention_mask)
        if not self.uses_mean:
            return h
        return torch.cat([h, causal_mean(h, attention_mask)], dim=-1)

    def head_input(self, hidden: torch.Tensor, signals: torch.Tensor) -> torch.Tensor:
        """What the head reads: [boundary features (B, P, n_features) ; standardised signals
        (from raw (B, P, S))]."""
        if self.n_signals:
            x = signals.to(hidden.dtype)
            if self.signal_transform == "asinh":
                # asinh written out: the ONNX exporter has no aten::asinh at opset 17.
                x = torch.sign(x) * torch.log(x.abs() + torch.sqrt(x * x + 1.0))
            z = (x - self.signal_mean) / self.signal_std
            hidden = torch.cat([hidden, z], dim=-1)
        return hidden

    def head_logits(self, hidden: torch.Tensor, signals: torch.Tensor) -> torch.Tensor:
        """Logits from boundary features (B, P, n_features) and raw signals (B, P, S) -> (B, P)."""
        return self.head(self.head_input(hidden, signals)).squeeze(-1)

    def text_probe_logits(self, hidden: torch.Tensor, signals: torch.Tensor) -> torch.Tensor:
        """The second probe's graph logits (without its text part) -> (B, P)."""
        if self.text_probe is None:
            raise ValueError("this classifier has no text probe")
        return self.text_probe.head(self.head_input(hidden, signals)).squeeze(-1)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        positions: torch.Tensor,
        signals: torch.Tensor,
    ) -> torch.Tensor:
        """Logits at step boundaries.

        Args:
            input_ids: (B, T) int64.
            attention_mask: (B, T) int64, 1 on real tokens (right padding).
            positions: (B, P) int64 indices into T of the step boundaries to score.
            signals: (B, P, S) float32 raw signal values after each of those steps.

        Returns:
            (B, P) float32 logits; score = sigmoid(logits).
        """
        f = self.token_features(input_ids, attention_mask)  # (B, T, F)
        idx = positions.unsqueeze(-1).expand(-1, -1, f.shape[-1])  # (B, P, F)
        return self.head_logits(torch.gather(f, 1, idx), signals)


class TextProbe:
    """The second probe (train.text_candidate, served as candidate "monitor_text").

    Attributes:
        head: a linear layer over the classifier's head input (features ; standardised signals).
        text: its text part (training.baselines.probe_text.TextHead, or a TfidfLR once loaded):
            `run_logits(run)`, `to_json()`; added to the head's logit.
    """

    def __init__(self, head: torch.nn.Linear, text: Any) -> None:
        self.head = head
        self.text = text


def causal_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Running mean over the sequence of the unmasked rows: (B, T, H), (B, T) -> (B, T, H).

    Row t = sum of hidden[s] * mask[s] for s <= t, divided by max(1, sum of mask[s] for s <= t).
    """
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, T, 1)
    total = torch.cumsum(hidden * m, dim=1)
    count = torch.cumsum(m, dim=1).clamp_min(1.0)
    return total / count


def build_classifier(
    base: str,
    n_layers: int | None,
    signal_names: Sequence[str],
    dtype: str = "float32",
    signal_transform: str = "asinh",
    pooling: str = "last",
) -> PrefixClassifier:
    """A fresh classifier (zero head) on the base checkpoint truncated to `n_layers`."""
    backbone = load_backbone(resolve_base(base), n_layers, dtype)
    return PrefixClassifier(backbone, signal_names, signal_transform, pooling)


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
