"""The realized run-level FPR of every threshold group: one `monitor.drift.FprWatch` per group.

The groups are the bundle's threshold groups (agents, or sources when its thresholds are keyed
by source) and "other" for every run outside them, so that metric labels stay bounded. Each
counted verdict goes to its group's watch; a run the bundle served by its known-task choice
(serving.task_prior) also counts in a second watch of its group, `known_tasks`, so drift on that
path is seen apart from the rest. Verdicts are also counted by outcome (resolved, unresolved,
not_counted). `FprWatches` renders all of it for `/v1/status` and `/metrics`; which verdicts count
and the record of closed runs are `monitor.feedback.Feedback`'s, which holds one of these.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

from monitor.drift import FprWatch
from monitor.escape import prom_label
from monitor.thresholds import group_name

OTHER = "other"
"""The group of agents the bundle has no thresholds for (bounds the metric labels)."""


class FprWatches:
    """Per-group realized FPR and drift flags, and verdict counts by outcome.

    Not thread-safe: its `Feedback` holds its lock around every call that reads or changes
    counts.

    Args:
        target: the run-level FPR target the served thresholds were set for.
        groups: the threshold groups of the bundle; any other run counts as "other".
        alpha: the watch's chance of ever flagging while the FPR is at or below the target.
        group_by: what the groups name: "agent", or "source" (then a run's source is tried first).
    """

    def __init__(
        self, target: float, groups: Iterable[str] = (), *, alpha: float, group_by: str
    ) -> None:
        self.target = float(target)
        self.alpha = float(alpha)
        self.group_by = group_by
        self.groups = sorted({str(g) for g in groups} - {OTHER}) + [OTHER]
        self.watches = {g: FprWatch(self.target, alpha=self.alpha) for g in self.groups}
        self.flagged_at: dict[str, float] = {}
        self.known_watches: dict[str, FprWatch] = {}
        """Per group, the watch of its runs served by the known-task choice (made on the first
        such verdict counted)."""
        self.known_flagged_at: dict[str, float] = {}
        self.verdicts: Counter[tuple[str, str]] = Counter()  # (group, outcome label) -> n

    def group(self, agent: str | None, source: str = "") -> str:
        """The metric/watch group of a run: the threshold group it is looked up under
        (monitor.thresholds.group_name), or "other" when that is not one of the groups."""
        name = group_name(self.watches, self.group_by, agent or "", source)
        return name if name and name in self.watches else OTHER

    def count(
        self, group: str, *, resolved: bool, stopped: bool, known_task: bool, counted: bool
    ) -> tuple[FprWatch | None, FprWatch | None]:
        """Count one verdict of a run of `group` (in its watches only when `counted`).

        Returns:
            The group's watch and its known-task watch, each only when this verdict raised its
            drift flag (else None).
        """
        watch = self.watches[group]
        flagged = known_flagged = False
        known = None
        if counted:
            flagged = watch.add(resolved=resolved, stopped=stopped)
            label = "resolved" if resolved else "unresolved"
            if known_task:
                known = self.known_watches.setdefault(
                    group, FprWatch(self.target, alpha=self.alpha)
                )
                known_flagged = known.add(resolved=resolved, stopped=stopped)
        else:
            label = "not_counted"
        self.verdicts[(group, label)] += 1
        if flagged:
            self.flagged_at[group] = time.time()
        if known_flagged:
            self.known_flagged_at[group] = time.time()
        return (watch if flagged else None), (known if known_flagged else None)

    # --- status and metrics -------------------------------------------------------------------

    def watch_dict(self, group: str) -> dict[str, Any]:
        """One group's watch as `/v1/status` shows it (with `known_tasks` once it has one)."""
        w = self.watches[group]
        d = w.to_dict()
        at = self.flagged_at.get(group)
        d["flagged_at"] = (
            time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at)) if at is not None else None
        )
        d["verdicts"] = sum(n for (g, _), n in self.verdicts.items() if g == group)
        d["not_counted"] = self.verdicts[(group, "not_counted")]
        known = self.known_watches.get(group)
        if known is not None:
            k = known.to_dict()
            at_k = self.known_flagged_at.get(group)
            k["flagged_at"] = (
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at_k)) if at_k is not None else None
            )
            d["known_tasks"] = k
        return d

    def status(self) -> dict[str, dict[str, Any]]:
        """Every group's `watch_dict`, by group."""
        return {g: self.watch_dict(g) for g in self.groups}

    def prometheus_text(self) -> str:
        """Gauges of the realized FPR and its interval, the drift flag, and verdict counters, one
        series per group (bounded labels: the bundle's groups and "other")."""
        rows = {
            g: (w.fpr, w.lower, w.upper, w.drift, w.resolved, w.stopped)
            for g, w in self.watches.items()
        }
        known_rows = {
            g: (w.fpr, w.lower, w.upper, w.drift, w.resolved, w.stopped)
            for g, w in self.known_watches.items()
        }
        verdicts = dict(self.verdicts)

        def num(x: float | None) -> str:
            return "NaN" if x is None or math.isnan(x) else f"{x:.6g}"

        gauges = (
            ("failfast_fpr_realized", "Realized run-level FPR (stopped resolved / resolved).", 0),
            ("failfast_fpr_lower", "Lower end of the anytime-valid FPR interval.", 1),
            ("failfast_fpr_upper", "Upper end of the anytime-valid FPR interval.", 2),
            ("failfast_fpr_drift", "1 once the FPR interval lies above the target.", 3),
            ("failfast_fpr_resolved_runs", "Resolved runs counted.", 4),
            ("failfast_fpr_stopped_resolved_runs", "Resolved runs the monitor stopped.", 5),
        )
        lines = [
            "# HELP failfast_fpr_target Run-level FPR target of the served thresholds.",
            "# TYPE failfast_fpr_target gauge",
            f"failfast_fpr_target {self.target:g}",
        ]
        # the known-task watches (runs served by the known-task choice) as their own series
        known_gauges = [
            (n.replace("failfast_fpr_", "failfast_known_tasks_fpr_"), f"{h[:-1]}, known tasks.", i)
            for n, h, i in gauges
        ]
        for (name, help, i), by_group in (
            *((g, rows) for g in gauges),
            *((g, known_rows) for g in known_gauges if known_rows),
        ):
            lines += [f"# HELP {name} {help}", f"# TYPE {name} gauge"]
            for g, row in by_group.items():
                v = row[i]
                lines.append(
                    f'{name}{{group="{prom_label(g)}"}} {int(v) if isinstance(v, bool) else num(v)}'  # type: ignore[arg-type]
                )
        lines += [
            "# HELP failfast_verdicts_total Verdicts received by group and outcome "
            "(resolved, unresolved, not_counted).",
            "# TYPE failfast_verdicts_total counter",
        ]
        for g in self.groups:
            for label in ("resolved", "unresolved", "not_counted"):
                n = verdicts.get((g, label), 0)
                lines.append(
                    f'failfast_verdicts_total{{group="{prom_label(g)}",outcome="{label}"}} {n}'
                )
        return "\n".join(lines) + "\n"
