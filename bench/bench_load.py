"""Load on the HTTP service: N concurrent live sessions x M steps on loopback.

    python bench/bench_load.py --bundle /tmp/ff-bench/bundle [--int8] [--sessions 32] [--steps 50]

Starts `failfast serve` on a free port, replays real mini-swe-agent steps from ../shared/data (each
session a different run, cycled to --steps) through POST /v1/sessions/{id}/steps from one thread
per session, and reports errors, p50/p95 step latency, throughput and the server's peak resident
memory (VmHWM).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import itertools
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

DATA = Path(
    os.environ.get("FAILFAST_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_runs(n: int) -> list:
    from monitor.formats import minisweagent

    files = sorted(
        (DATA / "swe-bench-verified" / "mini-swe-agent-gemini-3-pro" / "trajs").glob(
            "*/*.traj.json.gz"
        )
    )
    runs = []
    for f in files:
        traj = minisweagent.read(f)
        if len(traj.steps) >= 10:
            runs.append(traj)
        if len(runs) == n:
            break
    return runs


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--int8", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sessions", type=int, default=32)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()

    runs = load_runs(args.sessions)
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "training.cli",
        "serve",
        "--bundle",
        args.bundle,
        "--port",
        str(port),
        "--threads",
        str(args.threads),
    ]
    if args.int8:
        cmd.append("--int8")
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        latencies: list[float] = []
        errors: list[str] = []

        def session(i: int) -> None:
            traj = runs[i % len(runs)]
            with httpx.Client(timeout=120) as client:
                r = client.post(f"{url}/v1/sessions", json={"task": traj.task, "agent": traj.agent})
                if r.status_code != 201:
                    errors.append(f"open {r.status_code}")
                    return
                sid = r.json()["session_id"]
                for step in itertools.islice(itertools.cycle(traj.steps), args.steps):
                    d = step.to_dict()
                    d.pop("index")
                    t0 = time.perf_counter()
                    r = client.post(f"{url}/v1/sessions/{sid}/steps", json=d)
                    latencies.append((time.perf_counter() - t0) * 1000)
                    if r.status_code != 200:
                        errors.append(f"step {r.status_code}: {r.text[:100]}")
                client.delete(f"{url}/v1/sessions/{sid}")

        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(args.sessions) as pool:
            list(pool.map(session, range(args.sessions)))
        wall = time.perf_counter() - t0
        lat = sorted(latencies)
        p95 = lat[int(0.95 * (len(lat) - 1))]
        print(
            f"{args.sessions} sessions x {args.steps} steps ({'int8' if args.int8 else 'fp32'}, "
            f"{args.threads} ORT threads): requests={len(lat)} errors={len(errors)} "
            f"p50={statistics.median(lat):.0f} ms p95={p95:.0f} ms wall={wall:.0f} s "
            f"throughput={len(lat) / wall:.1f} steps/s peak_rss={peak_rss_mb(server.pid):.0f} MiB"
        )
        for e in errors[:5]:
            print("  error:", e)
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
