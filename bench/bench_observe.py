"""Benchmark Session.observe() on the real corpus: steps per second, pure Python.

Runs are read first (not timed); then every step of every run goes through a fresh
Monitor session (default policy: stuck patterns, context thrash, format errors, review flags),
as a harness would call it, with a check() before each step.

    python bench/bench_observe.py                # all of ../shared/data
    python bench/bench_observe.py PATH... --limit 300
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from monitor.session import Monitor  # noqa: E402
from monitor.types import Trajectory  # noqa: E402

DATA = ROOT.parent / "shared" / "data"


def load(paths: list[Path], limit: int | None) -> list[Trajectory]:
    """Read runs with monitor.reading when it is there, else the per-format readers directly."""
    try:
        from monitor.reading import read_runs
    except ImportError:
        read_runs = None
    if read_runs is not None:
        runs = list(read_runs(paths))
        return runs[:limit] if limit else runs
    from monitor.formats import minisweagent, sweagent

    runs = []
    for root in paths:
        files = sorted(root.rglob("*.traj.json.gz")) + sorted(root.rglob("*.traj.gz"))
        for f in files:
            reader = minisweagent if f.name.endswith(".traj.json.gz") else sweagent
            runs.append(reader.read(f))
            if limit and len(runs) >= limit:
                return runs
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, default=[DATA])
    parser.add_argument("--limit", type=int, default=None, help="at most this many runs")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes (best is reported)")
    args = parser.parse_args()

    t0 = time.perf_counter()
    runs = load(args.paths, args.limit)
    n_steps = sum(len(t.steps) for t in runs)
    print(f"read {len(runs)} runs, {n_steps} steps in {time.perf_counter() - t0:.1f} s")
    if not n_steps:
        sys.exit("no steps to time")
    best = float("inf")
    stops = 0
    for _ in range(args.repeat):
        monitor = Monitor()
        stops = 0
        t0 = time.perf_counter()
        for traj in runs:
            session = monitor.start(task=traj.task, agent=traj.agent, run=traj.id)
            for step in traj.steps:
                session.check()
                session.observe(step)
            stops += session.stopped is not None
        best = min(best, time.perf_counter() - t0)
    print(
        f"observe()+check(): {n_steps / best:,.0f} steps/s "
        f"({1e6 * best / n_steps:.1f} us/step, best of {args.repeat}); "
        f"runs stopped by the default policy: {stops} of {len(runs)}"
    )


if __name__ == "__main__":
    main()
