"""Review flags: signs that a human should look, raised beside the decision.

Flags never stop a run. Each is raised at most once per run (per variant) and names its
evidence: the step, the files, the test output line, the question asked.

- scope_widening: the files touched (edits seen in the transcript, the harness's diff, the
  final submission) outgrow what the task suggests (files named in the task statement, or a
  per-agent cap such as the p95 of files touched by resolved runs), or new files keep being
  touched late in the run.
- unsupported_completion: the run submits / calls `finish` with status completed while the
  last test run failed or reported skipped tests, or the finish call gives no evidence.
- spec_forgotten: the agent asks the user a question whose words are mostly in the task
  statement (typically after a compaction).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
from pydantic import Field

from monitor.config import StrictModel
from monitor.shell import written_file
from monitor.signals import is_edit, is_test_run, test_failed
from monitor.types import Flag, Step, Trajectory


class FlagConfig(StrictModel):
    """Which review flags are raised, and their limits."""

    scope_widening: bool = Field(default=True, description="Raise scope_widening.")
    scope_files_cap: int | None = Field(
        default=None,
        description="Files a run may touch (e.g. per-agent p95); None: use scope_factor.",
    )
    scope_factor: int = Field(
        default=3, description="Flag beyond this many times the files the task names."
    )
    scope_min_files: int = Field(default=4, description="Never flag at or below this many files.")
    scope_late_step: int = Field(
        default=40,
        description="A new file touched at or after this step, beyond the expected count, is late growth.",
    )
    unsupported_completion: bool = Field(default=True, description="Raise unsupported_completion.")
    completion_skipped: bool = Field(
        default=True, description="Count skipped tests in the last test run as unsupported."
    )
    spec_forgotten: bool = Field(default=True, description="Raise spec_forgotten.")
    spec_overlap: float = Field(
        default=0.6, description="Share of a question's content words found in the task to flag it."
    )


# Every pattern below sees text from a run, so none may backtrack more than linearly (an
# adversarial 1 MB string must cost milliseconds; tests/test_regex_linear.py, bench/bench_regex.py).
# A file name starts where a run of path characters starts: without the lookbehind every position
# inside a 40,000-character word restarts the greedy scan (quadratic: 12.8 s for a task of "a"s).
_TASK_FILE = re.compile(
    r"(?<![\w./-])[\w./-]*\w\.(?:py|pyx|js|ts|tsx|jsx|c|h|cc|cpp|go|rs|java|rb|rst|txt|cfg|toml|ini|json|yaml|yml|html|css)\b"
)
_DIFF_FILE = re.compile(r"^diff --git a/(\S+) b/", re.MULTILINE)
# `/owner__repo/`: the lookahead finds the `__` once, instead of retrying the rest of the
# component from every `__` (quadratic on "/a__a__a...").
_PATH_PREFIX = re.compile(
    r"^(?:/testbed/|/workspace/[^/]+/|/repo/|/app/|\./|/(?=[\w.-]+__[\w.-])[\w.-]+/)"
)
_SUBMIT = re.compile(
    r"^\s*submit\b|COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT|MINI_SWE_AGENT_FINAL_OUTPUT"
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_SKIPPED = re.compile(r"\b\d+ skipped\b|\(skipped=\d+\)|\bSKIPPED\b")
_SUMMARY = re.compile(
    # `=== 2 passed in 1s ===`: a lookahead for the word, then one scan to the closing `=`
    # (`.*\bword\b.*=+` rescans the line after every candidate word: quadratic).
    r"^(?:=+ (?=.*\b(?:passed|failed|error|skipped)\b).*=|Ran \d+ tests?.*|OK\b.*|FAILED \(.*)$",
    re.MULTILINE,
)
_WORD = re.compile(r"[a-z_][a-z0-9_]{3,}")
_QUESTION_START = re.compile(
    r"\b(?:should i|shall i|could you|can you|would you|do you|which|what|where|how should|"
    r"please (?:confirm|clarify|provide|specify))\b",
    re.IGNORECASE,
)
_ASK_TOOLS = frozenset({"askuserquestion", "ask_user", "ask_followup_question", "ask_human"})
_STOPWORDS = frozenset(
    "this that with what which would should could there their then than have from your into "
    "when where about does make want like need also some will were been only just more here "
    "other please confirm clarify provide specify know tell shall able sure".split()
)


def clean_path(path: str) -> str:
    """Strip sandbox prefixes (/testbed/, /workspace/x/, ./) so paths compare across tools."""
    return _PATH_PREFIX.sub("", path.strip().strip("'\""))


def diff_files(diff: str) -> set[str]:
    """Files a unified git diff touches."""
    return {clean_path(m) for m in _DIFF_FILE.findall(diff)}


def task_files(task: str) -> set[str]:
    """Base names of the files a task statement names."""
    return {m.rsplit("/", 1)[-1] for m in _TASK_FILE.findall(task)}


def edited_files(step: Step, open_file: str = "") -> set[str]:
    """Files an edit step writes, as far as the transcript shows (may be empty)."""
    args = step.args if isinstance(step.args, dict) else {}
    for key in ("path", "file_path", "filename", "file", "notebook_path"):
        value = args.get(key)
        if isinstance(value, str) and value:
            return {clean_path(value)}
    words = step.action.split(None, 2)
    if words and words[0] in ("edit", "insert", "append") and open_file:
        return {open_file}  # SWE-agent edits the open file
    if len(words) > 1 and words[0] == "create":
        return {clean_path(words[1])}
    target = written_file(step.action[:2000])
    return {clean_path(target)} if target else set()


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS}


def _question(step: Step) -> str:
    if step.tool.lower() in _ASK_TOOLS:
        return step.action or str(step.args or "")
    if step.kind != "message":
        return ""
    text = step.thought or step.action
    asks = [
        s for s in re.split(r"(?<=[.!?])\s+", text) if s.endswith("?") and _QUESTION_START.search(s)
    ]
    return " ".join(asks)


class FlagTracker:
    """Raises review flags for one run, step by step (O(1) per step apart from the text scans)."""

    def __init__(self, task: str = "", config: FlagConfig | None = None) -> None:
        self.config = config or FlagConfig()
        self.named = task_files(task)
        self._task_words = _content_words(task)
        self.files: dict[str, int] = {}
        """File in the run's diff -> step (1-based) at which the diff first showed it."""
        self.edited: dict[str, int] = {}
        """File the transcript shows an edit of -> first step (scratch files included)."""
        self._open_file = ""
        self._last_test: tuple[int, bool, bool, str] | None = None
        self._compacted_at = 0
        self.raised: set[str] = set()

    def _raise(self, key: str, name: str, step: int, **evidence: object) -> list[Flag]:
        if key in self.raised:
            return []
        self.raised.add(key)
        return [Flag(name=name, step=step, evidence=dict(evidence))]

    def scope_limit(self) -> int:
        """Files a run may touch before scope_widening is raised."""
        cfg = self.config
        if cfg.scope_files_cap is not None:
            return cfg.scope_files_cap
        return max(cfg.scope_min_files, cfg.scope_factor * max(1, len(self.named)))

    def add_files(self, files: Iterable[str], k: int, *, late: bool = True) -> list[Flag]:
        """Record the files of the run's diff at step k; return scope flags this raises.

        Only diffs count for scope (the harness's current diff, the final submission): files
        edited in the transcript include scratch scripts that never reach the diff.

        Args:
            files: files the diff touches now.
            k: the step.
            late: check late growth too (live diffs; not for the final submission, whose
                step says nothing about when a file was first touched).
        """
        out: list[Flag] = []
        new = [f for f in files if f and f not in self.files and not f.startswith("/tmp/")]
        for f in new:
            self.files[f] = k
        if not new or not self.config.scope_widening:
            return out
        if len(self.files) > self.scope_limit():
            out += self._raise(
                "scope",
                "scope_widening",
                k,
                files=sorted(self.files),
                named_in_task=sorted(self.named),
                limit=self.scope_limit(),
                why="touches more files than the task suggests",
            )
        if late and k >= self.config.scope_late_step and len(self.files) > max(1, len(self.named)):
            out += self._raise(
                "scope_late",
                "scope_widening",
                k,
                files=sorted(new),
                named_in_task=sorted(self.named),
                why=f"new files touched late (step {k}, {len(self.files)} files so far)",
            )
        return out

    def update(
        self, step: Step, k: int, *, edit: bool | None = None, test: bool | None = None
    ) -> list[Flag]:
        """Fold step k (1-based) in; return the flags it raises.

        Args:
            step: the step.
            k: its 1-based position.
            edit, test: whether it edits files / runs tests, when the caller already knows
                (SignalTracker.last_edit / last_test); computed here when None.
        """
        out: list[Flag] = []
        if step.kind == "compaction":
            self._compacted_at = k
            return out
        words = step.action.split(None, 2)
        if len(words) > 1 and words[0] == "open":
            self._open_file = clean_path(words[1])
        if edit if edit is not None else is_edit(step):
            for f in edited_files(step, self._open_file):
                self.edited.setdefault(f, k)
        if test if test is not None else is_test_run(step):
            obs = _ANSI.sub("", step.observation[-4000:])
            lines = _SUMMARY.findall(obs)
            self._last_test = (
                k,
                test_failed(step),
                self.config.completion_skipped and _SKIPPED.search(obs) is not None,
                (lines[-1] if lines else obs.strip()[-160:]).strip(),
            )
        if self.config.spec_forgotten:
            q = _question(step)
            if q:
                out += self._spec(q, k)
        if self._is_completion(step):
            out += self.completion(k, evidence=self._finish_evidence(step))
        return out

    def _spec(self, question: str, k: int) -> list[Flag]:
        words = _content_words(question)
        found = words & self._task_words
        if len(found) < 2 or len(found) < self.config.spec_overlap * len(words):
            return []
        return self._raise(
            f"spec{k}",
            "spec_forgotten",
            k,
            question=question[:300],
            in_task=sorted(found)[:20],
            overlap=round(len(found) / len(words), 2),
            after_compaction=self._compacted_at > 0,
        )

    @staticmethod
    def _is_completion(step: Step) -> bool:
        if step.tool.lower() == "finish":
            args = step.args if isinstance(step.args, dict) else {}
            return str(args.get("status", "completed")) == "completed"
        return step.kind == "submit" or _SUBMIT.search(step.action[:500]) is not None

    @staticmethod
    def _finish_evidence(step: Step) -> str | None:
        if step.tool.lower() != "finish" or not isinstance(step.args, dict):
            return None  # a plain submit has no evidence field to judge
        return str(step.args.get("evidence") or "")

    def completion(self, k: int, *, evidence: str | None = None) -> list[Flag]:
        """The run claims completion at step k; flag it when the transcript does not support it.

        Args:
            k: step number of the claim.
            evidence: the finish call's evidence text; None when the claim had no such field.
        """
        if not self.config.unsupported_completion:
            return []
        if evidence is not None and not evidence.strip():
            return self._raise(
                "completion", "unsupported_completion", k, why="finish gave no evidence"
            )
        if self._last_test is None:
            return []
        step, failed, skipped, line = self._last_test
        if failed or skipped:
            why = "last test run failed" if failed else "last test run skipped tests"
            return self._raise(
                "completion", "unsupported_completion", k, why=why, test_step=step, test_output=line
            )
        return []

    def end(self, k: int, submission: str = "") -> list[Flag]:
        """The run ended at step k with this final diff: last chance for scope and completion."""
        out = self.add_files(diff_files(submission), k, late=False) if submission else []
        if submission.strip() and "completion" not in self.raised:
            out += self.completion(k)
        return out


def fit_scope_caps(trajs: Iterable[Trajectory], *, quantile: float = 0.95) -> dict[str, int]:
    """Per agent, the quantile of files touched by resolved runs' submissions (scope_files_cap)."""
    per: dict[str, list[int]] = {}
    for t in trajs:
        if t.resolved is True and t.submission:
            per.setdefault(t.agent, []).append(len(diff_files(t.submission)))
    return {a: int(np.ceil(np.quantile(xs, quantile))) for a, xs in per.items() if xs}
