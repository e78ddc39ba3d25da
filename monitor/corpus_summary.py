"""What an ingest read: per-source counts (`SourceStats`), problems and warnings (`Summary`),
as `summary.json` and as the table `failfast ingest` prints (monitor.corpus writes both)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitor.escape import visible
from monitor.problems import Problem
from monitor.types import Trajectory


@dataclass
class SourceStats:
    """Counts of one data source."""

    agents: set[str] = field(default_factory=set)
    runs: int = 0
    instances: set[str] = field(default_factory=set)
    resolved: int = 0
    unresolved: int = 0
    unknown: int = 0
    steps: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    problems: int = 0
    root: Path | None = None  # the folder named after the source, to attribute problems

    def add(self, t: Trajectory) -> None:
        self.agents.add(t.agent)
        self.runs += 1
        self.instances.add(t.instance_id)
        if t.resolved is True:
            self.resolved += 1
        elif t.resolved is False:
            self.unresolved += 1
        else:
            self.unknown += 1
        self.steps.append(len(t.steps))
        self.tokens.append(t.total_tokens)
        if self.root is None:
            self.root = next((p for p in Path(t.path).parents if p.name == t.source), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "instances": len(self.instances),
            "resolved": self.resolved,
            "unresolved": self.unresolved,
            "unknown": self.unknown,
            "agent": ",".join(sorted(self.agents)),
            "median_steps": statistics.median(self.steps) if self.steps else 0,
            "median_tokens": statistics.median(self.tokens) if self.tokens else 0,
            "problems": self.problems,
        }


@dataclass
class Summary:
    """What an ingest read: per-source counts, problems and warnings."""

    sources: dict[str, SourceStats] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    links_followed: int = 0  # symbolic links the walk followed (folders and files)

    @property
    def runs(self) -> int:
        return sum(s.runs for s in self.sources.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "sources": {name: s.to_dict() for name, s in sorted(self.sources.items())},
            "problems": [p.to_dict() for p in self.problems],
            "warnings": self.warnings,
            "runs": self.runs,
            "links_followed": self.links_followed,
        }

    def table(self) -> str:
        """A plain-text table per source (and the problems, one per line)."""
        head = ("source", "agent", "runs", "instances", "resolved", "unresolved", "unknown",
                "med steps", "med tokens", "problems")  # fmt: skip
        rows: list[tuple[str, ...]] = [head]
        for name, s in sorted(self.sources.items()):
            d = s.to_dict()
            rows.append(
                (
                    visible(name),
                    visible(d["agent"]),
                    *(
                        str(d[k])
                        for k in ("runs", "instances", "resolved", "unresolved", "unknown")
                    ),
                    f"{d['median_steps']:g}",
                    f"{d['median_tokens']:.0f}",
                    str(s.problems),
                )  # fmt: skip
            )
        other = len(self.problems) - sum(s.problems for s in self.sources.values())
        if other:
            rows.append(("(no source)", "", "", "", "", "", "", "", "", str(other)))
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        # names from the data are shown with control characters visible: one line each, always
        lines += [f"problem: {visible(p.path)}: {visible(p.reason)}" for p in self.problems]
        lines += [f"warning: {visible(w)}" for w in self.warnings]
        return "\n".join(lines)
