"""The onnxruntime scorer: whole runs in one call per window, live sessions on a KV cache.

No torch here: onnxruntime, tokenizers and numpy only.

    scorer = Scorer.load("bundle/")
    scores = scorer.score_run(traj)            # element k-1 = P(unresolved | steps 1..k)
    session = scorer.session(task, agent)      # monitor Session: observe(step) -> Decision
    raw = scorer.start(task, agent)            # ScoreSession: observe(step) -> float

A live session feeds only the new step's tokens to model_kv.onnx on top of the cached keys and
values (and, for a bundle with pooling "last+mean", the running sum and count of the window's
hidden states); when the featuriser re-renders the window (it outgrew `window_tokens`), that
state is dropped and the whole new window is encoded once. With `Scorer.enable_batching` the
calls of concurrent sessions are gathered into batched calls (serving.batching).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from monitor.errors import BundleError, Cancelled
from monitor.featurise import Featuriser, FeaturiserConfig
from monitor.signals import SIGNAL_NAMES, signal_matrix
from monitor.thresholds import Thresholds
from monitor.types import Trajectory
from serving.batching import KVBatcher, KVRequest, pack, unpack
from serving.bundle import Bundle, load_bundle
from serving.candidate_run import MONITOR, MONITOR_TEXT, run_pieces
from serving.graphs import LOGIT_OUTPUTS, check_logit_outputs, kv_start_state, ort_session
from serving.live import KVScoreSession
from serving.numeric import sigmoid

__all__ = ["KVScoreSession", "Scorer", "sigmoid"]

log = logging.getLogger(__name__)


class Scorer:
    """Scores runs with a bundle's ONNX graphs. Thread-safe (onnxruntime `run` is).

    Live sessions feed model_kv.onnx at most `encode_chunk` tokens per call (0: all at once);
    set the attribute to change it.

    Args:
        bundle: a loaded bundle.
        threads: onnxruntime intra-op threads per call (None: onnxruntime's default).
        int8: use the int8 graphs (the bundle must have been exported with --int8).
        target: run-level FPR target for the stop threshold (None: the bundle's default).
    """

    # 256: one 2,048-token encode of the 12-layer bundle peaks ~0.1 GB above the weights instead
    # of ~0.8 GB, and takes 1.1 s instead of 1.9 s (int8; fp32 1.9 vs 2.4 s, same logits to 1e-4).
    # 128 measured the same under load. With int8 graphs the scores shift a little with the chunk
    # size (activation scales are per call), as they already do between incremental steps.
    encode_chunk: int = 256

    def __init__(
        self,
        bundle: Bundle,
        *,
        threads: int | None = None,
        int8: bool = False,
        target: float | None = None,
    ) -> None:
        self.bundle = bundle
        self.target = bundle.target if target is None else float(target)
        self.int8 = int8
        self.featuriser = Featuriser.from_tokenizer_file(
            bundle.path / "tokenizer.json", FeaturiserConfig.model_validate(bundle.featuriser)
        )
        self.signal_index = [SIGNAL_NAMES.index(n) for n in bundle.signal_names]
        self.full = ort_session(bundle.graph("model.onnx", int8=int8), threads)
        self.kv = ort_session(bundle.graph("model_kv.onnx", int8=int8), threads)
        self.choice = bundle.choice()  # the candidate each group serves (serving.choice)
        # the LM probe's text part (train.probe_text): its logit is added to the graphs'
        self.text_head = bundle.text_head()
        # the second probe's text part (train.text_candidate), added to the graphs' second
        # logit ("logits_text"); None: the graphs have one logit
        self.text_probe = bundle.text_probe()
        self.heads = 2 if self.text_probe is not None else 1
        check_logit_outputs(
            bundle.path, {"model.onnx": self.full, "model_kv.onnx": self.kv}, self.heads
        )
        self.batcher: KVBatcher | None = None
        self.tokens_encoded = 0  # tokens live sessions had model_kv.onnx encode (all sessions)
        self._count_lock = threading.Lock()
        self._full_inputs = {i.name for i in self.full.get_inputs()}
        self._kv_inputs = {i.name for i in self.kv.get_inputs()}
        # the KV graph's past inputs in order, and the state a session starts from (and
        # returns to on a re-render); `pooled`: the window mean is carried as a running sum
        self.past_names, self._start_state, self.pooled = kv_start_state(
            bundle.path / "model_kv.onnx", self.kv, bundle.kv
        )

    @classmethod
    def load(
        cls,
        bundle: str | Path,
        *,
        threads: int | None = None,
        int8: bool = False,
        target: float | None = None,
        verify: bool = True,
        sha256: str | None = None,
        trust: Sequence[str | Path] = (),
    ) -> Scorer:
        """Load a bundle folder (hashes and versions checked) and open its graphs.

        Args:
            sha256: the pinned sha256 of the bundle's monitor.json (see `load_bundle`).
            trust: public key files one of which must have signed the bundle (`load_bundle`).

        Raises:
            BundleError: the bundle is missing files, corrupt, of another version, not the
                pinned one, or a graph or the tokenizer cannot be loaded.
        """
        loaded = load_bundle(bundle, verify=verify, sha256=sha256, trust=trust)
        try:
            return cls(loaded, threads=threads, int8=int8, target=target)
        except BundleError:
            raise
        except Exception as e:  # onnxruntime / tokenizers refusing a file, a bad field
            raise BundleError(f"{loaded.path}: cannot load the bundle: {e}") from e

    def enable_batching(self, window: float, max_batch: int) -> None:
        """Gather concurrent sessions' KV-graph calls into batches of up to `max_batch` rows,
        waiting at most `window` seconds for more after the first (max_batch 1: off)."""
        self.close()
        if max_batch > 1:
            self.batcher = KVBatcher(
                self._kv_call,
                self.past_names,
                window=window,
                max_batch=max_batch,
                heads=self.heads,
            )

    def close(self) -> None:
        """Stop the batching worker, if any (sessions then call the graph themselves)."""
        batcher, self.batcher = self.batcher, None
        if batcher is not None:
            batcher.close()

    def _kv_call(self, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        return list(self.kv.run(None, {k: v for k, v in feed.items() if k in self._kv_inputs}))

    def run_kv(
        self, ids: list[int], state: list[np.ndarray], signals: np.ndarray
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """One session's call of model_kv.onnx: (logits (heads,), new state), batched when
        enabled."""
        request = KVRequest(ids, state, signals)
        batcher = self.batcher
        if batcher is not None:
            out = batcher.submit(request)
        else:
            feed = pack([request], self.past_names)
            out = unpack(self._kv_call(feed), [request], self.heads)[0]
        with self._count_lock:
            self.tokens_encoded += len(ids)
        return out

    @property
    def policy(self) -> dict[str, Any]:
        """The PolicyConfig dict stored in the bundle (check schedule and halts)."""
        return self.bundle.policy

    def thresholds(self, agent: str | None, source: str = "") -> Thresholds:
        """Stop/warn thresholds for a run of `agent` (from `source`, when the bundle's thresholds
        are keyed by source) at this scorer's target."""
        return self.bundle.thresholds_for(agent, self.target, source)

    def served(self, agent: str | None, source: str = "", instance_id: str = "") -> Thresholds:
        """The thresholds a run of `agent` / `source` is served with at this scorer's target,
        and the candidate they are for (`Thresholds.scorer`): candidates.json's choice for its
        group, else the LM probe (serving.choice says when); the known-task choice where
        `instance_id` is a task the bundle's verdict table knows (serving.task_prior)."""
        th = self.thresholds(agent, source)
        if self.choice is None or self.bundle.thresholds is None:
            return th
        group = self.bundle.group_of(agent, source)
        prior = self.choice.prior_of(instance_id, agent, group)
        return self.choice.served(group, self.target, th, prior=prior)

    def score_served(
        self, traj: Trajectory, *, cancelled: Callable[[], bool] | None = None
    ) -> tuple[list[float], Thresholds]:
        """The served candidate's score after every step of `traj` (what a live session of the
        same steps gives), and what served it."""
        served = self.served(traj.agent or None, traj.source, traj.instance_id)
        if served.scorer == MONITOR:
            return self.score_run(traj, cancelled=cancelled), served
        assert self.choice is not None
        mon = text = None
        if self.choice.for_prior(served.task_prior).needs_monitor(served.scorer):
            heads = 2 if served.scorer == MONITOR_TEXT else 1
            both = self.score_heads(traj, cancelled=cancelled, heads=heads)
            mon, text = both[MONITOR], both.get(MONITOR_TEXT)
        scores = self.choice.score_run(
            served.scorer,
            run_pieces(self.featuriser, traj, self.choice.tfidf_text),
            signal_matrix(traj),
            [s.tokens for s in traj.steps],
            self.bundle.group_of(traj.agent, traj.source),
            mon,
            text,
            served.task_prior,
        )
        return scores.tolist(), served

    def _signals(self, traj: Trajectory) -> np.ndarray:
        """(n_steps, S) float32 raw signals in the bundle's column order."""
        return signal_matrix(traj)[:, self.signal_index].astype(np.float32)

    def score_run(
        self, traj: Trajectory, *, cancelled: Callable[[], bool] | None = None
    ) -> list[float]:
        """P(unresolved | steps 1..k) for every k, one graph call per featuriser window.

        Args:
            traj: the run.
            cancelled: polled before each graph call; True stops the work (`Cancelled`).

        Raises:
            FloatingPointError: a score is not finite (e.g. a NaN cost reached the signals).
            Cancelled: `cancelled()` returned True.
        """
        return self.score_heads(traj, cancelled=cancelled, heads=1)[MONITOR]

    def score_heads(
        self,
        traj: Trajectory,
        *,
        cancelled: Callable[[], bool] | None = None,
        heads: int | None = None,
    ) -> dict[str, list[float]]:
        """`score_run`'s scores ("monitor") and, where the bundle has a second probe, its
        scores ("monitor_text") from the same graph calls. `heads`: 1 for the first alone."""
        n_heads = self.heads if heads is None else min(heads, self.heads)
        names = [MONITOR, MONITOR_TEXT][:n_heads]
        if not traj.steps:
            return {n: [] for n in names}
        sig = self._signals(traj)
        out = np.zeros((n_heads, len(traj.steps)), dtype=np.float64)
        text = np.zeros((n_heads, len(traj.steps)))
        if self.text_head is not None:
            text[0] = self.text_head.run_logits(traj)
        if n_heads > 1 and self.text_probe is not None:
            text[1] = self.text_probe.run_logits(traj)
        outputs = list(LOGIT_OUTPUTS[:n_heads])
        for w in self.featuriser.windows(traj):
            if cancelled is not None and cancelled():
                raise Cancelled(f"stopped scoring {traj.id or 'the run'} at step {w.steps[0]}")
            steps = np.asarray(w.steps, dtype=np.int64)
            feed = {
                "input_ids": np.asarray([w.ids], dtype=np.int64),
                "attention_mask": np.ones((1, len(w.ids)), dtype=np.int64),
                "positions": np.asarray([w.boundaries], dtype=np.int64),
                "signals": sig[steps - 1][None],
            }
            logits = self.full.run(
                outputs, {k: v for k, v in feed.items() if k in self._full_inputs}
            )
            for j, z in enumerate(logits):
                out[j, steps - 1] = sigmoid(z[0] + text[j, steps - 1])
        bad = np.flatnonzero(~np.isfinite(out).all(axis=0))
        if bad.size:
            raise FloatingPointError(f"non-finite score at step {int(bad[0]) + 1}")
        return {n: out[j].tolist() for j, n in enumerate(names)}

    def score_prefix(self, traj: Trajectory, k: int) -> float:
        """P(unresolved | steps 1..k) of `traj` (1 <= k <= len(traj.steps))."""
        if not 1 <= k <= len(traj.steps):
            raise ValueError(f"prefix length {k} outside 1..{len(traj.steps)}")
        import dataclasses

        return self.score_run(dataclasses.replace(traj, steps=traj.steps[:k]))[-1]

    def start(
        self, task: str, agent: str | None = None, source: str = "", instance_id: str = ""
    ) -> KVScoreSession:
        """A ScoreSession (monitor.protocols) for a live run: observe(step) -> score. `source`
        names the calibration group of a bundle whose thresholds are keyed by source;
        `instance_id`, the run's task, looked up in the bundle's verdict table of known tasks
        (serving.task_prior)."""
        return KVScoreSession(self, task, agent, source, instance_id)

    def session(
        self,
        task: str = "",
        agent: str | None = None,
        *,
        monitor: Any = None,
        run: str = "",
        source: str = "",
        instance_id: str = "",
    ) -> Any:
        """A monitor Session (observe(step) -> Decision) driven by this scorer.

        Args:
            task: the problem statement.
            agent: agent family (the threshold group when the bundle's thresholds are keyed by
                agent; an unknown group gets the table's fallback, with a warning).
            source: the run's calibration group when the bundle's thresholds are keyed by
                source (a name in its thresholds.json); empty: looked up by agent.
            monitor: a monitor.session.Monitor to open it from (shares its decision log);
                None builds one with the bundle's policy.
            run: a name for the run in the decision log.
            instance_id: the run's task id (a known task is served by the known-task choice).
        """
        if monitor is None:
            from monitor.policy import PolicyConfig
            from monitor.session import Monitor

            monitor = Monitor(PolicyConfig.model_validate(self.policy), scorer=self)
        return monitor.start(task, agent, run=run, source=source, instance_id=instance_id)
