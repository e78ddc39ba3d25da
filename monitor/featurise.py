"""Featuriser: a run's prefix as token windows, append-only, for one causal pass per window.

Text comes from monitor/render.py (the header and one piece per step; layout documented there).
Each piece is encoded SEPARATELY and the ids concatenated, so within a window the ids of prefix
k are exactly a prefix of those of prefix k+1: one causal pass over a window scores every step
boundary in it, and a live session encodes only the new step (the KV cache continues).

A window never holds more than `window_tokens` tokens. The header is cut (by tokens) to half the
window, the signals line to an eighth, and every step piece to what is left once the header and
a signals line are in, so any single step always fits. When the next step does not fit, the
window is re-rendered: header + a line of loop signals (monitor/signals.py) + the most recent
steps that fit in `keep_recent_frac * window_tokens`, ending with the new step (with
`pin_edit_chars` > 0, the latest edit is pinned after the signals line when it is older than the
steps kept: FailFast's "latest patch in view", here only where the window restarts anyway, so
the encoding stays append-only between re-renders). Only the new
step has a boundary in the re-rendered window; the older steps there are context, already
scored in an earlier window, so every prefix length k is scored exactly once.

`Featuriser.windows(traj)` (training, offline scoring) and `Featuriser.session(...).add(step)`
(serving) share one code path and give identical ids and boundaries.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field

from monitor.config import StrictModel
from monitor.errors import ConfigError
from monitor.render import render_header, render_pinned_edit, render_step
from monitor.signals import SignalTracker, signals_line
from monitor.types import Step, Trajectory

Encode = Callable[[str], list[int]]
"""A tokenizer's encode WITHOUT special tokens: text -> token ids."""

RENDER_VERSION = 1
"""Bumped whenever the rendered text or the windowing changes for the same config, so caches
keyed on the featuriser config (training/features.py) can include it."""

TOKEN_CUT_MARKER = "\n[... cut ...]\n"
"""Appended to a piece that was cut by tokens to fit the window."""


class FeaturiserConfig(StrictModel):
    """How a run is rendered into model input (stored in the bundle's monitor.json)."""

    window_tokens: int = Field(default=1024, ge=64)
    """Most tokens in one window (the model's input length)."""
    task_chars: int = Field(default=1500, ge=0)
    """The problem statement is cut to this many characters in the header."""
    action_chars: int = Field(default=400, ge=0)
    """The action text (command or tool call) is cut to its first this many characters."""
    obs_head_chars: int = Field(default=300, ge=0)
    """Characters kept from the start of an observation."""
    obs_tail_chars: int = Field(default=200, ge=0)
    """Characters kept from the end of an observation (a "[... N chars cut ...]" marker between)."""
    thought_chars: int = Field(default=0, ge=0)
    """Characters of the model's thought rendered per step; 0 = thoughts are not rendered."""
    keep_recent_frac: float = Field(default=0.5, gt=0.0, le=1.0)
    """On a re-render, the most recent steps fill up to this share of the window."""
    pin_edit_chars: int = Field(default=0, ge=0)
    """On a re-render, the latest edit's action text (cut to this many characters) is pinned
    after the signals line when it is older than the recent steps kept; 0 = off."""


def chunk_encode(text: str) -> list[int]:
    """Fallback encode: one id per 4-character chunk (a CRC32 of it, below 2**16).

    Deterministic and dependency-free, and about as many ids as a BPE tokenizer gives for
    English or code, so budgets mean roughly the same without a tokenizer.
    """
    chunks = (text[i : i + 4] for i in range(0, len(text), 4))
    return [zlib.crc32(c.encode("utf-8", "replace")) & 0xFFFF for c in chunks]


@dataclass
class Window:
    """One model input: token ids and the step boundaries scored in it.

    Attributes:
        ids: token ids of the whole window.
        boundaries: boundaries[j] = index in `ids` of the LAST token of step piece j.
        steps: steps[j] = k, the prefix length (steps 1..k seen) scored at boundaries[j].
        restarted: True when this window is a re-render (header + signals line + recent steps).
    """

    ids: list[int] = field(default_factory=list)
    boundaries: list[int] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    restarted: bool = False


def _cut(ids: list[int], cap: int, marker: list[int]) -> list[int]:
    """Cut `ids` to at most `cap` tokens, ending with `marker` when anything was cut."""
    if len(ids) <= cap:
        return ids
    if len(marker) >= cap:
        return ids[:cap]
    return ids[: cap - len(marker)] + marker


class Featuriser:
    """Renders runs into append-only token windows (see the module docstring).

    Args:
        config: rendering options; defaults when None.
        encode: a tokenizer's encode without special tokens; None uses `chunk_encode`.
    """

    def __init__(self, config: FeaturiserConfig | None = None, encode: Encode | None = None):
        self.config = config or FeaturiserConfig()
        self.encode: Encode = encode or chunk_encode
        self._marker = self.encode(TOKEN_CUT_MARKER)

    @classmethod
    def from_tokenizer_file(
        cls, path: str | Path, config: FeaturiserConfig | None = None
    ) -> Featuriser:
        """Build a featuriser whose encode is a `tokenizers.Tokenizer` JSON file.

        Args:
            path: a tokenizer.json file, or a folder holding one (an HF model folder).
            config: rendering options; defaults when None.

        Raises:
            ConfigError: the file is missing or is not a tokenizer, or `tokenizers` is absent.
        """
        p = Path(path)
        if p.is_dir():
            p = p / "tokenizer.json"
        try:
            from tokenizers import Tokenizer
        except ImportError as e:
            raise ConfigError("the `tokenizers` package is needed to load a tokenizer file") from e
        try:
            tok = Tokenizer.from_file(str(p))
        except Exception as e:  # tokenizers raises a bare Exception on bad files
            raise ConfigError(f"{p}: cannot load tokenizer: {e}") from e

        def encode(text: str) -> list[int]:
            return list(tok.encode(text, add_special_tokens=False).ids)

        return cls(config, encode)

    def header(self, task: str, agent: str = "") -> str:
        """The window header text: agent line and the task cut to `task_chars`."""
        return render_header(task, agent, task_chars=self.config.task_chars)

    def render_step(self, step: Step, k: int | None = None) -> str:
        """The text piece of `step`, numbered `k` (default: step.index + 1)."""
        c = self.config
        return render_step(
            step,
            step.index + 1 if k is None else k,
            action_chars=c.action_chars,
            obs_head_chars=c.obs_head_chars,
            obs_tail_chars=c.obs_tail_chars,
            thought_chars=c.thought_chars,
        )

    def session(self, task: str, agent: str = "") -> RenderSession:
        """Open a live rendering session for a run on `task` by `agent`."""
        return RenderSession(self, task, agent)

    def windows(self, traj: Trajectory) -> list[Window]:
        """All windows of a run, in order; every k in 1..len(traj.steps) is scored exactly once."""
        sess = self.session(traj.task, traj.agent)
        out: list[Window] = []
        for step in traj.steps:
            ids, restarted = sess.add(step)
            if restarted or not out:
                out.append(Window(ids=list(ids), restarted=restarted))
            else:
                out[-1].ids.extend(ids)
            out[-1].boundaries.append(len(out[-1].ids) - 1)
            out[-1].steps.append(sess.k)
        return out


class RenderSession:
    """The rendering of one live run, one step at a time (O(new step) per add).

    Attributes:
        k: steps added so far.
        header_ids: the header's ids (cut to half the window); every window starts with them.
    """

    def __init__(self, featuriser: Featuriser, task: str, agent: str = ""):
        self.k = 0
        self._f = featuriser
        cfg = featuriser.config
        self._window = cfg.window_tokens
        self._keep = int(cfg.keep_recent_frac * cfg.window_tokens)
        self._signals_cap = cfg.window_tokens // 8
        header = featuriser.encode(featuriser.header(task, agent))
        self.header_ids = _cut(header, cfg.window_tokens // 2, featuriser._marker)
        self._piece_cap = cfg.window_tokens - len(self.header_ids) - self._signals_cap
        self._tracker = SignalTracker()
        self._length = 0  # tokens in the current window
        self._recent: deque[list[int]] = deque()  # pieces a re-render may keep, oldest first
        self._recent_total = 0
        self._last_edit: tuple[int, Step] | None = None  # (k, step) of the latest edit

    def add(self, step: Step) -> tuple[list[int], bool]:
        """Add the next step.

        Returns:
            (ids, restarted). With restarted False, `ids` are the new tokens to append to the
            current window (on the first step: header + step, for an empty window). With
            restarted True, `ids` is the complete new window (drop any KV cache). Either way
            ids[-1] is the boundary token for prefix k.
        """
        f = self._f
        self.k += 1
        self._tracker.update(step)
        piece = _cut(f.encode(f.render_step(step, self.k)), self._piece_cap, f._marker)
        if self.k == 1:
            ids, restarted = self.header_ids + piece, False
            self._length = len(ids)
        elif self._length + len(piece) <= self._window:
            ids, restarted = piece, False
            self._length += len(piece)
        else:
            ids, restarted = self._rerender(piece), True
            self._length = len(ids)
        self._remember(piece)
        if f.config.pin_edit_chars and self._tracker.last_edit:  # updated with this step above
            self._last_edit = (self.k, step)
        return ids, restarted

    def _rerender(self, piece: list[int]) -> list[int]:
        """Header + signals line + the most recent pieces that fit, ending with `piece`."""
        f = self._f
        line = signals_line(self._tracker.values())
        sig = _cut(f.encode(line + "\n"), self._signals_cap, f._marker)
        room = min(self._keep, self._window - len(self.header_ids) - len(sig)) - len(piece)
        kept: list[list[int]] = []
        for old in reversed(self._recent):
            if len(old) > room:
                break
            kept.append(old)
            room -= len(old)
        free = self._window - len(self.header_ids) - len(sig) - len(piece) - sum(map(len, kept))
        ids = self.header_ids + sig + self._pinned(len(kept), free)
        for old in reversed(kept):
            ids += old
        return ids + piece

    def _pinned(self, n_kept: int, room: int) -> list[int]:
        """The latest edit's pinned block when it is older than the `n_kept` recent steps kept
        (and is not the new step), cut to `room` tokens; [] when off, none, or no room."""
        f = self._f
        if not self._last_edit or room < 4 * len(f._marker):
            return []
        k, step = self._last_edit
        if k >= self.k - n_kept:  # the new step or one of the kept pieces: already in view
            return []
        text = render_pinned_edit(step, k, chars=f.config.pin_edit_chars)
        return _cut(f.encode(text), room, f._marker)

    def _remember(self, piece: list[int]) -> None:
        self._recent.append(piece)
        self._recent_total += len(piece)
        while self._recent and self._recent_total > self._keep:
            self._recent_total -= len(self._recent.popleft())
