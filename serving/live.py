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
from serving.candidate_run import MONITOR_TEXT, header_piece, step_piece
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

    def __init__(
        self,
        scorer: Any,
        task: str,
        agent: str | None = None,
        source: str = "",
        instance_id: str = "",
    ) -> None:
        # scorer: the serving.scorer.Scorer that opened the session (not imported: it imports this)
        self._scorer = scorer
        self._render = scorer.featuriser.session(task, agent or "")
        self._tracker = SignalTracker()
        self._lock = threading.Lock()
        self._window: list[int] = []  # ids of the current window (to rebuild the cache)
        self._past: list[np.ndarray] | None = None  # None: no valid cache, encode the window
        th = scorer.served(agent, source, instance_id)
        self.threshold = th.stop
        self.warn_threshold = th.warn
        self.threshold_origin = th.origin
        self.scorer_name = th.scorer
        """The candidate this run is scored with ("monitor": the LM probe; serving.choice)."""
        self.task_prior = th.task_prior
        """The task prior the run is scored with (None: served as an unknown task)."""
        self.known_task = th.task_prior is not None
        """Served by the bundle's known-task choice (monitor.protocols.ScoreSession)."""
        self.k = 0
        self.tokens_encoded = 0
        self.restarts = 0
        self._candidate = None
        # the text parts added to the graphs' logits: the LM probe's (train.probe_text) and the
        # second probe's (train.text_candidate) where the run is served by it; None where there
        # is none or nothing reads it (that head's score is then left out)
        second = scorer.text_probe if th.scorer == MONITOR_TEXT else None
        self._texts = [scorer.text_head, second][: scorer.heads]
        self._text_counts: list[dict[int, float]] = [
            t.piece_counts(t.text.header(task, agent or "")) if t is not None else {}
            for t in self._texts
        ]
        self._lm = True  # whether the graphs run (the candidate needs their scores)
        if th.scorer != "monitor":
            header = header_piece(scorer.featuriser, task, agent or "", scorer.choice.tfidf_text)
            group = scorer.bundle.group_of(agent, source)
            self._candidate = scorer.choice.start(th.scorer, header, group, th.task_prior)
            self._lm = self._candidate.choice.needs_monitor(th.scorer)

    def observe(self, step: Step) -> float:
        """Add one step; return P(unresolved | steps so far).

        Raises whatever onnxruntime raises (the monitor Session turns it into a
        `monitor_error` decision); the next call then rebuilds the cache from the window.
        """
        with self._lock:
            self._tracker.update(step)
            self.k += 1
            signals = np.asarray(self._tracker.vector(), dtype=np.float64)  # after this step
            scores = self._graph_scores(step, signals) if self._lm else []
            if self._candidate is None:
                return scores[0]
            piece = step_piece(
                self._scorer.featuriser, step, self.k, self._scorer.choice.tfidf_text
            )
            monitor = scores[0] if scores else None
            text = scores[1] if len(scores) > 1 and self.scorer_name == MONITOR_TEXT else None
            return self._candidate.observe(piece, signals, step.tokens, monitor, text)

    def _graph_scores(self, step: Step, signals: np.ndarray) -> list[float]:
        """The LM probe's score after `step` and, where the bundle has one, the second
        probe's (`signals`: the tracker's vector after it)."""
        ids, restarted = self._render.add(step)
        if restarted:
            self._window = list(ids)
            self._past = None
            self.restarts += 1
        else:
            self._window.extend(ids)
        sig = signals.astype(np.float32)[self._scorer.signal_index]
        text = np.zeros(len(self._texts))
        for j, (t, counts) in enumerate(zip(self._texts, self._text_counts, strict=True)):
            if t is not None:
                t.add_piece(counts, t.text.step(step, self.k))
                text[j] = t.logit_counts(counts)
        if self._past is None:
            new, past = self._window, self._scorer._start_state
        else:
            new, past = list(ids), self._past
        return self._run(new, past, sig, text)

    def _run(
        self, new: list[int], past: list[np.ndarray], sig: np.ndarray, text: np.ndarray
    ) -> list[float]:
        """The graph's logits after the new tokens, plus the text parts' `text`, as scores."""
        s = self._scorer
        self._past = None  # until this call succeeds
        step = s.encode_chunk if s.encode_chunk > 0 else max(1, len(new))
        logit = np.zeros(len(text))
        # Long inputs (the whole window after a re-render) go through the graph in chunks: one
        # 2,048-token call holds ~0.8 GB of attention activations, so concurrent re-renders under
        # load set the server's peak memory (see Scorer.encode_chunk); chunks also keep the
        # padding of a batched call small.
        for start in range(0, max(1, len(new)), step):  # an empty step still gets its call
            logit, past = s.run_kv(new[start : start + step], past, sig)
        self._past = past
        self.tokens_encoded += len(new)
        scores = [float(v) for v in sigmoid(logit + text)]
        if not all(math.isfinite(v) for v in scores):
            raise FloatingPointError(f"non-finite score at step {self.k}")
        return scores
