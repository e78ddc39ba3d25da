"""The layouts users have (issue 21): SWE-bench harness report trees, Harbor trial folders, Aider
transcripts, symlinked run folders. Fixtures are built here from the formats' public
descriptions (see monitor/formats/harbor.py, aider.py and monitor/labels.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from monitor.reading import Problem, Scan, read_runs
from training.cli import main

FIXTURES = Path(__file__).parents[1] / "fixtures"
ATIF = FIXTURES / "atif_constructed_v1.json"


def _mini_traj(instance: str) -> dict:
    return {
        "info": {"exit_status": "Submitted", "submission": "diff", "mini_version": "2.0.0"},
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": f"<pr_description>fix {instance}</pr_description>"},
            {"role": "assistant", "content": "Look.\n```bash\nls\n```"},
            {"role": "user", "content": "<returncode>0</returncode><output>a.py</output>"},
        ],
        "trajectory_format": "mini-swe-agent-1.1",
        "instance_id": instance,
    }


def _report(instance: str, resolved: bool) -> dict:
    return {
        instance: {
            "patch_is_None": False,
            "patch_exists": True,
            "patch_successfully_applied": True,
            "resolved": resolved,
            "tests_status": {"FAIL_TO_PASS": {"success": [], "failure": []}},
        }
    }


def _read(*paths: Path) -> tuple[list, list[Problem]]:
    problems: list[Problem] = []
    runs = list(read_runs(paths, problems=problems))
    return runs, problems


@pytest.mark.parametrize("tree", ["eval_results/{model}", "logs/run_evaluation/rid/{model}"])
def test_swebench_harness_tree_labels_the_run_beside_it(tmp_path: Path, tree: str) -> None:
    """`<run>/<instance>/<instance>.traj.json` + a report tree: named by the run, all joined."""
    run = tmp_path / "swe-bench-verified" / "20251101_mini-v2_gpt5"
    verdicts = {"astropy__astropy-12907": True, "django__django-11099": False}
    for instance, resolved in verdicts.items():
        (run / instance).mkdir(parents=True)
        (run / instance / f"{instance}.traj.json").write_text(json.dumps(_mini_traj(instance)))
        rep = run / tree.format(model="gpt-5") / instance
        rep.mkdir(parents=True)
        (rep / "report.json").write_text(json.dumps(_report(instance, resolved)))
        (rep / "test_output.txt").write_text("ok")
    # a second run of one instance elsewhere under the benchmark folder is not labelled by it
    other = tmp_path / "swe-bench-verified" / "other-run" / "django__django-11099"
    other.mkdir(parents=True)
    (other / "django__django-11099.traj.json").write_text(
        json.dumps(_mini_traj("django__django-11099"))
    )
    runs, problems = _read(tmp_path / "swe-bench-verified")
    by_source = {(t.source, t.instance_id): t for t in runs}
    assert {t.source for t in runs} == {"20251101_mini-v2_gpt5", "other-run"}
    assert by_source["20251101_mini-v2_gpt5", "astropy__astropy-12907"].resolved is True
    assert by_source["20251101_mini-v2_gpt5", "django__django-11099"].resolved is False
    assert by_source["other-run", "django__django-11099"].resolved is None
    reasons = [p.reason for p in problems]
    assert not any("with no run here" in r for r in reasons), reasons
    assert any("1 run(s) that no label file covers" in r for r in reasons), reasons


def _harbor_trial(job: Path, task: str, trial: str, reward: float | None) -> Path:
    d = job / f"{task}__{trial}"
    (d / "agent").mkdir(parents=True)
    (d / "verifier").mkdir()
    config = {
        "task": {"path": f"tasks/{task}", "source": "terminal-bench"},
        "trial_name": d.name,
        "agent": {"name": "terminus-2", "model_name": "openai/gpt-5"},
        "job_id": "0b7c",
    }
    (d / "config.json").write_text(json.dumps(config))
    result = {
        "task_name": task,
        "trial_name": d.name,
        "agent_info": {"name": "terminus-2", "version": "2.0.0"},
        "agent_result": {"n_input_tokens": 1200, "n_output_tokens": 300, "cost_usd": 0.01},
        "verifier_result": None if reward is None else {"rewards": {"reward": reward}},
        "exception_info": None,
    }
    (d / "result.json").write_text(json.dumps(result))
    if reward is not None:
        (d / "verifier" / "reward.txt").write_text(f"{reward}\n")
    shutil.copy(ATIF, d / "agent" / "trajectory.json")
    return d


def test_harbor_job_folder(tmp_path: Path) -> None:
    """Trials named by task, source = job, several trials = several runs, reward joined."""
    job = tmp_path / "jobs" / "tb2-gpt5"
    job.mkdir(parents=True)
    (job / "config.json").write_text(json.dumps({"job_name": "tb2-gpt5", "agents": []}))
    (job / "result.json").write_text(json.dumps({"id": "0b7c", "n_total_trials": 3, "stats": {}}))
    _harbor_trial(job, "hello-world", "AbCd123", 1.0)
    _harbor_trial(job, "hello-world", "ZyXw987", 0.0)
    _harbor_trial(job, "fix-git", "Qq11", None)  # the verifier did not run
    runs, problems = _read(tmp_path / "jobs")
    got = sorted((t.source, t.instance_id, t.run, t.resolved) for t in runs)
    assert got == [
        ("tb2-gpt5", "fix-git", "Qq11", None),
        ("tb2-gpt5", "hello-world", "AbCd123", True),
        ("tb2-gpt5", "hello-world", "ZyXw987", False),
    ]
    assert all(t.agent == "terminus-2" for t in runs)
    assert all(t.model == "openai/gpt-5" for t in runs)
    assert {t.format for t in runs} == {"harbor"}
    assert all(t.totals.cost_usd is not None for t in runs)
    assert problems == []  # the job's own config.json and result.json are no runs, no verdicts


def test_harbor_trial_without_atif_is_reported_and_its_verdict_names_no_run(
    tmp_path: Path,
) -> None:
    job = tmp_path / "job"
    _harbor_trial(job, "ok-task", "t1", 1.0)
    broken = _harbor_trial(job, "lost-task", "t2", 0.0)
    (broken / "agent" / "trajectory.json").unlink()  # the agent wrote no ATIF
    runs, problems = _read(job)
    assert [t.instance_id for t in runs] == ["ok-task"]
    reasons = {Path(p.path).name: p.reason for p in problems}
    assert "wrote no ATIF" in reasons[broken.name]
    assert reasons["result.json"] == "names 1 instance(s) with no run here: lost-task"
    assert len(problems) == 3  # the folder, its result.json and its reward.txt


def test_harbor_reward_txt_alone_and_disagreement(tmp_path: Path) -> None:
    job = tmp_path / "job"
    d = _harbor_trial(job, "sqlite", "t1", 1.0)
    (d / "result.json").unlink()  # only verifier/reward.txt left
    (runs, problems) = _read(job)
    assert [(t.instance_id, t.resolved) for t in runs] == [("sqlite", True)]
    d2 = _harbor_trial(job, "regex", "t2", 1.0)
    (d2 / "verifier" / "reward.txt").write_text("0\n")
    runs, problems = _read(job)
    assert {t.instance_id: t.resolved for t in runs} == {"sqlite": True, "regex": True}
    assert any("labels disagree" in p.reason for p in problems)
    (d2 / "verifier" / "reward.txt").write_text("n/a\n")
    _, problems = _read(job)
    assert any("does not hold a number" in p.reason for p in problems)


def test_aider_harness_transcripts_with_results_json(tmp_path: Path) -> None:
    """`<sub>/trajs/<instance>.md` + `<sub>/results/results.json`: one run per file."""
    sub = tmp_path / "evaluation" / "lite" / "20240523_aider"
    (sub / "trajs").mkdir(parents=True)
    (sub / "results").mkdir()
    for instance in ("astropy__astropy-12907", "sympy__sympy-20590"):
        shutil.copy(FIXTURES / "aider_constructed_harness.md", sub / "trajs" / f"{instance}.md")
    (sub / "results" / "results.json").write_text(
        json.dumps({"resolved": ["astropy__astropy-12907"], "no_generation": []})
    )
    (sub / "README.md").write_text("# Aider\nnot a transcript\n")
    runs, problems = _read(tmp_path / "evaluation")
    got = sorted((t.source, t.instance_id, t.resolved, t.format) for t in runs)
    assert got == [
        ("20240523_aider", "astropy__astropy-12907", True, "aider"),
        ("20240523_aider", "sympy__sympy-20590", False, "aider"),
    ]
    assert problems == []
    # the two attempts of the file are one run; the second starts with a "new attempt" step
    steps = runs[0].steps
    assert [s.action for s in steps if s.tool == "aider"] == ["new attempt 2"]
    assert sum(s.kind == "format_error" for s in steps) == 1
    assert any(s.is_error and "F821" in s.observation for s in steps)
    assert runs[0].model == "gpt-4o"
    assert steps[0].tokens_in == 14711
    assert not steps[0].tokens_estimated


def test_aider_chat_history_sessions_are_runs(tmp_path: Path) -> None:
    repo = tmp_path / "myrepo"
    repo.mkdir()
    shutil.copy(FIXTURES / "aider_constructed_history.md", repo / ".aider.chat.history.md")
    runs, _ = _read(tmp_path)
    assert [(t.instance_id, t.run, len(t.steps)) for t in runs] == [
        ("myrepo", "session-1", 2),
        ("myrepo", "session-2", 1),
    ]
    first = runs[0].steps
    assert first[0].tokens_in == 2100
    assert first[0].tokens_out == 95
    # the user's /test after the edit failed: the edit's observation says so
    assert first[0].is_error
    assert "1 failed, 2 passed" in first[0].observation
    assert not first[1].is_error
    assert first[1].cost_usd == 0.009


def _linked_data_set(tmp_path: Path, n: int) -> tuple[Path, Path]:
    """Real runs in store/, a data set of links to them, with a label file beside the links."""
    store = tmp_path / "store"
    ds = tmp_path / "my-dataset"
    ds.mkdir()
    resolved = []
    for i in range(n):
        inst = f"proj__proj-{i:03d}"
        d = store / inst
        d.mkdir(parents=True)
        traj = _mini_traj(inst)
        # long enough runs to calibrate on, with errors in the failing ones
        for k in range(6):
            failing = i % 2 == 1
            traj["messages"] += [
                {"role": "assistant", "content": f"Step {k}.\n```bash\npython t{k % 3}.py\n```"},
                {
                    "role": "user",
                    "content": f"<returncode>{1 if failing else 0}</returncode><output>"
                    f"{'Error' if failing else 'ok'} {k}</output>",
                },
            ]
        (d / f"{inst}.traj.json").write_text(json.dumps(traj))
        (ds / inst).symlink_to(d, target_is_directory=True)
        if i % 2 == 0:
            resolved.append(inst)
    summary = {
        "instances": [
            {"instance_id": f"proj__proj-{i:03d}", "resolved": f"proj__proj-{i:03d}" in resolved}
            for i in range(n)
        ]
    }
    (ds / "results_summary.json").write_text(json.dumps(summary))
    return store, ds


def test_symlinked_run_folders_ingest_once_with_loops_reported(tmp_path: Path) -> None:
    store, ds = _linked_data_set(tmp_path, 4)
    (ds / "again").symlink_to(store / "proj__proj-000", target_is_directory=True)
    (ds / "loop").symlink_to(ds, target_is_directory=True)  # back to the folder above
    scanned = Scan()
    problems: list[Problem] = []
    runs = list(read_runs([ds], problems=problems, scanned=scanned))
    assert sorted(t.instance_id for t in runs) == [f"proj__proj-{i:03d}" for i in range(4)]
    assert {t.source for t in runs} == {"my-dataset"}
    assert [t.resolved for t in sorted(runs, key=lambda t: t.instance_id)] == [
        True,
        False,
        True,
        False,
    ]
    assert scanned.links == 6  # four run folders, `again` and `loop`
    reasons = sorted(p.reason for p in problems)
    assert len(reasons) == 2, reasons
    assert reasons[0].startswith("same folder as")
    assert "already read" in reasons[0]
    assert reasons[1].startswith("symbolic link loop")


def test_symlinked_data_set_ingest_counts_links(tmp_path: Path, capsys) -> None:
    """The CLI on a folder of links: every run read and labelled, the links counted."""
    _, ds = _linked_data_set(tmp_path, 6)
    assert main(["ingest", str(ds), "--out", str(tmp_path / "corpus")]) == 0
    out = capsys.readouterr().out
    assert "6 runs" in out
    assert "6 symbolic link(s) followed" in out
    written = json.loads((tmp_path / "corpus" / "summary.json").read_text())
    assert written["links_followed"] == 6
    assert written["sources"]["my-dataset"]["resolved"] == 3
    assert written["sources"]["my-dataset"]["unknown"] == 0


def test_inspect_shows_where_names_and_verdict_came_from(tmp_path: Path, capsys) -> None:
    job = tmp_path / "job-7"
    d = _harbor_trial(job, "hello-world", "AbCd123", 1.0)
    assert main(["inspect", str(d), "--steps", "0"]) == 0
    out = capsys.readouterr().out
    assert "instance: hello-world" in out
    assert "task_name" in out
    assert "source:   job-7" in out
    assert "Harbor job folder" in out
    assert "label:    resolved" in out
    assert "result.json" in out
