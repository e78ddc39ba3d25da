"""Cross-agent transfer: leave one agent out (see training.experiments for the protocol).

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
from training.experiments import (
    AUROC_KEYS,
    TARGETS,
    Prepared,
    build_model,
    encode,
    fit_head,
    ledger,
    num,
    pct,
    pick,
    records,
    score,
    subset,
)

log = logging.getLogger(__name__)
SETTINGS = ("transfer", "own_calibration", "in_domain")


def run_transfer(cfg: PipelineConfig, prep: Prepared) -> dict[str, Any]:
    """Leave-one-agent-out over the agents of the data; returns the JSON of the report."""
    from training.prefix_metrics import auroc_scores

    model = build_model(cfg)
    enc = {n: encode(cfg, rs, model=model) for n, rs in prep.split.items()}
    agents = sorted({r.agent for r in prep.split["test"]})

    def idx(split: str, keep: Any) -> list[int]:
        return [i for i, r in enumerate(prep.split[split]) if keep(r.agent)]

    # in-domain reference: all agents
    sel_all = fit_head(
        cfg,
        model,
        prep.split["train"],
        enc["train"],
        val_runs=prep.split["val"],
        val=enc["val"],
    )
    val_all = records(prep.split["val"], score(model, enc["val"]), enc["val"])
    test_all = records(prep.split["test"], score(model, enc["test"]), enc["test"])
    th_all = pick(cfg, val_all)
    out: dict[str, Any] = {
        "protocol": (
            "leave one agent out: head fitted on the other agents' training runs (the config's "
            "stratified subsample), C/hidden scale picked on their validation runs, thresholds "
            "picked on their validation runs; the held-out agent's test runs are stopped with "
            "the POOLED threshold of the training agents. own_calibration: the same head with "
            "thresholds picked on the held-out agent's validation runs. in_domain: head fitted "
            "on all agents with the agent's own thresholds (as shipped by failfast train)."
        ),
        "threshold_method": {"mode": th_all.get("mode"), "method": th_all.get("method")},
        "in_domain_selection": sel_all,
        "agents": {},
    }
    for a in agents:
        tr, va_o = idx("train", lambda g, a=a: g != a), idx("val", lambda g, a=a: g != a)
        va_a, te_a = idx("val", lambda g, a=a: g == a), idx("test", lambda g, a=a: g == a)
        runs = {k: [prep.split[s][i] for i in ix] for k, s, ix in (
            ("train", "train", tr), ("val_o", "val", va_o), ("val_a", "val", va_a),
            ("test_a", "test", te_a))}  # fmt: skip
        encs = {
            "train": subset(enc["train"], tr),
            "val_o": subset(enc["val"], va_o),
            "val_a": subset(enc["val"], va_a),
            "test_a": subset(enc["test"], te_a),
        }
        sel = fit_head(
            cfg, model, runs["train"], encs["train"], val_runs=runs["val_o"], val=encs["val_o"]
        )
        recs = {
            k: records(runs[k], score(model, encs[k]), encs[k])
            for k in ("val_o", "val_a", "test_a")
        }
        th_o, th_a = pick(cfg, recs["val_o"]), pick(cfg, recs["val_a"])
        test_in = [r for r in test_all if r.agent == a]
        entry: dict[str, Any] = {
            "train_runs": len(tr),
            "test_runs": len(te_a),
            "test_resolved": sum(bool(r.resolved) for r in runs["test_a"]),
            "selection": sel,
            "auroc": {
                "transfer": auroc_scores(recs["test_a"], scorer="monitor"),
                "in_domain": auroc_scores(test_in, scorer="monitor"),
            },
            "pooled_threshold_of_training_agents": th_o.get("pooled"),
            "targets": {},
        }
        for t in TARGETS:
            entry["targets"][f"{t:g}"] = {
                "transfer": ledger(recs["test_a"], th_o, target=t),
                "own_calibration": ledger(recs["test_a"], th_a, target=t),
                "in_domain": ledger(test_in, th_all, target=t),
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
