"""Prefix features: one causal pass per featuriser window yields the head features at every step
boundary of a run (the hidden state, plus the causal mean of the window's hidden states with
pooling "last+mean"), read from and written to the feature cache (training.model.cache).

Runs are processed and cached in chunks, so an interrupted pass resumes from the runs written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from monitor.featurise import Featuriser, Window
from monitor.types import Trajectory
from training.model.cache import FeatureCache, RunFeatures, run_hash

log = logging.getLogger(__name__)


@dataclass
class PassStats:
    """What a feature pass cost (for logs and the benchmark)."""

    runs: int = 0
    cached_runs: int = 0
    tokens: int = 0
    seconds: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def _batches(items: list[tuple[int, Window]], batch_tokens: int) -> list[list[tuple[int, Window]]]:
    """Group windows (sorted by length) so that batch size x longest length <= batch_tokens."""
    items = sorted(items, key=lambda it: len(it[1].ids))
    out: list[list[tuple[int, Window]]] = []
    cur: list[tuple[int, Window]] = []
    for it in items:
        longest = len(it[1].ids)  # sorted: the newest item is the longest
        if cur and longest * (len(cur) + 1) > batch_tokens:
            out.append(cur)
            cur = []
        cur.append(it)
    if cur:
        out.append(cur)
    return out


def _device(model: Any) -> torch.device:
    """Where `model`'s weights are (the CPU for a model without parameters)."""
    params = getattr(model, "parameters", None)
    first = next(iter(params()), None) if callable(params) else None
    return first.device if first is not None else torch.device("cpu")


@torch.no_grad()
def encode_windows(
    model: Any, windows: Sequence[Window], *, batch_tokens: int = 4096, pad_id: int = 0
) -> list[np.ndarray]:
    """Head features at the boundaries of each window: one (len(boundaries), F) array per window.

    Args:
        model: a PrefixClassifier (its `token_features`: [last ; causal mean] with pooling
            "last+mean"), or anything with `.features(input_ids, attention_mask) -> (B, T, H)`.
        windows: featuriser windows.
        batch_tokens: padded tokens per forward batch.
        pad_id: id used for right padding (masked out; causal attention makes it inert).
    """
    direct = getattr(model, "window_features", None)
    if direct is not None:  # onnxruntime (training.export.features_graph): no batches, no padding
        return [
            f[w.boundaries] for f, w in zip(direct([w.ids for w in windows]), windows, strict=True)
        ]
    out: list[np.ndarray | None] = [None] * len(windows)
    for batch in _batches(list(enumerate(windows)), batch_tokens):
        t = max(len(w.ids) for _, w in batch)
        ids = torch.full((len(batch), t), pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), t), dtype=torch.long)
        for row, (_, w) in enumerate(batch):
            ids[row, : len(w.ids)] = torch.tensor(w.ids, dtype=torch.long)
            mask[row, : len(w.ids)] = 1
        encode = getattr(model, "token_features", None) or model.features
        dev = _device(model)  # a model on a GPU (bench/gpu_crossfit.sh) reads its batches there
        h = encode(ids.to(dev), mask.to(dev))  # (B, T, F)
        for row, (i, w) in enumerate(batch):
            out[i] = h[row, w.boundaries].float().cpu().numpy()
    return [o for o in out if o is not None]


def run_features_from_windows(
    windows: Sequence[Window], hidden: Sequence[np.ndarray], n_steps: int
) -> RunFeatures:
    """Assemble per-window boundary states into one (n_steps, H) array ordered by k."""
    h = hidden[0].shape[1] if hidden else 0
    arr = np.zeros((n_steps, h), dtype=np.float32)
    seen = 0
    for w, hw in zip(windows, hidden, strict=True):
        for j, k in enumerate(w.steps):
            arr[k - 1] = hw[j]
            seen += 1
    if seen != n_steps:
        raise ValueError(f"featuriser scored {seen} prefixes of a run with {n_steps} steps")
    return RunFeatures(arr, sum(len(w.ids) for w in windows))


def _from_cache(
    runs: Sequence[Trajectory],
    keys: list[str],
    cache: FeatureCache | None,
    stats: PassStats,
) -> tuple[list[RunFeatures | None], dict[str, int], list[int]]:
    """The features already known: (per run its cached features or None, content key -> first
    run with it (identical runs are encoded once), the runs still to encode)."""
    out: list[RunFeatures | None] = [None] * len(runs)
    todo: list[int] = []
    first: dict[str, int] = {}
    for i, key in enumerate(keys):
        if key in first:
            continue
        first[key] = i
        hit = cache.get(key) if cache is not None else None
        if hit is not None and hit.hidden.shape[0] == len(runs[i].steps):
            out[i] = hit
            stats.cached_runs += 1
        elif len(runs[i].steps) == 0:
            out[i] = RunFeatures(np.zeros((0, 0), dtype=np.float32), 0)
        else:
            todo.append(i)
    return out, first, todo


def extract_features(
    model: Any,
    featuriser: Featuriser,
    runs: Sequence[Trajectory],
    *,
    cache: FeatureCache | None = None,
    batch_tokens: int = 4096,
    chunk_runs: int = 32,
    pad_id: int = 0,
    progress: bool = True,
    stats: PassStats | None = None,
) -> list[RunFeatures]:
    """Boundary hidden states of every run, from the cache where present.

    Runs are processed in chunks of `chunk_runs`: each chunk's windows are batched by length,
    encoded, and its runs written to the cache before the next chunk starts.

    Args:
        model: a PrefixClassifier (or anything with `.features`), in eval mode.
        featuriser: turns a run into windows (its encode must be the model's tokenizer).
        runs: the runs.
        cache: feature cache, or None to always compute.
        batch_tokens: padded tokens per forward batch.
        chunk_runs: runs per chunk (the unit of resumption).
        pad_id: padding id.
        progress: show a progress bar (tokens).
        stats: filled with counts and timing when given.
    """
    total = stats if stats is not None else PassStats()
    stats = PassStats()  # this call; added to `total` at the end
    t0 = time.perf_counter()
    keys = [run_hash(r) for r in runs]
    out, first, todo = _from_cache(runs, keys, cache, stats)
    bar = tqdm(
        total=len(todo),
        unit="run",
        desc="features",
        disable=not progress or not todo,
        dynamic_ncols=True,
    )
    chunks = [todo[s : s + chunk_runs] for s in range(0, len(todo), chunk_runs)]

    def render(chunk: list[int]) -> dict[int, list[Window]]:
        return {i: featuriser.windows(runs[i]) for i in chunk}

    # The next chunk is rendered and tokenised on a thread of its own while this one encodes
    # (the featuriser is single-threaded: 18.7 s of one core for all 4,078 runs here).
    prep = ThreadPoolExecutor(1, thread_name_prefix="featurise")
    try:
        ahead = prep.submit(render, chunks[0]) if chunks else None
        for n, chunk in enumerate(chunks):
            assert ahead is not None
            per_run = ahead.result()
            ahead = prep.submit(render, chunks[n + 1]) if n + 1 < len(chunks) else None
            flat = [(i, w) for i in chunk for w in per_run[i]]
            hidden = encode_windows(
                model, [w for _, w in flat], batch_tokens=batch_tokens, pad_id=pad_id
            )
            by_run: dict[int, list[np.ndarray]] = {i: [] for i in chunk}
            for (i, _), h in zip(flat, hidden, strict=True):
                by_run[i].append(h)
            for i in chunk:
                feats = run_features_from_windows(per_run[i], by_run[i], len(runs[i].steps))
                out[i] = feats
                stats.tokens += feats.encoded_tokens
                if cache is not None:
                    cache.put(keys[i], feats)
            stats.runs += len(chunk)
            bar.update(len(chunk))
            elapsed = time.perf_counter() - t0
            bar.set_postfix(tok_s=f"{stats.tokens / max(elapsed, 1e-9):.0f}")
    finally:
        prep.shutdown(cancel_futures=True)
    bar.close()
    stats.seconds = time.perf_counter() - t0
    total.runs += stats.runs
    total.cached_runs += stats.cached_runs
    total.tokens += stats.tokens
    total.seconds += stats.seconds
    if todo:
        log.info(
            "feature pass: %d runs encoded (%d cached), %d tokens in %.1f s (%.0f tok/s)",
            stats.runs,
            stats.cached_runs,
            stats.tokens,
            stats.seconds,
            stats.tokens_per_s,
        )
    return [out[i] if out[i] is not None else out[first[k]] for i, k in enumerate(keys)]  # type: ignore[misc]


def shard_features(
    model: Any,
    featuriser: Featuriser,
    runs: Sequence[Trajectory],
    *,
    cache: FeatureCache,
    rank: int,
    world: int,
    timeout_s: float = 24 * 3600,
    **kwargs: Any,
) -> None:
    """Data-parallel feature pass: process `rank` of `world` encodes runs[rank::world] into the
    shared cache, then waits until every other process has written its share.

    Afterwards `extract_features` on all runs reads everything from the cache. Needs no process
    group (ranks only share the cache folder), so it works before the Trainer initialises one.
    """
    extract_features(model, featuriser, runs[rank::world], cache=cache, **kwargs)
    keys = {run_hash(r) for r in runs if r.steps}
    deadline = time.monotonic() + timeout_s
    while True:
        missing = [k for k in keys if not cache._path(k).is_file()]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(missing)} runs never appeared in {cache.dir}")
        time.sleep(2.0)
