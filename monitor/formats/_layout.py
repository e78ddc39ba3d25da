"""Where a run sits in a data folder: its source (data-source folder) and run (attempt) names.

Shared by the mini-swe-agent, SWE-agent and AutoCodeRover readers. The layouts are the ones the
agents write (and ../shared/data keeps):

- mini-swe-agent: `<source>/[trajs/]<instance>/<instance>.traj.json` -> run "".
- SWE-agent / CodeR: `<source>/trajs/<instance>.traj` -> run ""; `<source>/<run>/<instance>.traj`
  -> run = `<run>`.
- AutoCodeRover: `<source>/<run>/<bucket>/<instance>_<timestamp>/` -> run = `<run>`.
"""

from __future__ import annotations

from pathlib import Path

# Folder names that hold runs but name neither a source nor a run.
CONTAINERS = frozenset(
    {"trajs", "trajectories", "runs", "results", "output", "outputs", "llm_completions"}
)


def run_id(source: str, run: str, instance_id: str) -> str:
    """The corpus-unique id `source/run/instance` (empty parts skipped)."""
    return "/".join(p for p in (source, run, instance_id) if p)


def place_file(path: Path, instance_id: str) -> tuple[str, str]:
    """(source, run) of a transcript file, from the folders above it."""
    parent = Path(path).resolve().parent
    if parent.name == instance_id:  # mini-swe-agent: <instance>/<instance>.traj.json
        parent = parent.parent
    if parent.name in CONTAINERS:
        return parent.parent.name, ""
    if parent.parent.name in CONTAINERS or parent.parent == parent:
        return parent.name, ""
    return parent.parent.name, parent.name


def place_task_dir(path: Path) -> tuple[str, str]:
    """(source, run) of an AutoCodeRover task directory `<source>/<run>/<bucket>/<task>/`."""
    p = Path(path).resolve()
    run_dir = p.parent.parent
    return run_dir.parent.name, run_dir.name
