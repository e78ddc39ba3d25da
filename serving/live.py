"""A live run scored step by step on model_kv.onnx (`Scorer.start`): only each new step's tokens
are encoded, on top of the session's cached keys/values (serving.scorer has the details).
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from monitor.signals import SignalTracker
from monitor.types import Step
from serving.choice import header_piece, step_piece
from serving.numeric import sigmoid


class KVScoreSession:
    """One live run scored incrementally on model_kv.onnx. Thread-safe (a lock per session).

    Attributes:
        threshold: stop threshold for the session's agent (inf: no stop by score).
        warn_threshold: warn threshold for the session's agent.
        threshold_origin: "agent", "pooled", "pooled-unknown-agent", "refused" or "unknown-group".
        k: steps observed.
        tokens_encoded: tokens the model has encoded for this run (the monitor's own cost).
    """

    def __init__(self, scorer: Any, task: str, agent: str | None = None, source: str = "") -> None:
        # scorer: the serving.scorer.Scorer that opened the session (not imported: it imports this)
        self._scorer = scorer
        self._render = scorer.featuriser.session(task, agent or "")
        self._tracker = SignalTracker()
        self._lock = threading.Lock()
        self._window: list[int] = []  # ids of the current window (to rebuild the cache)
        self._past: list[np.ndarray] | None = None  # None: no valid cache, encode the window
        th = scorer.served(agent, source)
        self.threshold = th.stop
        self.warn_threshold = th.warn
        self.threshold_origin = th.origin
        self.scorer_name = th.scorer
        """The candidate this run is scored with ("monitor": the LM probe; serving.choice)."""
        self.k = 0
        self.tokens_encoded = 0
        self.restarts = 0
        self._candidate = None
        self._text = scorer.text_head  # the LM probe's text part (None: it has none)
        self._text_counts: dict[int, float] = {}
        if self._text is not None:
            self._text_counts = self._text.piece_counts(self._text.text.header(task, agent or ""))
        self._lm = True  # whether the LM probe runs (the candidate needs its score)
        if th.scorer != "monitor":
            header = header_piece(scorer.featuriser, task, agent or "", scorer.choice.tfidf_text)
            group = scorer.bundle.group_of(agent, source)
            self._candidate = scorer.choice.start(th.scorer, header, group)
            self._lm = scorer.choice.needs_monitor(th.scorer)

    def observe(self, step: Step) -> float:
        """Add one step; return P(unresolved | steps so far).

        Raises whatever onnxruntime raises (the monitor Session turns it into a
        `monitor_error` decision); the next call then rebuilds the cache from the window.
        """
        with self._lock:
            self._tracker.update(step)
            self.k += 1
            signals = np.asarray(self._tracker.vector(), dtype=np.float64)  # after this step
            monitor = self._monitor_score(step, signals) if self._lm else None
            if self._candidate is None:
                assert monitor is not None
                return monitor
            piece = step_piece(
                self._scorer.featuriser, step, self.k, self._scorer.choice.tfidf_text
            )
            return self._candidate.observe(piece, signals, step.tokens, monitor)

    def _monitor_score(self, step: Step, signals: np.ndarray) -> float:
        """The LM probe's score after `step` (`signals`: the tracker's vector after it)."""
        ids, restarted = self._render.add(step)
        if restarted:
            self._window = list(ids)
            self._past = None
            self.restarts += 1
        else:
            self._window.extend(ids)
        sig = signals.astype(np.float32)[self._scorer.signal_index]
        text = 0.0
        if self._text is not None:
            self._text.add_piece(self._text_counts, self._text.text.step(step, self.k))
            text = self._text.logit_counts(self._text_counts)
        if self._past is None:
            new, past = self._window, self._scorer._start_state
        else:
            new, past = list(ids), self._past
        return self._run(new, past, sig, text)

    def _run(
        self, new: list[int], past: list[np.ndarray], sig: np.ndarray, text: float = 0.0
    ) -> float:
        """The graph's logit after the new tokens, plus the text part's `text`, as a score."""
        s = self._scorer
        self._past = None  # until this call succeeds
        step = s.encode_chunk if s.encode_chunk > 0 else max(1, len(new))
        logit = 0.0
        # Long inputs (the whole window after a re-render) go through the graph in chunks: one
        # 2,048-token call holds ~0.8 GB of attention activations, so concurrent re-renders under
        # load set the server's peak memory (see Scorer.encode_chunk); chunks also keep the
        # padding of a batched call small.
        for start in range(0, max(1, len(new)), step):  # an empty step still gets its call
            logit, past = s.run_kv(new[start : start + step], past, sig)
        self._past = past
        self.tokens_encoded += len(new)
        score = float(sigmoid(logit + text))
        if not math.isfinite(score):
            raise FloatingPointError(f"non-finite score at step {self.k}")
        return score
