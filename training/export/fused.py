"""A Llama-family decoder written for export: the same weights and arithmetic as the transformers
forward, traced into the fused operators onnxruntime runs fastest on a CPU.

What the exported graphs hold instead of the transformers trace (docs/BUNDLE.md, "Graphs"):

- Q, K and V as one packed MatMul, gate and up as one (fewer, wider GEMMs);
- RMSNorm after a residual add as `com.microsoft.SkipSimplifiedLayerNormalization` (one pass);
- whole renderings (model.onnx): `com.microsoft.GroupQueryAttention` with the rotary embedding
  inside it and the padding taken from the mask's row lengths (right padding), instead of a
  (B, heads, T, T) mask built, added, softmaxed and NaN-checked in separate passes;
- live steps (model_kv.onnx): rotary from per-row positions and attention against the cached
  keys/values under one additive mask built once per call, so one call can carry several
  sessions with different past lengths (left-padded past, right-padded new tokens; the batch
  GroupQueryAttention kernel refuses more than one row of several new tokens on a cache).

`supports(backbone)` says whether a backbone is one this module reproduces; others are exported
through the transformers trace (training.export.graphs). Every export is checked against the
transformers forward (training.export.convert), so a mismatch here fails the export.
"""

from __future__ import annotations

from typing import Any

import torch

# Architectures whose decoder layer is exactly: RMSNorm, q/k/v projections, rotate-half rotary,
# causal grouped-query attention, o projection, residual, RMSNorm, SiLU-gated MLP, residual.
ARCHITECTURES = ("llama",)


def supports(backbone: Any) -> bool:
    """Whether `backbone` (a transformers base model) can be exported by `FusedDecoder`."""
    cfg = backbone.config
    rotary = getattr(backbone, "rotary_emb", None)
    return (
        getattr(cfg, "model_type", None) in ARCHITECTURES
        and getattr(cfg, "hidden_act", None) == "silu"
        and rotary is not None
        and getattr(rotary, "rope_type", "default") == "default"  # static frequencies only
        and not getattr(cfg, "pretraining_tp", 1) > 1
    )


class _GroupQueryAttention(torch.autograd.Function):
    """Causal attention of right-padded rows, rotary applied inside (onnxruntime contrib op).

    q (B, S, H*hd), k / v (B, S, KV*hd) before rotary; cos / sin (max_positions, hd / 2).
    Eager (tracing) computes the same for unpadded rows; the graph reads the row lengths.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        past: torch.Tensor,
        seqlens_k: torch.Tensor,
        total: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        heads: int,
        kv_heads: int,
    ) -> torch.Tensor:
        b, s, _ = q.shape
        hd = q.shape[-1] // heads
        pos = torch.arange(s).unsqueeze(0).expand(b, s)
        qh = rotate(q.view(b, s, heads, hd), cos[pos], sin[pos])
        kh = rotate(k.view(b, s, kv_heads, hd), cos[pos], sin[pos]).transpose(1, 2)
        vh = v.view(b, s, kv_heads, hd).transpose(1, 2)
        causal = torch.ones(s, s, dtype=torch.bool).tril()
        bias = torch.zeros(s, s).masked_fill(~causal, torch.finfo(torch.float32).min)
        return attend(qh.reshape(b, s, heads * hd), kh, vh, bias[None, None, None], heads)

    @staticmethod
    def symbolic(
        g: Any, q, k, v, past, seqlens_k, total, cos, sin, heads: int, kv_heads: int
    ) -> Any:  # type: ignore[no-untyped-def]
        # `past` is an empty (B, KV, 0, hd) cache: a first prompt, positions 0..S-1 in every row
        out = g.op(
            "com.microsoft::GroupQueryAttention",
            q,
            k,
            v,
            past,
            past,
            seqlens_k,
            total,
            cos,
            sin,
            num_heads_i=heads,
            kv_num_heads_i=kv_heads,
            do_rotary_i=1,
            rotary_interleaved_i=0,
            outputs=3,
        )
        out[0].setType(q.type())
        return out[0]


class _SkipRMSNorm(torch.autograd.Function):
    """(x + skip) RMS-normalised, and x + skip (the next residual)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, skip: torch.Tensor, w: torch.Tensor, eps: float) -> Any:  # type: ignore[override]
        s = x + skip
        return rms_norm(s, w, eps), s

    @staticmethod
    def symbolic(g: Any, x, skip, w, eps: float) -> Any:  # type: ignore[no-untyped-def]
        out = g.op(
            "com.microsoft::SkipSimplifiedLayerNormalization", x, skip, w, epsilon_f=eps, outputs=4
        )
        out[0].setType(x.type())
        out[3].setType(x.type())
        return out[0], out[3]


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm in fp32 (onnxruntime fuses it into SimplifiedLayerNormalization)."""
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half rotary embedding: x (B, S, heads, hd), cos / sin (B, S, hd / 2)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos.unsqueeze(2), sin.unsqueeze(2)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, heads: int
) -> torch.Tensor:
    """Grouped-query attention without repeating the cache.

    q (B, S, H*hd) rotated; k / v (B, KV, T, hd); bias (B or 1, 1, 1, S, T) additive.
    Returns (B, S, H*hd).
    """
    b, s, width = q.shape
    kv, hd = k.shape[1], k.shape[-1]
    # query head h reads kv head h // (H / KV), as transformers' repeat_kv does
    qg = q.view(b, s, kv, heads // kv, hd).permute(0, 2, 3, 1, 4) * hd**-0.5  # (B, KV, R, S, hd)
    scores = torch.matmul(qg, k.unsqueeze(2).transpose(-1, -2)) + bias  # (B, KV, R, S, T)
    out = torch.matmul(torch.softmax(scores, dim=-1), v.unsqueeze(2))  # (B, KV, R, S, hd)
    return out.permute(0, 3, 1, 2, 4).reshape(b, s, width)


def causal_bias(mask: torch.Tensor, new: int) -> torch.Tensor:
    """Additive attention mask of the last `new` positions: (B, T) 0/1 -> (B, 1, 1, new, T).

    Key j is visible to new token i when mask[b, j] is 1 and j <= T - new + i (causal over the
    whole buffer: a left-padded past, then right-padded new tokens).
    """
    t = mask.shape[1]
    query = torch.arange(new) + (t - new)  # (new,) buffer index of each new token
    allowed = (torch.arange(t).unsqueeze(0) <= query.unsqueeze(1)).unsqueeze(0)  # (1, new, T)
    allowed = allowed & mask.unsqueeze(1).bool()  # (B, new, T)
    bias = (~allowed).to(torch.float32) * torch.finfo(torch.float32).min
    return bias[:, None, None]


class FusedDecoder(torch.nn.Module):
    """The decoder of a supported backbone (`supports`), traced into fused operators.

    `full(ids, mask)`: right-padded renderings -> last hidden states (B, T, H).
    `step(ids, mask, past)`: new tokens on a KV cache -> (hidden (B, N, H), present), with
    mask (B, P + N) over a left-padded past and right-padded new tokens.
    """

    def __init__(self, backbone: Any) -> None:
        super().__init__()
        cfg = backbone.config
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(getattr(cfg, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.heads)
        self.embed = backbone.embed_tokens
        self.layers = backbone.layers[: cfg.num_hidden_layers]
        self.norm = backbone.norm
        # GroupQueryAttention's kernels need head_dim % 16 == 0 (rotary inside); else the
        # whole rendering goes through `step` on an empty cache.
        self.gqa = self.head_dim % 16 == 0
        q_w = self.heads * self.head_dim
        kv_w = self.kv_heads * self.head_dim
        self.qkv_split = [q_w, kv_w, kv_w]
        # Parameters, not buffers: the exporter writes them as initializers, which the
        # quantisers recognise as weights (a traced buffer becomes a Constant node).
        for i, layer in enumerate(self.layers):
            a, m = layer.self_attn, layer.mlp
            for name, parts in (
                ("qkv", [a.q_proj, a.k_proj, a.v_proj]),
                ("gate_up", [m.gate_proj, m.up_proj]),
            ):
                self.register_parameter(f"{name}_{i}", _packed(parts, "weight"))
                self.register_parameter(f"{name}_bias_{i}", _packed(parts, "bias"))
        rotary = backbone.rotary_emb
        n = int(cfg.max_position_embeddings)
        freqs = torch.outer(torch.arange(n, dtype=torch.float32), rotary.inv_freq.float())
        scale = float(getattr(rotary, "attention_scaling", 1.0))
        self.cos: torch.Tensor
        self.sin: torch.Tensor
        self.register_buffer("cos", freqs.cos() * scale, False)  # (max_positions, hd / 2)
        self.register_buffer("sin", freqs.sin() * scale, False)

    def _decoder(self, h: torch.Tensor, attention: Any) -> torch.Tensor:
        """Embeddings (B, S, H) through every layer and the final norm; `attention(i, q, k, v)`
        maps layer i's projections (B, S, width) to its attention output (B, S, H*hd)."""
        resid: torch.Tensor | None = None
        for i, layer in enumerate(self.layers):
            ln = layer.input_layernorm
            if resid is None:
                x, resid = rms_norm(h, ln.weight, ln.variance_epsilon), h
            else:
                x, resid = _SkipRMSNorm.apply(h, resid, ln.weight, ln.variance_epsilon)
            qkv = torch.nn.functional.linear(x, self._get(f"qkv_{i}"), self._get(f"qkv_bias_{i}"))
            q, k, v = qkv.split(self.qkv_split, dim=-1)
            h = layer.self_attn.o_proj(attention(i, q, k, v))
            ln = layer.post_attention_layernorm
            x, resid = _SkipRMSNorm.apply(h, resid, ln.weight, ln.variance_epsilon)
            gu = torch.nn.functional.linear(
                x, self._get(f"gate_up_{i}"), self._get(f"gate_up_bias_{i}")
            )
            gate, up = gu.chunk(2, dim=-1)
            h = layer.mlp.down_proj(torch.nn.functional.silu(gate) * up)
        out, _ = _SkipRMSNorm.apply(h, resid, self.norm.weight, self.norm.variance_epsilon)
        return out

    def _get(self, name: str) -> Any:
        return getattr(self, name)

    def empty_past(self, ids: torch.Tensor) -> list[torch.Tensor]:
        """An empty cache (B, KV, 0, hd) per layer and kind, B from `ids`."""
        zeros = self.cos.new_zeros(ids.shape[0], self.kv_heads, 0, self.head_dim)
        return [zeros] * (2 * len(self.layers))

    def full(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Right-padded renderings (B, T) -> last hidden states (B, T, H)."""
        if not self.gqa:
            return self.step(ids, mask, self.empty_past(ids))[0]
        seqlens = (mask.sum(dim=1) - 1).to(torch.int32)  # (B,) last real index of each row
        total = torch._shape_as_tensor(mask)[1].to(torch.int32)
        past = self.empty_past(ids)[0]
        h, kv = self.embed(ids), (self.heads, self.kv_heads)
        return self._decoder(
            h,
            lambda i, q, k, v: _GroupQueryAttention.apply(
                q, k, v, past, seqlens, total, self.cos, self.sin, *kv
            ),
        )

    def step(
        self, ids: torch.Tensor, mask: torch.Tensor, past: list[torch.Tensor]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """New tokens (B, N) on a cache -> hidden states (B, N, H) and the present cache.

        mask (B, P + N): 1 on the real past and new tokens; past: 2 * layers (B, KV, P, hd).
        A new token's position is the count of real tokens before it in its row.
        """
        b, n = ids.shape
        positions = (mask.cumsum(dim=1) - 1).clamp_min(0)[:, -n:]  # (B, N)
        cos, sin = self.cos[positions], self.sin[positions]  # (B, N, hd / 2)
        bias = causal_bias(mask, n)
        hd, present = self.head_dim, []

        def attention(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            q = rotate(q.view(b, n, self.heads, hd), cos, sin).reshape(b, n, -1)
            k = rotate(k.view(b, n, self.kv_heads, hd), cos, sin).transpose(1, 2)
            k = torch.cat([past[2 * i], k], dim=2)  # (B, KV, P + N, hd)
            v = torch.cat([past[2 * i + 1], v.view(b, n, self.kv_heads, hd).transpose(1, 2)], 2)
            present.extend([k, v])
            return attend(q, k, v, bias, self.heads)

        return self._decoder(self.embed(ids), attention), present


def _packed(linears: list[Any], kind: str) -> torch.nn.Parameter | None:
    """The weights (or biases) of `linears` stacked on the output axis; None without biases."""
    if kind == "bias" and all(m.bias is None for m in linears):
        return None
    parts = [
        getattr(m, kind).detach()
        if getattr(m, kind) is not None
        else m.weight.new_zeros(m.out_features)
        for m in linears
    ]
    return torch.nn.Parameter(torch.cat(parts, dim=0).contiguous(), requires_grad=False)
