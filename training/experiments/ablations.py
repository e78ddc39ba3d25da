"""Ablations on the saved test split: what each part of the monitor buys.

Variants are named SCOPE:WHAT.
- SCOPE `full`: the config's training subsample, the whole validation and test splits, probe
  (C, hidden scale) picked on validation, thresholds picked on validation; AUROC and the token
  ledger at 5 % and 10 % target FPR. signals_only / lm_only / lm_signals share the config's
  (cached) features; windowN and layersN run their own feature pass over every split (cached
  afterwards); lora fine-tunes on the training subsample and re-encodes validation and test with
  the tuned backbone (needs full:lm_signals first: its probe pick is the warm start).
- SCOPE `subset`: per agent at most `subset_train` runs of the training subsample and
  `subset_test` of the test split, stratified by label (sizes stated in the result; a cap above
  the split's size takes the whole test split); the probe's (C, hidden scale) is fixed to the
  pair the `full:lm_signals` variant picked (no validation pass); AUROC only (the subset's
  validation is not encoded, so no thresholds). Every subset variant uses the same runs.
- WHAT: `signals_only` (loop signals, no LM features), `lm_only` (LM features, no signals),
  `lm_signals` (both: the monitor), `windowN` (featuriser window of N tokens), `layersN`
  (backbone cut to N layers), `lora` (LoRA on the top layers, head warm-started from the probe,
  the config's train.* fine-tuning settings).
"""

from __future__ import annotations

import logging
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitor.types import Trajectory
from training.config import PipelineConfig
from training.data.records import RunRecord, save_records
from training.data.runs import stratified_subsample
from training.experiments.ablation_report import auroc_summary, paired_deltas, test_counts
from training.experiments.common import TARGETS, ledger
from training.pipeline.encode import Encoded, Encoder, encode, load_encoder
from training.pipeline.stages import SplitRuns, calibrate, fine_tune, fit_head, monitor_records

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
INPUTS = {"signals_only": (False, True), "lm_only": (True, False), "lm_signals": (True, True)}


def variant_config(cfg: PipelineConfig, what: str) -> PipelineConfig:
    """The pipeline config of a `windowN` / `layersN` variant (others: `cfg` itself)."""
    if m := re.fullmatch(r"window(\d+)", what):
        feat = cfg.featurise.model_copy(update={"window_tokens": int(m.group(1))})
        return cfg.model_copy(update={"featurise": feat})
    if m := re.fullmatch(r"layers(\d+)", what):
        return cfg.model_copy(
            update={"model": cfg.model.model_copy(update={"n_layers": int(m.group(1))})}
        )
    if what in INPUTS or what == "lora":
        return cfg
    raise ValueError(
        f"unknown ablation {what!r} (signals_only, lm_only, lm_signals, windowN, layersN, lora)"
    )


def per_agent_subset(runs: Sequence[Any], cap: int, *, seed: int) -> list[Any]:
    """At most `cap` runs of each agent, stratified by label (seeded), in the input order."""
    keep = {
        id(r)
        for a in sorted({r.agent for r in runs})
        for r in stratified_subsample([r for r in runs if r.agent == a], cap, seed=seed)
    }
    return [r for r in runs if id(r) in keep]


def _pass_info(enc: dict[str, Encoded]) -> dict[str, Any]:
    return {
        "tokens_encoded_now": sum(e.stats.tokens for e in enc.values()),
        "seconds": round(sum(e.stats.seconds for e in enc.values()), 1),
        "encoded_tokens_total": sum(sum(e.encoded_tokens) for e in enc.values()),
    }


@dataclass
class _Ablation:
    """What the variants of one run share: the splits, the config's encoder and features (built
    on first use), and the probe pair the subset variants use."""

    cfg: PipelineConfig
    runs: dict[str, dict[str, list[Trajectory]]]  # scope -> split -> runs
    probe_grid: bool
    pair: tuple[float, float]
    pair_from: str = "config grid (first pair): full:lm_signals was not run first"
    encoder: Encoder | None = None
    features: dict[str, dict[str, Encoded]] = field(default_factory=dict)

    def encoded(self, scope: str) -> tuple[Encoder, dict[str, Encoded]]:
        """The config's encoder and the features of a scope's splits."""
        if self.encoder is None:
            self.encoder = load_encoder(self.cfg)
        if scope not in self.features:
            self.features[scope] = {
                n: encode(self.encoder, rs) for n, rs in self.runs[scope].items()
            }
        return self.encoder, self.features[scope]

    def own_pass(
        self, scope: str, what: str, entry: dict[str, Any]
    ) -> tuple[Encoder, dict[str, Encoded]]:
        """A windowN / layersN variant's own encoder and feature pass (cached)."""
        encoder = load_encoder(variant_config(self.cfg, what))
        enc = {n: encode(encoder, rs) for n, rs in self.runs[scope].items()}
        entry["feature_pass"] = _pass_info(enc)
        return encoder, enc

    def lora(self, train: Encoded, info: dict[str, Any]) -> Encoder:
        """A fresh encoder whose backbone is LoRA-tuned on `train` from the probe at `pair`."""
        encoder = load_encoder(self.cfg)
        head = fit_head(self.cfg, encoder.model, train, grid=[self.pair])
        t = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            losses, windows = fine_tune(encoder, train, head, kind="lora", out_dir=tmp)
        tc = self.cfg.train
        info.update(
            windows=windows,
            losses=losses,
            finetune_seconds=round(time.perf_counter() - t, 1),
            settings={
                k: getattr(tc, k)
                for k in ("epochs", "lr", "batch_size", "lora_r", "lora_alpha", "lora_top_layers")
            },
        )
        return encoder

    def full(self, what: str, entry: dict[str, Any]) -> list[RunRecord]:
        """Probe picked on validation, thresholds on validation, ledger and AUROC on test."""
        use = (True, True)
        if what in INPUTS:
            encoder, enc = self.encoded("full")
            use = INPUTS[what]
        elif what == "lora":
            entry["lora"] = {}
            encoder = self.lora(self.encoded("full")[1]["train"], entry["lora"])
            enc = {"train": self.features["full"]["train"]}
            for n in ("val", "test"):
                enc[n] = encode(encoder, self.runs["full"][n], cached=False)
                entry["lora"][f"{n}_pass_seconds"] = round(enc[n].stats.seconds, 1)
        else:
            encoder, enc = self.own_pass("full", what, entry)
        enc = {n: e.masked(hidden=use[0], signals=use[1]) for n, e in enc.items()}
        sel: dict[str, Any]
        if what == "lora":
            sel = {"C": self.pair[0], "hidden_scale": self.pair[1], "from": self.pair_from}
        else:
            sel = fit_head(
                variant_config(self.cfg, what), encoder.model, enc["train"], enc["val"]
            ).summary()
        if what == "lm_signals":
            self.pair, self.pair_from = (sel["C"], sel["hidden_scale"]), "full:lm_signals"
        test = monitor_records(encoder.model, enc["test"])
        th = calibrate(self.cfg, monitor_records(encoder.model, enc["val"]))
        entry.update(
            train_runs=len(enc["train"].runs),
            test_runs=len(test),
            selection=sel,
            ledger={f"{tg:g}": ledger(test, th, target=tg) for tg in TARGETS},
        )
        return test

    def subset(self, what: str, entry: dict[str, Any]) -> list[RunRecord]:
        """Probe fixed to `pair` on the subset's training runs; AUROC on its test runs."""
        entry.update(
            train_runs=len(self.runs["subset"]["train"]),
            test_runs=len(self.runs["subset"]["test"]),
            probe={"C": self.pair[0], "hidden_scale": self.pair[1], "from": self.pair_from},
        )
        if what == "lora":
            entry["lora"] = {}
            encoder = self.lora(self.encoded("subset")[1]["train"], entry["lora"])
            test = encode(encoder, self.runs["subset"]["test"], cached=False)
            entry["lora"]["test_pass_seconds"] = round(test.stats.seconds, 1)
            return monitor_records(encoder.model, test)
        if what in INPUTS:
            encoder, enc = self.encoded("subset")
            use_h, use_s = INPUTS[what]
            enc = {n: e.masked(hidden=use_h, signals=use_s) for n, e in enc.items()}
        else:
            encoder, enc = self.own_pass("subset", what, entry)
        cfg = variant_config(self.cfg, what)
        if self.probe_grid:
            entry["grid"] = _grid(cfg, encoder, enc)
        fit_head(cfg, encoder.model, enc["train"], grid=[self.pair])
        return monitor_records(encoder.model, enc["test"])


def _grid(
    cfg: PipelineConfig, encoder: Encoder, enc: dict[str, Encoded]
) -> dict[str, float | None]:
    """Mean per-agent overall test AUROC for every (C, hidden scale) of the config's grid."""
    out = {}
    for c in cfg.train.probe_C:
        for scale in cfg.train.probe_hidden_scale:
            fit_head(cfg, encoder.model, enc["train"], grid=[(c, scale)])
            auc = auroc_summary(monitor_records(encoder.model, enc["test"]))
            out[f"C={c:g},hidden_scale={scale:g}"] = auc["mean_per_agent"]["overall"]
    return out


def _check(names: Sequence[str], cfg: PipelineConfig) -> None:
    """Refuse unknown variants, and full:lora before full:lm_signals (its probe pick)."""
    for i, v in enumerate(names):
        scope, _, what = v.partition(":")
        if scope not in ("full", "subset"):
            raise ValueError(f"ablation {v!r}: scope must be full: or subset:")
        variant_config(cfg, what)
        if scope == "full" and what == "lora" and "full:lm_signals" not in names[:i]:
            raise ValueError(f"ablation {v!r}: run full:lm_signals before full:lora")


def run_ablations(
    cfg: PipelineConfig,
    sr: SplitRuns,
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
    _check(names, cfg)
    seed = cfg.data.subsample_seed
    full = sr.use
    sub = {
        "train": per_agent_subset(full["train"], subset_train, seed=seed),
        "test": per_agent_subset(full["test"], subset_test, seed=seed),
    }
    out: dict[str, Any] = {
        "full": {n: len(full[n]) for n in ("train", "val", "test")},
        "subset": {n: len(rs) for n, rs in sub.items()},
        "subset_rule": f"per agent at most {subset_train} runs of the config's training subsample "
        f"and {subset_test} of the test split, stratified by label (seed {seed}); probe "
        "(C, hidden scale) fixed to full:lm_signals' pick",
        "test_counts": {"full": test_counts(full["test"]), "subset": test_counts(sub["test"])},
        "variants": {},
    }
    state = _Ablation(
        cfg,
        {"full": dict(full), "subset": sub},
        probe_grid,
        (cfg.train.probe_C[0], cfg.train.probe_hidden_scale[0]),
    )
    tests: dict[str, list[RunRecord]] = {}
    for v in names:
        scope, _, what = v.partition(":")
        t = time.perf_counter()
        entry: dict[str, Any] = {"scope": scope}
        tests[v] = state.full(what, entry) if scope == "full" else state.subset(what, entry)
        entry["auroc"] = auroc_summary(tests[v])
        entry["seconds"] = round(time.perf_counter() - t, 1)
        out["variants"][v] = entry
        if records_dir is not None:
            save_records(records_dir / f"{v.replace(':', '_')}.parquet", tests[v])
        paired_deltas(out, tests)
        if on_variant is not None:
            on_variant(out)
        log.info(
            "ablation %s: mean per-agent AUROC %s (%.1f s)",
            v,
            entry["auroc"]["mean_per_agent"],
            entry["seconds"],
        )
    return out
