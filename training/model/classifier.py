"""PrefixClassifier: P(run ends unresolved | prefix) from a causal LM's hidden state at a step boundary.

A (possibly truncated) decoder-only backbone encodes a run's rendering once; the hidden state at the
last token of step k (pooling "last"), or that state followed by the causal mean of the last hidden
states of every token of the window up to and including that boundary (pooling "last+mean"),
concatenated with the standardised loop signals after step k (asinh first, by default), goes
through one linear layer. sigmoid(logit) is the score. Saved and loaded as a folder by
training.model.classifier_files.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from training.model.backbone import load_backbone, resolve_base

SIGNAL_TRANSFORMS = ("asinh", "none")
POOLINGS = ("last", "last+mean")


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
