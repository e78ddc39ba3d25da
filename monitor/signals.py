"""Loop signals: numbers per prefix, updated in O(1) per step.

`SignalTracker.update(step)` folds one step into running counters; `values()` reads them out.
The stuck patterns follow OpenHands' StuckDetector (openhands/controller/stuck.py): the same
action with the same observation 4 times, the same action ending in an error 3 times, the same
agent message 3 times with nothing in between, and an A-B-A-B alternation over 6 steps.
Each pattern is tracked as the length of its current run; `stuck_hits` counts how often any
pattern reached the OpenHands length (a rising edge).

`vector()` returns the raw values (no log1p or other scaling): the learned model standardises
its features, and raw counts keep the numbers readable in evidence and logs.
"""

from __future__ import annotations

import re

import numpy as np

from monitor.normalise import call_key
from monitor.types import Step, Trajectory

SIGNAL_NAMES: tuple[str, ...] = (
    "steps",
    "tokens",
    "cost_usd",
    "wall_seconds",
    "tool_calls",
    "tool_results",
    "max_repeat",
    "last_repeat",
    "errors",
    "error_streak",
    "max_error_streak",
    "no_new_info",
    "no_new_info_streak",
    "same_pair_run",
    "action_error_run",
    "monologue_run",
    "alternation_run",
    "stuck_hits",
    "edits",
    "test_runs",
    "last_test_failed",
    "since_edit",
    "format_errors",
    "format_error_streak",
    "compactions",
)

# OpenHands StuckDetector lengths; the policy has its own (configurable) limits.
STUCK_LENGTHS = {
    "same_pair_run": 4,
    "action_error_run": 3,
    "monologue_run": 3,
    "alternation_run": 6,
}

EDIT_TOOLS = frozenset(
    {
        "edit",
        "write",
        "multiedit",
        "notebookedit",
        "str_replace_editor",
        "str_replace_based_edit_tool",
        "edit_file",
        "write_file",
        "create_file",
        "apply_patch",
        "file_change",
        "write_patch",
        "insert",
        "str_replace",
        "create",
        "replace",
    }
)
_VIEW_COMMANDS = frozenset({"view", "read", "undo_edit"})
# Shell commands that write files: (literal that must be present, pattern). The literal
# pre-check keeps the common case (no such literal) free of regex scans.
_SHELL_EDITS = (
    (">", re.compile(r"\bcat\s+(?:<<|>)|(?<![<>&0-9])>\s*[\w./-]+\.\w+")),
    ("sed", re.compile(r"\bsed\s+(?:-\w+\s+)*-i")),
    ("tee", re.compile(r"\btee\s")),
    ("apply", re.compile(r"\bgit\s+apply\b")),
    ("patch", re.compile(r"\bpatch\s+-p")),
    ("perl", re.compile(r"\bperl\s+-p?i")),
    ("write", re.compile(r"\.write_text\(|\.write\(")),
)
_EDIT_COMMANDS = frozenset({"edit", "create", "insert", "str_replace", "append"})
_TEST_RUN = re.compile(
    r"\bpytest\b|\bpy\.test\b|-m\s+unittest\b|\btox\b|runtests\.py|manage\.py\s+test\b|"
    r"\bnosetests\b|\b(?:npm|yarn|pnpm)\s+(?:run\s+)?test\b|\bgo\s+test\b|\bcargo\s+test\b|"
    r"\bmake\s+(?:test|check)\b|\bbin/test\b|\brun_tests?\b|\bsetup\.py\s+test\b"
)
# Test output that reports failure (pytest, unittest, Django runner).
_TEST_FAIL = re.compile(
    r"\b\d+ (?:failed|errors?)\b|^FAILED\b|^FAIL:|^ERROR:|\bFAILED \(|^E\s{2,}|"
    r"Traceback \(most recent call last\)",
    re.MULTILINE,
)
_SCAN = 4000  # only the start of an action is scanned for edit/test patterns


def is_edit(step: Step) -> bool:
    """True when the step changes files (editor tool call, or a shell command that writes)."""
    tool = step.tool.lower()
    if tool in EDIT_TOOLS:
        args = step.args or {}
        sub = str(args.get("command", "")).lower() if isinstance(args, dict) else ""
        if sub in _VIEW_COMMANDS:
            return False
        head = step.action.split(None, 2)
        return not (len(head) > 1 and head[0].lower() == tool and head[1].lower() in _VIEW_COMMANDS)
    text = step.action[:_SCAN]
    if not text:
        return False
    words = text.split(None, 1)
    if words and words[0] in _EDIT_COMMANDS:
        return True
    return any(lit in text and rx.search(text) is not None for lit, rx in _SHELL_EDITS)


def is_test_run(step: Step) -> bool:
    """True when the step runs a test suite (pytest, unittest, tox, Django runner, ...)."""
    text = step.action[:_SCAN]
    if "test" not in text and "tox" not in text:
        return False
    return _TEST_RUN.search(text) is not None


def test_failed(step: Step) -> bool:
    """True when a test-run step reports failure (error flag or failing test summary)."""
    if step.is_error:
        return True
    obs = step.observation
    if len(obs) > 2 * _SCAN:
        obs = obs[:_SCAN] + "\n" + obs[-_SCAN:]
    return _TEST_FAIL.search(obs) is not None


class SignalTracker:
    """Running loop signals of one run. Each `update` is O(1) in the number of steps so far."""

    def __init__(self) -> None:
        self._v: dict[str, float] = dict.fromkeys(SIGNAL_NAMES, 0.0)
        self._calls: dict[str, int] = {}
        self._obs_seen: set[int] = set()
        self._prev_pair: tuple[str, int] | None = None
        self._prev2_pair: tuple[str, int] | None = None
        self._prev_key: str | None = None
        self._prev_message: str | None = None
        self._first_ts: float | None = None
        self.top_call: str = ""
        """Key of the most repeated call (see monitor.normalise.short_call)."""
        self.last_key: str = ""
        """Key of the last tool call ("" before the first)."""
        self.last_edit = False
        """Whether the last tool call edited files."""
        self.last_test = False
        """Whether the last tool call ran tests."""
        self.compaction_steps: list[int] = []
        """1-based step numbers at which the context was compacted."""

    def update(self, step: Step) -> None:
        """Fold one step into the signals.

        Long on purpose: one pass per step, returning early by step kind, and the signals share
        the step's hashes (observation, call key); split up, those would become state."""
        v = self._v
        self.last_edit = self.last_test = False
        v["steps"] += 1
        n = v["steps"]
        v["tokens"] += step.tokens_in + step.tokens_out
        if step.cost_usd is not None:
            v["cost_usd"] += step.cost_usd
        if step.timestamp is not None:
            if self._first_ts is None:
                self._first_ts = step.timestamp
            v["wall_seconds"] = max(v["wall_seconds"], step.timestamp - self._first_ts)

        kind = step.kind
        if kind == "compaction":
            v["compactions"] += 1
            self.compaction_steps.append(int(n))
            return
        if kind == "format_error":
            v["format_errors"] += 1
            v["format_error_streak"] += 1
            return
        v["format_error_streak"] = 0.0

        if step.is_error:
            v["errors"] += 1
            v["error_streak"] += 1
            if v["error_streak"] > v["max_error_streak"]:
                v["max_error_streak"] = v["error_streak"]
        else:
            v["error_streak"] = 0.0

        obs = step.observation
        obs_h = hash(obs) if obs else 0
        if obs:
            v["tool_results"] += 1
            if obs_h in self._obs_seen:
                v["no_new_info"] += 1
                v["no_new_info_streak"] += 1
            else:
                self._obs_seen.add(obs_h)
                v["no_new_info_streak"] = 0.0

        has_call = kind in ("action", "submit") and bool(step.action or step.tool)
        if not has_call:
            text = step.thought or step.action
            if kind == "message" and text == self._prev_message:
                v["monologue_run"] += 1
            else:
                v["monologue_run"] = 1.0 if kind == "message" else 0.0
            self._prev_message = text if kind == "message" else None
            self._bump_stuck("monologue_run")
            v["since_edit"] += 1
            return
        self._prev_message = None
        v["monologue_run"] = 0.0
        v["tool_calls"] += 1

        key = call_key(step.tool, step.action, step.args)
        count = self._calls.get(key, 0) + 1
        self._calls[key] = count
        v["last_repeat"] = float(count)
        if count > v["max_repeat"]:
            v["max_repeat"] = float(count)
            self.top_call = key

        pair = (key, obs_h)
        v["same_pair_run"] = v["same_pair_run"] + 1 if pair == self._prev_pair else 1.0
        same_action = key == self._prev_key
        if step.is_error:
            v["action_error_run"] = v["action_error_run"] + 1 if same_action else 1.0
        else:
            v["action_error_run"] = 0.0
        if pair == self._prev2_pair and pair != self._prev_pair:
            v["alternation_run"] = v["alternation_run"] + 1 if v["alternation_run"] else 3.0
        else:
            v["alternation_run"] = 0.0
        self._prev2_pair, self._prev_pair, self._prev_key = self._prev_pair, pair, key
        self.last_key = key
        for name in ("same_pair_run", "action_error_run", "alternation_run"):
            self._bump_stuck(name)

        self.last_edit = is_edit(step)
        self.last_test = is_test_run(step)
        if self.last_edit:
            v["edits"] += 1
            v["since_edit"] = 0.0
        else:
            v["since_edit"] += 1
        if self.last_test:
            v["test_runs"] += 1
            v["last_test_failed"] = 1.0 if test_failed(step) else 0.0

    def _bump_stuck(self, name: str) -> None:
        if self._v[name] == STUCK_LENGTHS[name]:
            self._v["stuck_hits"] += 1

    def call_count(self, key: str) -> int:
        """How many times the call with this key was made so far."""
        return self._calls.get(key, 0)

    def values(self) -> dict[str, float]:
        """The current signals, by name (a copy)."""
        return dict(self._v)

    def vector(self) -> list[float]:
        """The current signals in SIGNAL_NAMES order (raw values, no scaling)."""
        v = self._v
        return [v[name] for name in SIGNAL_NAMES]


def signal_matrix(traj: Trajectory) -> np.ndarray:
    """Signals after each prefix of a run.

    Returns:
        float64 array of shape (n_steps, len(SIGNAL_NAMES)); row k-1 holds the values after
        steps 1..k.
    """
    tracker = SignalTracker()
    out = np.zeros((len(traj.steps), len(SIGNAL_NAMES)), dtype=np.float64)
    for i, step in enumerate(traj.steps):
        tracker.update(step)
        out[i] = tracker.vector()
    return out


_LINE_FIELDS = (
    ("steps", "steps"),
    ("max_repeat", "max_repeat"),
    ("error_streak", "error_streak"),
    ("no_new_info", "no_new_info"),
    ("edits", "edits"),
    ("since_edit", "since_edit"),
    ("test_runs", "tests"),
    ("stuck_hits", "stuck"),
    ("compactions", "compactions"),
)


def signals_line(values: dict[str, float]) -> str:
    """One short line summarising the signals, for a re-rendered window's header.

    Example: "[signals] steps=23 max_repeat=4 error_streak=2 no_new_info=5 edits=1 since_edit=9
    tests=3 stuck=0 compactions=0".
    """
    parts = [f"{label}={int(values.get(name, 0))}" for name, label in _LINE_FIELDS]
    return "[signals] " + " ".join(parts)
