"""Prometheus text exposition of the service: a latency histogram and simple gauges/counters.

Decision counts come from the monitor's DecisionLog (monitor/decision_log.py); this module adds
what only the service knows. No client library: the text format is small.
"""

from __future__ import annotations

import bisect
import threading

from monitor.escape import prom_label
from monitor.protocols import Batcher

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (seconds) of the latency histogram buckets."""


class Histogram:
    """A thread-safe Prometheus histogram with one label (the endpoint).

    Args:
        name: metric name (without _bucket/_sum/_count).
        help: one-line description.
        buckets: increasing upper bounds; +Inf is added.
    """

    def __init__(self, name: str, help: str, buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.name = name
        self.help = help
        self.buckets = tuple(buckets)
        self._counts: dict[str, list[int]] = {}
        self._sum: dict[str, float] = {}
        self._lock = threading.Lock()

    def observe(self, label: str, value: float) -> None:
        """Add one observation under `label`."""
        i = bisect.bisect_left(self.buckets, value)
        with self._lock:
            counts = self._counts.setdefault(label, [0] * (len(self.buckets) + 1))
            counts[i] += 1
            self._sum[label] = self._sum.get(label, 0.0) + value

    def text(self, label_name: str = "endpoint") -> str:
        """The histogram in Prometheus text format (cumulative buckets)."""
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        with self._lock:
            for raw, counts in sorted(self._counts.items()):
                label = prom_label(raw)
                acc = 0
                for bound, n in zip((*self.buckets, float("inf")), counts, strict=True):
                    acc += n
                    le = "+Inf" if bound == float("inf") else f"{bound:g}"
                    lines.append(f'{self.name}_bucket{{{label_name}="{label}",le="{le}"}} {acc}')
                lines.append(f'{self.name}_sum{{{label_name}="{label}"}} {self._sum[raw]:.6f}')
                lines.append(f'{self.name}_count{{{label_name}="{label}"}} {acc}')
        return "\n".join(lines) + "\n"


class Counter:
    """A thread-safe counter with one label."""

    def __init__(self, name: str, help: str) -> None:
        self.name = name
        self.help = help
        self._values: dict[str, int] = {}
        self._lock = threading.Lock()

    def inc(self, label: str, n: int = 1) -> None:
        with self._lock:
            self._values[label] = self._values.get(label, 0) + n

    def text(self, label_name: str) -> str:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} counter"]
        with self._lock:
            for label, n in sorted(self._values.items()):
                lines.append(f'{self.name}{{{label_name}="{prom_label(label)}"}} {n}')
        return "\n".join(lines) + "\n"


def gauge(name: str, help: str, value: float) -> str:
    """One unlabelled gauge in Prometheus text format."""
    return f"# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value:g}\n"


def batch_gauges(batcher: Batcher | None) -> str:
    """Calls and rows of a serving.batching.KVBatcher (nothing when batching is off)."""
    if batcher is None:
        return ""
    calls, rows = batcher.calls, batcher.rows
    return gauge(
        "failfast_batched_calls", "Batched model calls for live sessions since start.", calls
    ) + gauge("failfast_batched_rows", "Session steps those calls carried.", rows)
