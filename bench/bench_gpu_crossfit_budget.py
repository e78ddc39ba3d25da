"""Does bench/gpu_crossfit.sh fit 10 minutes on one GPU? Counts its work, then divides.

Renders every labelled run with configs/gpu-crossfit.yaml's featuriser (no model) and counts the
tokens each pass of the script puts through the 30-layer backbone:
  frozen pass: every run once;
  per pair (K instance folds): a training pass over the tuning runs' windows (epochs x, a
  forward + backward ~ 3 forwards), then the calibration and test runs encoded again (1 forward);
and prints the total in forward-equivalent tokens and its time at a throughput you give
(--tokens-per-s: measure it on the GPU with bench/bench_features.py, or use the FLOP estimate
printed here). Nothing here runs on a GPU.

    python bench/bench_gpu_crossfit_budget.py --data ../shared/data [--tokens-per-s 300000]
"""

from __future__ import annotations

import argparse
import time

from monitor.featurise import Featuriser
from training.config import load_pipeline_config
from training.data.runs import labelled_runs, load_runs
from training.model.backbone import resolve_base

# SmolLM2-135M: 30 layers, hidden 576, 135M parameters (config.json of the converted GGUF).
PARAMS, LAYERS, HIDDEN = 135e6, 30, 576


def flops_per_token(window: int) -> float:
    """Forward FLOPs per token: 2 x parameters + attention over a window half full on average."""
    return 2 * PARAMS + 4 * LAYERS * HIDDEN * window / 2


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", nargs="+", required=True)
    p.add_argument("--config", default="configs/gpu-crossfit.yaml")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--tokens-per-s", type=float, default=None, help="forward tokens/s on the GPU")
    p.add_argument("--mfu", type=float, default=0.10, help="assumed utilisation for the estimate")
    p.add_argument("--peak-tflops", type=float, default=989.0, help="bf16 dense peak (H200: 989)")
    a = p.parse_args()
    cfg = load_pipeline_config(a.config)
    t0 = time.perf_counter()
    runs = labelled_runs(load_runs(a.data)).runs
    feat = Featuriser.from_tokenizer_file(resolve_base(cfg.model.base), cfg.featurise)
    tokens = windows = 0
    for r in runs:
        for w in feat.windows(r):
            tokens += len(w.ids)
            windows += 1
    k = a.folds
    tune_frac = (k - 1) / k * (1 - 1 / max(k - 1, 2))  # training folds minus the calibration fold
    reencode_frac = 1 / k + (k - 1) / k / max(k - 1, 2)  # test fold + calibration fold
    per_pair = tokens * (tune_frac * cfg.train.epochs * 3 + reencode_frac)
    total = tokens + k * per_pair
    print(f"{len(runs)} runs, {windows} windows, {tokens:,} tokens ({tokens / len(runs):.0f} per run; "
          f"counted in {time.perf_counter() - t0:.0f} s)")  # fmt: skip
    print(f"per pair: tune {tune_frac:.0%} of runs x {cfg.train.epochs:g} epoch(s) x 3 "
          f"+ re-encode {reencode_frac:.0%}: {per_pair / 1e6:.1f}M forward-equivalent tokens")  # fmt: skip
    print(f"total ({k} pairs + the frozen pass): {total / 1e6:.1f}M forward-equivalent tokens")
    f = flops_per_token(cfg.featurise.window_tokens)
    est = a.peak_tflops * 1e12 * a.mfu / f
    print(f"FLOP estimate: {f / 1e9:.2f} GFLOP/token; at {a.mfu:.0%} of {a.peak_tflops:g} TFLOP/s "
          f"= {est:,.0f} tokens/s -> {total / est:.0f} s of GPU passes")  # fmt: skip
    if a.tokens_per_s:
        print(f"at the given {a.tokens_per_s:,.0f} tokens/s: {total / a.tokens_per_s:.0f} s")


if __name__ == "__main__":
    main()
