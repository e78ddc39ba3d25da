"""The feature graph's fp32 down projections rewritten as int8 with one activation scale per
token row.

onnxruntime's dynamic int8 (`quantize_dynamic`) scales a MatMul's activations by the largest
value of the whole call. The down projection reads SiLU(gate) * up, where a few tokens carry
values far above the rest, so one scale per call leaves the other tokens a handful of levels
(features' relative error 0.188 with every down projection so quantised, 0.063 with them in
fp32: docs/SPEED.md). Here each token row gets its own scale (max |x| / 127 of that row), the
weights one symmetric scale per output column:

    q = QuantizeLinear(x, s_row, 128)        (uint8, zero point 128: VNNI's u8 x s8 product)
    y = float(MatMulInteger(q, Wq, 128, 0)) * s_row * s_col

A row's features then depend on that row alone (not on the other tokens of its call), as with
fp32.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

MATMULS = ("down_proj",)


def rowwise_matmuls(model: object, parts: tuple[str, ...] = MATMULS, levels: int = 127) -> int:
    """Rewrite `model` (an onnx.ModelProto with its weights loaded) in place: every fp32 MatMul
    whose name holds one of `parts` and whose second input is a 2-D initializer, its weights in
    [-levels, levels] (127; 63 where the CPU's u8 x s8 products saturate:
    training.model.backbone.row_weight_levels). Returns the number rewritten."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    assert isinstance(model, onnx.ModelProto)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    node = helper.make_node
    nodes = []
    done = 0
    shared = False
    for n in graph.node:
        w = inits.get(n.input[1]) if n.op_type == "MatMul" and len(n.input) == 2 else None
        if w is None or not any(p in n.name for p in parts) or len(w.dims) != 2:
            nodes.append(n)
            continue
        if not shared:
            graph.initializer.extend(
                [
                    numpy_helper.from_array(np.array([128], np.uint8), "rw_zp"),
                    numpy_helper.from_array(np.array(128, np.uint8), "rw_zp0"),
                    numpy_helper.from_array(np.array(0, np.int8), "rw_wzp"),
                    numpy_helper.from_array(np.array(1e-12, np.float32), "rw_eps"),
                    numpy_helper.from_array(np.array(127.0, np.float32), "rw_127"),
                    numpy_helper.from_array(np.array([-1], np.int64), "rw_m1"),
                    numpy_helper.from_array(np.array([0], np.int64), "rw_zero"),
                ]
            )
            shared = True
        wf = numpy_helper.to_array(w).astype(np.float32)  # (K, N)
        k, cols = wf.shape
        ws = np.maximum(np.abs(wf).max(axis=0), 1e-12) / float(levels)  # (N,)
        wq = np.clip(np.rint(wf / ws), -levels, levels).astype(np.int8)
        p = f"rw{done}"
        graph.initializer.extend(
            [
                numpy_helper.from_array(wq, f"{p}_wq"),
                numpy_helper.from_array(ws.astype(np.float32), f"{p}_ws"),
                numpy_helper.from_array(np.array([-1, k], np.int64), f"{p}_rows"),
                numpy_helper.from_array(np.array([cols], np.int64), f"{p}_cols"),
            ]
        )
        x, y = n.input[0], n.output[0]
        nodes += [
            node("Shape", [x], [f"{p}_xshape"]),
            node("Slice", [f"{p}_xshape", "rw_zero", "rw_m1"], [f"{p}_lead"]),
            node("Concat", [f"{p}_lead", f"{p}_cols"], [f"{p}_yshape"], axis=0),
            node("Reshape", [x, f"{p}_rows"], [f"{p}_x2"]),
            node("Abs", [f"{p}_x2"], [f"{p}_abs"]),
            node("ReduceMax", [f"{p}_abs"], [f"{p}_amax"], axes=[1], keepdims=0),
            node("Max", [f"{p}_amax", "rw_eps"], [f"{p}_amax1"]),
            node("Div", [f"{p}_amax1", "rw_127"], [f"{p}_s"]),
            node("Shape", [f"{p}_s"], [f"{p}_sshape"]),
            node("Expand", ["rw_zp", f"{p}_sshape"], [f"{p}_zp"]),
            node("QuantizeLinear", [f"{p}_x2", f"{p}_s", f"{p}_zp"], [f"{p}_q"], axis=0),
            node("MatMulInteger", [f"{p}_q", f"{p}_wq", "rw_zp0", "rw_wzp"], [f"{p}_acc"]),
            node("Cast", [f"{p}_acc"], [f"{p}_accf"], to=TensorProto.FLOAT),
            node("Unsqueeze", [f"{p}_s", "rw_m1"], [f"{p}_s2"]),
            node("Mul", [f"{p}_accf", f"{p}_s2"], [f"{p}_y1"]),
            node("Mul", [f"{p}_y1", f"{p}_ws"], [f"{p}_y2"]),
            node("Reshape", [f"{p}_y2", f"{p}_yshape"], [y]),
        ]
        graph.initializer.remove(w)
        done += 1
    del graph.node[:]
    graph.node.extend(nodes)
    return done


def rowwise_graph(src: Path, dst: Path, parts: tuple[str, ...] = MATMULS, levels: int = 127) -> int:
    """Write SRC's graph to DST (weights in DST.data) with its fp32 `parts` MatMuls in
    row-scaled int8 (weights in [-levels, levels]); the number rewritten. DST appears whole or
    not at all (written beside, renamed into place)."""
    import onnx

    model = onnx.load(str(src))
    done = rowwise_matmuls(model, parts, levels)
    tag = f".tmp{os.getpid()}"
    data = dst.name + ".data"
    tmp = dst.with_name(dst.name + tag)
    onnx.save(
        model,
        str(tmp),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=data + tag,
        size_threshold=1024,
    )
    if not (dst.parent / (data + tag)).is_file():  # every tensor small enough to stay inline
        tmp.replace(dst)
        return done
    (dst.parent / (data + tag)).replace(dst.parent / data)
    model = onnx.load(str(tmp), load_external_data=False)  # point it at the final weights name
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = data
    onnx.save(model, str(tmp))
    tmp.replace(dst)
    return done
