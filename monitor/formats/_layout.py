"""Where a run sits in a data folder: its source (data-source folder) and run (attempt) names.

Shared by the mini-swe-agent, SWE-agent and AutoCodeRover readers. The layouts are the ones the
agents write (and ../shared/data keeps):

- mini-swe-agent: `<source>/[trajs/]<instance>/<instance>.traj.json` -> run "". The folder
  holding the instance folders names the source: a batch run's output folder (2.x writes
  `<run>/<instance>/<instance>.traj.json`), never the benchmark folder above it.
- SWE-agent / CodeR: `<source>/trajs/<instance>.traj` -> run ""; `<source>/<run>/<instance>.traj`
  -> run = `<run>`.
- AutoCodeRover: `<source>/<run>/<bucket>/<instance>_<timestamp>/` -> run = `<run>`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# Folder names that hold runs but name neither a source nor a run.
CONTAINERS = frozenset(
    {"trajs", "trajectories", "runs", "results", "output", "outputs", "llm_completions"}
)
# Folder names that say what a folder holds, not whose runs: never a source name.
GENERIC = CONTAINERS | {"agent", "logs", "eval_results", "evaluation", "run_evaluation", "jobs"}
# Benchmark folders (`swe-bench-lite`, `terminal-bench-2`, ...): they hold many sources.
_BENCHMARK = re.compile(r"^(multi-)?(swe-?bench|terminal-?bench|t-?bench)([-_].*)?$", re.I)


def generic_name(name: str) -> bool:
    """True for a folder name that cannot name a source (a container or a benchmark)."""
    return name.lower() in GENERIC or _BENCHMARK.match(name) is not None


def run_id(source: str, run: str, instance_id: str) -> str:
    """The corpus-unique id `source/run/instance` (empty parts skipped)."""
    return "/".join(p for p in (source, run, instance_id) if p)


def place_file(path: Path, instance_id: str) -> tuple[str, str]:
    """(source, run) of a transcript file, from the folders above it."""
    # abspath, not resolve(): a run reached through a symbolic link belongs where the link is
    parent = Path(os.path.abspath(path)).parent
    if parent.name == instance_id:  # mini-swe-agent: <instance>/<instance>.traj.json
        parent = parent.parent
        if parent.name not in CONTAINERS:  # <run>/<instance>/: the run's folder is the source
            return parent.name, ""
    if parent.name in CONTAINERS:
        return parent.parent.name, ""
    if parent.parent.name in CONTAINERS or parent.parent == parent:
        return parent.name, ""
    return parent.parent.name, parent.name


def place_task_dir(path: Path) -> tuple[str, str]:
    """(source, run) of an AutoCodeRover task directory `<source>/<run>/<bucket>/<task>/`."""
    p = Path(os.path.abspath(path))
    run_dir = p.parent.parent
    return run_dir.parent.name, run_dir.name
