"""Ablations on the saved test split: what each part of the monitor buys.

Variants are named SCOPE:WHAT.
- SCOPE `full`: the config's training subsample, the whole validation and test splits, probe
  (C, hidden scale) picked on validation, thresholds picked on validation; AUROC and the token
  ledger at 5 % and 10 % target FPR. signals_only / lm_only / lm_signals share the config's
  (cached) features; windowN and layersN run their own feature pass over every split (~2M
  tokens: ~7-10 min at 4 layers on 2 cores, cached afterwards); lora fine-tunes on the training
  subsample and re-encodes validation and test with the tuned backbone (needs full:lm_signals
  first: its probe pick is the warm start).
- SCOPE `subset`: per agent at most `subset_train` runs of the training subsample and
  `subset_test` of the test split, stratified by label (sizes stated in the result; a cap above
  the split's size takes the whole test split); the probe's (C, hidden scale) is fixed to the pair the
  `full:lm_signals` variant picked (no validation pass); AUROC only (the subset's validation is
  not encoded, so no thresholds). Every subset variant uses the same runs, so rows compare.
- WHAT: `signals_only` (loop signals, no LM features), `lm_only` (LM features, no signals),
  `lm_signals` (both: the monitor), `windowN` (featuriser window of N tokens), `layersN`
  (backbone cut to N layers), `lora` (LoRA on the top layers, head warm-started from the probe,
  the config's train.* fine-tuning settings).
"""

from __future__ import annotations

import logging
import math
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from training.config import PipelineConfig
from training.experiments import (
    AUROC_KEYS,
    SPLITS,
    TARGETS,
    Encoded,
    Prepared,
    build_model,
    encode,
    fit_head,
    ledger,
    num,
    pct,
    pick,
    records,
    score,
)
from training.records import save_records

log = logging.getLogger(__name__)
VARIANTS = (
    "full:signals_only",
    "full:lm_only",
    "full:lm_signals",
    "subset:signals_only",
    "subset:lm_only",
    "subset:lm_signals",
    "subset:layers6",
    "subset:window2048",
    "subset:window512",
    "subset:lora",
    "subset:layers8",
)
_INPUTS = {"signals_only": (False, True), "lm_only": (True, False), "lm_signals": (True, True)}


def variant_config(cfg: PipelineConfig, what: str) -> PipelineConfig:
    """The pipeline config of a `windowN` / `layersN` variant (others: `cfg` itself)."""
    if m := re.fullmatch(r"window(\d+)", what):
        feat = cfg.featurise.model_copy(update={"window_tokens": int(m.group(1))})
        return cfg.model_copy(update={"featurise": feat})
    if m := re.fullmatch(r"layers(\d+)", what):
        return cfg.model_copy(
            update={"model": cfg.model.model_copy(update={"n_layers": int(m.group(1))})}
        )
    if what in _INPUTS or what == "lora":
        return cfg
    raise ValueError(
        f"unknown ablation {what!r} (signals_only, lm_only, lm_signals, windowN, layersN, lora)"
    )


def _auroc(recs: list[Any]) -> dict[str, Any]:
    from training.prefix_metrics import auroc_report

    rep = auroc_report(recs, scorers=["monitor"])
    return {
        "mean_per_agent": rep["mean_per_agent"]["monitor"],
        "per_agent": {a: e["monitor"] for a, e in rep["per_agent"].items()},
        "pooled": rep["pooled"]["monitor"],
    }


def _lora_model(
    cfg: PipelineConfig, train_runs: list[Any], train_enc: Encoded, pair: tuple[float, float]
) -> tuple[Any, dict[str, Any]]:
    """LoRA on `train_runs`: probe warm start on cached features, fine-tune, merge."""
    from training.data import probe_examples, window_examples
    from training.heads import tune_backbone

    tc = cfg.train
    model = build_model(cfg)
    fit_head(cfg, model, train_runs, train_enc, grid=[pair])
    ex = probe_examples(cfg, train_runs)
    ex_w = window_examples(train_enc.featuriser, train_runs, train_enc.signals, ex)
    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        losses = tune_backbone(model, ex_w, tc, head="lora", out_dir=tmp)
    train_s = time.perf_counter() - t
    info = {
        "windows": len(ex_w),
        "losses": losses,
        "finetune_seconds": round(train_s, 1),
        "settings": {
            k: getattr(tc, k)
            for k in ("epochs", "lr", "batch_size", "lora_r", "lora_alpha", "lora_top_layers")
        },
    }
    return model.float().eval(), info


def _lora(
    cfg: PipelineConfig,
    runs: dict[str, list[Any]],
    ref: dict[str, Encoded],
    pair: tuple[float, float],
) -> tuple[list[Any], dict[str, Any]]:
    """Subset LoRA: fine-tune on the subset's training runs, re-encode its test runs."""
    model, info = _lora_model(cfg, runs["train"], ref["train"], pair)
    test = encode(cfg, runs["test"], model=model, cached=False)
    info["test_pass_seconds"] = round(test.seconds, 1)
    return records(runs["test"], score(model, test), test), info


def _full_lora(
    cfg: PipelineConfig, prep: Prepared, enc: dict[str, Encoded], pair: tuple[float, float]
) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """Full LoRA: fine-tune on the training subsample, re-encode validation and test with the
    tuned backbone (no cache), thresholds on validation, ledger on test. The head keeps the
    probe's (C, hidden scale) from full:lm_signals as its warm start."""
    sp = prep.split
    model, info = _lora_model(cfg, sp["train"], enc["train"], pair)
    recs = {}
    for n in ("val", "test"):
        e = encode(cfg, sp[n], model=model, cached=False)
        info[f"{n}_pass_seconds"] = round(e.seconds, 1)
        recs[n] = records(sp[n], score(model, e), e)
    th = pick(cfg, recs["val"])
    led = {f"{tg:g}": ledger(recs["test"], th, target=tg) for tg in TARGETS}
    return recs["test"], info, led


def per_agent_subset(runs: Sequence[Any], cap: int, *, seed: int) -> list[Any]:
    """At most `cap` runs of each agent, stratified by label (seeded), in the input order."""
    from training.data import stratified_subsample

    keep = {
        id(r)
        for a in sorted({r.agent for r in runs})
        for r in stratified_subsample([r for r in runs if r.agent == a], cap, seed=seed)
    }
    return [r for r in runs if id(r) in keep]


def _pass_info(enc: dict[str, Encoded]) -> dict[str, Any]:
    return {
        "tokens_encoded_now": sum(e.tokens_encoded for e in enc.values()),
        "seconds": round(sum(e.seconds for e in enc.values()), 1),
        "encoded_tokens_total": sum(sum(e.encoded) for e in enc.values()),
    }


def _full(
    cfg: PipelineConfig,
    prep: Prepared,
    model: Any,
    enc: dict[str, Encoded],
    use_h: bool,
    use_s: bool,
) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """Probe picked on validation, thresholds on validation, ledger on test."""
    sp = prep.split
    sel = fit_head(cfg, model, sp["train"], enc["train"], use_hidden=use_h, use_signals=use_s,
                   val_runs=sp["val"], val=enc["val"])  # fmt: skip
    recs = {
        n: records(sp[n], score(model, enc[n], use_hidden=use_h, use_signals=use_s), enc[n])
        for n in ("val", "test")
    }
    th = pick(cfg, recs["val"])
    return recs["test"], sel, {f"{tg:g}": ledger(recs["test"], th, target=tg) for tg in TARGETS}


def run_ablations(
    cfg: PipelineConfig,
    prep: Prepared,
    *,
    variants: Sequence[str] | None = None,
    subset_train: int = 20,
    subset_test: int = 25,
    on_variant: Callable[[dict[str, Any]], None] | None = None,
    records_dir: Path | None = None,
    probe_grid: bool = False,
) -> dict[str, Any]:
    """Run the named variants (default VARIANTS, in that order); returns the JSON of the report.

    `on_variant(result so far)` is called after each variant (the CLI writes partial results, so
    an interrupted run keeps the variants already done). `records_dir`: where each variant's
    test records go (SCOPE_WHAT.parquet), for analyses after the fact. `probe_grid`: subset
    variants also fit every (C, hidden scale) of the config's probe grid and record each pair's
    test AUROC under "grid" (a hindsight sensitivity check of the fixed pair, never a selection).
    """
    names = list(variants or VARIANTS)
    for v in names:
        scope, _, what = v.partition(":")
        if scope not in ("full", "subset"):
            raise ValueError(f"ablation {v!r}: scope must be full: or subset:")
        variant_config(cfg, what)
        if scope == "full" and what.startswith("lora") and enc_pair_missing(names, v):
            raise ValueError(f"ablation {v!r}: run full:lm_signals before full:lora")
    seed = cfg.data.subsample_seed
    sub = {
        "train": per_agent_subset(prep.split["train"], subset_train, seed=seed),
        "test": per_agent_subset(prep.split["test"], subset_test, seed=seed),
    }
    out: dict[str, Any] = {
        "full": {n: len(prep.split[n]) for n in ("train", "val", "test")},
        "subset": {n: len(rs) for n, rs in sub.items()},
        "subset_rule": f"per agent at most {subset_train} runs of the config's training subsample "
        f"and {subset_test} of the test split, stratified by label (seed {seed}); probe "
        "(C, hidden scale) fixed to full:lm_signals' pick",
        "test_counts": {
            "full": test_counts(prep.split["test"]),
            "subset": test_counts(sub["test"]),
        },
        "variants": {},
    }
    tests: dict[str, list[Any]] = {}
    model = None
    enc_full: dict[str, Encoded] = {}
    enc_sub: dict[str, Encoded] = {}
    pair = (cfg.train.probe_C[0], cfg.train.probe_hidden_scale[0])
    pair_from = "config grid (first pair): full:lm_signals was not run first"
    for v in names:
        scope, _, what = v.partition(":")
        t = time.perf_counter()
        entry: dict[str, Any] = {"scope": scope}
        if scope == "full":
            if what in _INPUTS or what == "lora":
                if not enc_full:
                    model = model or build_model(cfg)
                    enc_full = {n: encode(cfg, prep.split[n], model=model) for n in SPLITS}
            if what in _INPUTS:
                test, sel, led = _full(cfg, prep, model, enc_full, *_INPUTS[what])
            elif what == "lora":
                test, entry["lora"], led = _full_lora(cfg, prep, enc_full, pair)
                sel = {"C": pair[0], "hidden_scale": pair[1], "from": pair_from}
            else:  # layersN / windowN: its own (cached) features
                vcfg = variant_config(cfg, what)
                vmodel = build_model(vcfg)
                enc = {n: encode(vcfg, prep.split[n], model=vmodel) for n in SPLITS}
                entry["feature_pass"] = _pass_info(enc)
                test, sel, led = _full(vcfg, prep, vmodel, enc, True, True)
            if what == "lm_signals":
                pair, pair_from = (sel["C"], sel["hidden_scale"]), "full:lm_signals"
            entry.update(
                train_runs=len(prep.split["train"]), test_runs=len(test), selection=sel, ledger=led
            )
        else:
            if not enc_sub:
                model = model or build_model(cfg)
                enc_sub = {n: encode(cfg, rs, model=model) for n, rs in sub.items()}
            entry.update(
                train_runs=len(sub["train"]),
                test_runs=len(sub["test"]),
                probe={"C": pair[0], "hidden_scale": pair[1], "from": pair_from},
            )
            if what in _INPUTS:
                use_h, use_s = _INPUTS[what]
                if probe_grid:
                    entry["grid"] = _grid(cfg, model, sub, enc_sub, use_h, use_s)
                fit_head(
                    cfg,
                    model,
                    sub["train"],
                    enc_sub["train"],
                    use_hidden=use_h,
                    use_signals=use_s,
                    grid=[pair],
                )
                test = records(
                    sub["test"],
                    score(model, enc_sub["test"], use_hidden=use_h, use_signals=use_s),
                    enc_sub["test"],
                )
            elif what == "lora":
                test, entry["lora"] = _lora(cfg, sub, enc_sub, pair)
            else:
                vcfg = variant_config(cfg, what)
                vmodel = build_model(vcfg)
                enc = {n: encode(vcfg, rs, model=vmodel) for n, rs in sub.items()}
                entry["feature_pass"] = _pass_info(enc)
                if probe_grid:
                    entry["grid"] = _grid(vcfg, vmodel, sub, enc, True, True)
                fit_head(vcfg, vmodel, sub["train"], enc["train"], grid=[pair])
                test = records(sub["test"], score(vmodel, enc["test"]), enc["test"])
        entry["auroc"] = _auroc(test)
        entry["seconds"] = round(time.perf_counter() - t, 1)
        out["variants"][v] = entry
        tests[v] = test
        if records_dir is not None:
            save_records(records_dir / f"{v.replace(':', '_')}.parquet", test)
        _paired(out, tests)
        if on_variant is not None:
            on_variant(out)
        log.info(
            "ablation %s: mean per-agent AUROC %s (%.1f s)",
            v,
            entry["auroc"]["mean_per_agent"],
            entry["seconds"],
        )
    return out


def _grid(
    cfg: PipelineConfig,
    model: Any,
    runs: dict[str, list[Any]],
    enc: dict[str, Encoded],
    use_h: bool,
    use_s: bool,
) -> dict[str, float | None]:
    """Mean per-agent overall test AUROC for every (C, hidden scale) of the config's grid."""
    out = {}
    for c in cfg.train.probe_C:
        for scale in cfg.train.probe_hidden_scale:
            fit_head(cfg, model, runs["train"], enc["train"], use_hidden=use_h, use_signals=use_s,
                     grid=[(c, scale)])  # fmt: skip
            sc = score(model, enc["test"], use_hidden=use_h, use_signals=use_s)
            auc = _auroc(records(runs["test"], sc, enc["test"]))["mean_per_agent"]["overall"]
            out[f"C={c:g},hidden_scale={scale:g}"] = auc
    return out


def _paired(out: dict[str, Any], tests: dict[str, list[Any]]) -> None:
    """Each variant vs its scope's lm_signals reference on the same test runs (paired bootstrap
    of the mean per-agent overall AUROC difference), once both exist."""
    from training.prefix_metrics import paired_auroc_delta

    for v, e in out["variants"].items():
        ref = f"{e['scope']}:lm_signals"
        if v == ref or ref not in tests or "vs_reference" in e:
            continue
        e["vs_reference"] = {"reference": ref, **paired_auroc_delta(tests[ref], tests[v])}


def enc_pair_missing(names: Sequence[str], variant: str) -> bool:
    """True when `variant` comes before (or without) full:lm_signals, whose probe pick it needs."""
    before = names[: list(names).index(variant)]
    return "full:lm_signals" not in before


def test_counts(runs: Sequence[Any]) -> dict[str, dict[str, int]]:
    """Per agent: test runs and unresolved runs (for the AUROC standard errors)."""
    out: dict[str, dict[str, int]] = {}
    for r in runs:
        c = out.setdefault(r.agent, {"runs": 0, "unresolved": 0})
        c["runs"] += 1
        c["unresolved"] += int(not r.resolved)
    return dict(sorted(out.items()))


def auroc_se(auc: float, n_pos: int, n_neg: int) -> float | None:
    """Hanley & McNeil (1982) standard error of an AUROC from n_pos positive and n_neg negative
    runs (run-level counts: prefixes of one run are not independent)."""
    if n_pos < 1 or n_neg < 1:
        return None
    q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    var = (auc * (1 - auc) + (n_pos - 1) * (q1 - auc**2) + (n_neg - 1) * (q2 - auc**2)) / (
        n_pos * n_neg
    )
    return math.sqrt(max(var, 0.0))


def mean_se(per_agent: dict[str, Any], counts: dict[str, dict[str, int]] | None) -> float | None:
    """Standard error of the mean over agents of the overall AUROC (agents independent)."""
    ses = []
    for a, vals in per_agent.items():
        auc, c = vals.get("overall"), (counts or {}).get(a)
        if auc is None or c is None:
            continue
        se = auroc_se(auc, c["unresolved"], c["runs"] - c["unresolved"])
        if se is not None:
            ses.append(se)
    return math.sqrt(sum(x * x for x in ses)) / len(ses) if ses else None


def _mean_se(per_agent: dict[str, Any], counts: dict[str, dict[str, int]] | None) -> str:
    se = mean_se(per_agent, counts)
    return "-" if se is None else f"{se:.3f}"


def _delta(d: dict[str, Any] | None) -> str:
    if not d or d.get("delta") is None:
        return "-"
    if d.get("lo") is None or d.get("hi") is None:
        return f"{d['delta']:+.3f}"
    return f"{d['delta']:+.3f} ({d['lo']:+.3f}, {d['hi']:+.3f})"


def ablation_table(result: dict[str, Any]) -> str:
    """One markdown table: a row per variant."""
    agents = sorted({a for e in result["variants"].values() for a in e["auroc"]["per_agent"]})
    head = ["variant", "train runs", "test runs", "mean/agent AUROC " + " / ".join(AUROC_KEYS),
            "SE", "vs lm_signals (95% CI)", *(f"{a} overall" for a in agents)]  # fmt: skip
    for tg in TARGETS:
        head += [f"FPR@{tg:g}", f"saved@{tg:g}"]
    head.append("s")
    lines = [
        "Ablations on the test split. full: training subsample "
        f"{result['full']['train']} runs, validation {result['full']['val']}, test "
        f"{result['full']['test']} runs; subset: {result['subset']['train']} training and "
        f"{result['subset']['test']} test runs ({result['subset_rule']}; no thresholds, AUROC only).",
        "SE: Hanley-McNeil standard error of the mean/agent overall AUROC from the run counts "
        "(of one row alone). vs lm_signals: the difference to the same scope's LM + signals row "
        "on the same test runs, with a paired bootstrap 95% interval (runs resampled within "
        "agent): the test for whether a variant helps. "
        "FPR/saved: realized run-level FPR and token savings (%) at target FPR 5 % / 10 %, "
        "thresholds picked on validation. s: wall seconds of the variant (feature pass included).",
        "",
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * (len(head) - 1),
    ]
    for v, e in result["variants"].items():
        a = e["auroc"]
        cells = [v, str(e["train_runs"]), str(e["test_runs"]),
                 " / ".join(num(a["mean_per_agent"][k]) for k in AUROC_KEYS),
                 _mean_se(a["per_agent"], (result.get("test_counts") or {}).get(e["scope"])),
                 _delta(e.get("vs_reference")),
                 *(num(a["per_agent"].get(g, {}).get("overall")) for g in agents)]  # fmt: skip
        for tg in TARGETS:
            m = (e.get("ledger") or {}).get(f"{tg:g}")
            cells += [pct(m["realized_fpr"]), pct(m["token_savings"])] if m else ["-", "-"]
        cells.append(f"{e['seconds']:.0f}")
        lines.append("| " + " | ".join(cells) + " |")
    for v, e in result["variants"].items():
        grid = {k: x for k, x in (e.get("grid") or {}).items() if x is not None}
        if grid:
            best = max(grid, key=lambda k: grid[k])
            lines.append(
                f"\n{v}: over the {len(grid)} probe pairs of the grid, test AUROC "
                f"{min(grid.values()):.3f}-{grid[best]:.3f} (best {best}; hindsight, not a pick)."
            )
    return "\n".join(lines) + "\n"
