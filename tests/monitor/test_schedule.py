"""The check schedule: which steps are checked, and when persistent scores stop a run."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from monitor.policy import PolicyConfig
from monitor.schedule import Schedule


def S(min_steps: int = 1, every: int = 1, persist: int = 1) -> Schedule:
    return Schedule(min_steps=min_steps, every=every, persist=persist)


def test_checked_steps_and_is_checked_agree() -> None:
    cfg = PolicyConfig(min_steps=3, every=2)
    assert [k for k in range(1, 10) if cfg.is_checked(k)] == [3, 5, 7, 9]
    assert cfg.checked_steps(9).tolist() == [3, 5, 7, 9]
    assert [k for k in range(1, 5) if PolicyConfig().is_checked(k)] == [3, 4]
    assert S(2, 3).checked_steps(1).tolist() == []
    # a policy is a schedule with more fields; its schedule part alone
    assert cfg.schedule() == Schedule(min_steps=3, every=2, persist=2)
    assert Schedule() == PolicyConfig().schedule()  # one set of defaults


def test_first_stop_respects_schedule() -> None:
    s = [0.9, 0.1, 0.2, 0.95, 0.3, 0.99]
    assert S().first_stop(s, 0.5) == 1
    assert S(min_steps=2).first_stop(s, 0.5) == 4
    assert S(2, 3).first_stop(s, 0.5) is None  # k in {2, 5}: 0.1, 0.3
    assert S(3, 3).first_stop(s, 0.5) == 6
    assert S().first_stop(s, None) is None
    assert S().first_stop([], 0.1) is None


def test_first_stop_with_persistence_known_answers() -> None:
    s = [0.9, 0.1, 0.8, 0.9, 0.2, 0.7, 0.95, 0.99]
    # persist 1: the first checked score >= 0.6; persist 2: two checked scores in a row
    assert S(persist=1).first_stop(s, 0.6) == 1
    assert S(persist=2).first_stop(s, 0.6) == 4  # 0.8, 0.9 at k = 3, 4
    assert S(persist=3).first_stop(s, 0.6) == 8  # 0.7, 0.95, 0.99 at k = 6, 7, 8
    assert S(persist=4).first_stop(s, 0.6) is None
    # the streak counts checked scores only: min_steps 2, every 2 checks k = 2, 4, 6, 8
    assert S(2, 2, 2).first_stop(s, 0.6) == 6  # 0.9 at 4, 0.7 at 6
    assert S(2, 2, 2).first_stop(s, 0.75) is None  # 0.7 breaks it
    assert S(2, 2, 1).first_stop(s, 0.75) == 4
    assert S(3, 1, 2).first_stop(s, 0.6) == 4  # k = 1, 2 are not checked
    assert S(persist=2).first_stop(s[:1], 0.1) is None  # one checked score cannot persist
    with pytest.raises(ValidationError):
        S(persist=0)


def test_stopping_statistic_is_max_of_rolling_min() -> None:
    s = [0.9, 0.1, 0.8, 0.9, 0.2, 0.7, 0.95, 0.99]
    assert S().max_checked_score(s) == 0.99
    assert S(persist=2).max_checked_score(s) == pytest.approx(0.95)
    assert S(persist=3).max_checked_score(s) == pytest.approx(0.7)
    assert S(2, 2, 2).max_checked_score(s) == pytest.approx(0.7)
    assert S(2, 1, 2).max_checked_score(s[:2]) == -np.inf
    assert S(2, 2, 3).single() == S(2, 2, 1)
    # the run is stopped at t iff its statistic is >= t, for every t and schedule
    rng = np.random.default_rng(7)
    for _ in range(200):
        x = rng.random(rng.integers(0, 12))
        sched = S(int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(1, 4)))
        stat = sched.max_checked_score(x)
        for t in rng.random(5):
            assert (sched.first_stop(x, t) is not None) == (stat >= t)


def test_stop_statistic_is_the_rolling_min_at_every_checked_prefix() -> None:
    rng = np.random.default_rng(11)
    for _ in range(300):
        x = rng.random(rng.integers(0, 15))
        sched = S(int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(1, 5)))
        ks, stat = sched.stop_statistic(x)
        checked = sched.checked_steps(len(x))
        p = sched.persist
        want = [min(x[checked[i - p + 1 : i + 1] - 1]) for i in range(p - 1, len(checked))]
        assert ks.tolist() == checked[p - 1 :].tolist()
        assert stat.tolist() == want


def test_the_live_streak_stops_where_first_stop_does_and_never_on_nan() -> None:
    from monitor.schedule import Streak

    rng = np.random.default_rng(0)
    for _ in range(300):
        sched = S(int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(1, 4)))
        scores = rng.uniform(0, 1, int(rng.integers(1, 15)))
        scores[rng.uniform(size=len(scores)) < 0.1] = np.nan
        t = float(rng.choice([0.3, 0.6, 0.9, np.nan, np.inf]))
        streak = Streak(sched)
        live = next(
            (k for k, s in enumerate(scores, 1) if streak.crossed(k, float(s), t) is not None),
            None,
        )
        assert live == sched.first_stop(scores, t)
    streak = Streak(S(1, 1, 1))
    assert streak.crossed(1, float("nan"), 0.5) is None
    assert streak.crossed(2, 0.7, float("nan")) is None
    assert streak.crossed(3, 0.7, 0.5) == {"score": 0.7, "threshold": 0.5}
