"""`failfast demo`: the whole pipeline in one command, the way a new user meets it.

Stages, each timed: ingest (monitor.corpus.ingest into OUT/corpus; prints the per-source table),
train (training.pipeline.train on that corpus: splits, features, probe, baselines, records,
metrics, thresholds.json, OUT/bundle), evaluate (training.evaluate.report on the saved test split
with the thresholds picked on validation, at each target FPR: JSON, markdown and plots under
OUT/eval/), and a results table (monitor vs baselines vs oracle per source and overall, one column
group per target FPR). Nothing needs a manual step in between.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from training.config import EvalConfig, PipelineConfig
from training.evaluate.inputs import EvalInputs
from training.evaluate.report import pct
from training.pipeline.summary import timed

DEMO_TARGETS = (0.05, 0.10)


def target_name(target: float) -> str:
    """File stem of one target FPR's report: 0.05 -> 'fpr05', 0.1 -> 'fpr10'."""
    return f"fpr{round(100 * target):02d}"


def evaluate_targets(
    inputs: EvalInputs,
    *,
    targets: Sequence[float] = DEMO_TARGETS,
    out_dir: str | Path | None = None,
    eval_overrides: Mapping[str, Any] | None = None,
    plots: bool = True,
) -> dict[str, dict[str, Any]]:
    """Evaluate at each target FPR (what `failfast evaluate` does, for every target).

    Args:
        inputs: records, thresholds and the rules' inputs (training.evaluate.inputs).
        targets: run-level FPR targets.
        out_dir: write `fprNN.json`, `fprNN.md` and `plots_fprNN/` here (None: write nothing).
        eval_overrides: EvalConfig fields (besides target_fpr).
        plots: write the plots.

    Returns:
        target name (`fpr05`, ...) -> the evaluate() report.
    """
    from training.evaluate.inputs import write_report

    results: dict[str, dict[str, Any]] = {}
    for target in targets:
        cfg = EvalConfig(**{**dict(eval_overrides or {}), "target_fpr": target})
        name = target_name(target)
        results[name] = inputs.evaluate(cfg)
        if out_dir is not None:
            write_report(
                results[name],
                inputs.records,
                cfg,
                json_path=Path(out_dir) / f"{name}.json",
                plots_dir=Path(out_dir) / f"plots_{name}" if plots else None,
            )
    return results


SERVED = "served"
"""The row of what the bundle serves: per group the candidate chosen on calibration runs
(`calibrated_baselines.selected`; serving.choice serves the same choice)."""
LABELS = {
    SERVED: "served (per-group choice)",
    "monitor": "monitor (LM probe)",
    "oracle": "oracle (the ceiling)",
}


def _rule(sec: Mapping[str, Any], rule: str) -> Mapping[str, Any] | None:
    if rule == SERVED:
        return (sec.get("calibrated_baselines") or {}).get("selected")
    if rule in ("monitor", "oracle"):
        return sec.get(rule)
    return sec["baselines"].get(rule)


def results_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """A markdown table: per source and overall, one row per rule (what the bundle serves, the
    LM probe, the baselines, the oracle);
    for each target FPR its realized FPR, recall and token savings (%), then resolution after
    cold restarts at the first target."""
    names = list(results)
    first = results[names[0]]
    head = ["scope", "rule", "runs"]
    for n in names:
        t = results[n]["target_fpr"]
        head += [f"FPR@{t:g}", f"recall@{t:g}", f"saved@{t:g}"]
    head += ["resolved before", f"after restart@{results[names[0]]['target_fpr']:g}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    scopes = [*first["per_source"], "overall"]
    for scope in scopes:
        secs = {
            n: (results[n] if scope == "overall" else results[n]["per_source"][scope])
            for n in names
        }
        rules = [SERVED, "monitor", *secs[names[0]]["baselines"], "oracle"]
        for rule in rules:
            tuned = ((_rule(secs[names[0]], rule) or {}).get("info") or {}).get(
                "matched_to_monitor_fpr"
            )  # a hindsight row: tuned on these runs to the LM probe's realized FPR
            plain = f"{rule} (tuned on these runs)" if tuned else f"{rule} (fixed rule)"
            cells = [scope, LABELS.get(rule, plain)]
            runs = None
            for n in names:
                m = _rule(secs[n], rule)
                if m is None:
                    cells += ["-", "-", "-"]
                    continue
                runs = m["runs"]
                cells += [pct(m["realized_fpr"]), pct(m["recall"]), pct(m["token_savings"])]
            m0 = _rule(secs[names[0]], rule) or {}
            cells.insert(2, str(runs if runs is not None else "-"))
            cells += [pct(m0.get("resolution_before")), pct(m0.get("resolution_after_restart"))]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_demo(
    cfg: PipelineConfig,
    data: Sequence[str | Path],
    out: str | Path,
    *,
    targets: Sequence[float] = DEMO_TARGETS,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Ingest, train, evaluate and report; returns {"timings": ..., "results": ...}.

    Writes OUT/corpus/, the training output in OUT/ (records/, thresholds.json, bundle/, ...),
    OUT/eval/ (fprNN.json/.md, plots_fprNN/, results.md) and OUT/demo.json (timings and paths).
    """
    from monitor.corpus import ingest
    from training.data.runs import load_runs
    from training.evaluate.inputs import train_dir_inputs
    from training.pipeline.summary import format_metrics
    from training.pipeline.train import main as train_main

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    corpus = out / "corpus"
    with _stage(times, "ingest", say):
        summary = ingest([Path(p) for p in data], corpus, progress=True)
    say(summary.table())
    say(f"{summary.runs} runs, {len(summary.problems)} problems -> {corpus}")
    if summary.runs == 0:
        raise ValueError(f"no run could be read from {', '.join(map(str, data))}")
    with _stage(times, "train", say):
        metrics = train_main(cfg, [corpus], out)
    say(format_metrics(metrics))
    if not (out / "thresholds.json").is_file():
        raise FileNotFoundError(
            f"{out / 'thresholds.json'} was not written: set train.bundle=true to pick thresholds"
        )
    with _stage(times, "evaluate", say):
        inputs = train_dir_inputs(out, load_runs([corpus]))
        overrides = cfg.evaluate.model_dump(exclude={"target_fpr"})
        results = evaluate_targets(
            inputs, targets=targets, out_dir=out / "eval", eval_overrides=overrides
        )
    table = results_table(results)
    (out / "eval" / "results.md").write_text(
        "Test split; thresholds picked on the validation split; numbers in %.\n\n" + table
    )
    times["total"] = time.perf_counter() - t0
    say("\nResults on the held-out test split (thresholds picked on validation; numbers in %):")
    say(table)
    known = known_tasks_line(results)
    if known:
        say(known)
    say("wall time: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
    report = {
        "timings_s": {k: round(v, 2) for k, v in times.items()},
        "train_seconds": metrics.get("seconds"),
        "out": str(out),
        "reports": {n: str(out / "eval" / f"{n}.json") for n in results},
        "bundle": str(out / "bundle"),
    }
    (out / "demo.json").write_text(json.dumps(report, indent=1) + "\n")
    say(f"wrote {out} (bundle: {out / 'bundle'}, reports and plots: {out / 'eval'})")
    return {"timings": times, "results": results}


def known_tasks_line(results: dict[str, Any]) -> str:
    """One line per target on the report's `known_tasks` (a bundle that serves known tasks,
    train.task_prior_min_runs): the test runs served with their tasks' other-agent verdicts
    known, beside the served choice without them; "" when no report has the section."""
    lines = []
    for res in results.values():
        k = res.get("known_tasks") or {}
        if "overall" not in k:
            continue
        a, b = k["overall"]["served"], k["overall"]["with_known_tasks"]
        lines.append(
            f"  target {res['target_fpr']:g}: {k['known_runs']} of {k['overall']['runs']} test runs "
            f"known, {k.get('known_runs_served', 0)} served by the known-task choice; "
            f"{pct(b['tokens_saved'])}% saved at {pct(b['realized_fpr'])}% realized FPR "
            f"(served without the verdicts: {pct(a['tokens_saved'])}% at "
            f"{pct(a['realized_fpr'])}%)"
        )
    if not lines:
        return ""
    head = (
        "\nKnown tasks (the test tasks' verdicts by other agents known, as for public benchmark "
        "tasks; the table above holds tasks out):"
    )
    return "\n".join([head, *lines])


@contextmanager
def _stage(times: dict[str, float], name: str, say: Callable[[str], None]) -> Iterator[None]:
    """Announce a stage and its wall time; the time goes to times[name]."""
    say(f"== {name}")
    with timed(times, name):
        yield
    say(f"== {name}: {times[name]:.1f} s")
