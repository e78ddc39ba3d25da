"""Featuriser: text layout, append-only windows, budgets, session == windows, real runs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.config import load_config
from monitor.errors import ConfigError
from monitor.featurise import (
    TOKEN_CUT_MARKER,
    Featuriser,
    FeaturiserConfig,
    Window,
    chunk_encode,
)
from monitor.render import clean, clean_head_tail, cut_marker, exit_code, render_pinned_edit
from monitor.signals import SignalTracker, signals_line
from monitor.types import Step, Trajectory


def byte_encode(text: str) -> list[int]:
    """One id per UTF-8 byte: unicode-heavy text costs up to 4 ids a character."""
    return list(text.encode("utf-8", "replace"))


def word_encode(text: str) -> list[int]:
    """Ids that depend on context across a join (like BPE): pieces must be encoded apart."""
    return [hash(w) % 1000 for w in text.split(" ")] if text else []


def make_traj(n: int, *, obs: str = "ok", task: str = "Fix the bug in foo.py") -> Trajectory:
    steps = [
        Step(i, tool="bash", action=f"cat file_{i}.py", observation=f"{obs} {i}") for i in range(n)
    ]
    return Trajectory(id="r", instance_id="i", agent="mini-swe-agent", task=task, steps=steps)


def session_windows(f: Featuriser, traj: Trajectory) -> list[Window]:
    """Rebuild windows from a live session, as a serving KV cache would see them."""
    sess = f.session(traj.task, traj.agent)
    out: list[Window] = []
    for step in traj.steps:
        ids, restarted = sess.add(step)
        if restarted or not out:
            out.append(Window(ids=list(ids), restarted=restarted))
        else:
            out[-1].ids += ids
        out[-1].boundaries.append(len(out[-1].ids) - 1)
        out[-1].steps.append(sess.k)
    return out


def check_windows(f: Featuriser, traj: Trajectory, windows: list[Window]) -> None:
    """Invariants every featurisation must satisfy."""
    budget = f.config.window_tokens
    header = f.session(traj.task, traj.agent).header_ids
    assert [k for w in windows for k in w.steps] == list(range(1, len(traj.steps) + 1))
    for i, w in enumerate(windows):
        assert 0 < len(w.ids) <= budget
        assert len(w.boundaries) == len(w.steps) >= 1
        assert w.boundaries == sorted(set(w.boundaries))
        assert w.boundaries[-1] == len(w.ids) - 1
        assert w.restarted == (i > 0)
        assert w.ids[: len(header)] == header
        assert w.boundaries[0] >= len(header)
        if i > 0:  # the new window carries on where the last one stopped
            assert w.steps[0] == windows[i - 1].steps[-1] + 1


# ---------------------------------------------------------------- text rendering


def test_header_and_step_layout() -> None:
    f = Featuriser(FeaturiserConfig(obs_head_chars=5, obs_tail_chars=3, action_chars=10))
    assert f.header("Fix  it\r\n\n\n\nnow", "swe-agent") == (
        "### agent: swe-agent\n### task:\nFix it\n\nnow\n"
    )
    assert f.header("T") == "### task:\nT\n"
    step = Step(
        2,
        tool="bash",
        role="Reproducer",
        action="python   -m\tpytest tests/test_a.py -x",
        observation="<returncode>1</returncode>\n\x1b[31mFAILED\x1b[0m"
        + " test_a  1234567890" * 4
        + " end",
        is_error=False,
    )
    text = f.render_step(step)
    obs = "FAILED" + " test_a 1234567890" * 4 + " end"
    assert text == (
        "\n### step 3 [Reproducer] bash: python -m "
        + cut_marker(len("python -m pytest tests/test_a.py -x") - 10)
        + "\n"
        + obs[:5]
        + cut_marker(len(obs) - 8)
        + obs[-3:]
        + "\n[error exit=1]\n"
    )
    msg = Step(0, kind="message", thought="I think", action="Let me think.", observation="")
    assert Featuriser().render_step(msg, 7) == "\n### step 7 <message> Let me think.\n"
    f2 = Featuriser(FeaturiserConfig(thought_chars=3))
    long_msg = Step(0, kind="message", thought="I think so " * 5, action="Hm.")
    assert (
        f2.render_step(long_msg, 1)
        == "\n### step 1 <message> Hm.\nthought: I t[... 51 chars cut ...]\n"
    )
    assert f2.render_step(msg, 7) == "\n### step 7 <message> Let me think.\nthought: I think\n"
    err = Step(
        0, tool="search_class", action="search_class(Foo)", observation="not found", is_error=True
    )
    assert Featuriser().render_step(err).endswith("not found\n[error]\n")
    assert f.render_step(err).endswith("not found\n[error]\n")  # a longer marker is not used


def test_clean_is_safe_for_hostile_text() -> None:
    hostile = "a\x00b\x1b[1;32mc\x1b]0;title\x07d\ud800e\u200bf\r\ng\x7f"
    out = clean(hostile)
    assert out == "abcd?e f\ng"
    out.encode("utf-8")  # never raises
    assert clean("x\n\n\n\n\ny", one_line=True) == "x y"
    assert exit_code("<returncode>127</returncode>\n<output>") == 127
    assert exit_code("no code here") is None


def test_huge_observation_is_cut_exactly_and_fast() -> None:
    big = "".join(chr(0x41 + i % 26) for i in range(1_000_000))  # 1 MB, no whitespace
    t0 = time.perf_counter()
    out = clean_head_tail(big, 300, 200)
    assert time.perf_counter() - t0 < 0.05
    assert out == big[:300] + cut_marker(1_000_000 - 500) + big[-200:]
    f = Featuriser(FeaturiserConfig(window_tokens=128), encode=byte_encode)
    traj = make_traj(3, obs="\U0001f600" * 1_000_000)
    windows = f.windows(traj)
    check_windows(f, traj, windows)


# ---------------------------------------------------------------- windows


def test_pieces_are_encoded_separately_and_appended() -> None:
    f = Featuriser(FeaturiserConfig(window_tokens=4096), encode=word_encode)
    traj = make_traj(4)
    (w,) = f.windows(traj)
    expected = word_encode(f.header(traj.task, traj.agent))
    bounds = []
    for step in traj.steps:
        expected += word_encode(f.render_step(step))
        bounds.append(len(expected) - 1)
    assert w.ids == expected
    assert w.boundaries == bounds
    assert w.steps == [1, 2, 3, 4]
    assert not w.restarted


def test_rerender_keeps_header_signals_and_recent_steps() -> None:
    cfg = FeaturiserConfig(window_tokens=256, keep_recent_frac=0.5)
    f = Featuriser(cfg)
    traj = make_traj(40, obs="x" * 120)
    windows = f.windows(traj)
    check_windows(f, traj, windows)
    assert len(windows) > 2
    header = chunk_encode(f.header(traj.task, traj.agent))
    piece = [chunk_encode(f.render_step(s)) for s in traj.steps]
    for w in windows[1:]:
        k = w.steps[0]
        tracker = SignalTracker()
        for s in traj.steps[:k]:
            tracker.update(s)
        sig = chunk_encode(signals_line(tracker.values()) + "\n")
        assert w.ids[: len(header) + len(sig)] == header + sig
        # the recent steps before k, then step k, fill at most keep_recent_frac of the window
        recent = w.ids[len(header) + len(sig) : w.boundaries[0] + 1]
        assert recent[-len(piece[k - 1]) :] == piece[k - 1]
        assert len(recent) <= 128
        kept, j = [], k - 1
        while sum(map(len, kept)) + len(piece[j - 1]) + len(piece[k - 1]) <= 128 and j > 0:
            kept.insert(0, piece[j - 1])
            j -= 1
        assert recent == [t for p in kept for t in p] + piece[k - 1]
        assert len(kept) >= 1  # a 256-token window keeps older context with these step sizes


def test_latest_edit_is_pinned_on_rerender_when_out_of_view() -> None:
    edit = "str_replace_editor str_replace /repo/a.py\nold: x = 1\nnew: x = 2"
    steps = [
        Step(
            index=i,
            tool="str_replace_editor" if i == 2 else "bash",
            action=edit if i == 2 else f"ls dir{i}",
            observation="file " * 20,
        )
        for i in range(40)
    ]
    traj = Trajectory(id="r", instance_id="i", agent="a", task="fix it", steps=steps)
    plain = Featuriser(FeaturiserConfig(window_tokens=256, keep_recent_frac=0.15))
    f = Featuriser(FeaturiserConfig(window_tokens=256, keep_recent_frac=0.15, pin_edit_chars=200))
    windows = f.windows(traj)
    check_windows(f, traj, windows)
    assert session_windows(f, traj) == windows
    assert plain.windows(traj)[0] == windows[0]  # nothing pinned before the first re-render
    pinned = chunk_encode(render_pinned_edit(steps[2], 3, chars=200))
    assert "new: x = 2" in render_pinned_edit(steps[2], 3, chars=200)  # newlines kept
    header = chunk_encode(f.header(traj.task, traj.agent))
    for w in windows[1:]:
        tracker = SignalTracker()
        for s in steps[: w.steps[0]]:
            tracker.update(s)
        start = len(header) + len(chunk_encode(signals_line(tracker.values()) + "\n"))
        assert w.restarted
        assert w.ids[start : start + len(pinned)] == pinned
    # the pinned block takes room, so the run needs more windows than without it
    assert len(windows) > len(plain.windows(traj))


def test_single_huge_step_is_cut_by_tokens() -> None:
    cfg = FeaturiserConfig(window_tokens=64, obs_head_chars=5000, obs_tail_chars=5000)
    f = Featuriser(cfg, encode=byte_encode)
    traj = make_traj(5, obs="y" * 50_000, task="t" * 5000)
    windows = f.windows(traj)
    check_windows(f, traj, windows)
    marker = byte_encode(TOKEN_CUT_MARKER)
    assert all(w.ids[-len(marker) :] == marker for w in windows)
    assert all(len(w.ids) == 64 - 64 // 8 for w in windows[:1])  # header + one cut piece


def test_every_config_field_changes_rendering_and_config_is_strict(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text("window_tokens: 512\nthought_chars: 20\n")
    cfg = load_config(FeaturiserConfig, path, ["keep_recent_frac=0.25"])
    assert (cfg.window_tokens, cfg.thought_chars, cfg.keep_recent_frac) == (512, 20, 0.25)
    with pytest.raises(ConfigError, match="window_tokenz"):
        load_config(FeaturiserConfig, None, ["window_tokenz=3"])
    with pytest.raises(ConfigError, match="window_tokens"):
        load_config(FeaturiserConfig, None, ["window_tokens=8"])


def test_from_tokenizer_file_bad_path(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="tokenizer.json"):
        Featuriser.from_tokenizer_file(bad)
    with pytest.raises(ConfigError, match="missing"):
        Featuriser.from_tokenizer_file(tmp_path / "missing")


# ---------------------------------------------------------------- properties

_any_text = st.text(st.characters(blacklist_categories=()), max_size=300)
_step = st.builds(
    Step,
    index=st.just(0),
    kind=st.sampled_from(["action", "message", "format_error", "submit", "compaction"]),
    thought=_any_text,
    tool=st.sampled_from(["", "bash", "str_replace_editor", "t\u00e9l\u00e9"]),
    action=_any_text,
    observation=st.one_of(_any_text, st.builds(lambda c, n: c * n, _any_text, st.integers(0, 400))),
    is_error=st.booleans(),
    role=st.sampled_from(["", "Manager", "Rep\x1b[0mro"]),
)
_config = st.builds(
    FeaturiserConfig,
    window_tokens=st.integers(64, 600),
    task_chars=st.integers(0, 2000),
    action_chars=st.integers(0, 500),
    obs_head_chars=st.integers(0, 400),
    obs_tail_chars=st.integers(0, 400),
    thought_chars=st.integers(0, 100),
    keep_recent_frac=st.floats(0.05, 1.0),
    pin_edit_chars=st.sampled_from([0, 0, 40, 400]),
)
_encode = st.sampled_from([chunk_encode, byte_encode, word_encode])
# hypothesis favours short lists; long runs are where windows restart
_steps = st.one_of(st.lists(_step, max_size=4), st.lists(_step, min_size=10, max_size=40))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=_config, encode=_encode, steps=_steps, task=_any_text)
def test_properties(cfg: FeaturiserConfig, encode, steps: list[Step], task: str) -> None:  # noqa: ANN001
    for i, s in enumerate(steps):
        s.index = i
    traj = Trajectory(id="r", instance_id="i", agent="a\u0301gent", task=task, steps=steps)
    f = Featuriser(cfg, encode)
    windows = f.windows(traj)
    check_windows(f, traj, windows)
    # deterministic, and a live session gives the same ids and boundaries
    assert Featuriser(cfg, encode).windows(traj) == windows
    assert session_windows(f, traj) == windows
    # append-only: the windows of prefix k are a prefix of those of prefix k+1
    prev: list[Window] = []
    for k in range(1, len(steps) + 1):
        cur = f.windows(
            Trajectory(id="r", instance_id="i", agent=traj.agent, task=task, steps=steps[:k])
        )
        assert cur[: len(prev) - 1] == prev[:-1]
        if prev and len(cur) == len(prev):
            assert cur[-1].ids[: len(prev[-1].ids)] == prev[-1].ids
            assert cur[-1].boundaries[:-1] == prev[-1].boundaries
        prev = cur


def test_real_tokenizer_file(tiny_model_dir: Path) -> None:
    """With a byte-level BPE tokenizer, hostile text round-trips and the decoded window is
    exactly header + step texts."""
    cfg = FeaturiserConfig(window_tokens=600)
    f = Featuriser.from_tokenizer_file(tiny_model_dir, cfg)
    assert Featuriser.from_tokenizer_file(tiny_model_dir / "tokenizer.json", cfg).encode("a b") == (
        f.encode("a b")
    )
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    traj = make_traj(30, obs="Traceback (most recent call last): Error \u00e9\u4e2d\U0001f600")
    traj.steps[7].observation = "\x1b[1m" + "z\u0300" * 100_000
    windows = f.windows(traj)
    check_windows(f, traj, windows)
    assert session_windows(f, traj) == windows
    assert len(windows) > 1
    first = windows[0]
    text = f.header(traj.task, traj.agent) + "".join(
        f.render_step(s) for s in traj.steps[: first.steps[-1]]
    )
    assert tok.decode(first.ids) == text
    for w in windows[1:]:
        decoded = tok.decode(w.ids)
        assert decoded.startswith(f.header(traj.task, traj.agent) + "[signals] steps=")
        if w.steps[-1] != 8:
            assert decoded.endswith(f.render_step(traj.steps[w.steps[-1] - 1]))
    (huge,) = [w for w in windows if 8 in w.steps]
    decoded = tok.decode(huge.ids)
    assert "\n### step 8 bash: cat file_7.py\n" + "z\u0300" * 20 in decoded
    assert TOKEN_CUT_MARKER in decoded


def _smollm2_tokenizer() -> Path:
    """The real SmolLM2 tokenizer, converted from the GGUF package on first use (~20 s)."""
    pytest.importorskip("torch")
    from training.model.backbone import resolve_base

    return resolve_base("smollm2-135m") / "tokenizer.json"


@pytest.mark.slow
def test_smollm2_tokenizer_budget_and_text() -> None:
    """The real model's tokenizer: the default window holds, decoded windows read back."""
    from tokenizers import Tokenizer

    path = _smollm2_tokenizer()
    f = Featuriser.from_tokenizer_file(path)
    tok = Tokenizer.from_file(str(path))
    assert f.encode("### step 1") == tok.encode("### step 1", add_special_tokens=False).ids
    traj = make_traj(60, obs="E   AssertionError: \u00e9\u00e8 " * 60, task="Fix it. " * 400)
    windows = f.windows(traj)
    check_windows(f, traj, windows)
    assert session_windows(f, traj) == windows
    assert tok.decode(windows[0].ids).startswith("### agent: mini-swe-agent\n### task:\nFix it.")
    assert max(len(w.ids) for w in windows) <= 1024 < sum(len(w.ids) for w in windows)


def test_tool_not_repeated_and_message_prose_shown() -> None:
    f = Featuriser()
    edit = Step(0, tool="edit", action="edit 1:1\nimport re\nend_of_edit", observation="done")
    assert f.render_step(edit) == "\n### step 1 edit 1:1 import re end_of_edit\ndone\n"
    search = Step(1, tool="search_class", action='search_class("Foo")', observation="")
    assert f.render_step(search) == '\n### step 2 search_class("Foo")\n'
    prose = Step(2, kind="message", thought="Based on the  results,\nthe bug is in x.", action="")
    assert f.render_step(prose) == "\n### step 3 <message> Based on the results, the bug is in x.\n"
    assert Featuriser(FeaturiserConfig(thought_chars=50)).render_step(prose) == f.render_step(prose)


REAL_RUNS = {
    "mini-swe-agent": "swe-bench-verified/mini-swe-agent-gemini-3-pro/trajs/*/*.traj.json*",
    "swe-agent": "swe-bench-lite/swe-agent-gpt4/cost_2_1/*.traj*",
    "coder": "swe-bench-lite/coder-gpt4/trajs/*.traj*",
    "autocoderover": "swe-bench-lite/autocoderover-gpt4/acr-run-1/applicable_patch/*/",
}


@pytest.mark.parametrize("agent", sorted(REAL_RUNS))
def test_real_runs(data_dir: Path, agent: str) -> None:
    """Real transcripts: invariants, session == windows, and the text reads back step by step."""
    from monitor.reading import read_trajectory

    paths = sorted(data_dir.glob(REAL_RUNS[agent]))[:3]
    assert paths, f"no {agent} runs under {data_dir}"
    f = Featuriser()
    small = Featuriser(FeaturiserConfig(window_tokens=256, keep_recent_frac=0.3))
    for path in paths:
        traj = read_trajectory(path)
        assert traj.agent == agent
        assert traj.steps
        for feat in (f, small):
            windows = feat.windows(traj)
            check_windows(feat, traj, windows)
            assert session_windows(feat, traj) == windows
        first = f.windows(traj)[0]
        text = f.header(traj.task, traj.agent) + "".join(
            f.render_step(s, k) for k, s in enumerate(traj.steps[: first.steps[-1]], 1)
        )
        assert first.ids == chunk_encode(f.header(traj.task, traj.agent)) + [
            i
            for k, s in enumerate(traj.steps[: first.steps[-1]], 1)
            for i in chunk_encode(f.render_step(s, k))
        ]
        assert text.count("\n### step ") == first.steps[-1]
