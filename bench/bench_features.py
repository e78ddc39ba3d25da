"""Feature-pass throughput on this CPU: tokens/s of SmolLM2-135M truncated to 4 / 6 / 12 / 30 layers,
per engine (torch fp32 / bf16, the fused onnxruntime graph in fp32 or int8: training.export.features_graph).

Encodes the featuriser windows of a fixed sample of real runs (../shared/data, or --data) with
the quick config's rendering, through training.model.features.encode_windows (what the feature
pass runs), after one warm-up call. Engines are timed round-robin `--repeats` times, so ratios
between them come from the same stretch of machine load. Prints per engine and layer count the
best wall tokens/s, tokens per CPU-second of this process (less sensitive to other jobs on a
shared machine), the ratio to the first engine, the features' relative error against the first
engine, and peak resident memory. Usage:

    python bench/bench_features.py [--layers 4] [--runs 24] \
        [--engines torch:float32 torch:bfloat16 ort-fp32 ort-int8 ort-int8:split] [--repeats 2]
"""

from __future__ import annotations

import argparse
import random
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from monitor.featurise import Featuriser
from monitor.reading import read_runs
from training.config import load_pipeline_config
from training.model.backbone import resolve_base
from training.model.classifier import build_classifier
from training.model.features import encode_windows

ROOT = Path(__file__).resolve().parents[1]


def _engine(name: str, base: str, n: int, pooling: str, threads: int, work: Path) -> Any:
    """What encode_windows runs for one engine name ("torch:<dtype>", "ort-fp32", "ort-int8";
    "ort-...:split" runs one window at a time on all threads instead of a window per thread,
    "ort-...:c<N>" attends in N query chunks (":c1" in one piece, the graph as exported); modes
    combine with "+", e.g. "ort-int8:split+c1")."""
    if name.startswith("torch"):
        dtype = name.split(":", 1)[1] if ":" in name else "float32"
        return build_classifier(base, n, [], dtype, pooling=pooling).eval()
    from training.export.features_graph import OrtFeatures

    model = build_classifier(base, n, [], "float32", pooling=pooling).eval()
    engine, _, mode = name.partition(":")
    modes = set(mode.split("+")) - {""}
    chunks = [int(m[1:]) for m in modes if m.startswith("c")]
    extra = {"chunks": chunks[0]} if chunks else {}
    return OrtFeatures(
        model, work / f"{engine}-L{n}", engine, threads, split_windows="split" in modes, **extra
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--config", default=str(ROOT / "configs" / "quick.yaml"))
    p.add_argument("--layers", type=int, nargs="+", default=[4])
    p.add_argument("--engines", nargs="+", default=["torch:float32", "ort-fp32", "ort-int8"])
    p.add_argument("--runs", type=int, default=24, help="runs sampled (seeded) from --data")
    p.add_argument("--repeats", type=int, default=2, help="round-robin passes per engine")
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
        f"(window_tokens={cfg.featurise.window_tokens}, pooling={cfg.model.pooling}), "
        f"{args.threads} threads, {args.repeats} round-robin repeats"
    )
    bt = cfg.train.batch_tokens
    with tempfile.TemporaryDirectory() as work:
        for n in args.layers:
            engines = {
                e: _engine(e, cfg.model.base, n, cfg.model.pooling, args.threads, Path(work))
                for e in args.engines
            }
            for e in engines.values():
                encode_windows(e, windows[:2], batch_tokens=bt)  # warm-up
            wall: dict[str, float] = {e: float("inf") for e in engines}
            cpu: dict[str, float] = {e: float("inf") for e in engines}
            feats: dict[str, np.ndarray] = {}
            for _ in range(args.repeats):
                for name, e in engines.items():
                    t, c = time.perf_counter(), time.process_time()
                    out = encode_windows(e, windows, batch_tokens=bt)
                    wall[name] = min(wall[name], time.perf_counter() - t)
                    cpu[name] = min(cpu[name], time.process_time() - c)
                    feats[name] = np.concatenate(out)
            first = args.engines[0]
            print(
                f"{'layers':>6} {'engine':>14} {'tokens/s':>9} {'x':>5} {'tok/CPU-s':>9} "
                f"{'x':>5} {'rel.err':>8} {'peak RSS MB':>12}"
            )
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            ref = feats[first]
            for name in engines:
                err = float(np.linalg.norm(feats[name] - ref) / np.linalg.norm(ref))
                print(
                    f"{n:>6} {name:>14} {tokens / wall[name]:>9.0f} "
                    f"{wall[first] / wall[name]:>5.2f} {tokens / cpu[name]:>9.0f} "
                    f"{cpu[first] / cpu[name]:>5.2f} {err:>8.2g} {peak:>12.0f}"
                )
            del engines


if __name__ == "__main__":
    main()
