"""`failfast known-tasks BUNDLE --data RUNS --out NEW`: add labelled runs' verdicts to a bundle's
table of known tasks (serving.task_prior), so that more tasks are served by its known-task
choice, e.g. the verdicts of the runs a main job held out for its test split, or of other agents'
runs of the benchmark tasks you rerun.

The known-task choice's thresholds are not changed: they were calibrated with priors from as
many other-agent runs per task as the training data had. A task given more runs than that counts
as that many at its own failure rate (serving.task_prior.TaskPrior.max_others, the cap), so its
prior is no sharper than calibration saw; the command counts such tasks and says so. A table
written before the cap has none: there such tasks get sharper priors, and the command says that.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from monitor.atomic import atomic_dir
from monitor.errors import BundleError
from monitor.types import Trajectory
from serving.task_prior import TaskPrior

log = logging.getLogger(__name__)


@dataclass
class Added:
    """What `add_verdicts` did."""

    added: int
    already: int  # counted before (the same run id)
    unlabelled: int
    no_task: int  # no instance id
    tasks_before: int
    tasks_after: int
    most_runs_before: int  # the cap (max_others), else the most runs any task had before
    over_calibration: int  # tasks that now have more runs than that
    capped: bool = True  # the table caps other-agent runs at most_runs_before
    over_before: int = 0  # tasks that had more runs than that before the command
    recounted: int = 0  # verdict-file runs on a task whose family the table already counted

    def lines(self) -> list[str]:
        out = [
            f"verdicts added: {self.added} runs ({self.already} already counted, "
            f"{self.unlabelled} without a verdict, {self.no_task} without an instance id)",
            f"tasks in the table: {self.tasks_before} -> {self.tasks_after}",
        ]
        if self.recounted:
            out.append(
                f"note: {self.recounted} verdicts from label files are of a task and agent family "
                "the table already counted: if a file is of runs counted before (e.g. from their "
                "transcripts), they now count twice, and the prior leans on them"
            )
        if self.over_calibration and self.capped:
            out.append(
                f"{self.over_calibration} tasks now have more than {self.most_runs_before} runs "
                f"({self.over_before} before), the most other-agent runs any calibration run had: "
                f"a run that sees more counts them as {self.most_runs_before} at their own "
                "failure rate (the table's cap)"
            )
        elif self.over_calibration:
            out.append(
                f"note: {self.over_calibration} tasks now have more than {self.most_runs_before} "
                "runs, the most any task had when the known-task choice was calibrated, and this "
                "table has no cap (trained before it): their priors are sharper than calibration "
                "saw (docs/RESULTS.md, prior sharpness: the FPR can rise); train the bundle again"
            )
        return out


def table_agents(bundle: str | Path) -> set[str]:
    """The agent families a bundle's table of known tasks counts (empty without a table)."""
    from serving.bundle import load_bundle

    cands = load_bundle(Path(bundle)).candidates() or {}
    if not (cands.get("known_tasks") or {}).get("prior"):
        return set()
    table = TaskPrior.from_json(cands["known_tasks"]["prior"])
    return {a for per in table.counts.values() for a in per} | set(table.families.values())


def add_verdicts(bundle: str | Path, out: str | Path, runs: Sequence[Trajectory]) -> Added:
    """Copy `bundle` to `out` with `runs`' verdicts added to its table of known tasks; monitor.json
    is written last, the copy loaded back, and the folder renamed into place whole. A signature
    (monitor.json.sig) is not copied: the new monitor.json needs `failfast sign` again.

    Raises:
        BundleError: the bundle has no known-task table, `out` is the bundle, or `out` is not
            empty and not a bundle.
    """
    from serving.bundle import CANDIDATES, load_bundle
    from serving.manifest import write_manifest
    from training.export.calibrated import check_out_dir, copy_listed

    src, dst = Path(bundle), Path(out)
    b = load_bundle(src)
    cands_path = src / CANDIDATES
    cands = b.candidates()
    if cands is None:
        raise BundleError(f"{src}: no candidates.json listed in monitor.json")
    if not cands.get("known_tasks"):
        why = cands.get("known_tasks_refused") or "trained without train.task_prior_min_runs"
        raise BundleError(f"{cands_path}: no known-task table to add to ({why})")
    check_out_dir(src, dst, "the bundle itself")
    table = TaskPrior.from_json(cands["known_tasks"]["prior"])
    if table.counts and not table.seen:
        raise BundleError(
            f"{cands_path}: its table does not record which runs it counted (written before "
            "`seen`), so the same runs could be counted twice; train the bundle again"
        )
    before = len(table.counts)
    most = table.max_others or table.most_runs()

    def over() -> int:  # tasks whose runs exceed `most` (a new agent's run sees all of them)
        return sum(sum(c[0] for c in per.values()) > most for per in table.counts.values())

    over_before = over()
    pre = {(task, agent) for task, per in table.counts.items() for agent in per}
    added = already = unlabelled = no_task = recounted = 0
    for r in runs:
        if r.resolved is None:
            unlabelled += 1
        elif not r.instance_id:
            no_task += 1
        elif table.add(r.id, r.instance_id, r.agent, bool(r.resolved)):
            added += 1
            recounted += r.id.startswith("verdicts:") and (r.instance_id, r.agent) in pre
        else:
            already += 1
    over_after = over()
    cands["known_tasks"]["prior"] = table.to_json()
    with atomic_dir(dst) as tmp:
        copy_listed(b, src, tmp)
        (tmp / CANDIDATES).write_text(json.dumps(cands) + "\n", encoding="utf-8")
        result = Added(
            added,
            already,
            unlabelled,
            no_task,
            before,
            len(table.counts),
            most,
            over_after,
            capped=bool(table.max_others),
            over_before=over_before,
            recounted=recounted,
        )
        card = tmp / "README.md"
        if card.is_file():  # the card says where the added verdicts came from
            extra = "\n## Verdicts added (`failfast known-tasks`)\n\n" + "".join(
                f"- {line}\n" for line in result.lines()
            )
            card.write_text(card.read_text(encoding="utf-8") + extra, encoding="utf-8")
        write_manifest(tmp, b.manifest)
        load_bundle(tmp)  # the hashes hold before the copy replaces anything
    log.info("bundle with %d more verdicts written to %s", added, dst)
    return result
