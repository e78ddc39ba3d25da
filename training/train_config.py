"""The `train:` section of the pipeline config (training.config re-exports it): the feature
pass, the probe, the second probe, the fine-tune and the learned baselines."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from monitor.config import StrictModel


class TfidfTextConfig(StrictModel):
    """The text the TF-IDF baseline counts when `train.tfidf_text` is set
    (serving.candidates.PieceText): monitor.render's pieces with cuts of their own. Cross-fitted
    on all 4,078 runs of ../shared/data (docs/RESULTS.md, "Issue 26, fifth round"), these longer
    cuts, the agent's thoughts above all, beat the LM window's (300 task characters, 100 of each
    action, 60 + 60 of each observation, no thoughts) for the TF-IDF LR and the stack over it."""

    task_chars: int = Field(2000, ge=0)
    action_chars: int = Field(300, ge=0)
    obs_head_chars: int = Field(300, ge=0)
    obs_tail_chars: int = Field(300, ge=0)
    thought_chars: int = Field(1000, ge=0)


class TrainConfig(StrictModel):
    """Feature pass, probe, fine-tuning and baselines."""

    seed: int = 0
    """Seed of torch, numpy and the Trainer."""
    threads: int = Field(2, ge=1)
    """torch CPU threads."""
    batch_tokens: int = Field(4096, ge=64)
    """Padded tokens per forward batch of the feature pass."""
    chunk_runs: int = Field(32, ge=1)
    """Runs per feature-cache write (the unit of resumption)."""
    cache_dir: str | None = None
    """Feature/model cache root; None: $FAILFAST_CACHE or ~/.cache/failfast."""
    balance: Literal["agent_class", "class", "none"] = "agent_class"
    """Run weights: equal total weight per (agent, label) cell, per label, or none."""
    max_prefixes_per_run: int | None = Field(None, ge=1)
    """At most this many checked prefixes per training run (evenly spaced); None: all."""
    savings_power: float | None = Field(None, ge=0.0)
    """Savings weighting of failing runs (training.data.examples.savings_weights), for the probe
    and the TF-IDF baseline (the signals LR keeps the even spread): a failing run's weight spread
    over its prefixes in proportion to the tokens still to come after each (what a stop there
    saves) and scaled by (its tokens / its agent's mean run tokens) ** this power; None: spread
    evenly, every run alike."""
    probe_C: list[float] = Field(default_factory=lambda: [0.1, 0.3])
    """Inverse L2 strengths tried for the probe (with every probe_hidden_scale); the pair with the
    best validation AUROC (mean over agents of the 25/50/75 %/overall figures) wins."""
    probe_hidden_scale: list[float] = Field(default_factory=lambda: [0.05, 0.1])
    """Scales of the standardised hidden columns tried (smaller = stronger L2 on them than on the
    signals; see training.model.probe.fit_probe)."""
    probe_max_focus: float = Field(0.0, ge=0.0)
    """> 0: the probe's loss on a resolved run is on the soft maximum of its checked logits
    (log-sum-exp at temperature 1 / focus; training.model.stop_loss.stop_loss_fit), the score a stop
    rule on a run's highest checked score sees; 0: per-prefix log loss."""
    probe_rank_weight: float = Field(0.0, ge=0.0)
    """> 0: add to the probe's loss a ranking loss between failing and resolved prefixes of the
    same agent at the same step (runs alive together; training.model.stop_loss.ranking_pairs), this
    weight times the log loss's total weight; 0: none."""
    probe_text: float | None = Field(None, gt=0.0)
    """The probe also reads the TF-IDF text (`tfidf_text`, which must be set): the sublinear
    TF-IDF of each prefix's terms (the TF-IDF baseline's vocabulary size) as columns beside the
    hidden state and the signals, multiplied by this scale (so their L2 penalty is 1 / scale**2
    of a signal column's), one logistic regression over all of them. Served as the ONNX head's
    logit plus the text columns' (the bundle's monitor_text.json; training.model.probe_text).
    None: the probe reads the hidden state and the signals only."""
    text_candidate: float | None = Field(None, gt=0.0)
    """Fit a second probe that reads, beside what the LM probe reads, the TF-IDF text at this
    scale (as `probe_text` does, with the LM probe's C and hidden scale, on
    `text_candidate_prefixes` checked prefixes per run) and offer it to the per-group choice as
    the candidate "monitor_text"; the LM probe stays as it is. Needs `tfidf_text`, `baselines`
    and model.head: probe. Served from the same graphs (a second logit) plus its text part
    (bundle format 4). None: no second probe."""
    text_candidate_prefixes: int = Field(8, ge=1)
    """Checked prefixes per training run the second probe is fitted on (8: what the joint
    probe was measured with; docs/RESULTS.md, eighteenth and twenty-first rounds)."""
    progress: bool = True
    """Progress bars."""
    baselines: bool = True
    """Fit the signals and TF-IDF baselines."""
    task_prior_min_runs: int = Field(0, ge=0)
    """> 0: the bundle serves known tasks (serving.task_prior): a verdict table of the training
    and validation runs, and a known-task choice calibrated on the calibration runs whose task
    has this many runs by other agents, offering `monitor_prior` and `prior` besides the other
    candidates. 0 (default): no table. 4 is the measured design point (docs/RESULTS.md, "Known
    tasks"). Needs `baselines` (the choice it is made in)."""
    task_prior_weight: float = Field(1.0, gt=0.0)
    """The prior's logit weight in `monitor_prior` (1 measured best; 0.5 over-stopped)."""
    bundle: bool = True
    """At the end, pick thresholds (training.calibrate.thresholds) and export the bundle to OUT/bundle."""
    signals_C: float = Field(1.0, gt=0)
    """Inverse L2 strength of the signals baseline."""
    tfidf_C: float = Field(1.0, gt=0)
    """Inverse L2 strength of the TF-IDF baseline (4 lost cross-fitted: RESULTS.md, eleventh
    round)."""
    tfidf_max_features: int = Field(20000, ge=10)
    """TF-IDF vocabulary size."""
    tfidf_ngram_max: int = Field(1, ge=1, le=3)
    """Longest word n-gram the TF-IDF baseline counts (1: words only; 2 adds word pairs, formed
    within a rendered piece, as the served TfidfLR forms them). 1 as shipped: pairs (40,000
    terms) gained nothing cross-fitted and lost 4.3 points at 10% on later tasks (docs/RESULTS.md,
    eleventh round)."""
    tfidf_max_prefixes_per_run: int = Field(8, ge=1)
    """Training prefixes per run for the TF-IDF baseline (bounds its memory; 16 lost cross-fitted:
    RESULTS.md, eleventh round)."""
    tfidf_text: TfidfTextConfig | None = None
    """The TF-IDF baseline's own text (e.g. `{}` for TfidfTextConfig's defaults); null: the
    featuriser's window pieces. Off by default: cross-fitted, the longer text made TF-IDF and the
    stack save more, but the per-group choice over them broke the FPR bar (docs/RESULTS.md,
    "Issue 26, fifth round")."""
    epochs: float = Field(1.0, gt=0)
    """lora/full: passes over the training windows."""
    max_steps: int = -1
    """lora/full: stop after this many optimiser steps (-1: epochs decide)."""
    lr: float = Field(1e-4, gt=0)
    """lora/full: learning rate."""
    batch_size: int = Field(4, ge=1)
    """lora/full: windows per device batch."""
    grad_accum: int = Field(1, ge=1)
    """lora/full: gradient accumulation steps."""
    weight_decay: float = Field(0.0, ge=0)
    """lora/full: AdamW weight decay."""
    warmup_steps: int = Field(0, ge=0)
    """lora/full: linear warm-up steps."""
    bf16: bool = False
    """lora/full: bfloat16 mixed precision (GPU)."""
    gradient_checkpointing: bool = False
    """lora/full: trade compute for memory."""
    save_steps: int = Field(0, ge=0)
    """lora/full: write a safetensors checkpoint every this many steps (0: only the final model)."""
    lora_r: int = Field(8, ge=1)
    """LoRA rank."""
    lora_alpha: int = Field(16, ge=1)
    """LoRA alpha."""
    lora_dropout: float = Field(0.0, ge=0, lt=1)
    """LoRA dropout."""
    lora_top_layers: int = Field(2, ge=1)
    """LoRA adapters on this many top layers of the (truncated) backbone."""

    @model_validator(mode="after")
    def _probe_text_has_text(self) -> TrainConfig:
        if self.probe_text is not None and self.tfidf_text is None:
            raise ValueError(
                "train.probe_text needs train.tfidf_text (the text the probe's TF-IDF columns "
                "count); set tfidf_text: {} for its defaults"
            )
        return self

    lora_targets: list[str] = Field(
        default_factory=lambda: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ]
    )
    """Modules that get LoRA adapters."""
