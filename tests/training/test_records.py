"""RunRecord parquet round trip."""

from __future__ import annotations

import numpy as np
import pytest

from training.data.records import RunRecord, load_records, save_records


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


def test_paired_auroc_delta_is_zero_for_identical_scores_and_positive_for_a_better_scorer():
    from training.data.records import RunRecord
    from training.evaluate.auroc import paired_auroc_delta

    rng = np.random.default_rng(0)

    def recs(noise: float) -> list[RunRecord]:
        out = []
        for i in range(60):
            resolved = i % 3 == 0
            base = (0.3 if resolved else 0.6) + noise * rng.normal(size=8)
            out.append(
                RunRecord(
                    run_id=f"r{i}", agent="a" if i % 2 else "b", source="s", instance_id=f"i{i}",
                    resolved=resolved, step_tokens=np.ones(8), scores={"monitor": base},
                )
            )  # fmt: skip
        return out

    noisy = recs(0.6)
    same = paired_auroc_delta(noisy, noisy, n_boot=50)
    assert same["delta"] == 0.0
    assert same["lo"] == same["hi"] == 0.0
    clean = recs(0.1)
    d = paired_auroc_delta(noisy, clean, n_boot=200)
    assert d["runs"] == 60
    assert d["delta"] > 0.1
    assert 0 < d["lo"] <= d["delta"] <= d["hi"]


def test_a_write_that_fails_leaves_the_previous_records_whole(tmp_path, monkeypatch):
    import os

    path = tmp_path / "records.parquet"
    one = RunRecord("r1", "i1", "a", "a", True, np.array([1, 2]), {"monitor": np.array([0.1, 0.2])})
    save_records(path, [one])
    before = path.read_bytes()

    def killed(fd):
        raise OSError("killed mid-write")

    monkeypatch.setattr(os, "fsync", killed)
    with pytest.raises(OSError, match="killed"):
        save_records(path, [one, one])
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [r.run_id for r in load_records(path)] == ["r1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records.parquet"]  # no leftovers
