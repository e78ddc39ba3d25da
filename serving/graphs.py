"""Opening a bundle's onnxruntime graphs for serving, and checking their logit outputs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from monitor.errors import BundleError

LOGIT_OUTPUTS = ("logits", "logits_text")
"""The graphs' logit outputs, first in both graphs: the LM probe's, then the second probe's
(only in a bundle with one; docs/BUNDLE.md)."""


def ort_session(path: Path, threads: int | None) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads:
        opts.intra_op_num_threads = int(threads)
    opts.inter_op_num_threads = 1
    # No busy-waiting between ops: with many sessions calling at once spinning threads only
    # steal cores; arenas stay at onnxruntime's defaults (both measured: docs/SPEED.md).
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def check_logit_outputs(bundle: Path, sessions: Mapping[str, Any], heads: int) -> None:
    """Each graph's first outputs are the `heads` logits monitor.json promises, and no more: a
    second logit read as a cache tensor (or the reverse) would score silently wrong.

    Raises:
        BundleError: naming the graph, its outputs and what was expected.
    """
    want = list(LOGIT_OUTPUTS[:heads])
    for name, sess in sessions.items():
        outs = [o.name for o in sess.get_outputs()]
        if outs[:heads] != want or any(o in LOGIT_OUTPUTS for o in outs[heads:]):
            raise BundleError(
                f"{bundle / name}: outputs {outs[:3]} do not start with {want} "
                "as monitor.json's classifier.text_probe says; re-export the bundle"
            )


def kv_start_state(
    path: Path, kv: Any, meta: Mapping[str, Any]
) -> tuple[list[str], list[np.ndarray], bool]:
    """The KV graph's past inputs in order, the state a live session starts from (an empty KV
    cache and, for pooling "last+mean", a zero running sum (1, H) and count (1, 1) of the
    window's hidden states), and whether the graph carries that sum.

    Args:
        path: the graph file (named in errors).
        kv: its onnxruntime session.
        meta: monitor.json's "kv" (n_layers, kv_heads, head_dim).

    Raises:
        BundleError: the graph's running-sum input has no fixed width.
    """
    names = [f"past_{t}_{i}" for i in range(meta["n_layers"]) for t in ("key", "value")]
    empty = np.zeros((1, meta["kv_heads"], 0, meta["head_dim"]), np.float32)
    state: list[np.ndarray] = [empty] * len(names)
    sum_input = {i.name: i for i in kv.get_inputs()}.get("past_hidden_sum")
    if sum_input is None:
        return names, state, False
    width = sum_input.shape[-1]
    if not isinstance(width, int):
        raise BundleError(f"{path}: past_hidden_sum has no width")
    zeros = [np.zeros((1, width), np.float32), np.zeros((1, 1), np.float32)]
    return ["past_hidden_sum", "past_count", *names], zeros + state, True
