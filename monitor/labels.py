"""Label joiners: SWE-bench verdict files -> `Trajectory.resolved` (True / False / None).

Shapes read (see shared FORMATS.md, "Labels"):

- SWE-bench per-instance `report.json` (`logs/.../<instance>/report.json`):
  `{instance_id: {resolved, patch_is_None, patch_exists, ...}}`, or the inner object alone
  (then the instance is the folder's name). Labels runs under the folder
  above `logs/` (or above the instance folder when there is no `logs/`).
- SWE-bench run report (`<model>.<run_id>.json`, multi-swe-bench / SWE-bench experiments
  `results/results.json`): `resolved_ids` (some copies name it `resolved`, a list) -> True;
  `unresolved_ids`, `empty_patch_ids`, `empty_error_patch_ids` and `completed_ids` not resolved
  -> False; `error_ids`, `incomplete_ids` and ids it does not name -> None (no verdict).
- Plain lists (SWE-agent `final_report.json`, AutoCodeRover `report.json`, CodeR `results.json`,
  the last not strict JSON: read leniently, with a warning): `resolved` (a list, or the lists of
  `resolved_per_project`) -> True; the harness-error lists `install_fail`, `reset_failed`,
  `test_errored` -> None; every other run under the file's folder -> False (these reports cover
  the whole run: an instance with no generated patch did not resolve). `test_timeout` counts as a
  verdict (tests ran past the limit: unresolved).
- mini-swe-agent `results_summary.json`: `instances[]{instance_id, resolved}`; ids not listed
  -> None.
- Moatless Tools `result.json` (note the name): plain lists as above.

A label file labels the runs under its folder; one inside a `results/` folder (the SWE-bench
experiments and Multi-SWE-bench layout, `<submission>/results/results.json` beside
`<submission>/trajs/`) labels the runs of the submission folder above it. A label file given
explicitly (`--labels FILE`) labels every run it names, wherever the run lies, and wins over the
files found beside the runs. When several apply to one run: files that name its instance before
files that only give a default, then explicit first, then the one whose folder is deepest, then
per-instance report, run report, summary, plain lists.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from monitor.errors import LabelError, TranscriptError
from monitor.formats._layout import CONTAINERS
from monitor.formats.harbor import result_reward, reward_verdict, task_of
from monitor.textio import load_json, strip_gz

LABEL_NAMES = frozenset(
    {"report.json", "final_report.json", "results.json", "result.json", "results_summary.json"}
)
REWARD_NAME = "reward.txt"  # Harbor's verifier/reward.txt; found only inside trial folders
"""File names (after `.gz`) that hold verdicts; other JSON files are tried when no reader fits."""

_HARNESS_ERRORS = ("install_fail", "reset_failed", "test_errored")
_UNRESOLVED_IDS = ("completed_ids", "unresolved_ids", "empty_patch_ids", "empty_error_patch_ids")
RESULTS_FOLDER = "results"  # `<submission>/results/` holds the label files of `<submission>/`
PRIORITY = {
    "harbor-trial": 0,
    "harbor-reward": 1,  # verifier/reward.txt: after the result.json beside it
    "swebench-instance": 0,
    "swebench-run": 1,
    "mini-summary": 2,
    "resolved-lists": 3,
    "harbor-job": 4,
}


@dataclass
class LabelFile:
    """The verdicts of one label file.

    Attributes:
        path: the file.
        kind: "swebench-instance", "swebench-run", "resolved-lists" or "mini-summary".
        scope: the folder whose runs it labels.
        verdicts: instance_id -> True / False / None for the ids it names with a verdict rule.
        default: verdict for runs in scope that it does not name (False for plain lists).
        named: every instance id the file names (to report ids with no run).
        warnings: notes about the file (e.g. read leniently).
        explicit: given by the user (`--labels`): covers every run and wins over found files.
    """

    path: Path
    kind: str
    scope: Path
    verdicts: dict[str, bool | None] = field(default_factory=dict)
    default: bool | None = None
    named: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)
    explicit: bool = False
    _cached: tuple[Path, tuple[str, ...]] | None = field(default=None, repr=False, compare=False)

    def covers(self, run_path: Path) -> bool:
        """True when the run at `run_path` (an absolute path) lies under the scope, as written
        or with its symbolic links resolved."""
        if self.explicit:
            return True
        run = str(run_path)
        return any(run.startswith(p) or run == p[:-1] for p in self._prefixes)

    @property
    def _prefixes(self) -> tuple[str, ...]:
        if self._cached is None or self._cached[0] != self.scope:
            real = os.path.realpath(self.scope)
            both = {os.path.join(str(self.scope), ""), os.path.join(real, "")}
            self._cached = (self.scope, tuple(sorted(both)))
        return self._cached[1]

    def verdict(self, instance_id: str) -> bool | None:
        """The verdict for `instance_id` (the default when the file does not name it)."""
        return self.verdicts.get(instance_id, self.default)


def _ids(x: Any) -> list[str]:
    return [i for i in x if isinstance(i, str)] if isinstance(x, list) else []


def _scope_of_instance_report(path: Path, instance_id: str) -> Path:
    """The folder a per-instance report labels.

    - `<run>/logs/.../report.json` (the harness's `logs/run_evaluation/<run_id>/<model>/
      <instance>/`, or `logs/<instance>/`): the folder above `logs`.
    - `<run>/<instance>/report.json` beside the run's own files (`<instance>.traj.json`): <run>.
    - a copy of the harness tree under another name (`<run>/eval_results/<model>/<instance>/`):
      the nearest folder above the tree that holds the instance's run (an entry named after the
      instance, or a `trajs/`-like folder), else the folder three levels up.
    """
    parts = path.parent.parts
    if "logs" in parts:
        i = len(parts) - 1 - parts[::-1].index("logs")
        return Path(*parts[:i])
    folder = path.parent
    if folder.name != instance_id or _names(folder, instance_id, skip="report.json"):
        return folder.parent
    above = list(folder.parents)
    for branch, candidate in zip(above[:2], above[1:3], strict=False):
        if _names(candidate, instance_id, skip=branch.name, containers=True):
            return candidate
    return above[2] if len(above) > 2 else folder.parent


def _names(folder: Path, instance_id: str, *, skip: str, containers: bool = False) -> bool:
    """True when `folder` has an entry (other than `skip`) named after the instance, or (with
    `containers`) a folder of runs such as `trajs/`."""
    try:
        names = [e.name for e in os.scandir(folder) if not e.name.startswith(skip)]
    except OSError:
        return False
    return any(n.startswith(instance_id) or (containers and n in CONTAINERS) for n in names)


def _folder_scope(path: Path) -> Path:
    """The folder a run-level label file labels: its own, or the submission folder above a
    `results/` folder."""
    return path.parent.parent if path.parent.name == RESULTS_FOLDER else path.parent


def _is_run_report(data: dict[str, Any]) -> bool:
    """A SWE-bench run report: `resolved_ids`, or a `resolved` list beside `*_ids` lists."""
    if "resolved_ids" in data:
        return True
    return isinstance(data.get("resolved"), list) and any(
        k in data for k in ("unresolved_ids", "completed_ids", "empty_error_patch_ids")
    )


def _run_report(path: Path, data: dict[str, Any]) -> LabelFile:
    lf = LabelFile(path, "swebench-run", _folder_scope(path))
    for key in _UNRESOLVED_IDS:
        lf.verdicts.update(dict.fromkeys(_ids(data.get(key)), False))
    for key in ("error_ids", "incomplete_ids"):
        for i in _ids(data.get(key)):
            lf.verdicts.setdefault(i, None)
    resolved = _ids(data.get("resolved_ids")) + _ids(data.get("resolved"))
    failed = {i for k in _UNRESOLVED_IDS if k != "completed_ids" for i in _ids(data.get(k))}
    both = sorted(failed.intersection(resolved))  # completed_ids holds resolved ones too
    if both:
        lf.warnings.append(
            f"{path}: {len(both)} ids listed as resolved and as unresolved (e.g. {both[0]}); "
            "counted as resolved"
        )
    lf.verdicts.update(dict.fromkeys(resolved, True))
    lf.named = {i for k, v in data.items() if k.endswith("_ids") for i in _ids(v)}
    lf.named |= set(resolved)
    return lf


def parse_label(path: Path, data: Any) -> LabelFile:
    """Classify parsed label JSON and read its verdicts; LabelError when no shape fits."""
    path = Path(os.path.abspath(path))  # not resolve(): a label beside linked runs keeps its place
    if not isinstance(data, dict) or not data:
        raise LabelError(path, "not a label file (expected a JSON object with verdicts)")
    if _is_run_report(data):
        return _run_report(path, data)
    if "verifier_result" in data or ("trial_name" in data and "task_name" in data):
        return _harbor_trial(path, data)
    if "n_total_trials" in data:
        # A Harbor job's result.json: counts and reward stats by trial name; the trials' own
        # result.json files carry the verdicts, so this one labels nothing.
        return LabelFile(path, "harbor-job", path.parent)
    if isinstance(data.get("instances"), list):
        lf = LabelFile(path, "mini-summary", _folder_scope(path))
        for item in data["instances"]:
            if isinstance(item, dict) and isinstance(item.get("instance_id"), str):
                r = item.get("resolved")
                lf.verdicts[item["instance_id"]] = r if isinstance(r, bool) else None
        lf.named = set(lf.verdicts)
        return lf
    resolved = _ids(data.get("resolved"))
    per_project = data.get("resolved_per_project")
    if isinstance(per_project, dict):
        resolved += [i for v in per_project.values() for i in _ids(v)]
    if isinstance(data.get("resolved"), bool) and (
        "tests_status" in data or "patch_exists" in data
    ):
        # A per-instance report.json without the instance-id key: the folder names the instance.
        lf = LabelFile(path, "swebench-instance", _scope_of_instance_report(path, path.parent.name))
        lf.verdicts[path.parent.name] = data["resolved"]
        lf.named = set(lf.verdicts)
        return lf
    count = data.get("resolved")
    if resolved or (isinstance(count, (list, int)) and not isinstance(count, bool)):
        lf = LabelFile(path, "resolved-lists", _folder_scope(path), default=False)
        for key in _HARNESS_ERRORS:
            lf.verdicts.update(dict.fromkeys(_ids(data.get(key)), None))
        lf.verdicts.update(dict.fromkeys(resolved, True))
        lf.named = {i for v in data.values() if isinstance(v, list) for i in _ids(v)}
        lf.named |= set(resolved)
        return lf
    reports = {k: v for k, v in data.items() if isinstance(v, dict) and "resolved" in v}
    if reports and len(reports) == len(data):
        first = next(iter(reports))
        lf = LabelFile(path, "swebench-instance", _scope_of_instance_report(path, first))
        for iid, rep in reports.items():
            r = rep.get("resolved")
            lf.verdicts[iid] = r if isinstance(r, bool) else None
        lf.named = set(lf.verdicts)
        return lf
    raise LabelError(
        path,
        "unknown label shape (no resolved_ids, instances, resolved lists or per-instance reports)",
    )


def _harbor_trial(path: Path, data: dict[str, Any]) -> LabelFile:
    """A Harbor trial's result.json: `verifier_result.rewards.reward` labels the trial's task."""
    lf = LabelFile(path, "harbor-trial", path.parent)
    task, _ = task_of(path.parent, data)
    lf.verdicts[task] = reward_verdict(result_reward(data))
    lf.named = {task}
    return lf


def _harbor_reward(path: Path) -> LabelFile:
    """Harbor's `verifier/reward.txt` (one number; 1 = pass): labels the trial folder above."""
    trial = path.parent.parent
    try:
        text = path.read_text(errors="replace").strip()
    except OSError as e:
        raise LabelError(path, f"cannot read: {e.strerror}") from e
    try:
        reward: float | None = float(text)
    except ValueError:
        raise LabelError(path, f"reward.txt does not hold a number: {text[:40]!r}") from None
    lf = LabelFile(path, "harbor-reward", trial)
    task, _ = task_of(trial)
    lf.verdicts[task] = reward_verdict(reward)
    lf.named = {task}
    return lf


def load_label(path: str | Path, *, explicit: bool = False) -> LabelFile:
    """Read a label file (plain or gzip); LabelError naming the file when it cannot be used.

    `explicit=True` (a file the user named with `--labels`) makes it label every run it names.
    """
    path = Path(path)
    if path.name == REWARD_NAME:
        lf = _harbor_reward(Path(os.path.abspath(path)))
        lf.explicit = explicit
        return lf
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            data = load_json(path, lenient=True)
        except TranscriptError as e:
            raise LabelError(path, e.reason) from e
        except RecursionError as e:
            raise LabelError(path, "JSON nested too deeply") from e
    lf = parse_label(path, data)
    lf.warnings = [str(w.message) for w in caught] + lf.warnings
    lf.explicit = explicit
    return lf


def is_label_name(path: Path) -> bool:
    """True when the file's name marks it as a label file."""
    return strip_gz(Path(path).name) in LABEL_NAMES
