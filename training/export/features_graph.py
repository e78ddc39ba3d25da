"""The feature pass on onnxruntime: the frozen backbone as the fused graph (training.export.fused),
fp32 or with its Q/K/V and gate/up projections in int8 (the "mixed" scheme of
training.export.quant, VNNI on this CPU), returning the same per-token head features as
`PrefixClassifier.token_features`.

Engines (`model.feature_engine`): "torch" (the PrefixClassifier itself), "ort-fp32", "ort-int8".
The graph is exported once per backbone, pooling and engine into the cache folder
(CACHE/graphs/<key>/features.onnx, written beside and renamed into place) and checked against
torch on export. Each window is its own call: no padding to pay for, and a window's features
never depend on what else was in its batch (int8 activations are scaled per call).
"""

from __future__ import annotations

import logging
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from monitor.errors import BundleError
from training.model.classifier import PrefixClassifier, causal_mean

log = logging.getLogger(__name__)

ENGINES = ("torch", "ort-fp32", "ort-int8")
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
    fp32 = tmp / ("fp32.onnx" if engine == "ort-int8" else GRAPH)
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
    if engine == "ort-int8":
        from training.export.quant import _dynamic

        quiet = logging.getLogger("root")
        level = quiet.level
        quiet.setLevel(max(level, logging.ERROR))  # the quantiser logs a pre-processing hint
        try:
            _dynamic(fp32, tmp / GRAPH, per_channel=False, keep=INT8_FP32_MATMULS)
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

    `token_features(ids, mask)` has PrefixClassifier.token_features' contract (right-padded
    (B, T) -> (B, T, F) float32), so training.model.features.encode_windows reads either.

    Args:
        model: the classifier whose backbone and pooling are encoded.
        folder: where the graph lives (exported there when missing).
        engine: "ort-fp32" or "ort-int8".
        threads: onnxruntime intra-op threads.
    """

    def __init__(self, model: PrefixClassifier, folder: Path, engine: str, threads: int) -> None:
        path = folder / GRAPH
        if not path.is_file():
            path = export_feature_graph(model, folder, engine)
        self.engine = engine
        self.session = _session(path, threads)

    def token_features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """One call per row, on its real tokens only (features of padded slots are zero)."""
        ids, mask = input_ids.numpy(), attention_mask.numpy()
        rows = []
        for i in range(ids.shape[0]):
            n = int(mask[i].sum())
            f = self.session.run(None, _feed(ids[i : i + 1, :n]))[0][0]  # (n, F)
            pad = np.zeros((ids.shape[1] - n, f.shape[1]), dtype=np.float32)
            rows.append(np.concatenate([f, pad]) if len(pad) else f)
        return torch.from_numpy(np.stack(rows))
