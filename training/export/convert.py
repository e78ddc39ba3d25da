"""Export a PrefixClassifier to its two ONNX graphs (training.export.graphs) and check them against
torch (the int8 twins: training.export.quant).

After export both graphs are compared with torch on a batch size and length other than the
export's, and the largest absolute logit difference is logged (it must be <= `atol`); the KV
graph also once with three sessions of different past lengths in one batched call
(serving.batching), which must give each session's own logits.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from monitor.errors import BundleError
from training.config import ExportConfig
from training.export.graphs import (
    FULL_GRAPH,
    KV_GRAPH,
    POOL_NAMES,
    FullGraph,
    KVGraph,
    all_head_logits,
    empty_past,
    example_inputs,
    graph_kind,
    kv_names,
    logit_names,
)
from training.model.classifier import PrefixClassifier

log = logging.getLogger(__name__)


@dataclass
class ExportReport:
    """What an export measured.

    Attributes:
        full_max_abs_diff: largest |ORT - torch| logit of model.onnx on the check inputs.
        kv_max_abs_diff: same for model_kv.onnx fed in two chunks (past + new tokens), one
            session at a time and three sessions batched in one call (the larger of the two).
        graph: "fused" (training.export.fused) or "transformers" (the transformers trace).
        int8_max_abs_diff: largest |int8 - fp32| logit (None without --int8).
        files: graph files written (relative to the bundle).
        notes: lines for the user (e.g. the int8 AUROC change).
    """

    full_max_abs_diff: float = 0.0
    kv_max_abs_diff: float = 0.0
    int8_max_abs_diff: float | None = None
    graph: str = "transformers"
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _ort_session(path: Path) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _run(sess: Any, outputs: list[str] | None, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    # An input the graph does not use (signals with 0 signal columns) is pruned at export.
    names = {i.name for i in sess.get_inputs()}
    return list(sess.run(outputs, {k: v for k, v in feed.items() if k in names}))


def export_graphs(model: PrefixClassifier, out: Path, cfg: ExportConfig) -> ExportReport:
    """Write model.onnx and model_kv.onnx (fp32) for `model` into `out` and check them.

    Raises:
        BundleError: onnxruntime disagrees with torch by more than `cfg.atol`.
    """
    model = model.eval().float()
    out.mkdir(parents=True, exist_ok=True)
    n_layers = int(model.backbone.config.num_hidden_layers)
    past_names, present_names = kv_names(n_layers, model.uses_mean)
    heads = logit_names(model)
    ids, mask, positions, signals = example_inputs(model, 2, 24, 3, seed=0)
    with torch.no_grad(), warnings.catch_warnings():
        # The tracer warns about every Python branch in transformers; the checks below are what
        # tell whether the traced graphs generalise to other shapes.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            FullGraph(model),
            (ids, mask, positions, signals),
            str(out / FULL_GRAPH),
            input_names=["input_ids", "attention_mask", "positions", "signals"],
            output_names=heads,
            dynamic_axes={
                "input_ids": {0: "batch", 1: "tokens"},
                "attention_mask": {0: "batch", 1: "tokens"},
                "positions": {0: "batch", 1: "boundaries"},
                "signals": {0: "batch", 1: "boundaries"},
                **{h: {0: "batch", 1: "boundaries"} for h in heads},
            },
            opset_version=cfg.opset,
            dynamo=False,
        )
        new, past_len = 5, 7
        kv_ids = ids[:, :new]
        kv_mask = torch.ones(2, past_len + new, dtype=torch.long)
        # a batch as serving.batching packs it: the second row's past left-padded by one slot and
        # its new tokens right-padded by one, so the traced graph keeps the mask paths
        kv_mask[-1, 0] = 0
        kv_mask[-1, -1] = 0
        past = empty_past(model, 2, past_len, random=True)
        dyn: dict[str, dict[int, str]] = {
            "input_ids": {0: "batch", 1: "new_tokens"},
            "attention_mask": {0: "batch", 1: "total_tokens"},
            "signals": {0: "batch"},
            **{h: {0: "batch"} for h in heads},
        }
        for p_name, q_name in zip(past_names, present_names, strict=True):
            pooled = p_name in POOL_NAMES  # (B, H) / (B, 1): no token axis
            dyn[p_name] = {0: "batch"} if pooled else {0: "batch", 2: "past_tokens"}
            dyn[q_name] = {0: "batch"} if pooled else {0: "batch", 2: "total_tokens"}
        torch.onnx.export(
            KVGraph(model),
            (kv_ids, kv_mask, signals[:, -1], *past),
            str(out / KV_GRAPH),
            input_names=["input_ids", "attention_mask", "signals", *past_names],
            output_names=[*heads, *present_names],
            dynamic_axes=dyn,
            opset_version=cfg.opset,
            dynamo=False,
        )
    report = ExportReport(files=[FULL_GRAPH, KV_GRAPH], graph=graph_kind(model))
    report.full_max_abs_diff = check_full(model, out / FULL_GRAPH, cfg)
    report.kv_max_abs_diff = check_kv(model, out / KV_GRAPH, cfg)
    for name, diff in (
        ("model.onnx", report.full_max_abs_diff),
        ("model_kv.onnx", report.kv_max_abs_diff),
    ):
        log.info("%s: max |onnxruntime - torch| = %.3g (fp32, limit %g)", name, diff, cfg.atol)
        if not diff <= cfg.atol:
            raise BundleError(
                f"{out / name}: onnxruntime differs from torch by {diff:.3g} > {cfg.atol:g}"
            )
    return report


def torch_logits(
    model: PrefixClassifier,
    ids: torch.Tensor,
    mask: torch.Tensor,
    positions: torch.Tensor,
    signals: torch.Tensor,
) -> np.ndarray:
    """Every head's logits from torch (the reference of the checks): (heads, B, P)."""
    with torch.no_grad():
        f = model.token_features(ids, mask)
        idx = positions.unsqueeze(-1).expand(-1, -1, f.shape[-1])
        x = model.head_input(torch.gather(f, 1, idx), signals)
        return torch.stack(all_head_logits(model, x)).numpy()


def check_full(model: PrefixClassifier, path: Path, cfg: ExportConfig) -> float:
    """Max |ORT - torch| of the whole-rendering graph at another batch size and length (every
    head's logits)."""
    ids, mask, positions, signals = example_inputs(
        model, cfg.check_batch, cfg.check_length, 4, seed=1
    )
    ref = torch_logits(model, ids, mask, positions, signals)
    got = _run(
        _ort_session(path),
        logit_names(model),
        {
            "input_ids": ids.numpy(),
            "attention_mask": mask.numpy(),
            "positions": positions.numpy(),
            "signals": signals.numpy().astype(np.float32),
        },
    )
    return float(np.abs(np.stack(got) - ref).max())


def check_kv(model: PrefixClassifier, path: Path, cfg: ExportConfig) -> float:
    """Max |ORT - torch| of the KV graph: three runs of different lengths, each fed in two chunks,
    vs one full forward per run.

    Each run's first chunk starts from an empty cache (as a session's first step or a re-render
    does) and its second continues from the present KV (and running hidden sum/count) the graph
    returned: once one session at a time, then the three second chunks in one batched call
    (serving.batching: different past lengths and new-token counts, padded).
    """
    from serving.batching import KVRequest, pack, unpack

    sess = _ort_session(path)
    past_names, _ = kv_names(int(model.backbone.config.num_hidden_layers), model.uses_mean)
    heads = len(logit_names(model))

    def call(reqs: list[KVRequest]) -> list[tuple[np.ndarray, list[np.ndarray]]]:
        return unpack(_run(sess, None, pack(reqs, past_names)), reqs, heads=heads)

    start = [t.numpy() for t in empty_past(model, 1, 0, random=False)]
    g = torch.Generator().manual_seed(3)
    n = cfg.check_length
    diffs: list[float] = []
    pending: list[tuple[KVRequest, np.ndarray]] = []
    for j, (length, cut) in enumerate(((n, n // 2 + 3), (n - 9, 5), (n // 2, n // 2 - 1))):
        ids = example_inputs(model, 1, length, 1, seed=2 + j)[0]
        sig = torch.rand(1, 2, len(model.signal_names), generator=g) * 5
        pos = torch.tensor([[cut - 1, length - 1]])
        ref = torch_logits(model, ids, torch.ones_like(ids), pos, sig)[:, 0]  # (heads, 2)
        first = KVRequest(ids[0, :cut].tolist(), start, sig[0, 0].numpy())
        logit, state = call([first])[0]
        second = KVRequest(ids[0, cut:].tolist(), state, sig[0, 1].numpy())
        diffs += [
            float(np.abs(logit - ref[:, 0]).max()),
            float(np.abs(call([second])[0][0] - ref[:, 1]).max()),
        ]
        pending.append((second, ref[:, 1]))
    batch = [r for r, _ in pending]
    for (_, ref1), (logit, _) in zip(pending, call(batch), strict=True):
        diffs.append(float(np.abs(logit - ref1).max()))
    return float(max(diffs))
