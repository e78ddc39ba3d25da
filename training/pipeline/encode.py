"""The encode stage: runs -> the head's inputs (boundary features, loop signals) in one causal pass
per featuriser window, read from the feature cache where present.

`load_encoder(cfg)` builds what encoding needs once (classifier, featuriser, cache);
`encode(encoder, runs)` returns an `Encoded` the head stages read.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from monitor.featurise import Featuriser
from monitor.signals import SIGNAL_NAMES
from monitor.types import Trajectory
from training.config import PipelineConfig
from training.data.run_signals import run_signals
from training.model.backbone import backbone_key, cache_dir, feature_scheme, resolve_base
from training.model.cache import FeatureCache, feature_key
from training.model.classifier import PrefixClassifier, build_classifier
from training.model.features import PassStats, extract_features, shard_features


@dataclass
class Encoder:
    """What turns runs into head inputs under one config.

    Attributes:
        model: the classifier (backbone + head) in eval mode.
        featuriser: renders runs into the model's token windows.
        cache: feature cache of this backbone and featuriser config (None: always encode).
        base_dir: the backbone's local folder (its tokenizer is saved with the model).
        cfg: the pipeline config (batch sizes, progress bars).
        features: what runs the frozen backbone in the feature pass (`model`, or its
            onnxruntime graph: training.export.features_graph); a tuned backbone is run by `model`.
    """

    model: PrefixClassifier
    featuriser: Featuriser
    cache: FeatureCache | None
    base_dir: Path
    cfg: PipelineConfig
    features: Any = None

    @property
    def pad_id(self) -> int:
        """Right-padding id of the feature pass (masked out)."""
        return int(getattr(self.model.backbone.config, "pad_token_id", None) or 0)


@dataclass
class Encoded:
    """Head inputs of some runs, one array per run, rows k-1 = after steps 1..k.

    Attributes:
        runs: the runs.
        hidden: (n_steps, F) boundary features of each run.
        signals: (n_steps, S) raw loop signals the head reads (S = model.n_signals).
        encoded_tokens: tokens the model encoded for each run (the monitor's own cost).
        stats: what this pass cost (cached runs cost nothing).
    """

    runs: list[Trajectory]
    hidden: list[np.ndarray]
    signals: list[np.ndarray]
    encoded_tokens: list[int]
    stats: PassStats = field(default_factory=PassStats)

    def subset(self, idx: Sequence[int]) -> Encoded:
        """The runs at positions `idx`."""
        return Encoded(
            [self.runs[i] for i in idx],
            [self.hidden[i] for i in idx],
            [self.signals[i] for i in idx],
            [self.encoded_tokens[i] for i in idx],
        )

    def masked(self, *, hidden: bool = True, signals: bool = True) -> Encoded:
        """The same runs with the hidden features and/or the signals zeroed (ablations): zero
        columns standardise to zero and get no weight, the same model as one without them."""
        return Encoded(
            self.runs,
            self.hidden if hidden else [np.zeros_like(h) for h in self.hidden],
            self.signals if signals else [np.zeros_like(s) for s in self.signals],
            self.encoded_tokens,
            self.stats,
        )


def load_encoder(cfg: PipelineConfig) -> Encoder:
    """A fresh classifier (zero head) of the config, its featuriser and its feature cache."""
    mc, tc = cfg.model, cfg.train
    base_dir = resolve_base(mc.base)
    names = list(SIGNAL_NAMES) if mc.use_signals else []
    model = build_classifier(
        mc.base, mc.n_layers, names, mc.dtype, mc.signal_transform, mc.pooling
    ).eval()
    root = Path(tc.cache_dir) if tc.cache_dir else cache_dir()
    key = backbone_key(mc.base, mc.n_layers, feature_scheme(mc.feature_engine, mc.dtype))
    cache = FeatureCache(root / "features", key, feature_key(cfg.featurise, mc.pooling))
    featuriser = Featuriser.from_tokenizer_file(base_dir, cfg.featurise)
    features: Any = model
    if mc.feature_engine != "torch":
        from training.export.features_graph import OrtFeatures

        folder = root / "graphs" / f"{key}-{mc.pooling.replace('+', '-')}"
        features = OrtFeatures(model, folder, mc.feature_engine, tc.threads)
    return Encoder(model, featuriser, cache, base_dir, cfg, features)


def encode(encoder: Encoder, runs: Sequence[Trajectory], *, cached: bool = True) -> Encoded:
    """Boundary features (from the cache where present, unless `cached` is False: a tuned
    backbone's features are never cached) and loop signals of `runs`."""
    tc = encoder.cfg.train
    stats = PassStats()
    feats = extract_features(
        (encoder.features or encoder.model) if cached else encoder.model,
        encoder.featuriser,
        runs,
        cache=encoder.cache if cached else None,
        batch_tokens=tc.batch_tokens,
        chunk_runs=tc.chunk_runs,
        pad_id=encoder.pad_id,
        progress=tc.progress,
        stats=stats,
    )
    n = encoder.model.n_signals
    return Encoded(
        list(runs),
        [f.hidden for f in feats],
        [run_signals(r)[:, :n] for r in runs],
        [f.encoded_tokens for f in feats],
        stats,
    )


def encode_splits(encoder: Encoder, splits: dict[str, list[Trajectory]]) -> dict[str, Encoded]:
    """`encode` every split. Under torchrun / accelerate launch (WORLD_SIZE > 1) each process
    first encodes its share of all runs into the shared cache, so the splits are read from it."""
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and encoder.cache is not None:
        tc = encoder.cfg.train
        shard_features(
            encoder.features or encoder.model,
            encoder.featuriser,
            [r for rs in splits.values() for r in rs],
            cache=encoder.cache,
            rank=rank,
            world=world,
            batch_tokens=tc.batch_tokens,
            pad_id=encoder.pad_id,
            progress=tc.progress and rank == 0,
        )
    return {name: encode(encoder, rs) for name, rs in splits.items()}
