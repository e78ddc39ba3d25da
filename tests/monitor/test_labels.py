"""Label joiners: every label shape, verdict rules, scope and priority, real label files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from monitor.errors import LabelError
from monitor.label_join import LabelIndex, find_labels_near
from monitor.labels import load_label


def _write(path: Path, obj: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return path


def test_swebench_run_report(tmp_path: Path) -> None:
    lf = load_label(
        _write(
            tmp_path / "gpt4.run1.json",
            {
                "total_instances": 6,
                "completed_ids": ["a", "b", "c"],
                "resolved_ids": ["a"],
                "unresolved_ids": ["b"],
                "empty_patch_ids": ["d"],
                "error_ids": ["e"],
                "incomplete_ids": ["f"],
            },
        )
    )
    assert lf.kind == "swebench-run"
    assert [lf.verdict(i) for i in "abcdefg"] == [True, False, False, False, None, None, None]
    assert lf.named == set("abcdef")


def test_swebench_instance_reports_both_shapes(tmp_path: Path) -> None:
    keyed = load_label(
        _write(
            tmp_path / "src/logs/x__y-1/report.json",
            {"x__y-1": {"resolved": True, "patch_exists": True}},
        )
    )
    bare = load_label(
        _write(
            tmp_path / "src/logs/x__y-2/report.json",
            {"patch_is_None": False, "patch_exists": True, "resolved": False, "tests_status": {}},
        )
    )
    assert (keyed.kind, bare.kind) == ("swebench-instance", "swebench-instance")
    assert keyed.verdict("x__y-1") is True
    assert bare.verdict("x__y-2") is False
    assert bare.verdict("other") is None
    # Scope: the folder above logs/, so runs in src/trajs/... are covered.
    assert bare.scope == (tmp_path / "src").resolve()


def test_plain_lists_with_trailing_commas_warn(tmp_path: Path) -> None:
    text = '{\n "resolved": [\n  "a",\n  "b",\n ],\n "test_errored": ["c",],\n "applied": ["a", "b", "d"],\n}\n'
    lf = load_label(_write(tmp_path / "results.json", text))
    assert lf.kind == "resolved-lists"
    assert lf.warnings
    assert "trailing commas" in lf.warnings[0]
    assert [lf.verdict(i) for i in "abcdz"] == [True, True, None, False, False]
    assert lf.named == set("abcd")


def test_final_report_resolved_per_project(tmp_path: Path) -> None:
    lf = load_label(
        _write(
            tmp_path / "final_report.json",
            {
                "stats": {"resolved": 2},
                "resolved": 2,
                "resolved_per_project": {"p/q": ["a", "b"], "r/s": []},
            },
        )
    )
    assert lf.kind == "resolved-lists"
    assert (lf.verdict("a"), lf.verdict("b"), lf.verdict("c")) == (True, True, False)


def test_mini_summary(tmp_path: Path) -> None:
    lf = load_label(
        _write(
            tmp_path / "results_summary.json",
            {
                "instances": [
                    {"instance_id": "a", "resolved": True},
                    {"instance_id": "b", "resolved": "?"},
                ]
            },
        )
    )
    assert lf.kind == "mini-summary"
    assert (lf.verdict("a"), lf.verdict("b"), lf.verdict("c")) == (True, None, None)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("", "empty file"),
        ('{"resolved": [', "invalid JSON"),
        ('{"foo": 1}', "unknown label shape"),
        ("[1, 2]", "not a label"),
    ],
)
def test_bad_label_files(tmp_path: Path, content: str, match: str) -> None:
    path = _write(tmp_path / "report.json", content)
    with pytest.raises(LabelError, match=match) as info:
        load_label(path)
    assert info.value.path == str(path)


def test_index_scope_and_priority(tmp_path: Path) -> None:
    src = tmp_path / "src"
    lists = load_label(
        _write(src / "run1/report.json", {"resolved": ["a"], "generated": ["a", "b"]})
    )
    summary = load_label(
        _write(
            src / "results_summary.json", {"instances": [{"instance_id": "b", "resolved": True}]}
        )
    )
    index = LabelIndex([lists, summary])
    run1 = (src / "run1/bucket/a_2024").resolve()
    # A file that names the instance beats a deeper one that only gives its default.
    assert index.pick(run1, "a")[:2] == (True, lists)
    verdict, chosen, other = index.pick((src / "run1/x/b").resolve(), "b")
    assert (verdict, chosen) == (True, summary)
    assert other is None
    assert index.pick((src / "run1/x/c").resolve(), "c")[:2] == (False, lists)  # default
    assert index.pick((src / "run2/c").resolve(), "c") == (None, None, None)  # out of scope
    assert index.pick((tmp_path / "elsewhere/a").resolve(), "a") == (None, None, None)


def test_disagreeing_labels_reported(tmp_path: Path) -> None:
    inst = load_label(_write(tmp_path / "s/logs/a/report.json", {"a": {"resolved": False}}))
    summ = load_label(
        _write(
            tmp_path / "s/results_summary.json",
            {"instances": [{"instance_id": "a", "resolved": True}]},
        )
    )
    verdict, chosen, other = LabelIndex([summ, inst]).pick(
        (tmp_path / "s/trajs/a/a.traj.json").resolve(), "a"
    )
    assert (verdict, chosen, other) == (False, inst, summ)  # per-instance report wins


def test_real_label_files(data_dir: Path) -> None:
    coder = load_label(data_dir / "swe-bench-lite/coder-gpt4/results.json.gz")
    assert coder.kind == "resolved-lists"
    assert sum(v is True for v in coder.verdicts.values()) == 82
    assert coder.warnings  # not strict JSON as published
    acr = load_label(data_dir / "swe-bench-lite/autocoderover-gpt4/acr-run-1/report.json.gz")
    assert sum(v is True for v in acr.verdicts.values()) == 54
    swe = load_label(data_dir / "swe-bench-lite/swe-agent-gpt4/cost_2_1/final_report.json.gz")
    assert sum(v is True for v in swe.verdicts.values()) == 28
    mini = data_dir / "swe-bench-verified/mini-swe-agent-gemini-3-pro"
    summary = load_label(mini / "results_summary.json.gz")
    assert sum(v is True for v in summary.verdicts.values()) == 223
    report = load_label(mini / "logs/astropy__astropy-12907/report.json.gz")
    assert report.verdicts == {"astropy__astropy-12907": True}
    near = find_labels_near(
        mini / "trajs/astropy__astropy-12907/astropy__astropy-12907.traj.json.gz"
    )
    names = {p.name for p in near}
    assert "results_summary.json.gz" in names
    assert "report.json.gz" in names
