"""The halt-reason report: which halts and flags fire, per agent, on which runs.

Input is either decision logs (JSON lines from monitor.decision_log) or runs replayed through
the monitor. For each agent and each item (`stop:<reason>`, `warn:<reason>`, `flag:<name>`, and
with `audit=True` every heuristic rule on its own, `rule:<family>.<signal>`), the report counts
the runs it fired on and the share of resolved runs among them. A reason that fires mostly on
resolved runs stops good runs: a tuning problem, and the report says so.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitor.errors import TranscriptError
from monitor.flags import FlagConfig
from monitor.halts import TranscriptRule
from monitor.policy import PolicyConfig, heuristic_hits
from monitor.session import Monitor
from monitor.textio import read_text
from monitor.types import Trajectory


@dataclass
class RunFirings:
    """What fired on one run: item -> first step (1-based) at which it fired."""

    run: str
    agent: str
    resolved: bool | None
    fired: dict[str, int] = field(default_factory=dict)


def replay(traj: Trajectory, config: PolicyConfig, *, audit: bool = False) -> RunFirings:
    """Replay a recorded run through a Monitor session (no scorer).

    The session's first stop gives `stop:<reason>`; it is kept observing afterwards only to
    collect flags and, with `audit`, every heuristic rule that would fire on its own
    (budgets, stuck patterns, context thrash, format errors, error streak, and the
    transcript-analyser rule even when it is off in `config`).
    """
    out = RunFirings(traj.id, traj.agent, traj.resolved)
    session = Monitor(config).start(task=traj.task, agent=traj.agent, run=traj.id)
    rule = TranscriptRule(**config.analyser.model_dump(exclude={"enabled"}))
    stopped = False
    for before, decision in session.replay(traj.steps, check=True):
        if before is not None and before.stop:
            out.fired.setdefault(f"stop:{before.reason}", session.k - 1)  # before this step
            stopped = True
        k = session.k
        if not stopped and decision.action != "continue":
            out.fired.setdefault(f"{decision.action}:{decision.reason}", k)
            stopped = decision.stop
        for flag in decision.flags:
            out.fired.setdefault(f"flag:{flag.name}", flag.step)
        if audit:
            values = session.tracker.values()
            for hit in heuristic_hits(values, config, session.tracker.compaction_steps):
                family = "stuck" if hit.reason == "stuck_pattern" else hit.reason
                out.fired.setdefault(f"rule:{family}.{hit.signal}", k)
            for hit in rule.hits(values):
                out.fired.setdefault(f"rule:analyser.{hit.signal}", k)
    for flag in session.end(traj.submission):
        out.fired.setdefault(f"flag:{flag.name}", flag.step)
    return out


def replay_runs(
    trajs: Iterable[Trajectory],
    config: PolicyConfig | None = None,
    *,
    audit: bool = False,
    scope_caps: dict[str, int] | None = None,
) -> list[RunFirings]:
    """Replay many runs; `scope_caps` sets scope_files_cap per agent (see flags.fit_scope_caps)."""
    config = config or PolicyConfig()
    per_agent: dict[str, PolicyConfig] = {}
    outs = []
    for t in trajs:
        cfg = config
        if scope_caps and t.agent in scope_caps:
            if t.agent not in per_agent:
                flags = FlagConfig(
                    **{**config.flags.model_dump(), "scope_files_cap": scope_caps[t.agent]}
                )
                per_agent[t.agent] = config.model_copy(update={"flags": flags})
            cfg = per_agent[t.agent]
        outs.append(replay(t, cfg, audit=audit))
    return outs


def is_decision_log(path: str | Path) -> bool:
    """True when the file's first non-empty line is a decision record (not a transcript)."""
    p = Path(path)
    if not p.is_file():
        return False
    try:
        head = read_text(p)[:65536]
    except TranscriptError:
        return False
    for line in head.splitlines():
        if line.strip():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                return False
            return isinstance(rec, dict) and {"action", "reason", "step"} <= rec.keys()
    return False


def outcomes_from_log(path: str | Path) -> list[RunFirings]:
    """Read a decision log (JSON lines) into one outcome per (agent, run).

    Raises:
        TranscriptError: when the file is unreadable or no line is a decision record.
    """
    runs: dict[tuple[str, str], RunFirings] = {}
    n_bad = 0
    for line in read_text(path).splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            n_bad += 1
            continue
        if not isinstance(rec, dict) or "action" not in rec or "reason" not in rec:
            n_bad += 1
            continue
        agent = str(rec.get("agent") or "unknown")
        key = (agent, str(rec.get("run") or ""))
        out = runs.setdefault(key, RunFirings(key[1], agent, rec.get("resolved")))
        if out.resolved is None and rec.get("resolved") is not None:
            out.resolved = bool(rec["resolved"])
        step = int(rec.get("step") or 0)
        if rec["action"] != "continue":
            out.fired.setdefault(f"{rec['action']}:{rec['reason']}", step)
        for flag in rec.get("flags") or []:
            name = flag.get("name") if isinstance(flag, dict) else str(flag)
            out.fired.setdefault(
                f"flag:{name}", int(flag.get("step", step)) if isinstance(flag, dict) else step
            )
    if not runs:
        raise TranscriptError(path, f"no decision records found ({n_bad} unparsable lines)")
    return list(runs.values())


@dataclass
class ReasonRow:
    """One line of the report."""

    agent: str
    item: str
    fired: int
    resolved: int
    unresolved: int
    unknown: int
    runs: int
    runs_resolved: int

    @property
    def share_resolved(self) -> float | None:
        """Resolved runs among the labelled runs it fired on (None when none is labelled)."""
        n = self.resolved + self.unresolved
        return self.resolved / n if n else None

    min_runs: int = 5

    @property
    def tuning_problem(self) -> bool:
        """It fires mostly (> 50%) on resolved runs, on at least `min_runs` labelled runs."""
        share = self.share_resolved
        labelled = self.resolved + self.unresolved
        return share is not None and share > 0.5 and labelled >= self.min_runs


def reason_table(outcomes: list[RunFirings], *, min_runs: int = 5) -> list[ReasonRow]:
    """Count, per agent and item, the runs it fired on by label.

    Args:
        outcomes: one per run.
        min_runs: an item must fire on this many labelled runs before the report calls it a
            tuning problem (fewer runs say little).
    """
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    runs: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for o in outcomes:
        runs[o.agent][0] += 1
        runs[o.agent][1] += o.resolved is True
        col = 0 if o.resolved is True else 1 if o.resolved is False else 2
        for item in o.fired:
            counts[(o.agent, item)][col] += 1
    rows = [
        ReasonRow(a, item, sum(c), c[0], c[1], c[2], runs[a][0], runs[a][1], min_runs)
        for (a, item), c in counts.items()
    ]
    rows.sort(key=lambda r: (r.agent, r.item))
    return rows


def format_report(outcomes: list[RunFirings], rows: list[ReasonRow]) -> str:
    """The report as text: per agent, a header line then one line per item."""
    lines = []
    by_agent: dict[str, list[ReasonRow]] = defaultdict(list)
    for r in rows:
        by_agent[r.agent].append(r)
    agents = sorted({o.agent for o in outcomes})
    for agent in agents:
        runs = [o for o in outcomes if o.agent == agent]
        n_res = sum(o.resolved is True for o in runs)
        n_unk = sum(o.resolved is None for o in runs)
        labelled = len(runs) - n_unk
        base = f"{100 * n_res / labelled:.1f}%" if labelled else "n/a"
        lines.append(
            f"agent={agent} runs={len(runs)} resolved={n_res} ({base} of labelled) unknown={n_unk}"
        )
        lines.append(
            f"  {'item':<40} {'fired':>6} {'res':>5} {'unres':>5} {'unk':>4} {'fired%':>7} {'res%':>6}"
        )
        for r in by_agent.get(agent, []):
            share = r.share_resolved
            if r.tuning_problem:
                note = "  TUNING: fires mostly on resolved runs"
            elif share is not None and share > 0.5:
                note = f"  (mostly resolved, but under {r.min_runs} runs)"
            else:
                note = ""
            lines.append(
                f"  {r.item:<40} {r.fired:>6} {r.resolved:>5} {r.unresolved:>5} {r.unknown:>4} "
                f"{100 * r.fired / r.runs:>6.1f}% "
                f"{'n/a' if share is None else f'{100 * share:.1f}%':>6}{note}"
            )
        if not by_agent.get(agent):
            lines.append("  (nothing fired)")
    return "\n".join(lines)


def rows_json(rows: list[ReasonRow]) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts (with share_resolved and tuning_problem)."""
    return [
        {**r.__dict__, "share_resolved": r.share_resolved, "tuning_problem": r.tuning_problem}
        for r in rows
    ]
