"""Known tasks: what other agents' verdicts on the same task add to the monitor (issue 26).

    python -m training.experiments.task_prior A --corpus runs/quick/corpus --out C \\
        --views instance repo time [--weight 1] [--max-others K]
    python -m training.experiments.paired A C --config configs/quick.yaml \\
        --views instance repo time --extra prior monitor_prior

Every view of `failfast crossfit` holds tasks out, so it measures the monitor on tasks nobody has
run. Benchmark runs are the other case: SWE-bench's tasks have been run by many agents, and their
verdicts are public (the run reports our label readers parse). This asks what a task prior adds
there, strictly: a run's prior counts only the runs of *other agents* on the same instance
(`leave_agent_out_priors`; the agent's own other runs never count), smoothed by one pseudo-run at
the corpus's failure rate:

    prior = (unresolved others + p0) / (others + 1)

C/<view> is A's records (and, for the views without K folds, each pair's calibration records and
pairs.json) with two more scores per prefix: `prior`, the prior itself (a rule that decides at
the first check), and `monitor_prior`, sigmoid(logit(monitor) + weight * logit(prior)) (the LM
probe's odds times the prior's, as naive Bayes would combine them). The paired comparison with
`--extra prior monitor_prior` offers both to the per-group choice beside A's candidates,
calibrated and chosen exactly as they are (thresholds from the other folds, whose runs carry
priors of the same kind). `--max-others K` keeps K of each run's other-agent runs (a seeded draw
per run): a task seen a few times, not eight. `--own-agent` counts the agent's own other runs of
the task too (never the run itself): attempt k of a pass@k run, or the attempt after a restart.
`--min-runs M` gives a task with fewer than M other runs the corpus rate p0, as if unseen.
`--count-as N` counts every task's other runs as N runs at their own failure rate (a prior whose
sharpness does not grow with the number of verdicts).
`--known-only` (with `--min-runs M`) keeps only the runs whose task has M or more other-agent
runs, in the records and in the calibration records: what the bundle serves (serving.task_prior),
where known tasks get their own choice calibrated on known calibration runs only, and unknown
tasks the ordinary one. Compare it with `paired A C`: A's test runs are matched to C's, A stays
calibrated on all its runs (the bundle's unknown-task path on these runs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from monitor.atomic import atomic_write_text
from monitor.types import Trajectory
from training.data.records import RunRecord, load_records, save_records
from training.evaluate.known_tasks import task_table, with_prior_scores
from training.evaluate.views import PAIRS_JSON, calibration_files


def _labelled(runs: Sequence[Trajectory], what: str) -> tuple[list[Trajectory], float]:
    """The runs with a verdict and their unresolved share p0 (ValueError naming `what` when
    there are none)."""
    labelled = [r for r in runs if r.resolved is not None]
    if not labelled:
        raise ValueError(f"no labelled runs: {what} needs verdicts")
    return labelled, float(np.mean([not r.resolved for r in labelled]))


def leave_agent_out_priors(
    runs: Sequence[Trajectory],
    *,
    max_others: int = 0,
    seed: int = 0,
    own_agent: bool = False,
    min_runs: int = 0,
    count_as: int = 0,
) -> dict[str, float]:
    """P(unresolved) of each labelled run's task from other agents' runs of it (module docstring);
    runs without a verdict are neither scored nor counted. `max_others` > 0 keeps that many of
    the other runs, drawn per run from `seed` and the run's id. `own_agent`: the agent's own
    other runs of the task count too (attempts k > 1, or a restart; never the run itself).
    `min_runs`: a task with fewer other runs gets p0, as if nobody had run it (what a served
    prior would do below its minimum: fall back to the monitor alone). `count_as` > 0: every
    task's other runs count as that many at their own failure rate (the prior's sharpness fixed,
    so more verdicts per task change only its rate)."""
    labelled, p0 = _labelled(runs, "a task prior")
    by_task: dict[str, list[tuple[str, str, bool]]] = {}
    for r in labelled:
        by_task.setdefault(r.instance_id, []).append((r.agent, r.id, not r.resolved))
    out = {}
    for r in labelled:
        others = sorted(
            (rid, fail)
            for a, rid, fail in by_task[r.instance_id]
            if (a != r.agent or own_agent) and rid != r.id
        )
        if max_others and len(others) > max_others:
            digest = hashlib.sha256(f"{seed}:{r.id}".encode()).digest()
            rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
            others = [others[i] for i in sorted(rng.choice(len(others), max_others, False))]
        if len(others) < min_runs:
            out[r.id] = p0
            continue
        n, fails = len(others), float(sum(f for _, f in others))
        if count_as and n:
            n, fails = count_as, fails * count_as / n
        out[r.id] = (fails + p0) / (n + 1)
    return out


def repo_priors(
    runs: Sequence[Trajectory], *, own_agent: bool = True, min_runs: int = 0
) -> dict[str, float]:
    """P(unresolved) of each labelled run's *repository* from the runs of its other tasks (never
    its own task, by any agent): what is known of a new task of a known repository (the
    instance view's setting). `own_agent`: the agent's own runs of the repository's other tasks
    count too. Smoothed by one pseudo-run at p0; fewer than `min_runs` runs: p0."""
    from training.data.folds import repo_of

    labelled, p0 = _labelled(runs, "a repository prior")
    by_repo: dict[str, list[tuple[str, str, bool]]] = {}
    for r in labelled:
        by_repo.setdefault(repo_of(r.instance_id), []).append(
            (r.instance_id, r.agent, not r.resolved)
        )
    out = {}
    for r in labelled:
        others = [
            fail
            for inst, a, fail in by_repo[repo_of(r.instance_id)]
            if inst != r.instance_id and (own_agent or a != r.agent)
        ]
        out[r.id] = p0 if len(others) < min_runs else (sum(others) + p0) / (len(others) + 1)
    return out


def with_prior(
    records: Sequence[RunRecord], priors: dict[str, float], weight: float = 1.0
) -> list[RunRecord]:
    """`records` with `prior` and `monitor_prior` added to every run's scores
    (training.evaluate.known_tasks.with_prior_scores, what the bundle computes)."""
    out = []
    for rec in records:
        if rec.run_id not in priors:
            raise ValueError(f"run {rec.run_id} of the records has no labelled run in the corpus")
        out.append(with_prior_scores(rec, priors[rec.run_id], weight))
    return out


def known_runs(runs: Sequence[Trajectory], min_runs: int) -> set[str]:
    """Ids of the labelled runs whose task has `min_runs` or more labelled runs by other agents
    (serving.task_prior.TaskPrior's known tasks)."""
    table = task_table(runs, min_runs=max(min_runs, 1))
    labelled = [r for r in runs if r.resolved is not None]
    return {r.id for r in labelled if table.prior(r.instance_id, r.agent) is not None}


def prior_view(
    a: Path, c: Path, priors: dict[str, float], weight: float, keep: set[str] | None = None
) -> list[str]:
    """C = A with the prior scores (records, and the pairs' calibration records when A has
    them; only the runs in `keep` when given); returns the files written."""
    done = []
    for f in [a / "records.parquet", *calibration_files(a)]:
        recs = load_records(f)
        if keep is not None:
            recs = [r for r in recs if r.run_id in keep]
        save_records(c / f.name, with_prior(recs, priors, weight))
        done.append(f.name)
    if (a / PAIRS_JSON).exists():
        c.mkdir(parents=True, exist_ok=True)
        if keep is None:
            shutil.copyfile(a / PAIRS_JSON, c / PAIRS_JSON)
        else:  # each pair's test runs, less those left out
            pairs = json.loads((a / PAIRS_JSON).read_text())
            kept = [[x for x in ids if x in keep] for ids in pairs]
            atomic_write_text(c / PAIRS_JSON, json.dumps(kept))
        done.append(PAIRS_JSON)
    return done


def main(argv: Sequence[str] | None = None) -> int:
    from monitor.corpus import load_corpus

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", type=Path, help="the reference crossfit folder")
    p.add_argument("--corpus", type=Path, required=True, help="the corpus A was cross-fitted on")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--views", nargs="+", default=["instance"])
    p.add_argument("--weight", type=float, default=1.0, help="the prior's logit weight")
    p.add_argument("--max-others", type=int, default=0, help="other runs kept per run (0: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--own-agent", action="store_true", help="count the agent's own other runs of the task"
    )
    p.add_argument("--min-runs", type=int, default=0, help="fewer other runs: no prior (p0)")
    p.add_argument(
        "--count-as",
        type=int,
        default=0,
        help="every task's other runs count as this many at their own rate (0: as they are)",
    )
    p.add_argument(
        "--known-only", action="store_true", help="keep only runs of tasks with --min-runs others"
    )
    p.add_argument(
        "--scope",
        choices=["task", "repo"],
        default="task",
        help="task: other agents' runs of the same task; repo: all runs of the repository's "
        "other tasks (a new task of a known repository)",
    )
    args = p.parse_args(argv)
    if args.known_only and (args.min_runs < 1 or args.own_agent or args.max_others):
        p.error("--known-only needs --min-runs >= 1, and neither --own-agent nor --max-others")
    runs = load_corpus(args.corpus)
    keep = known_runs(runs, args.min_runs) if args.known_only else None
    if args.scope == "repo":
        if args.known_only or args.max_others:
            p.error("--scope repo takes neither --known-only nor --max-others")
        priors = repo_priors(runs, min_runs=args.min_runs)
    else:
        priors = leave_agent_out_priors(
            runs,
            max_others=args.max_others,
            seed=args.seed,
            own_agent=args.own_agent,
            min_runs=args.min_runs,
            count_as=args.count_as,
        )
    for view in args.views:
        if not (args.a / view / "records.parquet").is_file():
            p.error(f"{args.a / view / 'records.parquet'}: missing (run failfast crossfit)")
        done = prior_view(args.a / view, args.out / view, priors, args.weight, keep)
        sys.stdout.write(f"{args.out / view}: {', '.join(done)}\n")
    atomic_write_text(args.out / "task_prior.json", json.dumps(vars(args), default=str, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
