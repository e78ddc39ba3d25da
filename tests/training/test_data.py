"""Data stage: instance splits, prefix examples and weights, runs from a corpus."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from monitor.errors import ConfigError  # noqa: E402
from monitor.schedule import Schedule  # noqa: E402
from monitor.types import Step, Trajectory  # noqa: E402
from training.data.examples import (  # noqa: E402
    even_weights,
    prefix_examples,
    run_weights,
    savings_weights,
)
from training.data.runs import balanced_subset, labelled_runs, stratified_subsample  # noqa: E402
from training.data.splits import load_splits, make_splits, save_splits  # noqa: E402
from training.model.cache import run_hash  # noqa: E402

EVERY_STEP = Schedule(min_steps=1, every=1, persist=1)


def test_splits_do_not_leak(runs, tmp_path):
    s = make_splits(runs, fractions=(0.5, 0.25, 0.25), seed=3)
    parts = [set(s.train), set(s.val), set(s.test)]
    assert not (parts[0] & parts[1])
    assert not (parts[0] & parts[2])
    assert not (parts[1] & parts[2])
    assert set().union(*parts) == {r.instance_id for r in runs}
    assert (len(s.train), len(s.val), len(s.test)) == (8, 4, 4)
    for r in runs:  # every run of an instance is in the split of its instance
        assert r in s.select(runs, s.of(r.instance_id))
    assert make_splits(runs, fractions=(0.5, 0.25, 0.25), seed=3) == s
    assert make_splits(runs, fractions=(0.5, 0.25, 0.25), seed=4).train != s.train
    save_splits(tmp_path / "splits.json", s)
    assert load_splits(tmp_path / "splits.json") == s
    d = s.to_dict()
    d["val"].append(d["train"][0])
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(ConfigError, match="in both train and val"):
        load_splits(tmp_path / "bad.json")


def test_examples_weights_and_unknown_labels(runs):
    extra = Trajectory(
        id="x", instance_id="inst-x", agent="alpha", steps=runs[0].steps, resolved=None
    )
    lab = labelled_runs([*runs, extra])
    assert len(lab.runs) == len(runs)
    assert lab.unknown == {"alpha": 1}
    w = run_weights(lab.runs, balance="agent_class")
    assert w.mean() == pytest.approx(1.0)
    cells: dict = {}
    for r, wi in zip(lab.runs, w, strict=True):
        cells[(r.agent, r.resolved)] = cells.get((r.agent, r.resolved), 0) + wi
    assert len(cells) == 4
    assert np.allclose(list(cells.values()), len(runs) / 4)
    sched = Schedule(min_steps=2, every=2)
    ex = prefix_examples(lab.runs, schedule=sched, weights=w)
    for i, r in enumerate(lab.runs):  # each run carries its run weight, spread over its prefixes
        assert ex.weight[ex.run == i].sum() == pytest.approx(w[i])
        assert ex.step[ex.run == i].tolist() == sched.checked_steps(len(r.steps)).tolist()
    assert set(ex.label[ex.run == 0]) == {0 if lab.runs[0].resolved else 1}
    sub = stratified_subsample(lab.runs, 20, seed=0)
    assert len(sub) <= 22
    assert {r.agent for r in sub} == {"alpha", "beta"}


def _run(rid: str, agent: str, tokens: list[int], resolved: bool) -> Trajectory:
    steps = [Step(index=i, action=f"ls {i}", tokens_in=t) for i, t in enumerate(tokens)]
    return Trajectory(id=rid, instance_id=rid, agent=agent, steps=steps, resolved=resolved)


def test_savings_weights_follow_the_tokens_a_stop_saves():
    runs = [
        _run("f-long", "a", [100, 100, 100, 100, 600], False),  # 1,000 tokens, most at the end
        _run("f-short", "a", [100, 100, 100, 100, 100], False),  # 500
        _run("ok", "a", [100, 100, 100, 100, 100], True),  # 500
        _run("f-other", "b", [10, 10, 10, 10, 10], False),  # its agent's only run: scale 1
    ]
    sched = Schedule(min_steps=2, every=1, persist=1)
    ex = prefix_examples(runs, schedule=sched, weights=np.ones(4))
    assert savings_weights(runs, ex, None) is ex  # off: nothing changes
    for power in (0.0, 1.0, 2.0):
        sw = savings_weights(runs, ex, power)
        assert sw.run.tolist() == ex.run.tolist()
        assert sw.step.tolist() == ex.step.tolist()
        w = {i: sw.weight[sw.run == i] for i in range(4)}
        assert w[2].tolist() == ex.weight[ex.run == 2].tolist()  # resolved: the even spread
        # a run's weight is (its tokens / its agent's mean run tokens) ** power: 1000 / 666.7
        assert w[0].sum() == pytest.approx(1.5**power)
        assert w[1].sum() == pytest.approx(0.75**power)
        assert w[3].sum() == pytest.approx(1.0)
        # spread over k = 2..5 in proportion to the share of tokens after step k (+ 1e-3)
        left = np.array([800, 700, 600, 0]) / 1000 + 1e-3
        assert np.allclose(w[0], 1.5**power * left / left.sum())
        assert np.all(np.diff(w[1]) < 0)  # earlier prefixes save more: they weigh more
    assert savings_weights(runs, prefix_examples([], schedule=sched), 1.0).weight.size == 0
    # the even spread back (what the signals LR trains on), from any weights the set carries
    for balance in ("agent_class", "none"):
        even = prefix_examples(runs, schedule=sched, weights=run_weights(runs, balance=balance))
        got = even_weights(runs, savings_weights(runs, even, 2.0), balance)
        assert np.allclose(got, even.weight)


def test_balanced_subset_caps_each_agent_and_label(runs):
    cells: dict = {}
    for r in runs:
        cells[(r.agent, bool(r.resolved))] = cells.get((r.agent, bool(r.resolved)), 0) + 1
    n = min(cells.values()) - 1
    sub = balanced_subset(runs, n, seed=0)
    got: dict = {}
    for r in sub:
        got[(r.agent, bool(r.resolved))] = got.get((r.agent, bool(r.resolved)), 0) + 1
    assert got == dict.fromkeys(cells, n)
    assert len({r.id for r in sub}) == len(sub)
    # seeded and independent of the input order; another seed draws other runs
    assert [r.id for r in balanced_subset(runs[::-1], n, seed=0)] == [r.id for r in sub]
    assert balanced_subset(runs, n, seed=1) != sub
    assert len(balanced_subset(runs, 10**6, seed=0)) == len(runs)


def test_load_runs_from_an_ingest_folder_keeps_cache_keys(runs, tmp_path):
    from monitor.corpus import write_corpus
    from training.data.runs import load_runs

    write_corpus(runs, tmp_path)
    again = load_runs([tmp_path])
    assert [r.id for r in again] == [r.id for r in runs]
    assert [r.resolved for r in again] == [r.resolved for r in runs]
    # the feature cache is keyed by content: a corpus round trip must not invalidate it
    assert [run_hash(r) for r in again] == [run_hash(r) for r in runs]
