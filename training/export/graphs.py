"""ONNX graphs of a PrefixClassifier: the torch wrappers, their input names and shapes.

Two graphs, both with dynamic batch and sequence axes:

- `model.onnx`: (input_ids, attention_mask, positions, signals) -> logits (B, P)[, logits_text
  (B, P)]: a whole rendering, logits at the given step boundaries (all prefixes of a window in
  one call).
- `model_kv.onnx`: (input_ids, attention_mask, signals, [past_hidden_sum, past_count,]
  past_key_i, past_value_i ...) -> (logits (B,), [logits_text (B,),] [present_hidden_sum,
  present_count,] present_key_i, present_value_i ...): the new tokens of live sessions on top of their cached
  keys/values; the logit is the one at each row's LAST real new token (the step boundary).
  attention_mask covers past + new tokens. Several sessions share a call as rows: each row's
  past is LEFT-padded to the longest past and its new tokens RIGHT-padded to the most new
  tokens, the mask marking the real ones; a new token's position is the count of real tokens
  before it in its row (serving.batching builds such batches). With pooling "last+mean" the
  running sum (B, H) and count (B, 1) of the window's hidden states travel with the KV cache
  (zeros and 0 when the cache starts empty), so the mean continues across calls.

`logits_text` is there only for a classifier with a second probe (`text_probe`,
train.text_candidate): its head over the same input, without its text part (bundle format 4).

A Llama-family backbone is written out by training.export.fused (packed projections, fused
attention and norms); any other is traced through its transformers forward. The export itself
and its checks against torch are training.export.convert.
"""

from __future__ import annotations

from typing import Any

import torch

from serving.graphs import LOGIT_OUTPUTS
from training.export.fused import FusedDecoder, supports
from training.model.classifier import PrefixClassifier, causal_mean

FULL_GRAPH = "model.onnx"
KV_GRAPH = "model_kv.onnx"
INT8_SUFFIX = ".int8"


def graph_kind(model: PrefixClassifier) -> str:
    """ "fused" when training.export.fused reproduces the backbone, else "transformers"."""
    return "fused" if supports(model.backbone) else "transformers"


def logit_names(model: PrefixClassifier) -> list[str]:
    """The logit outputs of both graphs, in order (serving.graphs.LOGIT_OUTPUTS): "logits", then
    "logits_text" with a second probe."""
    return list(LOGIT_OUTPUTS[: 2 if model.text_probe is not None else 1])


def all_head_logits(model: PrefixClassifier, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Every head's logits from the head input `x` (B, P, F + S) -> each (B, P)."""
    out = [model.head(x).squeeze(-1)]
    if model.text_probe is not None:
        out.append(model.text_probe.head(x).squeeze(-1))
    return tuple(out)


class FullGraph(torch.nn.Module):
    """model.onnx: the classifier's forward, with named inputs (fused decoder when supported)."""

    def __init__(self, model: PrefixClassifier) -> None:
        super().__init__()
        self.model = model
        self.fused = FusedDecoder(model.backbone) if supports(model.backbone) else None
        # registered here so the second head's nodes are named after it ("text_head": the int8
        # schemes keep every "head" MatMul in fp32)
        self.text_head = model.text_probe.head if model.text_probe is not None else None

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        positions: torch.Tensor,
        signals: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        if self.fused is None:
            h = self.model.token_features(input_ids, attention_mask)
        else:
            h = self.fused.full(input_ids, attention_mask)  # (B, T, H)
            if self.model.uses_mean:
                h = torch.cat([h, causal_mean(h, attention_mask)], dim=-1)
        idx = positions.unsqueeze(-1).expand(-1, -1, h.shape[-1])  # (B, P, F)
        return all_head_logits(self.model, self.model.head_input(torch.gather(h, 1, idx), signals))


class KVGraph(torch.nn.Module):
    """model_kv.onnx: new tokens on top of a KV cache -> last-position logit + present KV."""

    def __init__(self, model: PrefixClassifier) -> None:
        super().__init__()
        self.model = model
        self.n_layers = int(model.backbone.config.num_hidden_layers)
        self.fused = FusedDecoder(model.backbone) if supports(model.backbone) else None
        self.text_head = model.text_probe.head if model.text_probe is not None else None

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, N) new tokens, right-padded
        attention_mask: torch.Tensor,  # (B, T) past (left-padded) + new (right-padded)
        signals: torch.Tensor,  # (B, S) raw signals after the new step
        *past: torch.Tensor,  # [sum (B, H), count (B, 1),] 2 * n_layers (B, kv_heads, T - N, hd)
    ) -> tuple[torch.Tensor, ...]:
        pooled: tuple[torch.Tensor, ...] = ()
        if self.model.uses_mean:
            past_sum, past_count, past = past[0], past[1], past[2:]
        new = input_ids.shape[1]
        if self.fused is not None:
            states, present = self.fused.step(input_ids, attention_mask, list(past))
        else:
            states, present = self._transformers_step(input_ids, attention_mask, list(past))
        m = attention_mask[:, -new:]  # (B, N) real new tokens
        last = (m.sum(dim=1) - 1).clamp_min(0)  # (B,) index of each row's last real token
        idx = last.view(-1, 1, 1).expand(-1, 1, states.shape[-1])
        hidden = torch.gather(states, 1, idx)  # (B, 1, H)
        if self.model.uses_mean:
            w = m.to(states.dtype).unsqueeze(-1)  # (B, N, 1)
            total = past_sum + (states * w).sum(dim=1)  # (B, H)
            count = past_count + w.sum(dim=1)  # (B, 1)
            mean = total / count.clamp_min(1.0)
            hidden = torch.cat([hidden, mean.unsqueeze(1)], dim=-1)  # (B, 1, 2H)
            pooled = (total, count)
        x = self.model.head_input(hidden, signals.unsqueeze(1))
        logits = tuple(z.squeeze(1) for z in all_head_logits(self.model, x))  # each (B,)
        return (*logits, *pooled, *present)

    def _transformers_step(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, past: list[torch.Tensor]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        from transformers import DynamicCache

        cache = DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(self.n_layers)])
        new = input_ids.shape[1]
        position_ids = (attention_mask.cumsum(dim=1) - 1).clamp_min(0)[:, -new:]
        out = self.model.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=True,
        )
        present: list[torch.Tensor] = []
        for layer in out.cache.layers[: self.n_layers]:
            present += [layer.keys, layer.values]
        return out.last_hidden_state, present


POOL_NAMES = ("past_hidden_sum", "past_count")


def kv_names(n_layers: int, pooled: bool = False) -> tuple[list[str], list[str]]:
    """Names of the past inputs and present outputs of the KV graph: the running hidden sum and
    count first when `pooled`, then the keys and values layer by layer."""
    past = [*(POOL_NAMES if pooled else ())]
    past += [f"past_{kv}_{i}" for i in range(n_layers) for kv in ("key", "value")]
    return past, [p.replace("past_", "present_", 1) for p in past]


def empty_past(model: Any, batch: int, past_len: int, random: bool) -> list[torch.Tensor]:
    """Past inputs of the KV graph in `kv_names` order (random values, or an empty cache)."""
    n_layers = int(model.backbone.config.num_hidden_layers)
    kv_heads, head_dim = kv_shape(model.backbone.config)
    make = torch.randn if random else torch.zeros
    out: list[torch.Tensor] = []
    if model.uses_mean:
        out += [make(batch, model.hidden), torch.full((batch, 1), float(past_len))]
    out += [make(batch, kv_heads, past_len, head_dim) for _ in range(2 * n_layers)]
    return out


def kv_shape(config: Any) -> tuple[int, int]:
    """(kv_heads, head_dim) of a backbone config."""
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    return kv_heads, head_dim


def example_inputs(
    model: PrefixClassifier, batch: int, length: int, n_pos: int, seed: int
) -> tuple[torch.Tensor, ...]:
    """Random ids, a right-padded mask (last row shorter), boundary positions and signals."""
    g = torch.Generator().manual_seed(seed)
    vocab = int(model.backbone.config.vocab_size)
    ids = torch.randint(1, vocab, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    short = max(n_pos + 1, length // 2)
    if batch > 1:
        mask[-1, short:] = 0  # right padding, so the traced graph keeps the padding mask
    ends = torch.linspace(n_pos, short - 1, n_pos).long()
    positions = ends.unsqueeze(0).expand(batch, -1).contiguous()
    signals = torch.rand(batch, n_pos, len(model.signal_names), generator=g) * 5
    return ids, mask, positions, signals
