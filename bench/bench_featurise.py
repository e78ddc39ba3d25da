"""Featurisation throughput on real trajectories.

Reads up to --runs runs from each source in the shared data folder, then times
`Featuriser.windows()` (rendering + encoding + windowing) with the dependency-free fallback
encode and, when given, a tokenizer.json (e.g. SmolLM2's). Reading time is excluded.

    python bench/bench_featurise.py [--data ../shared/data] [--runs 40]
        [--tokenizer ~/.cache/failfast/models/smollm2-135m/tokenizer.json] [-o window_tokens=2048]
"""

from __future__ import annotations

import argparse
import glob
import statistics
import time
from pathlib import Path

from monitor.config import load_config
from monitor.errors import TranscriptError
from monitor.featurise import Featuriser, FeaturiserConfig
from monitor.reading import read_trajectory
from monitor.types import Trajectory

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {
    "mini-swe-agent-gemini-3-pro": "swe-bench-verified/mini-swe-agent-gemini-3-pro/trajs/*/*.traj.json*",
    "swe-agent-gpt4": "swe-bench-lite/swe-agent-gpt4/*/*.traj*",
    "coder-gpt4": "swe-bench-lite/coder-gpt4/trajs/*.traj*",
    "autocoderover-gpt4": "swe-bench-lite/autocoderover-gpt4/acr-run-1/*/*/",
}


def load(data: Path, runs: int) -> dict[str, list[Trajectory]]:
    """Up to `runs` trajectories per source (unreadable files are reported and skipped)."""
    out: dict[str, list[Trajectory]] = {}
    for source, pattern in SOURCES.items():
        trajs = []
        for path in sorted(glob.glob(str(data / pattern)))[:runs]:
            try:
                trajs.append(read_trajectory(Path(path)))
            except TranscriptError as e:
                print(f"skip {e}")
        out[source] = trajs
    return out


def bench(name: str, f: Featuriser, corpus: dict[str, list[Trajectory]], repeat: int) -> None:
    """Print steps/s and window statistics of `f` on every source."""
    for source, trajs in corpus.items():
        steps = sum(len(t.steps) for t in trajs)
        if not steps:
            print(f"{name:10s} {source:28s} no runs read")
            continue
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            windows = [f.windows(t) for t in trajs]
            best = min(best, time.perf_counter() - t0)
        flat = [w for ws in windows for w in ws]
        per_step = [len(w.ids) / len(w.steps) for w in flat]
        print(
            f"{name:10s} {source:28s} runs={len(trajs):3d} steps={steps:5d} "
            f"steps/s={steps / best:9.0f} windows/run={len(flat) / len(trajs):5.1f} "
            f"restarted={sum(w.restarted for w in flat) / len(flat):4.0%} "
            f"mean_window_tokens={statistics.mean(len(w.ids) for w in flat):6.0f} "
            f"tokens/scored_step={statistics.mean(per_step):5.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--runs", type=int, default=40, help="runs per source")
    parser.add_argument("--tokenizer", type=Path, help="a tokenizer.json to bench as well")
    parser.add_argument(
        "-o",
        dest="overrides",
        action="append",
        help="featuriser option, e.g. -o window_tokens=2048",
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    t0 = time.perf_counter()
    corpus = load(args.data, args.runs)
    print(f"read {sum(map(len, corpus.values()))} runs in {time.perf_counter() - t0:.1f}s")
    cfg = load_config(FeaturiserConfig, None, args.overrides)
    print(cfg)
    bench("fallback", Featuriser(cfg), corpus, args.repeat)
    if args.tokenizer:
        bench("tokenizer", Featuriser.from_tokenizer_file(args.tokenizer, cfg), corpus, args.repeat)


if __name__ == "__main__":
    main()
