"""Every file in configs/ loads into the pipeline config (unknown keys are an error)."""

from __future__ import annotations

from pathlib import Path

import pytest

from monitor.errors import ConfigError
from training.config import PipelineConfig, load_pipeline_config

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))


def test_there_are_configs():
    assert {p.name for p in CONFIGS} >= {"quick.yaml", "default.yaml", "gpu.yaml"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_config_loads(path):
    cfg = load_pipeline_config(path)
    assert isinstance(cfg, PipelineConfig)
    assert cfg.featurise.window_tokens >= 64
    assert sum(cfg.data.split_fractions) == pytest.approx(1.0)


def test_overrides_and_unknown_keys(tmp_path):
    quick = next(p for p in CONFIGS if p.name == "quick.yaml")
    cfg = load_pipeline_config(quick, ["train.lr=0.001", "model.n_layers=3"])
    assert cfg.train.lr == pytest.approx(0.001)
    assert cfg.model.n_layers == 3
    with pytest.raises(ConfigError, match="n_layer"):
        load_pipeline_config(quick, ["model.n_layer=3"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  learning_rate: 0.1\n")
    with pytest.raises(ConfigError, match="learning_rate"):
        load_pipeline_config(bad)
