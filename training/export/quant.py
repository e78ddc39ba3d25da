"""The int8 twins of the fp32 graphs (`model.int8.onnx`, `model_kv.int8.onnx`) and what they
cost in AUROC.

Schemes (`ExportConfig.int8_scheme`, `failfast export --int8 --int8-scheme NAME`):

- "mixed": dynamic int8 (below) for the projections that read RMS-normalised inputs (Q/K/V,
  gate/up: ~70% of the matmul work); the output and down projections, whose inputs (attention
  outputs, SiLU(gate) * up) carry the outlier channels, and the head stay fp32. On real
  windows of the quick model its logits move a sixth as much as all-int8 (mean |d logit| 0.07
  vs 1.15) and it runs ~1.5x faster than fp32 (8-bit weights, a VNNI CPU, before the 7-bit weights
  below).
- "dynamic": int8 MatMul weights with one scale per tensor, activations quantised per tensor at
  each call (onnxruntime `quantize_dynamic`). The scale of a call's activations follows its
  largest value, so a few outlier channels cost the rest their precision, and a row's score
  depends on the other rows and chunks of its call.
- "per-channel": the same with one weight scale per output column.
- "blockwise": `MatMulNBits` with 8-bit weights in blocks of 32 input rows, activations
  quantised per block of each token row (accuracy_level 4). Nothing depends on the other rows of
  a call: batched and chunked calls give the same scores as single ones. On this CPU it is
  hardly faster than fp32 (the weights are 4x smaller).

The dynamic schemes ("mixed", "dynamic", "per-channel") store 7-bit weights in [-64, 64]
(onnxruntime's `reduce_range`). A bundle is exported once and served on CPUs the export never
sees, and on x86 without VNNI onnxruntime's u8 x s8 kernel adds pairs of products in int16
(training.model.backbone.u8s8_saturates), which 8-bit weights overflow and 7-bit ones cannot.
Measured on a 2-core AVX2 EPYC (docs/SPEED.md, "On a slow AVX2 CPU"), the quick job's bundle on
80 test-split runs (1,081 prefixes), "mixed" against fp32: 8-bit weights shifted every logit
down (mean -0.181, mean |d| 0.181, p99 0.349), 7-bit ones did not (mean -0.015, mean |d| 0.091,
p99 0.276). On a Zen 5 EPYC with AVX-512 VNNI (80 test-split runs, 1,043 prefixes) 7-bit weights
were closer too: mean -0.052, mean |d| 0.094 against -0.246 / 0.246 with 8-bit ones.

`quant_auroc_change` scores held-out runs with both graphs through serving.Scorer and compares
per-agent AUROC at 25/50/75% of each run (training.evaluate.auroc).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from training.export.graphs import FULL_GRAPH, INT8_SUFFIX, KV_GRAPH, example_inputs

log = logging.getLogger(__name__)

SCHEMES = ("mixed", "blockwise", "dynamic", "per-channel")
FP32_MATMULS = ("o_proj", "down_proj", "head")
"""Node-name parts of the MatMuls the "mixed" scheme keeps in fp32 (the fused and the transformers
graphs both name these nodes after their modules)."""
BLOCK = 32
"""Input rows per weight block of the "blockwise" scheme (32: the finest MatMulNBits block)."""


def int8_name(name: str) -> str:
    """model.onnx -> model.int8.onnx."""
    return f"{name[: -len('.onnx')]}{INT8_SUFFIX}.onnx"


def _dynamic(
    src: Path, dst: Path, per_channel: bool, keep: tuple[str, ...] = (), reduce_range: bool = False
) -> None:
    """onnxruntime's dynamic int8 of `src`'s MatMuls into `dst`, but for those whose node name
    holds one of `keep`; `reduce_range`: 7-bit weights (the served graphs: module docstring).
    The feature pass's dynamic projections keep 8-bit weights on every CPU: 7-bit ones there raised the features'
    relative error against torch fp32 from 0.071 to 0.100 on the AVX2 CPU of that measurement
    (bench_features, 8 runs), and its probe is fitted on the features it gets."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    graph = onnx.load(str(src), load_external_data=False).graph
    fp32 = [n.name for n in graph.node if n.op_type == "MatMul" and any(k in n.name for k in keep)]
    quantize_dynamic(
        str(src),
        str(dst),
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["MatMul"],
        per_channel=per_channel,
        nodes_to_exclude=fp32,
        use_external_data_format=True,
        reduce_range=reduce_range,
    )


def _blockwise(src: Path, dst: Path) -> None:
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    algo = DefaultWeightOnlyQuantConfig(
        block_size=BLOCK, is_symmetric=True, accuracy_level=4, bits=8
    )
    quantizer = MatMulNBitsQuantizer(
        onnx.load(str(src)),
        bits=8,
        block_size=BLOCK,
        is_symmetric=True,
        accuracy_level=4,
        algo_config=algo,
    )
    quantizer.process()
    quantizer.model.save_model_to_file(str(dst), use_external_data_format=True)


def quantize_graphs(out: Path, scheme: str = "mixed") -> list[str]:
    """Write the int8 twins of model.onnx and model_kv.onnx beside them; the files written.

    Raises:
        ValueError: an unknown scheme.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"int8 scheme {scheme!r}: use one of {', '.join(SCHEMES)}")
    # the quantisers log every node at INFO
    quiet = [
        logging.getLogger(n) for n in ("root", "onnxruntime.quantization.matmul_nbits_quantizer")
    ]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(max(q.level, logging.WARNING))
    written: list[str] = []
    try:
        for name in (FULL_GRAPH, KV_GRAPH):
            dst = out / int8_name(name)
            if scheme == "blockwise":
                _blockwise(out / name, dst)
            else:
                keep = FP32_MATMULS if scheme == "mixed" else ()
                _dynamic(
                    out / name,
                    dst,
                    per_channel=scheme == "per-channel",
                    keep=keep,
                    reduce_range=True,
                )
            written += [dst.name, *(p.name for p in out.glob(f"{dst.name}.data"))]
    finally:
        for q, level in zip(quiet, levels, strict=True):
            q.setLevel(level)
    return written


def int8_diff(model: Any, out: Path, check_batch: int, check_length: int) -> float:
    """Max |int8 - fp32| logit of the whole-rendering graphs on the export check inputs (every
    head's: the LM probe's and, with a second probe, "logits_text")."""
    from training.export.convert import _ort_session, _run
    from training.export.graphs import logit_names

    ids, mask, positions, signals = example_inputs(model, check_batch, check_length, 4, seed=1)
    feed = {
        "input_ids": ids.numpy(),
        "attention_mask": mask.numpy(),
        "positions": positions.numpy(),
        "signals": signals.numpy().astype(np.float32),
    }
    names = logit_names(model)
    a = np.stack(_run(_ort_session(out / FULL_GRAPH), names, feed))
    b = np.stack(_run(_ort_session(out / int8_name(FULL_GRAPH)), names, feed))
    return float(np.abs(a - b).max())


def quant_auroc_change(bundle: str | Path, runs: list[Any], *, max_runs: int = 0) -> dict[str, Any]:
    """AUROC of the fp32 and int8 graphs of `bundle` on labelled held-out runs.

    Args:
        bundle: a bundle exported with int8 graphs.
        runs: labelled runs the model never trained on (validation or test split).
        max_runs: at most this many runs, evenly spaced over `runs` (0: all).

    Returns:
        training.evaluate.auroc.auroc_report over scorers "fp32" and "int8" (per agent: AUROC at
        25/50/75% of each run and over all prefixes), plus "delta": per agent and for the mean
        over agents, int8 minus fp32 at each of those keys.
    """
    from serving.scorer import Scorer
    from training.data.records import records_from_runs
    from training.evaluate.auroc import auroc_report

    runs = [r for r in runs if r.resolved is not None and r.steps]
    if max_runs and len(runs) > max_runs:
        runs = [runs[i] for i in np.linspace(0, len(runs) - 1, max_runs).astype(int)]
    scores: dict[str, Sequence[np.ndarray]] = {}
    for name, int8 in (("fp32", False), ("int8", True)):
        scorer = Scorer.load(bundle, int8=int8, verify=not int8)
        scores[name] = [np.asarray(scorer.score_run(r)) for r in runs]
    report = auroc_report(records_from_runs(runs, scores), scorers=["fp32", "int8"])
    report["delta"] = {
        group: _delta(row["fp32"], row["int8"])
        for group, row in [*report["per_agent"].items(), ("mean_per_agent", _mean_rows(report))]
    }
    return report


def _mean_rows(report: dict[str, Any]) -> dict[str, Any]:
    return {name: report["mean_per_agent"][name] for name in ("fp32", "int8")}


def _delta(a: dict[str, float | None], b: dict[str, float | None]) -> dict[str, float | None]:
    return {k: (b[k] - a[k]) if a[k] is not None and b[k] is not None else None for k in a}  # type: ignore[operator]
