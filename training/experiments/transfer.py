"""Cross-agent transfer: leave one agent out, on the test split of the held-out agent.

For each held-out agent A, on A's test split:
- transfer: head fitted on the other agents' training runs, thresholds picked on the other
  agents' validation runs; A gets their POOLED threshold (A is an unknown agent).
- transfer + own calibration: the same head, thresholds picked on A's validation runs.
- in-domain: the head fitted on all agents, A's own thresholds (what `failfast train` ships).
"""

from __future__ import annotations

import logging
from typing import Any

from training.config import PipelineConfig
from training.evaluate.auroc import auroc_scores
from training.experiments.common import AUROC_KEYS, TARGETS, ledger, num, pct
from training.pipeline.encode import encode, load_encoder
from training.pipeline.stages import SplitRuns, calibrate, fit_head, monitor_records

log = logging.getLogger(__name__)
SETTINGS = ("transfer", "own_calibration", "in_domain")
PROTOCOL = (
    "leave one agent out: head fitted on the other agents' training runs (the config's "
    "stratified subsample), C/hidden scale picked on their validation runs, thresholds "
    "picked on their validation runs; the held-out agent's test runs are stopped with "
    "the POOLED threshold of the training agents. own_calibration: the same head with "
    "thresholds picked on the held-out agent's validation runs. in_domain: head fitted "
    "on all agents with the agent's own thresholds (as shipped by failfast train)."
)


def run_transfer(cfg: PipelineConfig, sr: SplitRuns) -> dict[str, Any]:
    """Leave-one-agent-out over the agents of the data; returns the JSON of the report."""
    encoder = load_encoder(cfg)
    model = encoder.model
    enc = {n: encode(encoder, rs) for n, rs in sr.use.items()}
    # in-domain reference: all agents
    sel_all = fit_head(cfg, model, enc["train"], enc["val"]).summary()
    test_all = monitor_records(model, enc["test"])
    th_all = calibrate(cfg, monitor_records(model, enc["val"]))
    out: dict[str, Any] = {
        "protocol": PROTOCOL,
        "threshold_method": {"mode": th_all.mode, "method": th_all.method},
        "in_domain_selection": sel_all,
        "agents": {},
    }
    for a in sorted({r.agent for r in sr.use["test"]}):

        def part(split: str, held_out: bool, a: str = a) -> Any:
            idx = [i for i, r in enumerate(sr.use[split]) if (r.agent == a) == held_out]
            return enc[split].subset(idx)

        train, val_o, val_a, test_a = (
            part("train", False), part("val", False), part("val", True), part("test", True)
        )  # fmt: skip
        sel = fit_head(cfg, model, train, val_o).summary()
        recs = {"val_o": val_o, "val_a": val_a, "test_a": test_a}
        recs = {k: monitor_records(model, d) for k, d in recs.items()}
        th_o, th_a = calibrate(cfg, recs["val_o"]), calibrate(cfg, recs["val_a"])
        test_in = [r for r in test_all if r.agent == a]
        entry: dict[str, Any] = {
            "train_runs": len(train.runs),
            "test_runs": len(test_a.runs),
            "test_resolved": sum(bool(r.resolved) for r in test_a.runs),
            "selection": sel,
            "auroc": {
                "transfer": auroc_scores(recs["test_a"], scorer="monitor"),
                "in_domain": auroc_scores(test_in, scorer="monitor"),
            },
            "pooled_threshold_of_training_agents": th_o.pooled.model_dump(exclude_none=True),
            "targets": {
                f"{t:g}": {
                    "transfer": ledger(recs["test_a"], th_o, target=t),
                    "own_calibration": ledger(recs["test_a"], th_a, target=t),
                    "in_domain": ledger(test_in, th_all, target=t),
                }
                for t in TARGETS
            },
        }
        out["agents"][a] = entry
        log.info(
            "held out %s: AUROC transfer %s, in-domain %s",
            a,
            entry["auroc"]["transfer"],
            entry["auroc"]["in_domain"],
        )
    return out


def transfer_table(result: dict[str, Any]) -> str:
    """Two markdown tables: AUROC per held-out agent, and FPR/savings at each target."""
    lines = [
        "Cross-agent transfer (leave one agent out), test split. " + result["protocol"],
        "",
        "AUROC (positive = unresolved) at 25/50/75 % of the run and over all prefixes:",
        "",
        "| held-out agent | train runs | test runs (resolved) | transfer "
        + " / ".join(AUROC_KEYS)
        + " | in-domain "
        + " / ".join(AUROC_KEYS)
        + " |",
        "|---|---:|---:|---|---|",
    ]
    for a, e in result["agents"].items():
        tr = " / ".join(num(e["auroc"]["transfer"][k]) for k in AUROC_KEYS)
        ind = " / ".join(num(e["auroc"]["in_domain"][k]) for k in AUROC_KEYS)
        lines.append(
            f"| {a} | {e['train_runs']} | {e['test_runs']} ({e['test_resolved']}) | {tr} | {ind} |"
        )
    lines += [
        "",
        "Run-level realized FPR (target), recall and token savings (%) on the held-out agent's "
        "test runs; thr = where the threshold came from:",
        "",
        "| held-out agent | target | setting | thr | realized FPR | recall | tokens saved |",
        "|---|---:|---|---|---:|---:|---:|",
    ]
    for a, e in result["agents"].items():
        for t, per in e["targets"].items():
            for s in SETTINGS:
                m = per[s]
                src = ",".join(sorted({str(v.get("from")) for v in m["threshold"].values()}))
                lines.append(
                    f"| {a} | {float(t):g} | {s} | {src} | {pct(m['realized_fpr'])} | "
                    f"{pct(m['recall'])} | {pct(m['token_savings'])} |"
                )
    return "\n".join(lines) + "\n"
