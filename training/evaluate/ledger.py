"""Offline evaluation: the token ledger of a stop rule, restarts, the oracle, baselines.

Every stop rule here is reduced to the same thing: for each run, the prefix length k after which
it is stopped (None = never). `ledger_metrics` turns those stop points into the numbers users
decide by (DESIGN.md, "Definitions"):

- realized FPR = stopped resolved runs / resolved runs, with a two-sided Clopper-Pearson interval
  and a one-sided upper bound at `confidence`;
- recall = stopped unresolved runs / unresolved runs;
- token savings = tokens after the stop point, summed over stopped runs / all tokens of all runs;
- resolution before (resolved / runs) and after stopping (a stopped run counts as unresolved);
- cold-restart simulation (`restart_outcomes`): a stopped run is replaced by the next recorded
  run of the same instance by the same agent in run-id order, wrapping around, not already used in this chain; the
  replacement is monitored too and is itself replaced when stopped. Tokens of every run in the
  chain count (the stopped prefix plus the replacement). An instance with no other run left
  stays stopped = unresolved, with no tokens added;
- net savings (`net_token_savings`) after the monitor's own cost: every token it encoded for a
  run (RunRecord.encoded_tokens, charged in full even when the run was stopped early: an upper
  bound) priced at `monitor_token_price` agent-LLM tokens (default 0.02: a 135M-parameter encoder
  pass costs about 1/50 of a GPT-4-class call per token, stated, configurable).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from training.calibrate.bounds import fpr_interval, fpr_upper_bound
from training.data.records import RunRecord, Stops


def oracle_stops(records: Sequence[RunRecord], *, min_steps: int = 1) -> Stops:
    """The ceiling: every unresolved run stopped at min_steps (if it gets there), no resolved run."""
    return {
        r.run_id: (min_steps if (not r.resolved and r.n_steps >= min_steps) else None)
        for r in records
    }


def restart_outcomes(
    records: Sequence[RunRecord], stops: Mapping[str, int | None]
) -> dict[str, Any]:
    """Cold-restart simulation (rule in the module docstring).

    Returns:
        {"resolved": run_id -> outcome after restarts, "tokens": run_id -> tokens spent over the
        chain, "restarts": run_id -> replacement runs started}.
    """
    # A restart re-runs the SAME agent on the instance: other agents' runs of that instance are
    # not replacements (SWE-bench Lite instances are shared by three agents here).
    by_inst: dict[tuple[str, str], list[RunRecord]] = {}
    for r in records:
        by_inst.setdefault((r.agent, r.instance_id), []).append(r)
    for rs in by_inst.values():
        rs.sort(key=lambda r: r.run_id)
    resolved: dict[str, bool] = {}
    tokens: dict[str, float] = {}
    restarts: dict[str, int] = {}
    for r in records:
        k = stops.get(r.run_id)
        spent = float(np.sum(r.step_tokens[: k if k is not None else None]))
        outcome = bool(r.resolved) and k is None
        restarts[r.run_id] = 0
        if k is not None:
            sib = by_inst[(r.agent, r.instance_id)]
            i = next(j for j, s in enumerate(sib) if s.run_id == r.run_id)
            for c in sib[i + 1 :] + sib[:i]:  # the others in run-id order, wrapping around
                restarts[r.run_id] += 1
                kc = stops.get(c.run_id)
                spent += float(np.sum(c.step_tokens[: kc if kc is not None else None]))
                if kc is None:
                    outcome = bool(c.resolved)
                    break
        resolved[r.run_id] = outcome
        tokens[r.run_id] = spent
    return {"resolved": resolved, "tokens": tokens, "restarts": restarts}


def ledger_metrics(
    records: Sequence[RunRecord],
    stops: Mapping[str, int | None],
    *,
    confidence: float = 0.95,
    monitor_token_price: float = 0.0,
    restart_pool: Sequence[RunRecord] | None = None,
) -> dict[str, Any]:
    """Token ledger of one stop rule on a set of runs.

    Args:
        records: the runs to report on.
        stops: run_id -> stop prefix length (None / absent = not stopped).
        confidence: of the FPR interval and upper bound.
        monitor_token_price: agent-LLM tokens per encoded token, for `net_token_savings`
            (0 for rules that cost nothing).
        restart_pool: runs replacements are drawn from (default: `records`).
    """
    res = np.array([bool(r.resolved) for r in records], dtype=bool)
    stopped = np.array([stops.get(r.run_id) is not None for r in records], dtype=bool)
    total = np.array([float(np.sum(r.step_tokens)) for r in records])
    saved = np.array(
        [
            float(np.sum(r.step_tokens[stops[r.run_id] :])) if s else 0.0
            for r, s in zip(records, stopped, strict=True)
        ]
    )
    encoded = float(sum(r.encoded_tokens for r in records))
    n, n_res = len(records), int(res.sum())
    fp, tp = int((stopped & res).sum()), int((stopped & ~res).sum())
    all_tokens = float(total.sum())
    pool = list(restart_pool) if restart_pool is not None else list(records)
    rs = restart_outcomes(pool, stops)
    ids = [r.run_id for r in records]
    after_tokens = float(sum(rs["tokens"][i] for i in ids))
    lo, hi = fpr_interval(fp, n_res, confidence=confidence)

    def frac(a: float, b: float) -> float | None:
        return a / b if b else None

    return {
        "runs": n,
        "resolved_runs": n_res,
        "stopped_runs": int(stopped.sum()),
        "realized_fpr": frac(fp, n_res),
        "fpr_ci": [lo, hi],
        "fpr_upper_bound": fpr_upper_bound(fp, n_res, confidence=confidence),
        "recall": frac(tp, n - n_res),
        "token_savings": frac(float(saved.sum()), all_tokens),
        "net_token_savings": frac(float(saved.sum()) - monitor_token_price * encoded, all_tokens),
        "resolution_before": frac(n_res, n),
        "resolution_after": frac(int((res & ~stopped).sum()), n),
        "resolution_after_restart": frac(sum(rs["resolved"][i] for i in ids), n),
        "tokens_after_restart": frac(after_tokens, all_tokens),
        "restarts": int(sum(rs["restarts"][i] for i in ids)),
        "tokens": all_tokens,
    }
