"""Feature-pass throughput on this CPU: tokens/s of SmolLM2-135M truncated to 4 / 6 / 12 / 30 layers.

Encodes the featuriser windows of a fixed sample of real runs (../shared/data, or --data) with
the quick config's rendering, after one warm-up batch, and reports tokens/s and the process's peak
resident memory. Usage:

    python bench/bench_features.py [--layers 4 6 12 30] [--runs 40] [--dtype float32 bfloat16]
"""

from __future__ import annotations

import argparse
import random
import resource
import time
from pathlib import Path

import torch

from monitor.featurise import Featuriser
from monitor.reading import read_runs
from training.config import load_pipeline_config
from training.model.backbone import resolve_base
from training.model.classifier import build_classifier
from training.model.features import encode_windows

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--config", default=str(ROOT / "configs" / "quick.yaml"))
    p.add_argument("--layers", type=int, nargs="+", default=[4, 6, 12, 30])
    p.add_argument("--dtype", nargs="+", default=["float32"])
    p.add_argument("--runs", type=int, default=40, help="runs sampled (seeded) from --data")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_pipeline_config(args.config)
    runs = [r for r in read_runs([args.data]) if r.steps]
    runs = random.Random(0).sample(runs, min(args.runs, len(runs)))
    feat = Featuriser.from_tokenizer_file(resolve_base(cfg.model.base), cfg.featurise)
    windows = [w for r in runs for w in feat.windows(r)]
    tokens = sum(len(w.ids) for w in windows)
    print(
        f"{len(runs)} runs, {len(windows)} windows, {tokens} tokens "
        f"(window_tokens={cfg.featurise.window_tokens}), {args.threads} threads"
    )
    print(f"{'layers':>6} {'dtype':>9} {'tokens/s':>9} {'seconds':>8} {'peak RSS MB':>12}")
    for dtype in args.dtype:
        for n in args.layers:
            model = build_classifier(cfg.model.base, n, [], dtype).eval()
            encode_windows(model, windows[:4], batch_tokens=cfg.train.batch_tokens)  # warm-up
            t = time.perf_counter()
            encode_windows(model, windows, batch_tokens=cfg.train.batch_tokens)
            dt = time.perf_counter() - t
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"{n:>6} {dtype:>9} {tokens / dt:>9.0f} {dt:>8.1f} {peak:>12.0f}")
            del model


if __name__ == "__main__":
    main()
