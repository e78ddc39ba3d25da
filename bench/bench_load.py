"""Load on the HTTP service: N concurrent live sessions x M steps on loopback.

    python bench/bench_load.py --bundle runs/quick/bundle [--int8] [--sessions 32] [--steps 50]
        [--max-batch 16] [--batch-window-ms 5] [--offline-layers 4]

Starts `failfast serve` on a free port, replays real mini-swe-agent steps from ../shared/data (each
session a different run, cycled to --steps) through POST /v1/sessions/{id}/steps from one thread
per session, and reports errors, p50/p95 step latency, throughput (steps/s, and tokens/s the model
encoded, read from /metrics) and the server's peak resident memory (VmHWM). Before the load, it
times the offline feature pass (training.model.features.encode_windows, torch, the bundle's
backbone and featuriser) on the same runs' windows, and prints the service's tokens/s as a share
of it.
"""

from __future__ import annotations

import os

# The offline pass runs torch in this process: passive OpenMP waits, as bench_latency.py explains
# (spinning threads stall on a CPU shared with the server and other jobs).
os.environ.setdefault("OMP_WAIT_POLICY", os.environ.get("FAILFAST_TORCH_OMP_WAIT", "PASSIVE"))

import argparse
import concurrent.futures as cf
import itertools
import json
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


def offline_tokens_per_s(bundle: Path, runs: list, threads: int) -> float:
    """tokens/s of the offline feature pass (torch) over the featuriser windows of `runs`."""
    import torch

    from monitor.featurise import Featuriser, FeaturiserConfig
    from training.model.classifier import build_classifier
    from training.model.features import encode_windows

    torch.set_num_threads(threads)
    m = json.loads((bundle / "monitor.json").read_text())
    feat = Featuriser.from_tokenizer_file(
        bundle / "tokenizer.json", FeaturiserConfig.model_validate(m["featuriser"])
    )
    windows = [w for r in runs for w in feat.windows(r)]
    c = m["classifier"]
    model = build_classifier(c["base"], c["n_layers"], [], pooling=c["pooling"]).eval()
    encode_windows(model, windows[:2], batch_tokens=4096)  # warm-up
    t0 = time.perf_counter()
    encode_windows(model, windows, batch_tokens=4096)
    return sum(len(w.ids) for w in windows) / (time.perf_counter() - t0)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def main() -> None:
    """Run the load test and print its figures (long: the flags, the server's start and the
    printed rows are one script a reader follows in order)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--int8", action="store_true")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sessions", type=int, default=32)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--max-batch", type=int, default=None, help="serve flag (default: its own)")
    ap.add_argument("--batch-window-ms", type=float, default=None, help="serve flag")
    ap.add_argument("--max-concurrent", type=int, default=None, help="serve flag")
    ap.add_argument("--no-offline", action="store_true", help="skip the offline pass timing")
    args = ap.parse_args()

    runs = load_runs(args.sessions)
    offline = (
        float("nan")
        if args.no_offline
        else offline_tokens_per_s(Path(args.bundle), runs, args.threads)
    )
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
    if args.max_batch is not None:
        cmd += ["--max-batch", str(args.max_batch)]
    if args.batch_window_ms is not None:
        cmd += ["--batch-window-ms", str(args.batch_window_ms)]
    if args.max_concurrent is not None:
        cmd += ["--max-concurrent", str(args.max_concurrent)]
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

        tokens0 = metric(url, "failfast_session_tokens_encoded")
        load0 = os.getloadavg()[0]
        cpu0 = cpu_seconds(server.pid)
        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(args.sessions) as pool:
            list(pool.map(session, range(args.sessions)))
        wall = time.perf_counter() - t0
        cpu = cpu_seconds(server.pid) - cpu0
        tokens = metric(url, "failfast_session_tokens_encoded") - tokens0
        rows_per_call = metric(url, "failfast_batched_rows") / metric(url, "failfast_batched_calls")
        lat = sorted(latencies)
        p95 = lat[int(0.95 * (len(lat) - 1))]
        print(
            f"{args.sessions} sessions x {args.steps} steps ({'int8' if args.int8 else 'fp32'}, "
            f"{args.threads} ORT threads, max_batch={args.max_batch or 'default'}, "
            f"max_concurrent={args.max_concurrent or 'default'}): "
            f"requests={len(lat)} errors={len(errors)} "
            f"p50={statistics.median(lat):.0f} ms p95={p95:.0f} ms wall={wall:.0f} s "
            f"throughput={len(lat) / wall:.1f} steps/s {tokens / wall:.0f} tokens/s "
            f"peak_rss={peak_rss_mb(server.pid):.0f} MiB"
        )
        print(
            f"offline feature pass (torch, same runs' windows): {offline:.0f} tokens/s; "
            f"service/offline = {tokens / wall / offline:.0%}; "
            f"{rows_per_call:.1f} steps per model call; server CPU {cpu / wall:.2f} cores, "
            f"{tokens / cpu:.0f} tokens per CPU-second; "
            f"load average before/after: {load0:.2f}/{os.getloadavg()[0]:.2f}"
        )
        for e in errors[:5]:
            print("  error:", e)
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
