"""Benchmark: ingest all of ../shared/data; print wall time, peak RSS and the per-source counts.

Usage: python bench/bench_ingest.py [DATA_DIR] [--out DIR]

The issue's budget: at most 2 minutes and 4 GB on the 2-core CI machine. The ingest runs in a
child process (the `failfast ingest` command itself), so the peak RSS is that of the command.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("data", nargs="?", default=str(DEFAULT_DATA))
    parser.add_argument("--out", default=None, help="corpus folder (default: a temp folder)")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="failfast-ingest-"))
    cmd = [sys.executable, "-c", "import sys; from training.cli import main; sys.exit(main())",
           "ingest", args.data, "--out", str(out)]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
    if proc.returncode != 0:
        print(proc.stdout + proc.stderr)
        print(f"ingest failed with exit code {proc.returncode}")
        return 1
    summary = json.loads((out / "summary.json").read_text())
    corpus_mb = sum(p.stat().st_size for p in out.glob("*.arrow")) / 2**20
    t1 = time.perf_counter()
    from monitor.corpus import load_corpus

    n = len(load_corpus(out))
    load_s = time.perf_counter() - t1
    print(f"data: {args.data}")
    print(f"ingest wall time: {wall:.1f} s (budget 120 s)")
    print(f"ingest peak RSS:  {peak_mb:.0f} MB (budget 4096 MB)")
    print(
        f"corpus: {summary['runs']} runs, {corpus_mb:.1f} MB of Arrow files; load_corpus: {n} runs in {load_s:.1f} s"
    )
    print(f"problems: {len(summary['problems'])}")
    for name, s in summary["sources"].items():
        print(f"  {name}: runs={s['runs']} instances={s['instances']} resolved={s['resolved']} "
              f"unresolved={s['unresolved']} unknown={s['unknown']}")  # fmt: skip
    return 0 if wall <= 120 and peak_mb <= 4096 else 1


if __name__ == "__main__":
    sys.exit(main())
