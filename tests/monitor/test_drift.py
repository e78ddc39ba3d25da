"""The drift watch: an anytime-valid confidence sequence on the realized FPR."""

from __future__ import annotations

import numpy as np
import pytest

from monitor.drift import FprWatch


def test_interval_and_flag_by_hand() -> None:
    w = FprWatch(0.05, alpha=0.05)
    for i in range(100):
        w.add(resolved=True, stopped=i % 10 == 0)
    w.add(resolved=False, stopped=True)  # unresolved runs do not count
    assert (w.runs, w.resolved, w.stopped) == (101, 100, 10)
    assert w.fpr == pytest.approx(0.10)
    lo, hi = w.to_dict()["interval"]
    # E_n(p0) = 2^10 ((1 - 2 p0) / (1 - p0))^90 = 20 at the lower end
    assert 10 * np.log(2) + 90 * np.log((1 - 2 * lo) / (1 - lo)) == pytest.approx(np.log(20))
    assert lo < 0.05 < 0.10 < hi
    assert not w.drift
    for _ in range(10):  # 10 more stops in a row push the lower end over the target
        w.add(resolved=True, stopped=True)
    assert w.drift
    assert w.flagged_at is not None
    assert w.flagged_at <= 110


def test_no_stops_and_all_stops_edges() -> None:
    w = FprWatch(0.05)
    assert w.fpr is None
    assert w.lower == 0.0
    for _ in range(50):
        w.add(resolved=True, stopped=False)
    assert w.lower == 0.0
    assert w.upper < 0.1
    v = FprWatch(0.05)
    v.add(resolved=True, stopped=True)
    assert v.upper == 1.0


def test_flags_at_twice_the_target_and_rarely_at_the_target() -> None:
    rng = np.random.default_rng(1)
    late, false_alarms = [], 0
    for _ in range(100):
        w = FprWatch(0.05)
        for x in rng.random(400) < 0.10:
            if w.add(resolved=True, stopped=bool(x)):
                break
        late.append(w.flagged_at or 10**6)
        v = FprWatch(0.05)
        false_alarms += any(v.add(resolved=True, stopped=bool(x)) for x in rng.random(1000) < 0.05)
    assert np.median(late) <= 120
    assert false_alarms <= 15  # alpha = 0.1 bounds it at 10 of 100 in expectation
