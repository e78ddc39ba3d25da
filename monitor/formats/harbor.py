"""Harbor trial folders (the Terminal-Bench 2 runner): one directory per trial.

Source of truth: laude-institute/harbor, `src/harbor/models/trial/` (TrialConfig, TrialResult,
TrialPaths) and docs/rfcs/0001-trajectory-format.md (ATIF). A job folder holds the job's own
`config.json` / `result.json` and one folder per trial, `<task>__<trial id>/`:

- `config.json`: TrialConfig `{task{path, name?, ...}, trial_name, agent{name, model_name},
  environment, verifier, job_id}`.
- `result.json`: TrialResult `{task_name, trial_name, agent_info{name, version,
  model_info{name}}, agent_result{n_input_tokens, n_cache_tokens, n_output_tokens, cost_usd},
  verifier_result{rewards{reward}}, exception_info{exception_type, ...}, started_at,
  finished_at}`; `reward` 1 = pass, 0 = fail, `verifier_result` null when the verifier did not
  run. Read as a label file (monitor.labels), as is `verifier/reward.txt` (the same reward).
- `agent/trajectory.json`: the run, in ATIF (read by monitor.formats.atif).

Names: the instance is the task (result's `task_name`, else config's task name or the last part
of its path, else the folder name without its `__<trial id>` suffix); the source is the job
folder (its name, e.g. the job name or start time Harbor gave it); the run is the trial id, so
several trials of one task are several runs of one instance.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from monitor.errors import TranscriptError
from monitor.formats import atif
from monitor.formats._fields import as_dict, as_float, as_int, as_str
from monitor.formats._layout import run_id
from monitor.textio import head_bytes, load_json
from monitor.types import Trajectory

NAME = "harbor"

TRAJECTORY = ("agent/trajectory.json", "agent/trajectory.json.gz")
RESULT = "result.json"
REWARD = "verifier/reward.txt"


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object in `path`, or {} when it is missing or unreadable (a trial cut short)."""
    try:
        data = load_json(path)
    except (TranscriptError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def sniff(path: Path, head: bytes) -> bool:
    """True for a trial directory: `config.json` naming a trial, beside `result.json` or `agent/`."""
    path = Path(path)
    if not path.is_dir() or not (path / "config.json").is_file():
        return False
    if not ((path / RESULT).is_file() or (path / "agent").is_dir()):
        return False
    try:
        config_head = head_bytes(path / "config.json", 8192)
    except TranscriptError:
        return False
    return b'"trial_name"' in config_head or (
        b'"task"' in config_head and b'"agent"' in config_head
    )


def trial_agent(result: dict[str, Any], config: dict[str, Any]) -> str:
    """The agent of a trial: its result's `agent_info.name`, else its config's `agent.name`
    ("" when neither names one)."""
    info, agent_cfg = as_dict(result.get("agent_info")), as_dict(config.get("agent"))
    return as_str(info.get("name")) or as_str(agent_cfg.get("name"))


def agent_in(trial_dir: Path) -> str:
    """`trial_agent` of the trial folder `trial_dir` (its result.json and config.json)."""
    trial_dir = Path(trial_dir)
    return trial_agent(_json_object(trial_dir / RESULT), _json_object(trial_dir / "config.json"))


def labels_in(path: Path) -> list[Path]:
    """The label files inside a trial folder: `result.json` and `verifier/reward.txt`."""
    return [p for p in (Path(path) / RESULT, Path(path) / REWARD) if p.is_file()]


def split_trial_name(name: str) -> tuple[str, str]:
    """`<task>__<trial id>` -> (task, trial id); a name without `__` is all task."""
    task, sep, trial = name.rpartition("__")
    return (task, trial) if sep and task else (name, "")


def task_of(trial_dir: Path, result: dict[str, Any] | None = None) -> tuple[str, str]:
    """(task, where it was found) of a trial folder."""
    trial_dir = Path(trial_dir)
    result = _json_object(trial_dir / RESULT) if result is None else result
    if as_str(result.get("task_name")):
        return as_str(result["task_name"]), f"{trial_dir / RESULT} task_name"
    task = as_dict(_json_object(trial_dir / "config.json").get("task"))
    if as_str(task.get("name")):
        return as_str(task["name"]), f"{trial_dir / 'config.json'} task.name"
    if as_str(task.get("path")):
        return PurePosixPath(as_str(task["path"])).name, f"{trial_dir / 'config.json'} task.path"
    return split_trial_name(trial_dir.name)[0], "trial folder name (before `__`)"


def reward_verdict(reward: Any) -> bool | None:
    """Harbor's reward -> verdict: 1 (or more) pass, a lower number fail, anything else none."""
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or reward != reward:
        return None  # (reward != reward: NaN)
    return float(reward) >= 1.0


def result_reward(result: dict[str, Any]) -> Any:
    """`verifier_result.rewards.reward` (None when the verifier did not run)."""
    return as_dict(as_dict(result.get("verifier_result")).get("rewards")).get("reward")


def read(path: Path) -> Trajectory:
    """Read a trial folder: its ATIF trajectory, named by the task, job and trial."""
    path = Path(path)
    if not path.is_dir():
        raise TranscriptError(path, "not a Harbor trial folder")
    file = next((path / t for t in TRAJECTORY if (path / t).is_file()), None)
    if file is None:
        raise TranscriptError(
            path, "Harbor trial without agent/trajectory.json (the agent wrote no ATIF)"
        )
    traj = atif.read(file)
    result = _json_object(path / RESULT)
    config = _json_object(path / "config.json")
    task, task_from = task_of(path, result)
    trial = split_trial_name(as_str(result.get("trial_name")) or path.name)[1] or path.name
    source = Path(path).absolute().parent.name
    agent_cfg = as_dict(config.get("agent"))
    info = as_dict(result.get("agent_info"))
    traj.instance_id = task
    traj.source = source
    traj.run = trial
    traj.id = run_id(source, trial, task)
    traj.path = str(path)
    traj.format = NAME  # the reader that was asked (`--format harbor`); the steps are ATIF's
    traj.agent = trial_agent(result, config) or traj.agent
    traj.model = (
        as_str(agent_cfg.get("model_name"))
        or as_str(as_dict(info.get("model_info")).get("name"))
        or traj.model
    )
    exc = as_dict(result.get("exception_info"))
    traj.exit_status = as_str(exc.get("exception_type")) or traj.exit_status
    agent_result = as_dict(result.get("agent_result"))
    if traj.totals.tokens_in is None and "n_input_tokens" in agent_result:
        traj.totals.tokens_in = as_int(agent_result.get("n_input_tokens"))
    if traj.totals.tokens_out is None and "n_output_tokens" in agent_result:
        traj.totals.tokens_out = as_int(agent_result.get("n_output_tokens"))
    if traj.totals.cost_usd is None:
        traj.totals.cost_usd = as_float(agent_result.get("cost_usd"))
    traj.resolved = None  # the verdict is joined from result.json / reward.txt (monitor.labels)
    traj.provenance = {
        "instance": task_from,
        "source": f"Harbor job folder {Path(path).absolute().parent}",
        "run": f"trial id of {path.name}",
    }
    return traj
