"""RunRecord parquet round trip."""

from __future__ import annotations

import numpy as np
import pytest

from training.records import RunRecord, load_records, save_records


def test_records_round_trip(tmp_path):
    recs = [
        RunRecord(
            "r1",
            "i1",
            "swe-agent",
            "swe-agent-gpt4",
            True,
            np.array([10, 20, 30]),
            {"monitor": np.array([0.1, 0.2, 0.9])},
            encoded_tokens=77,
        ),
        RunRecord(
            "r2",
            "i2",
            "coder",
            "coder-gpt4",
            False,
            np.array([5]),
            {"monitor": np.array([0.5]), "signals_lr": np.array([0.4])},
        ),
    ]
    save_records(tmp_path / "r.parquet", recs)
    back = load_records(tmp_path / "r.parquet")
    assert [r.run_id for r in back] == ["r1", "r2"]
    assert back[0].scores["monitor"] == pytest.approx([0.1, 0.2, 0.9])
    assert "signals_lr" not in back[0].scores
    assert back[1].scores["signals_lr"] == pytest.approx([0.4])
    assert back[0].step_tokens.tolist() == [10, 20, 30]
    assert back[0].encoded_tokens == 77
    assert back[1].resolved is False
