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


def test_extends_lays_a_file_over_another_key_by_key(tmp_path):
    (tmp_path / "base.yaml").write_text(
        "model:\n  n_layers: 4\n  pooling: last+mean\ntrain:\n  probe_C: [0.1, 1.0]\n"
        "export:\n  target: 0.1\n"
    )
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "child.yaml").write_text(
        "extends: ../base.yaml\nmodel:\n  n_layers: null\ntrain:\n  probe_C: [0.03]\n"
    )
    cfg = load_pipeline_config(sub / "child.yaml", ["train.lr=0.002"])
    assert cfg.model.n_layers is None  # the child's null wins over the base's 4
    assert cfg.model.pooling == "last+mean"  # a key the child leaves alone is the base's
    assert cfg.train.probe_C == [0.03]  # lists are replaced, not joined
    assert cfg.train.lr == pytest.approx(0.002)  # overrides apply last


def test_extends_errors_name_the_files(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("extends: b.yaml\n")
    b.write_text("extends: a.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_pipeline_config(a)
    c = tmp_path / "c.yaml"
    c.write_text("extends: nowhere.yaml\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: extends 'nowhere\.yaml'"):
        load_pipeline_config(c)
    d = tmp_path / "d.yaml"
    d.write_text("extends: [a.yaml, b.yaml]\n")
    with pytest.raises(ConfigError, match="must name one config file"):
        load_pipeline_config(d)
    e = tmp_path / "e.yaml"
    e.write_text("extends: base.yaml\n")
    (tmp_path / "base.yaml").write_text("train:\n  learning_rate: 1\n")
    with pytest.raises(ConfigError, match="learning_rate"):  # the merged result is still checked
        load_pipeline_config(e)


def test_probe_text_needs_its_text_and_the_frozen_probe():
    quick = next(p for p in CONFIGS if p.name == "quick.yaml")
    cfg = load_pipeline_config(quick, ["train.probe_text=1.0"])
    assert cfg.train.probe_text == 1.0
    with pytest.raises(ConfigError, match="probe_text needs train.tfidf_text"):
        load_pipeline_config(quick, ["train.probe_text=1.0", "train.tfidf_text=null"])
    with pytest.raises(ConfigError, match="model.head: lora"):
        load_pipeline_config(quick, ["train.probe_text=1.0", "model.head=lora"])


def test_config_errors_read_on_one_line_with_the_options() -> None:
    from monitor.config import load_config
    from training.config import ThresholdConfig

    with pytest.raises(ConfigError) as e:
        load_config(ThresholdConfig, None, ["margn=1", "margin=abc"])
    text = str(e.value)
    assert "\n" not in text
    assert "margn: unknown option (options: mode, method" in text
    assert "margin: Input should be a valid number" in text
    assert "(got 'abc')" in text
