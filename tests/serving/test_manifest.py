"""monitor.json as the Manifest type: one reader, one writer, the serving defaults defined once,
and thresholds.json files of the format before `groups` read as they were written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from monitor.errors import BundleError
from monitor.schedule import Schedule
from monitor.thresholds import (
    DEFAULT_FALLBACK,
    DEFAULT_GROUP_BY,
    DEFAULT_MARGIN,
    DEFAULT_TARGET,
    ThresholdTable,
)
from serving.manifest import Manifest, read_manifest, write_manifest
from tests.bundle_helpers import THRESHOLDS

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_are_defined_once_and_are_the_shipped_configs() -> None:
    from monitor.config import read_config_data
    from training.config import EvalConfig, ExportConfig, ThresholdConfig

    cfg = ThresholdConfig()
    assert (cfg.group_by, cfg.margin, cfg.fallback) == (
        DEFAULT_GROUP_BY,
        DEFAULT_MARGIN,
        DEFAULT_FALLBACK,
    )
    assert ExportConfig().target == EvalConfig().target_fpr == Manifest().target == DEFAULT_TARGET
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        data = read_config_data(path)  # `extends:` resolved (gpu-crossfit.yaml extends quick)
        th = ThresholdConfig.model_validate(data["thresholds"])
        assert (th.group_by, th.margin, th.fallback) == (
            DEFAULT_GROUP_BY,
            DEFAULT_MARGIN,
            DEFAULT_FALLBACK,
        ), path.name


def test_a_table_before_groups_keeps_its_meaning_and_a_new_one_takes_the_defaults() -> None:
    old = ThresholdTable.model_validate(THRESHOLDS)  # `per_agent`, no group_by/margin/fallback
    assert (old.group_by, old.margin, old.fallback) == ("agent", 1.0, "pooled")
    assert sorted(old.groups) == ["mini-swe-agent", "swe-agent"]
    assert old.lookup("never-seen", 0.05).stop == 0.7  # pooled fallback, as written
    new = {k: v for k, v in THRESHOLDS.items() if k != "per_agent"}
    new["groups"] = THRESHOLDS["per_agent"]
    table = ThresholdTable.model_validate(new)
    assert (table.group_by, table.margin, table.fallback) == (
        DEFAULT_GROUP_BY,
        DEFAULT_MARGIN,
        DEFAULT_FALLBACK,
    )
    assert table.lookup("never-seen", 0.05).stop == float("inf")  # fallback none
    assert "per_agent" not in old.to_json()
    assert ThresholdTable.model_validate(old.to_json()) == old


def test_the_policy_follows_the_thresholds_schedule_and_the_file_round_trips(tmp_path) -> None:
    table = ThresholdTable.model_validate(THRESHOLDS)
    m = Manifest(thresholds=table, policy={"min_steps": 9, "every": 4, "persist": 3})
    assert m.policy.schedule() == table.schedule == Schedule(min_steps=2, every=1, persist=1)
    (tmp_path / "tokenizer.json").write_text("{}")
    written = write_manifest(tmp_path, m.model_copy(update={"target": 0.1}))
    assert written.files
    assert "tokenizer.json" in written.files
    raw = (tmp_path / "monitor.json").read_bytes()
    again = read_manifest(raw, tmp_path / "monitor.json")
    assert again == written
    assert json.loads(raw)["thresholds"]["groups"]["swe-agent"]["warn"] == 0.5
    assert Manifest.model_validate({**json.loads(raw), "thresholds": {}}).thresholds is None


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"target": "five percent"}, "target"),
        ({"target": 1.5}, "target"),
        ({"kv": {"n_layers": 2}}, "kv"),
        ({"signal_names": ["no_such_signal"]}, "signal_names"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_read_manifest_names_the_malformed_field(fields: dict, name: str) -> None:
    with pytest.raises(BundleError, match=rf"m\.json: field '{name}' is malformed"):
        read_manifest(json.dumps(fields).encode(), Path("m.json"))
    with pytest.raises(BundleError, match="manifest must be a JSON object"):
        read_manifest(b"[1]", Path("m.json"))


def _documented(section: str) -> set[str]:
    """The backticked names in the first column of the table under `## {section}` of BUNDLE.md."""
    text = (ROOT / "docs" / "BUNDLE.md").read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in body.splitlines():
        cells = line.split("|")
        if line.startswith("| `") and len(cells) > 2:
            names |= set(re.findall(r"`([a-z_]+)`", cells[1]))
    return names


def test_bundle_md_documents_every_manifest_and_thresholds_field_and_no_other() -> None:
    assert _documented("monitor.json") == set(Manifest.model_fields)
    assert _documented("thresholds.json") == set(ThresholdTable.model_fields)
