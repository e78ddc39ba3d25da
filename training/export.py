"""ONNX export of a PrefixClassifier into a serving bundle (see the shared MODEL_CONTRACT).

Two graphs, both with dynamic batch and sequence axes:

- `model.onnx`: (input_ids, attention_mask, positions, signals) -> logits (B, P): a whole
  rendering, logits at the given step boundaries (all prefixes of a window in one call).
- `model_kv.onnx`: (input_ids, attention_mask, signals, [past_hidden_sum, past_count,]
  past_key_i, past_value_i ...) -> (logits (B,), [present_hidden_sum, present_count,]
  present_key_i, present_value_i ...): the new tokens of a live session on top of the cached
  keys/values; the logit is the one at the LAST new token (the step boundary).
  attention_mask covers past + new tokens; positions continue from the past length, so the
  graph expects no left padding (a session is one run, batch 1). With pooling "last+mean" the
  running sum (B, H) and count (B, 1) of the window's hidden states travel with the KV cache
  (zeros and 0 when the cache starts empty), so the mean continues across calls.

After export both graphs are compared with torch on a batch size and length other than the
export's, and the largest absolute logit difference is printed (must be <= `atol`).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field

from monitor.config import StrictModel
from monitor.errors import BundleError

log = logging.getLogger(__name__)

FULL_GRAPH = "model.onnx"
KV_GRAPH = "model_kv.onnx"
INT8_SUFFIX = ".int8"


class ExportConfig(StrictModel):
    """Options of `failfast export`."""

    opset: int = Field(default=17, ge=14, description="ONNX opset of the exported graphs.")
    int8: bool = Field(default=False, description="Also write int8 dynamically quantised graphs.")
    atol: float = Field(
        default=1e-4, gt=0, description="Largest allowed |onnxruntime - torch| logit."
    )
    check_batch: int = Field(default=3, ge=1, description="Batch size of the post-export check.")
    check_length: int = Field(
        default=53, ge=8, description="Sequence length of the post-export check."
    )
    target: float = Field(
        default=0.05, gt=0, lt=1, description="Run-level FPR target served by default."
    )


@dataclass
class ExportReport:
    """What an export measured.

    Attributes:
        full_max_abs_diff: largest |ORT - torch| logit of model.onnx on the check inputs.
        kv_max_abs_diff: same for model_kv.onnx fed in two chunks (past + new tokens).
        int8_max_abs_diff: largest |int8 - fp32| logit (None without --int8).
        files: graph files written (relative to the bundle).
        notes: lines for the user (e.g. the int8 AUROC change).
    """

    full_max_abs_diff: float = 0.0
    kv_max_abs_diff: float = 0.0
    int8_max_abs_diff: float | None = None
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class FullGraph(torch.nn.Module):
    """model.onnx: the classifier's own forward, with named inputs."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        positions: torch.Tensor,
        signals: torch.Tensor,
    ) -> torch.Tensor:
        return self.model(input_ids, attention_mask, positions, signals)  # (B, P)


class KVGraph(torch.nn.Module):
    """model_kv.onnx: new tokens on top of a KV cache -> last-position logit + present KV."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.n_layers = int(model.backbone.config.num_hidden_layers)

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, N) new tokens
        attention_mask: torch.Tensor,  # (B, T) past + new
        signals: torch.Tensor,  # (B, S) raw signals after the new step
        *past: torch.Tensor,  # [sum (B, H), count (B, 1),] 2 * n_layers (B, kv_heads, T - N, hd)
    ) -> tuple[torch.Tensor, ...]:
        from transformers import DynamicCache

        pooled: tuple[torch.Tensor, ...] = ()
        if self.model.uses_mean:
            past_sum, past_count, past = past[0], past[1], past[2:]
        cache = DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(self.n_layers)])
        total, new = attention_mask.shape[1], input_ids.shape[1]
        position_ids = torch.arange(total - new, total, dtype=torch.long).unsqueeze(0)
        out = self.model.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            cache=cache,
            use_cache=True,
        )
        hidden = out.last_hidden_state[:, -1:]  # (B, 1, H)
        if self.model.uses_mean:
            m = attention_mask[:, -new:].to(hidden.dtype).unsqueeze(-1)  # (B, N, 1)
            total = past_sum + (out.last_hidden_state * m).sum(dim=1)  # (B, H)
            count = past_count + m.sum(dim=1)  # (B, 1)
            mean = total / count.clamp_min(1.0)
            hidden = torch.cat([hidden, mean.unsqueeze(1)], dim=-1)  # (B, 1, 2H)
            pooled = (total, count)
        logits = self.model.head_logits(hidden, signals.unsqueeze(1)).squeeze(1)  # (B,)
        present: list[torch.Tensor] = []
        for layer in out.cache.layers[: self.n_layers]:
            present += [layer.keys, layer.values]
        return (logits, *pooled, *present)


POOL_NAMES = ("past_hidden_sum", "past_count")


def kv_names(n_layers: int, pooled: bool = False) -> tuple[list[str], list[str]]:
    """Names of the past inputs and present outputs of the KV graph: the running hidden sum and
    count first when `pooled`, then the keys and values layer by layer."""
    past = [*(POOL_NAMES if pooled else ())]
    past += [f"past_{kv}_{i}" for i in range(n_layers) for kv in ("key", "value")]
    return past, [p.replace("past_", "present_", 1) for p in past]


def _empty_past(model: Any, batch: int, past_len: int, random: bool) -> list[torch.Tensor]:
    """Past inputs of the KV graph in `kv_names` order (random values, or an empty cache)."""
    n_layers = int(model.backbone.config.num_hidden_layers)
    kv_heads, head_dim = kv_shape(model.backbone.config)
    make = torch.randn if random else torch.zeros
    out: list[torch.Tensor] = []
    if model.uses_mean:
        out += [make(batch, model.hidden), torch.full((batch, 1), float(past_len))]
    out += [make(batch, kv_heads, past_len, head_dim) for _ in range(2 * n_layers)]
    return out


def kv_shape(config: Any) -> tuple[int, int]:
    """(kv_heads, head_dim) of a backbone config."""
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    return kv_heads, head_dim


def _inputs(
    model: torch.nn.Module, batch: int, length: int, n_pos: int, seed: int
) -> tuple[torch.Tensor, ...]:
    """Random ids, a right-padded mask (last row shorter), boundary positions and signals."""
    g = torch.Generator().manual_seed(seed)
    vocab = int(model.backbone.config.vocab_size)
    ids = torch.randint(1, vocab, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    short = max(n_pos + 1, length // 2)
    if batch > 1:
        mask[-1, short:] = 0  # right padding, so the traced graph keeps the padding mask
    ends = torch.linspace(n_pos, short - 1, n_pos).long()
    positions = ends.unsqueeze(0).expand(batch, -1).contiguous()
    signals = torch.rand(batch, n_pos, len(model.signal_names), generator=g) * 5
    return ids, mask, positions, signals


def _ort_session(path: Path) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def _run(sess: Any, outputs: list[str] | None, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    # An input the graph does not use (signals with 0 signal columns) is pruned at export.
    names = {i.name for i in sess.get_inputs()}
    return list(sess.run(outputs, {k: v for k, v in feed.items() if k in names}))


def export_graphs(model: torch.nn.Module, out: Path, cfg: ExportConfig) -> ExportReport:
    """Write model.onnx and model_kv.onnx (fp32) for `model` into `out` and check them.

    Raises:
        BundleError: onnxruntime disagrees with torch by more than `cfg.atol`.
    """
    model = model.eval().float()
    out.mkdir(parents=True, exist_ok=True)
    n_layers = int(model.backbone.config.num_hidden_layers)
    past_names, present_names = kv_names(n_layers, model.uses_mean)
    ids, mask, positions, signals = _inputs(model, 2, 24, 3, seed=0)
    with torch.no_grad(), warnings.catch_warnings():
        # The tracer warns about every Python branch in transformers; the checks below are what
        # tell whether the traced graphs generalise to other shapes.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            FullGraph(model),
            (ids, mask, positions, signals),
            str(out / FULL_GRAPH),
            input_names=["input_ids", "attention_mask", "positions", "signals"],
            output_names=["logits"],
            dynamic_axes={
                "input_ids": {0: "batch", 1: "tokens"},
                "attention_mask": {0: "batch", 1: "tokens"},
                "positions": {0: "batch", 1: "boundaries"},
                "signals": {0: "batch", 1: "boundaries"},
                "logits": {0: "batch", 1: "boundaries"},
            },
            opset_version=cfg.opset,
            dynamo=False,
        )
        new, past_len = 5, 7
        kv_ids = ids[:, :new]
        kv_mask = torch.ones(2, past_len + new, dtype=torch.long)
        kv_mask[-1, 0] = 0  # a masked past slot keeps the mask path in the traced graph
        past = _empty_past(model, 2, past_len, random=True)
        dyn: dict[str, dict[int, str]] = {
            "input_ids": {0: "batch", 1: "new_tokens"},
            "attention_mask": {0: "batch", 1: "total_tokens"},
            "signals": {0: "batch"},
            "logits": {0: "batch"},
        }
        for p_name, q_name in zip(past_names, present_names, strict=True):
            pooled = p_name in POOL_NAMES  # (B, H) / (B, 1): no token axis
            dyn[p_name] = {0: "batch"} if pooled else {0: "batch", 2: "past_tokens"}
            dyn[q_name] = {0: "batch"} if pooled else {0: "batch", 2: "total_tokens"}
        torch.onnx.export(
            KVGraph(model),
            (kv_ids, kv_mask, signals[:, -1], *past),
            str(out / KV_GRAPH),
            input_names=["input_ids", "attention_mask", "signals", *past_names],
            output_names=["logits", *present_names],
            dynamic_axes=dyn,
            opset_version=cfg.opset,
            dynamo=False,
        )
    report = ExportReport(files=[FULL_GRAPH, KV_GRAPH])
    report.full_max_abs_diff = check_full(model, out / FULL_GRAPH, cfg)
    report.kv_max_abs_diff = check_kv(model, out / KV_GRAPH, cfg)
    for name, diff in (
        ("model.onnx", report.full_max_abs_diff),
        ("model_kv.onnx", report.kv_max_abs_diff),
    ):
        log.info("%s: max |onnxruntime - torch| = %.3g (fp32, limit %g)", name, diff, cfg.atol)
        if not diff <= cfg.atol:
            raise BundleError(
                f"{out / name}: onnxruntime differs from torch by {diff:.3g} > {cfg.atol:g}"
            )
    return report


def check_full(model: torch.nn.Module, path: Path, cfg: ExportConfig) -> float:
    """Max |ORT - torch| of the whole-rendering graph at another batch size and length."""
    ids, mask, positions, signals = _inputs(model, cfg.check_batch, cfg.check_length, 4, seed=1)
    with torch.no_grad():
        ref = model(ids, mask, positions, signals).numpy()
    got = _run(
        _ort_session(path),
        ["logits"],
        {
            "input_ids": ids.numpy(),
            "attention_mask": mask.numpy(),
            "positions": positions.numpy(),
            "signals": signals.numpy().astype(np.float32),
        },
    )[0]
    return float(np.abs(got - ref).max())


def check_kv(model: torch.nn.Module, path: Path, cfg: ExportConfig) -> float:
    """Max |ORT - torch| of the KV graph: a run fed in two chunks vs one full forward.

    The first chunk starts from an empty cache (as a session's first step or a re-render does);
    the second continues from the present KV (and running hidden sum/count) the graph returned.
    """
    length = cfg.check_length
    first = length // 2 + 3
    ids, _, _, _ = _inputs(model, 1, length, 1, seed=2)
    g = torch.Generator().manual_seed(3)
    signals = torch.rand(1, 2, len(model.signal_names), generator=g) * 5
    positions = torch.tensor([[first - 1, length - 1]])
    with torch.no_grad():
        ref = model(ids, torch.ones_like(ids), positions, signals).numpy()[0]
    sess = _ort_session(path)
    n_layers = int(model.backbone.config.num_hidden_layers)
    past_names, _ = kv_names(n_layers, model.uses_mean)
    past = [t.numpy() for t in _empty_past(model, 1, 0, random=False)]
    got = []
    for j, (a, b) in enumerate(((0, first), (first, length))):
        feed = {
            "input_ids": ids[:, a:b].numpy(),
            "attention_mask": np.ones((1, b), np.int64),
            "signals": signals[:, j].numpy().astype(np.float32),
            **dict(zip(past_names, past, strict=True)),
        }
        logits, *past = _run(sess, None, feed)
        got.append(float(logits[0]))
    return float(np.abs(np.array(got) - ref).max())


def quantize_int8(out: Path) -> list[str]:
    """Write `model.int8.onnx` and `model_kv.int8.onnx` (dynamic int8 weights) beside the fp32 graphs."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    written = []
    for name in (FULL_GRAPH, KV_GRAPH):
        src = out / name
        dst = out / int8_name(name)
        quantize_dynamic(
            str(src),
            str(dst),
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
            use_external_data_format=(out / f"{name}.data").exists(),
        )
        written.append(dst.name)
        written += [p.name for p in out.glob(f"{dst.name}.data")]
    return written


def int8_name(name: str) -> str:
    """model.onnx -> model.int8.onnx."""
    stem = name[: -len(".onnx")]
    return f"{stem}{INT8_SUFFIX}.onnx"


def int8_diff(model: torch.nn.Module, out: Path, cfg: ExportConfig) -> float:
    """Max |int8 - fp32| logit of the whole-rendering graph on the check inputs."""
    ids, mask, positions, signals = _inputs(model, cfg.check_batch, cfg.check_length, 4, seed=1)
    feed = {
        "input_ids": ids.numpy(),
        "attention_mask": mask.numpy(),
        "positions": positions.numpy(),
        "signals": signals.numpy().astype(np.float32),
    }
    a = _run(_ort_session(out / FULL_GRAPH), ["logits"], feed)[0]
    b = _run(_ort_session(out / int8_name(FULL_GRAPH)), ["logits"], feed)[0]
    return float(np.abs(a - b).max())


def _read_json(path: Path) -> Any:
    import json

    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise BundleError(f"{path}: cannot read: {e}") from e


def _train_outputs(train_dir: Path | None) -> dict[str, Any]:
    """thresholds, metrics, data summary and policy section of a training output dir (if any)."""
    import yaml

    found: dict[str, Any] = {"thresholds": {}, "metrics": {}, "data_summary": {}, "policy": {}}
    if train_dir is None:
        return found
    for key, name in (
        ("thresholds", "thresholds.json"),
        ("metrics", "metrics.json"),
        ("data_summary", "data_summary.json"),
    ):
        if (train_dir / name).is_file():
            found[key] = _read_json(train_dir / name)
        else:
            log.warning("%s: not found; the bundle has no %s", train_dir / name, key)
    if (train_dir / "config.yaml").is_file():
        cfg = yaml.safe_load((train_dir / "config.yaml").read_text()) or {}
        found["policy"] = dict(cfg.get("policy") or {}) if isinstance(cfg, dict) else {}
    return found


def _versions(opset: int) -> dict[str, Any]:
    from importlib import metadata

    import onnx
    import onnxruntime
    import transformers

    try:
        ours = metadata.version("failfast-monitor")
    except metadata.PackageNotFoundError:
        ours = "unknown"
    from serving.bundle import BUNDLE_FORMAT

    return {
        "bundle_format": BUNDLE_FORMAT,
        "failfast_monitor": ours,
        "onnx_opset": opset,
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def write_bundle(
    model_dir: str | Path,
    out: str | Path,
    *,
    cfg: ExportConfig | None = None,
    train_dir: str | Path | None = None,
) -> ExportReport:
    """Export a saved classifier folder (training OUT/model) into a serving bundle.

    Args:
        model_dir: folder written by `training.model.save_classifier`.
        out: bundle folder to write (must be empty, absent, or an earlier bundle).
        cfg: export options.
        train_dir: the training output dir (thresholds.json, metrics.json, data_summary.json,
            config.yaml, baselines/ are taken from it when present).

    Returns:
        The export report (largest ORT-vs-torch differences; int8 difference with --int8).
    """
    import shutil

    from monitor.policy import PolicyConfig
    from serving.bundle import MANIFEST, write_manifest
    from training.model import load_classifier, read_classifier_meta
    from training.thresholds import schedule_of

    cfg = cfg or ExportConfig()
    model_dir, out = Path(model_dir), Path(out)
    tdir = Path(train_dir) if train_dir is not None else None
    if out.exists() and any(out.iterdir()):
        if not (out / MANIFEST).is_file():
            raise BundleError(f"{out}: not empty and not a bundle; refusing to overwrite")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    meta = read_classifier_meta(model_dir)
    model = load_classifier(model_dir)
    report = export_graphs(model, out, cfg)
    if cfg.int8:
        report.files += quantize_int8(out)
        report.int8_max_abs_diff = int8_diff(model, out, cfg)
        log.info("model.int8.onnx: max |int8 - fp32| = %.3g", report.int8_max_abs_diff)
    shutil.copyfile(model_dir / "tokenizer.json", out / "tokenizer.json")
    found = _train_outputs(tdir)
    if tdir is not None and (tdir / "baselines").is_dir():
        shutil.copytree(tdir / "baselines", out / "baselines")
    # The schedule the thresholds were picked under wins over the policy section (a thresholds.json
    # written before persistence existed means persist=1, not today's default).
    schedule = schedule_of(found["thresholds"]) if found["thresholds"] else {}
    policy = PolicyConfig.model_validate({**found["policy"], **schedule}).model_dump()
    kv_heads, head_dim = kv_shape(model.backbone.config)
    manifest = {
        "featuriser": meta.get("featuriser") or {},
        "signal_names": list(model.signal_names),
        "classifier": {
            **{k: meta.get(k) for k in ("base", "n_layers", "hidden", "head_kind")},
            "pooling": model.pooling,
        },
        "kv": {
            "n_layers": int(model.backbone.config.num_hidden_layers),
            "kv_heads": kv_heads,
            "head_dim": head_dim,
            # width of the running hidden sum carried by model_kv.onnx (0: pooling "last")
            "pooled_hidden": model.hidden if model.uses_mean else 0,
        },
        "label": {
            "positive": "the run ends unresolved (SWE-bench harness verdict)",
            "score": "P(run ends unresolved | steps 1..k), sigmoid of the graph's logit",
        },
        "target": cfg.target,
        "thresholds": found["thresholds"],
        "policy": policy,
        "metrics": found["metrics"],
        "data_summary": found["data_summary"],
        "export": {
            "config": cfg.model_dump(),
            "full_max_abs_diff": report.full_max_abs_diff,
            "kv_max_abs_diff": report.kv_max_abs_diff,
            "int8_max_abs_diff": report.int8_max_abs_diff,
        },
        "versions": _versions(cfg.opset),
    }
    (out / "README.md").write_text(model_card(manifest))
    write_manifest(out, manifest)
    log.info("bundle written to %s", out)
    return report


def _fmt_metrics(metrics: dict[str, Any]) -> list[str]:
    lines = []
    for key, val in sorted(metrics.items()):
        if isinstance(val, dict):
            inner = ", ".join(
                f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                for k, v in val.items()
                if not isinstance(v, dict)
            )
            lines.append(f"- {key}: {inner}" if inner else f"- {key}: (nested, see monitor.json)")
        else:
            lines.append(f"- {key}: {val}")
    return lines


def model_card(manifest: dict[str, Any]) -> str:
    """The bundle's README.md: data, metrics, limits, intended use."""
    cls = manifest["classifier"]
    th = manifest.get("thresholds") or {}
    data = manifest.get("data_summary") or {}
    lines = [
        "# failfast-monitor bundle",
        "",
        "Predicts P(run ends unresolved | prefix) for a coding-agent run and tells the harness to",
        "continue, warn, or stop (with a warm-restart packet).",
        "",
        "## Model",
        f"- base: {cls.get('base')}, decoder layers kept: {cls.get('n_layers')}, head: {cls.get('head_kind')}",
        f"- boundary features: {cls.get('pooling', 'last')} (last = hidden state at the step "
        "boundary; last+mean = also the running mean of the window's hidden states)",
        f"- signals appended to the hidden state: {len(manifest['signal_names'])}",
        f"- graphs: model.onnx (whole rendering), model_kv.onnx (live sessions, KV cache); "
        f"ORT vs torch max |diff| {manifest['export']['full_max_abs_diff']:.2g} / "
        f"{manifest['export']['kv_max_abs_diff']:.2g}",
        "",
        "## Data",
        *(_fmt_metrics(data) if data else ["- no data summary was available at export time"]),
        "",
        "## Validation metrics (per agent first; a pooled figure mostly measures which agent wrote the run)",
        *(_fmt_metrics(manifest.get("metrics") or {}) or ["- none recorded"]),
        "",
        "## Thresholds",
        f"- mode: {th.get('mode', 'none')}, confidence {th.get('confidence', '-')}, schedule {th.get('schedule', '-')}",
        f"- served target (run-level FPR): {manifest['target']}; thresholds per "
        f"{th.get('group_by', 'agent')} ({', '.join(sorted(th.get('per_agent') or {})) or 'none'}:",
        "  pass that name as the session's `agent`) with a pooled fallback (warning) for one never",
        "  calibrated; a refused target means no stop by score.",
        "",
        "## Intended use and limits",
        "- Early stopping and warm restart of SWE-bench-style agent runs, checked at step boundaries.",
        "- Trained on a few agents (mostly GPT-4-era and one mini-swe-agent/Gemini set); scores for",
        "  other agents or tasks are uncalibrated until thresholds are fitted on their own runs.",
        "- A false positive kills a run that would have succeeded: the FPR target is per run.",
        "- Labels are SWE-bench harness verdicts; unknown labels were excluded, never counted as failures.",
        "",
        "Versions and sha256 of every file: monitor.json.",
        "",
    ]
    return "\n".join(lines)


def int8_auroc_change(
    bundle: str | Path, runs: list[Any], *, max_runs: int = 80
) -> dict[str, dict[str, float]]:
    """Validation AUROC over all prefixes (label = run unresolved), fp32 vs int8 graphs.

    Args:
        bundle: a bundle exported with int8 graphs.
        runs: labelled validation runs (never training runs).
        max_runs: at most this many runs (evenly spaced over `runs`, to bound the time).

    Returns:
        {group: {"fp32": auroc, "int8": auroc, "delta": int8 - fp32, "runs": n}} per agent and
        "pooled"; a group with one class only is left out.
    """
    from sklearn.metrics import roc_auc_score

    from serving.scorer import Scorer

    runs = [r for r in runs if r.resolved is not None and r.steps]
    if len(runs) > max_runs:
        runs = [runs[i] for i in np.linspace(0, len(runs) - 1, max_runs).astype(int)]
    fp32, int8 = Scorer.load(bundle), Scorer.load(bundle, int8=True, verify=False)
    rows: dict[str, list[tuple[int, list[float], list[float]]]] = {}
    for r in runs:
        item = (int(not r.resolved), fp32.score_run(r), int8.score_run(r))
        rows.setdefault(r.agent, []).append(item)
        rows.setdefault("pooled", []).append(item)
    out: dict[str, dict[str, float]] = {}
    for group, items in sorted(rows.items()):
        y = np.concatenate([[lab] * len(a) for lab, a, _ in items])
        if len(set(y.tolist())) < 2:
            continue
        a = roc_auc_score(y, np.concatenate([a for _, a, _ in items]))
        b = roc_auc_score(y, np.concatenate([b for _, _, b in items]))
        out[group] = {"fp32": float(a), "int8": float(b), "delta": float(b - a), "runs": len(items)}
    return out
