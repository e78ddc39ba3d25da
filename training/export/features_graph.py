"""The feature pass on onnxruntime: the frozen backbone as the fused graph (training.export.fused),
fp32 or with its Q/K/V and gate/up projections in int8 (the "mixed" scheme of
training.export.quant, VNNI on this CPU), returning the same per-token head features as
`PrefixClassifier.token_features`.

Engines (`model.feature_engine`): "torch" (the PrefixClassifier itself), "ort-fp32", "ort-int8",
"ort-int8-all" (the down projections in int8 too, activations scaled per call: measured in
docs/SPEED.md, not shipped), "ort-int8-row" (the down projections in int8 with one activation
scale per token row: training.export.rowwise_int8; configs/quick.yaml's since the fifteenth
round).
The graph is exported once per backbone, pooling and engine into the cache folder
(CACHE/graphs/<key>/features.onnx, written beside and renamed into place) and checked against
torch on export. Each window is its own call: no padding to pay for, and a window's features
never depend on what else was in its batch (int8 activations are scaled per call). With
`threads` > 1 that many windows run at once, each call on one onnxruntime thread, rather than one
window on `threads` intra-op threads: the matrices of a <= 1,024-token window are too small to
split well (1.22x the tokens/s on 2 cores, docs/SPEED.md), and the features are the same bits
(onnxruntime splits a MatMul's output, not its sum, between threads).
"""

from __future__ import annotations

import logging
import shutil
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from monitor.errors import BundleError
from training.export.chunked_attention import CHUNKS, chunked_graph
from training.model.classifier import PrefixClassifier, causal_mean

log = logging.getLogger(__name__)

ENGINES = ("torch", "ort-fp32", "ort-int8", "ort-int8-all", "ort-int8-row")
GRAPH = "features.onnx"
INT8_FP32_MATMULS = ("down_proj",)
"""MatMuls the int8 engine keeps in fp32: the down projection reads SiLU(gate) * up, whose
outlier channels int8 loses (features' relative error 0.18 with it in int8, 0.064 without, on
real windows; Q/K/V, gate/up and o in int8 cost 0.064 against 0.061 for the export's "mixed"
scheme and run ~1.14x faster: docs/SPEED.md, "Feature pass")."""
CHECK_ATOL = 1e-3
"""Largest |onnxruntime fp32 - torch| feature allowed on the export check."""


class _FeatureGraph(torch.nn.Module):
    """(input_ids, attention_mask) -> per-token head features (B, T, F), fused decoder."""

    def __init__(self, model: PrefixClassifier) -> None:
        super().__init__()
        from training.export.fused import FusedDecoder

        self.decoder = FusedDecoder(model.backbone)
        self.uses_mean = model.uses_mean

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        h = self.decoder.full(input_ids, attention_mask)
        if not self.uses_mean:
            return h
        return torch.cat([h, causal_mean(h, attention_mask)], dim=-1)


def export_feature_graph(model: PrefixClassifier, folder: Path, engine: str) -> Path:
    """Write FOLDER/features.onnx for `engine` (atomically: a temp folder renamed), and check the
    fp32 graph against torch. Returns the graph path."""
    from training.export.fused import supports

    if engine not in ENGINES[1:]:
        raise ValueError(f"feature engine {engine!r}: use one of {', '.join(ENGINES)}")
    if not supports(model.backbone):
        raise BundleError(
            f"model.feature_engine={engine}: the backbone "
            f"({getattr(model.backbone.config, 'model_type', '?')}) has no fused graph; use torch"
        )
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    graph = _FeatureGraph(model.float().eval())
    ids = torch.randint(1, int(model.backbone.config.vocab_size), (2, 24))
    mask = torch.ones(2, 24, dtype=torch.long)
    mask[1, 15:] = 0  # right padding, so the traced graph keeps the row lengths
    fp32 = tmp / ("fp32.onnx" if engine.startswith("ort-int8") else GRAPH)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            graph,
            (ids, mask),
            str(fp32),
            input_names=["input_ids", "attention_mask"],
            output_names=["features"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "tokens"},
                "attention_mask": {0: "batch", 1: "tokens"},
                "features": {0: "batch", 1: "tokens"},
            },
            opset_version=17,
            dynamo=False,
        )
        check = torch.randint(1, int(model.backbone.config.vocab_size), (1, 77))
        want = graph(check, torch.ones_like(check)).numpy()
    got = _session(fp32, 1).run(None, _feed(check.numpy()))[0]
    diff = float(np.abs(got - want).max())
    if not diff <= CHECK_ATOL:
        raise BundleError(f"{fp32}: onnxruntime features differ from torch by {diff:.3g}")
    if engine.startswith("ort-int8"):
        from training.export.quant import _dynamic

        quiet = logging.getLogger("root")
        level = quiet.level
        quiet.setLevel(max(level, logging.ERROR))  # the quantiser logs a pre-processing hint
        try:
            keep = () if engine == "ort-int8-all" else INT8_FP32_MATMULS
            if engine == "ort-int8-row":
                from training.export.rowwise_int8 import rowwise_graph
                from training.model.backbone import row_weight_levels

                _dynamic(fp32, tmp / "int8.onnx", per_channel=False, keep=keep)
                rowwise_graph(tmp / "int8.onnx", tmp / GRAPH, levels=row_weight_levels())
                for f in tmp.glob("int8.onnx*"):
                    f.unlink()
            else:
                _dynamic(fp32, tmp / GRAPH, per_channel=False, keep=keep)
        finally:
            quiet.setLevel(level)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    log.info("feature graph %s written to %s (fp32 check: max |diff| %.2g)", engine, folder, diff)
    return folder / GRAPH


def _session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    # Passive waits: spinning threads burn the shared cores' time (1.3x the CPU per token here
    # under load for the same wall time).
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _feed(ids: np.ndarray, mask: np.ndarray | None = None) -> dict[str, np.ndarray]:
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    m = np.ones_like(ids) if mask is None else np.ascontiguousarray(mask, dtype=np.int64)
    return {"input_ids": ids, "attention_mask": m}


class OrtFeatures:
    """The per-token head features of a frozen backbone on onnxruntime.

    `window_features(windows)` gives each window's (n, F) features, the per-token features of
    `PrefixClassifier.token_features` without padding (training.model.features.encode_windows
    reads them).

    Args:
        model: the classifier whose backbone and pooling are encoded.
        folder: where the graph lives (exported there when missing).
        engine: "ort-fp32", "ort-int8", "ort-int8-all" or "ort-int8-row".
        threads: windows encoded at once, each on one onnxruntime thread (one shared session:
            `InferenceSession.run` is thread-safe).
        split_windows: instead run one window at a time on `threads` intra-op threads (the
            engine before the window pool; kept for bench/bench_features.py's comparison).
        chunks: long windows attend in this many query chunks (training.export.chunked_attention:
            the same bits, faster); 1 runs the exported graph as it is (for the bench).
    """

    def __init__(
        self,
        model: PrefixClassifier,
        folder: Path,
        engine: str,
        threads: int,
        *,
        split_windows: bool = False,
        chunks: int = CHUNKS,
    ) -> None:
        path = folder / GRAPH
        if not path.is_file():
            path = export_feature_graph(model, folder, engine)
        if chunks > 1:
            path = chunked_graph(path, chunks)
        self.engine = engine
        threads = max(int(threads), 1)
        self.threads = 1 if split_windows else threads
        self.session = _session(path, threads if split_windows else 1)

    def _one(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        return self.session.run(None, _feed(np.asarray(ids).reshape(1, -1)))[0][0]  # (n, F)

    def window_features(self, windows: Sequence[Sequence[int] | np.ndarray]) -> list[np.ndarray]:
        """(len(ids), F) features of each window of token ids, `threads` windows at a time."""
        if self.threads == 1 or len(windows) < 2:
            return [self._one(w) for w in windows]
        # Longest first, so the pool's last calls are short ones (no core waits on one long tail).
        order = sorted(range(len(windows)), key=lambda i: -len(windows[i]))
        out: list[np.ndarray] = [np.zeros(0)] * len(windows)
        with ThreadPoolExecutor(self.threads) as pool:
            for i, f in zip(order, pool.map(lambda i: self._one(windows[i]), order), strict=True):
                out[i] = f
        return out
