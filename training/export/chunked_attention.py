"""Causal attention in query chunks: the feature graph's GroupQueryAttention nodes rewritten so a
long window attends in `CHUNKS` blocks of queries on a growing cache.

onnxruntime's CPU kernel for a first prompt multiplies every query by every key (an S x S
product per head, the upper triangle computed and then zeroed) through one (heads, S, S)
probability buffer: 37.7 MB at 1,024 tokens and 9 heads, far out of cache. Fed chunk by chunk
(queries [e_j, e_j+1) against the keys [0, e_j+1), the earlier chunks' keys arriving as the
node's past cache), it does (CHUNKS + 1) / (2 CHUNKS) of the products through a buffer CHUNKS
times smaller. Every query still reads the same keys in the same order, so the features are the
same bits (tests/training/test_chunked_attention.py); docs/SPEED.md has the speed.

Each rewritten node becomes an `If`: one row (batch 1, what the feature pass sends) of at least
`MIN_TOKENS` tokens takes the chunked branch, anything else the original node (chunks need
>= 1 token each, and a right-padded batch has one length per row).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

CHUNKS = 8
MIN_TOKENS = 256
"""Windows shorter than this attend in one piece (chunking gained nothing measurable there)."""
SUFFIX = ".chunked.onnx"


def chunk_attention(model: object, chunks: int = CHUNKS, min_tokens: int = MIN_TOKENS) -> int:
    """Rewrite `model` (an onnx.ModelProto) in place; returns the number of nodes rewritten."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    assert isinstance(model, onnx.ModelProto)
    graph = model.graph
    gqa = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    if not gqa:
        return 0
    consts: dict[str, np.ndarray] = {
        "ca_zero": np.array([0], np.int64),
        "ca_one": np.array([1], np.int64),
        "ca_min": np.array([min_tokens], np.int64),
        "ca_chunks": np.array([chunks], np.int64),
    }
    node = helper.make_node
    # Shapes from the first node's queries (B, T, H*hd): every layer's share them.
    pre = [
        node("Shape", [gqa[0].input[0]], ["ca_shape"]),
        node("Gather", ["ca_shape", "ca_zero"], ["ca_batch"]),
        node("Gather", ["ca_shape", "ca_one"], ["ca_tokens"]),
        node("Equal", ["ca_batch", "ca_one"], ["ca_one_row"]),
        node("GreaterOrEqual", ["ca_tokens", "ca_min"], ["ca_long"]),
        node("And", ["ca_one_row", "ca_long"], ["ca_take1"]),
        node("Squeeze", ["ca_take1"], ["ca_take"]),
    ]
    ends = []  # e_j = floor(T * j / chunks), j = 0..chunks, as (1,) int64
    for j in range(chunks + 1):
        consts[f"ca_j{j}"] = np.array([j], np.int64)
        pre += [
            node("Mul", ["ca_tokens", f"ca_j{j}"], [f"ca_tj{j}"]),
            node("Div", [f"ca_tj{j}", "ca_chunks"], [f"ca_e{j}"]),
        ]
        ends.append(f"ca_e{j}")
    for j in range(1, chunks + 1):  # the node's seqlens_k (B,) int32 and total length () int32
        pre += [
            node("Sub", [ends[j], "ca_one"], [f"ca_last{j}"]),
            node("Cast", [f"ca_last{j}"], [f"ca_seqlens{j}"], to=TensorProto.INT32),
            node("Squeeze", [ends[j]], [f"ca_total64_{j}"]),
            node("Cast", [f"ca_total64_{j}"], [f"ca_total{j}"], to=TensorProto.INT32),
        ]
    rewritten = {}
    for i, n in enumerate(gqa):
        q, k, v, past_k, past_v, _, _, *rotary = n.input
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        body, outs = [], []
        for j in range(chunks):
            p = f"ca{i}_{j}"
            parts = [f"{p}_q", f"{p}_k", f"{p}_v"]
            body += [
                node("Slice", [x, ends[j], ends[j + 1], "ca_one"], [name])
                for x, name in zip((q, k, v), parts, strict=True)
            ]
            body.append(
                node(
                    "GroupQueryAttention",
                    [*parts, past_k, past_v, f"ca_seqlens{j + 1}", f"ca_total{j + 1}", *rotary],
                    [f"{p}_out", f"{p}_pk", f"{p}_pv"],
                    domain="com.microsoft",
                    **attrs,
                )
            )
            past_k, past_v = f"{p}_pk", f"{p}_pv"
            outs.append(f"{p}_out")
        body.append(node("Concat", outs, [f"ca{i}_chunked"], axis=1))
        whole = onnx.NodeProto()
        whole.CopyFrom(n)
        del whole.output[:]
        whole.output.extend([f"ca{i}_whole", f"ca{i}_wk", f"ca{i}_wv"])

        def branch(nodes: list, out: str, name: str) -> object:
            value = helper.make_tensor_value_info(out, TensorProto.FLOAT, None)
            return helper.make_graph(nodes, name, [], [value])

        rewritten[id(n)] = node(
            "If",
            ["ca_take"],
            [n.output[0]],
            name=f"chunked_attention_{i}",
            then_branch=branch(body, f"ca{i}_chunked", f"chunked_{i}"),
            else_branch=branch([whole], f"ca{i}_whole", f"whole_{i}"),
        )
    used = {x for m in graph.node for x in m.input} | {o.name for o in graph.output}
    for n in gqa:  # the presents of a first prompt are never read by the feature graph
        if any(o in used for o in n.output[1:] if o):
            raise ValueError(f"{n.name}: its present cache is read; cannot chunk this graph")
    nodes = []
    for n in graph.node:
        if n is gqa[0]:
            nodes += pre
        nodes.append(rewritten.get(id(n), n))
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(numpy_helper.from_array(a, name) for name, a in consts.items())
    return len(gqa)


def chunked_graph(path: Path, chunks: int = CHUNKS, min_tokens: int = MIN_TOKENS) -> Path:
    """PATH's graph with its attention chunked, written once beside it (same weights file: the
    rewrite touches only nodes) and renamed into place; PATH itself when it has nothing to
    chunk."""
    import onnx

    out = path.with_name(path.name.removesuffix(".onnx") + f".c{chunks}m{min_tokens}{SUFFIX}")
    if out.is_file():
        return out
    model = onnx.load(str(path), load_external_data=False)
    if not chunk_attention(model, chunks, min_tokens):
        return path
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    onnx.save(model, str(tmp))
    tmp.replace(out)
    return out
