"""Drift detection through the service: runs replayed with their verdicts, thresholds set wrong.

Real per-step score sequences (a training dir's records: OUT/records/{val,test}.parquet, the
quick model's scores) and their verdicts are resampled into streams of runs. The stop threshold
is set on purpose so that the TRUE run-level FPR over the pool (stopped resolved / resolved under
the bundle's check schedule) is 2x the target, and, separately, at the target. Each stream is
replayed through the service as a dry-run harness would (every step sent, stops not obeyed, one
verdict per run), until the drift flag rises or --max-resolved resolved runs have been counted.

Two paths, the same streams: HTTP (the FastAPI app in process, httpx via TestClient: open a
session, POST every step, POST the verdict, DELETE) for the first --http-replays streams, and the
Python API (the service's Monitor: `start`, `observe`, `end`, `verdict`) for all of them; the
flag points must agree. By default each run is replayed compact: the shortest score sequence with
the same stopping statistic (min_steps - 1 quiet steps, `persist` steps at the run's statistic,
one step after), so a run is stopped at threshold t iff its full sequence is (--steps full
replays the recorded sequences; --check-full N checks the first N streams give the same flags).

    python bench/bench_drift.py --records /work/main/runs/quick/records [--replays 200]

Prints per condition: the threshold and the true FPR, how many replayed runs the service stopped
differently from the offline rule (schedule.max_checked_score >= threshold; must be 0), the median
resolved runs to the flag, the share flagged within 100 and within 1,000 resolved runs.
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from monitor.policy import PolicyConfig
from monitor.schedule import Schedule
from monitor.scripted import ScriptedScorer, ScriptedSession
from monitor.types import Step
from serving.limits import ServiceConfig
from serving.verdicts import service_monitor

AGENT = "replayed"


class ReplayScorer(ScriptedScorer):
    """A scorer whose session for task "i" returns run i's scores (the stop threshold fixed);
    its bundle stand-in names one threshold group, AGENT."""

    def __init__(self, runs: list[list[float]], threshold: float, target: float) -> None:
        super().__init__([], threshold=threshold, warn_threshold=math.inf)
        self.runs = runs
        self.target = target
        self.policy: dict[str, Any] = {}
        self.bundle = SimpleNamespace(
            thresholds=SimpleNamespace(groups={AGENT: None}, group_by="agent"),
            path=Path("replay"),
            sha256="",
            graph_hashes={},
            calibration={"by": "bench_drift", "note": "threshold set wrong on purpose"},
        )

    def start(self, task: str, agent: str | None = None, source: str = "") -> ScriptedSession:
        return ScriptedSession(self.runs[int(task)], self.threshold, math.inf, None)


def compact(stat: float, schedule: Schedule) -> list[float]:
    """The shortest score sequence whose stopping statistic is `stat` (and one step after)."""
    if not math.isfinite(stat):
        return [0.0] * schedule.min_steps
    return [0.0] * (schedule.min_steps - 1) + [stat] * schedule.persist + [0.0]


def threshold_at(stats: np.ndarray, rate: float, *, at_most: bool) -> tuple[float, float]:
    """A threshold stopping m of the n resolved runs' statistics (m = round(rate * n), or the
    largest m with m / n <= rate), and the share m / n."""
    s = np.sort(stats[np.isfinite(stats)])[::-1]
    m = max(1, math.floor(rate * len(stats) + 1e-9) if at_most else round(rate * len(stats)))
    t = (s[m - 1] + s[m]) / 2.0 if m < len(s) else s[-1]
    return float(t), float((stats >= t).sum() / len(stats))


def streams(n_pool: int, replays: int, length: int, seed: int) -> list[np.ndarray]:
    """`replays` streams of `length` pool indices drawn with replacement."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, n_pool, size=length) for _ in range(replays)]


def replay_python(
    monitor: Any, order: np.ndarray, resolved: list[bool], max_resolved: int, want: np.ndarray
) -> tuple[int | None, int]:
    """Through the service's Monitor (`start`, `observe`, `end`, `verdict`); returns (resolved
    runs counted when the flag rose, None if it did not; runs stopped unlike `want`)."""
    n_res = wrong = 0
    for i in order:
        scores = monitor.scorer.runs[i]
        session = monitor.start(str(i), AGENT, run=f"run-{i}")
        for k in range(len(scores)):
            session.observe(Step(index=k, tool="bash", action=f"step {k} of {i}", observation="ok"))
        session.end()
        done = session.verdict(resolved[i], finished=True)  # a dry run: every run ends
        n_res += resolved[i]
        wrong += done["stopped"] != want[i]
        if done["flagged_now"]:
            return done["watch"]["flagged_at_resolved"], wrong
        if n_res >= max_resolved:
            break
    return None, wrong


def replay_http(
    client: Any, order: np.ndarray, resolved: list[bool], lengths: list[int], max_resolved: int
) -> int | None:
    """Through the HTTP routes (open, steps, verdict, delete): resolved runs to the flag."""
    n_res = 0
    for i in order:
        r = client.post("/v1/sessions", json={"task": str(i), "agent": AGENT, "run": f"run-{i}"})
        sid = r.json()["session_id"]
        for k in range(lengths[i]):
            client.post(f"/v1/sessions/{sid}/steps", json={"action": f"step {k} of {i}"})
        body = {"resolved": resolved[i], "finished": True}
        done = client.post(f"/v1/sessions/{sid}/verdict", json=body).json()
        client.delete(f"/v1/sessions/{sid}")
        n_res += resolved[i]
        if done["flagged_now"]:
            return done["watch"]["flagged_at_resolved"]
        if n_res >= max_resolved:
            break
    return None


def load_pool(records: Path) -> tuple[list[Any], Schedule]:
    """Records of records/{val,test}.parquet (or one file) and the schedule of the bundle beside."""
    import json

    from training.data.records import load_records

    files = sorted(records.glob("*.parquet")) if records.is_dir() else [records]
    recs = [r for f in files for r in load_records(f) if "monitor" in r.scores]
    schedule = Schedule()
    manifest = records.parent / "bundle" / "monitor.json"
    if records.is_dir() and manifest.is_file():
        schedule = Schedule.model_validate(
            json.loads(manifest.read_text())["thresholds"]["schedule"]
        )
    return recs, schedule


def run_condition(
    name: str,
    rate: float,
    args: argparse.Namespace,
    recs: list[Any],
    schedule: Schedule,
) -> dict[str, Any]:
    stats = np.array([schedule.max_checked_score(r.scores["monitor"]) for r in recs])
    resolved = [bool(r.resolved) for r in recs]
    t, true_fpr = threshold_at(stats[np.array(resolved)], rate, at_most=name == "at target")
    want = stats >= t
    full = [list(map(float, r.scores["monitor"])) for r in recs]
    seqs = full if args.steps == "full" else [compact(s, schedule) for s in stats]
    policy = PolicyConfig(**schedule.model_dump())
    cfg = ServiceConfig(drift_alpha=args.alpha)
    length = int(args.max_resolved / max(np.mean(resolved), 1e-9) * 1.5) + 50
    orders = streams(len(recs), args.replays, length, args.seed + int(rate * 1e4))
    flags: list[int | None] = []
    wrong, seconds = 0, time.perf_counter()
    for order in orders:
        monitor = service_monitor(ReplayScorer(seqs, t, args.target), policy, cfg)
        at, bad = replay_python(monitor, order, resolved, args.max_resolved, want)
        flags.append(at)
        wrong += bad
    seconds = time.perf_counter() - seconds
    mismatches = 0
    if args.check_full and args.steps != "full":
        for order, at in zip(orders[: args.check_full], flags, strict=False):
            monitor = service_monitor(ReplayScorer(full, t, args.target), policy, cfg)
            got = replay_python(monitor, order, resolved, args.max_resolved, want)[0]
            mismatches += got != at
    http_mismatch, http_n = 0, min(args.http_replays, len(orders))
    if http_n:
        from fastapi.testclient import TestClient

        from serving.app import create_app

        for order, at in zip(orders[:http_n], flags, strict=False):
            app = create_app(ReplayScorer(seqs, t, args.target), cfg, policy)
            with TestClient(app) as client:
                lengths = [len(s) for s in seqs]
                got = replay_http(client, order, resolved, lengths, args.max_resolved)
            http_mismatch += got != at
    flagged = [f for f in flags if f is not None]
    return {
        "condition": name,
        "threshold": t,
        "true_fpr": true_fpr,
        "stops_unlike_offline": wrong,
        "median_to_flag": statistics.median([f if f is not None else math.inf for f in flags]),
        "within_100": sum(f <= 100 for f in flagged) / len(flags),
        "within_1000": sum(f <= 1000 for f in flagged) / len(flags),
        "replays": len(flags),
        "seconds": seconds,
        "full_mismatches": f"{mismatches} of {min(args.check_full, len(orders))}",
        "http_mismatches": f"{http_mismatch} of {http_n}",
    }


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=Path, required=True, help="records folder or parquet file")
    p.add_argument("--target", type=float, default=0.05)
    p.add_argument("--alpha", type=float, default=0.1, help="the watch's alpha (--drift-alpha)")
    p.add_argument("--replays", type=int, default=200)
    p.add_argument("--max-resolved", type=int, default=1000)
    p.add_argument("--steps", choices=["compact", "full"], default="compact")
    p.add_argument("--check-full", type=int, default=5, help="streams replayed full as a check")
    p.add_argument("--http-replays", type=int, default=2, help="streams also replayed over HTTP")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    logging.getLogger("failfast.drift").setLevel(logging.ERROR)  # one WARNING per flag otherwise
    recs, schedule = load_pool(args.records)
    n_res = sum(bool(r.resolved) for r in recs)
    print(
        f"pool: {len(recs)} runs, {n_res} resolved; schedule {schedule.model_dump()}; target "
        f"{args.target:g}, alpha {args.alpha:g}, {args.replays} replays, steps {args.steps}"
    )
    out = []
    for name, rate in (("2x target", 2 * args.target), ("at target", args.target)):
        row = run_condition(name, rate, args, recs, schedule)
        out.append(row)
        print(
            f"{name}: threshold {row['threshold']:.4f}, true FPR {row['true_fpr']:.4f}; median "
            f"resolved runs to the flag {row['median_to_flag']}; flagged within 100: "
            f"{row['within_100']:.0%}, within 1,000: {row['within_1000']:.0%} ({row['replays']} "
            f"replays, {row['seconds']:.0f} s; stops unlike the offline rule: "
            f"{row['stops_unlike_offline']}; flag points unlike the full sequences: "
            f"{row['full_mismatches']}, unlike HTTP: {row['http_mismatches']})",
            flush=True,
        )
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
