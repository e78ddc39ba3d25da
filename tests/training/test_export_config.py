"""`failfast export` takes the config's `export:` section; flags given override it."""

from __future__ import annotations

import argparse

import pytest

from monitor.errors import ConfigError
from training.cli.training import export_config


def flags(**given: object) -> argparse.Namespace:
    return argparse.Namespace(**{"int8": None, "int8_scheme": None, "target_fpr": None, **given})


def test_export_section_of_the_training_config_then_flags(tmp_path) -> None:
    (tmp_path / "config.yaml").write_text("export:\n  int8: true\n  target: 0.1\n")
    cfg = export_config(None, tmp_path, flags())
    assert (cfg.int8, cfg.target, cfg.int8_scheme) == (True, 0.1, "mixed")
    cfg = export_config(None, tmp_path, flags(target_fpr=0.02, int8_scheme="dynamic"))
    assert (cfg.int8, cfg.target, cfg.int8_scheme) == (True, 0.02, "dynamic")
    other = tmp_path / "other.yaml"
    other.write_text("export:\n  opset: 18\n")
    cfg = export_config(str(other), tmp_path, flags())
    assert (cfg.opset, cfg.int8, cfg.target) == (18, False, 0.05)
    assert export_config(None, None, flags()).target == 0.05


def test_a_bad_export_section_names_the_file(tmp_path) -> None:
    (tmp_path / "config.yaml").write_text("export:\n  target: 2\n")
    with pytest.raises(ConfigError, match="config.yaml: export section"):
        export_config(None, tmp_path, flags())


def test_the_export_section_of_an_extended_config(tmp_path) -> None:
    (tmp_path / "base.yaml").write_text("export:\n  int8: true\n  target: 0.1\n")
    (tmp_path / "child.yaml").write_text("extends: base.yaml\nexport:\n  target: 0.02\n")
    cfg = export_config(str(tmp_path / "child.yaml"), None, flags())
    assert (cfg.int8, cfg.target) == (True, 0.02)
