"""thresholds.json as types and its one lookup rule (serving and evaluation both use it)."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from monitor.schedule import Schedule
from monitor.thresholds import ThresholdTable, target_key
from tests.bundle_helpers import THRESHOLDS


def test_lookup_own_pooled_unknown_and_refused(caplog: pytest.LogCaptureFixture) -> None:
    table = ThresholdTable.model_validate(THRESHOLDS)
    assert table.schedule == Schedule(min_steps=2, every=1, persist=1)
    th = table.lookup("mini-swe-agent", 0.1)
    assert (th.stop, th.warn, th.origin) == (0.55, 0.45, "agent")
    # refused for a calibrated agent: the pooled stop threshold, the agent's own warn level
    th = table.lookup("swe-agent", 0.05)
    assert (th.stop, th.warn, th.origin) == (0.7, 0.5, "pooled")
    # no agent named: pooled, without a warning
    assert table.lookup(None, 0.05).origin == "pooled"
    assert not caplog.records
    with caplog.at_level("WARNING"):
        th = table.lookup("never-seen", 0.05)
    assert (th.stop, th.warn, th.origin) == (0.7, 0.42, "pooled-unknown-agent")
    assert "keyed by agent" in caplog.text
    # a target refused everywhere: no stop by score
    th = table.lookup("swe-agent", 0.1)
    assert math.isinf(th.stop)
    assert th.origin == "refused"


def test_round_trip_and_strictness() -> None:
    table = ThresholdTable.model_validate(THRESHOLDS)
    again = table.to_json()
    assert again["groups"]["swe-agent"]["stop"]["0.05"] == {
        "refused": "needs at least 59 resolved validation runs, has 30"
    }
    assert ThresholdTable.model_validate(again) == table
    assert target_key(0.05) == "0.05"
    assert target_key(0.1) == "0.1"
    with pytest.raises(ValidationError):
        ThresholdTable.model_validate({**THRESHOLDS, "per_agnet": {}})
