"""Batching of live sessions' steps: the pending steps of concurrent sessions go through
model_kv.onnx as the rows of one call instead of one call each.

A row is one session's new tokens on its own cache. Rows have different past lengths and new
token counts, so a batch LEFT-pads every past to the longest and RIGHT-pads every new input to
the longest; the attention mask marks the real tokens, and the graph takes each new token's
position from the count of real tokens before it and the logit at each row's last real token
(training.export.graphs, docs/BUNDLE.md). A row's present cache is cut back to its real slots,
so a session's state is the same whether its steps ran alone or in a batch (fp32: equal to
~1e-6, tests/serving/test_batching.py).

`KVBatcher` gathers requests for `window` seconds after the first arrives (or until
`max_batch` are waiting), splits them into calls whose padding costs at most a tenth more than
running them alone (`groups`), and hands each caller its row. Measured on 2 CPU cores
(docs/SPEED.md) a padded call costs what this cost model says and saves nothing else: a single
~80-token step already runs the matmuls at full speed, so batching pays only where per-call
costs dominate (short steps, more cores, accelerators). The service leaves it off by default.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

State = list[np.ndarray]
"""A session's cache in the KV graph's past-input order: [hidden sum (1, H), count (1, 1),]
then key and value (1, kv_heads, P, head_dim) per layer."""


@dataclass
class KVRequest:
    """One session's call: new token ids on its cache, the signals after its step."""

    ids: Sequence[int]
    state: State
    signals: np.ndarray  # (S,) float32
    future: Future = field(default_factory=Future)

    @property
    def past(self) -> int:
        """Cached tokens."""
        return int(self.state[-1].shape[2])


def pack(requests: Sequence[KVRequest], past_names: Sequence[str]) -> dict[str, np.ndarray]:
    """The feed of one KV-graph call carrying `requests` as rows (padding as described above).

    A single request is fed as is (no padding, no copy of its cache); a request without new
    tokens gets one masked padding token (its cache comes back unchanged).
    """
    b = len(requests)
    past = max(r.past for r in requests)
    new = max(max(len(r.ids), 1) for r in requests)
    ids = np.zeros((b, new), np.int64)  # padding id 0: masked, causal attention never reads it
    mask = np.zeros((b, past + new), np.int64)
    for i, r in enumerate(requests):
        ids[i, : len(r.ids)] = r.ids
        mask[i, past - r.past : past + len(r.ids)] = 1
    feed = {"input_ids": ids, "attention_mask": mask}
    feed["signals"] = np.stack([np.asarray(r.signals, np.float32) for r in requests])
    for j, name in enumerate(past_names):
        parts = [r.state[j] for r in requests]
        if b == 1:
            feed[name] = parts[0]
        elif parts[0].ndim == 2:  # hidden sum (1, H) / count (1, 1)
            feed[name] = np.concatenate(parts)
        else:
            kv = np.zeros((b, *parts[0].shape[1:2], past, parts[0].shape[3]), np.float32)
            for i, p in enumerate(parts):
                if p.shape[2]:
                    kv[i, :, past - p.shape[2] :] = p[0]
            feed[name] = kv
    return feed


def unpack(
    outputs: Sequence[np.ndarray], requests: Sequence[KVRequest], heads: int = 1
) -> list[tuple[np.ndarray, State]]:
    """Each request's (logits, new state) from the outputs of `pack`'s call: logits (heads,)
    float64, one per logit output of the graph (the first `heads` outputs: "logits", then
    "logits_text" where the bundle has a second probe)."""
    logits = np.stack([np.asarray(o, dtype=np.float64) for o in outputs[:heads]], axis=1)
    present = outputs[heads:]
    if len(requests) == 1 and len(requests[0].ids):  # nothing padded: the outputs as they are
        return [(logits[0], list(present))]
    past = max(r.past for r in requests)
    out = []
    for i, r in enumerate(requests):
        state = []
        for t in present:
            if t.ndim == 2:
                state.append(t[i : i + 1].copy())
            else:  # (B, kv_heads, P + N, hd): this row's real slots, past then new
                real = t[i : i + 1, :, past - r.past : past + len(r.ids)]
                state.append(np.ascontiguousarray(real))
        out.append((logits[i], state))
    return out


TOKEN_COST_IN_KEYS = 3000
"""What one new token's projections and MLP cost, in keys of attention: per layer a SmolLM2 token
costs ~7.1 MFLOP of matmuls and attending to one key ~2.3 kFLOP (9 heads x 64 x 2 x 2)."""


def padded_cost(group: Sequence[KVRequest]) -> float:
    """Work of one call carrying `group`: every row pays for the most new tokens and, for
    each of them, the projections plus attention over the longest past (TOKEN_COST_IN_KEYS)."""
    new = max(max(len(r.ids), 1) for r in group)
    past = max(r.past for r in group)
    return len(group) * new * (TOKEN_COST_IN_KEYS + past + new)


def real_cost(group: Sequence[KVRequest]) -> float:
    """The same work without padding (each request in its own call)."""
    return sum(max(len(r.ids), 1) * (TOKEN_COST_IN_KEYS + r.past + len(r.ids)) for r in group)


def groups(requests: list[KVRequest], slack: float = 1.1) -> list[list[KVRequest]]:
    """Split requests into calls whose padded work stays within `slack` times their real work.

    Requests are taken in order of new tokens, then past length: padding new tokens repeats the
    projections and MLP (a 40-token step beside a 256-token chunk pays for 256), padding a past
    only lengthens attention (a 300-token past beside a 1,000-token one pays ~20% more).
    """
    out: list[list[KVRequest]] = []
    cur: list[KVRequest] = []
    for r in sorted(requests, key=lambda r: (len(r.ids), r.past)):
        trial = [*cur, r]
        if cur and padded_cost(trial) > slack * real_cost(trial):
            out.append(cur)
            trial = [r]
        cur = trial
    if cur:
        out.append(cur)
    return out


class KVBatcher:
    """Runs concurrent sessions' KV-graph calls in batches on one worker thread.

    Args:
        run: the KV graph call (feed -> outputs).
        past_names: the graph's past inputs in order.
        window: seconds to wait for more requests after the first one arrives.
        max_batch: most rows in one call.
        heads: the graph's logit outputs (`unpack`).
    """

    def __init__(
        self,
        run: Callable[[dict[str, np.ndarray]], list[np.ndarray]],
        past_names: Sequence[str],
        *,
        window: float = 0.005,
        max_batch: int = 16,
        heads: int = 1,
    ) -> None:
        self._run = run
        self.past_names = list(past_names)
        self.heads = int(heads)
        self.window = float(window)
        self.max_batch = int(max_batch)
        self._queue: list[KVRequest] = []
        self._cv = threading.Condition()
        self._closed = False
        self.calls = 0  # graph calls made
        self.rows = 0  # rows carried by them
        self._thread = threading.Thread(target=self._loop, name="kv-batcher", daemon=True)
        self._thread.start()

    def submit(self, request: KVRequest) -> tuple[np.ndarray, State]:
        """Queue `request`, wait for its batch; its (logits, new state) as `unpack` gives them.
        Raises what the call raised."""
        with self._cv:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            self._queue.append(request)
            self._cv.notify_all()
        return request.future.result()

    def close(self) -> None:
        """Stop the worker after the requests already queued."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join(timeout=10)

    def _take(self) -> list[KVRequest]:
        with self._cv:
            while not self._queue and not self._closed:
                self._cv.wait()
            deadline = time.monotonic() + self.window
            while len(self._queue) < self.max_batch and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)
            batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
            return batch

    def _loop(self) -> None:
        while True:
            batch = self._take()
            if not batch:
                return  # closed and drained
            for group in groups(batch):
                self._run_group(group)

    def _run_group(self, group: list[KVRequest]) -> None:
        try:
            outputs = self._run(pack(group, self.past_names))
            results = unpack(outputs, group, self.heads)
        except BaseException as e:  # noqa: BLE001 - every waiting caller gets the error
            for r in group:
                r.future.set_exception(e)
            return
        self.calls += 1
        self.rows += len(group)
        for r, res in zip(group, results, strict=True):
            r.future.set_result(res)
