"""The bundle's README.md (model card), rendered from its manifest; plain text, no torch."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from monitor.escape import md
from monitor.thresholds import DEFAULT_FALLBACK, DEFAULT_GROUP_BY, DEFAULT_MARGIN, Thresholds


def _fmt_metrics(metrics: dict[str, Any]) -> list[str]:
    lines = []
    for key, val in sorted(metrics.items()):
        if isinstance(val, dict):
            inner = ", ".join(
                f"{md(k)}={v:.3f}" if isinstance(v, float) else f"{md(k)}={md(v)}"
                for k, v in val.items()
                if not isinstance(v, dict)
            )
            key = md(key)
            lines.append(f"- {key}: {inner}" if inner else f"- {key}: (nested, see monitor.json)")
        else:
            lines.append(f"- {md(key)}: {md(val)}")
    return lines


def _stop_cell(target: str, entry: dict[str, Any]) -> str:
    st = (entry.get("stop") or {}).get(target) or {}
    if st.get("threshold") is not None:
        own = f" (margin {st['margin']:.2f})" if st.get("margin") else ""
        return f"{target}: {st['threshold']:.3f}{own}"
    return f"{target}: refused ({st['refused']})" if st.get("refused") else f"{target}: not fitted"


def _thresholds_section(manifest: dict[str, Any]) -> list[str]:
    """What the thresholds are keyed by, what a session must name, and each group's state, all
    read from the manifest (so the card cannot drift from monitor.json)."""
    th = manifest.get("thresholds") or {}
    if not th:
        return ["## Thresholds", "- none: every run is scored, no stop by score (warn only)"]
    key = th.get("group_by", DEFAULT_GROUP_BY)
    fallback = th.get("fallback", DEFAULT_FALLBACK)
    groups = th.get("groups") or {}  # the groups, keyed by agent or by source
    targets = [f"{t:g}" for t in th.get("targets") or []]
    field = (
        "`source` (HTTP, `Monitor.start`), `--source` (score, watch, hook)"
        if key == "source"
        else "`agent` (HTTP, `Monitor.start`), `--agent` (score, watch, hook)"
    )
    lines = [
        "## Thresholds",
        f"- mode {th.get('mode', '-')}, method {th.get('method', '-')}, confidence "
        f"{th.get('confidence', '-')}, margin {th.get('margin', DEFAULT_MARGIN)} (each target fitted at "
        f"target / margin); check schedule {th.get('schedule', '-')}",
        *(
            [
                f"- adaptive margin {th['adaptive_margin']:g}: a group with n resolved calibration "
                "runs was fitted at target / min(margin, 1 + adaptive_margin / sqrt(n)) (its "
                "margin is in thresholds.json, each stop entry's `margin`)"
            ]
            if th.get("adaptive_margin")
            else []
        ),
        f"- served target (run-level FPR): {manifest['target']:g}",
        f"- keyed by **{key}**: a run finds its thresholds under its {key}; name it as {field}",
    ]
    if fallback == "none":
        lines.append(
            "- fallback none: a group not listed below, or a refused target, gets no stop by "
            "score (warnings and the model-free halts still apply); `failfast calibrate` gives "
            "a new group thresholds"
        )
    else:
        lines.append(
            "- fallback pooled: a group not listed below (with a warning), or a refused target, "
            "uses the pooled threshold, whose FPR for that group nobody certified"
        )
    lines.append(f"- groups ({len(groups)}), stop threshold per target:")
    for g, entry in sorted(groups.items()):
        cells = ", ".join(_stop_cell(t, entry) for t in targets)
        lines.append(
            f"  - {md(g)} ({entry.get('n_resolved', '?')} resolved calibration runs): {cells}"
        )
    pooled = th.get("pooled") or {}
    if pooled:
        cells = ", ".join(_stop_cell(t, pooled) for t in targets)
        lines.append(f"  - pooled ({pooled.get('n_resolved', '?')} resolved): {cells}")
    return lines


def _served_section(
    candidates: dict[str, Any] | None,
    target: float,
    calibration: dict[str, Any] | None,
    *,
    text_probe: bool = False,
) -> list[str]:
    """Which candidate scores each group at the served target: candidates.json's choice, as
    serving.choice serves it (the LM probe where the choice cannot be served, or the group was
    re-calibrated: `calibration` is the monitor table's record; `text_probe`: the bundle has
    the second probe, candidate monitor_text)."""
    if not candidates or not candidates.get("chosen"):
        return ["## Served scorer", "- the LM probe for every group (no candidates.json)"]
    lines = [
        "## Served scorer per group (candidates.json)",
        f"Chosen on calibration runs held out of its thresholds (the most tokens saved; at the "
        f"served target {target:g}); each is served with its own thresholds, the LM probe where "
        'the choice cannot be served (docs/BUNDLE.md, "Which scorer serves a group"):',
    ]
    from serving.choice import Choice, recalibrated_groups

    choice = dataclasses.replace(
        Choice.from_json(candidates, None),
        recalibrated=recalibrated_groups(calibration),
        text_probe=text_probe,
    )
    for g, c in sorted(choice.chosen.items()):
        th = choice.served(g, target, Thresholds(math.inf, math.inf, "refused"))
        saved = (c.get("held_out_saved") or {}).get(th.scorer)
        if th.scorer == "monitor":
            why = f" ({th.why})"
        else:
            why = (
                f" (held-out tokens saved, mean over targets: {100 * saved:.1f}%)" if saved else ""
            )
        lines.append(f"- {md(g)}: {md(th.scorer)}{md(why)}")
    if choice.known is not None and choice.task_prior is not None:
        t = choice.task_prior
        lines += [
            "",
            "## Known tasks (candidates.json, known_tasks)",
            f"A run that names its task (instance_id), when {t.min_runs}+ runs of it by other "
            f"agents are in the bundle's verdict table ({len(t.counts)} tasks), is served by a "
            "choice calibrated on such runs only; other runs as above "
            '(docs/BUNDLE.md, "Known tasks"):',
        ]
        refused = Thresholds(math.inf, math.inf, "refused")
        for g in sorted(choice.known.chosen):
            # any prior: Choice.served decides whether the known-task choice serves the group
            kth = choice.served(g, target, refused, prior=t.p0)
            if g in choice.recalibrated:
                name = "served as above (re-calibrated)"
            elif kth.task_prior is None:
                name = "as above (no known-task threshold)"
            else:
                name = kth.scorer
            lines.append(f"- {md(g)}: {md(name)}")
    return lines


def model_card(manifest: dict[str, Any], candidates: dict[str, Any] | None = None) -> str:
    """The bundle's README.md: data, metrics, served scorers, limits, intended use."""
    cls = manifest["classifier"]
    data = manifest.get("data_summary") or {}
    lines = [
        "# failfast-monitor bundle",
        "",
        "Predicts P(run ends unresolved | prefix) for a coding-agent run and tells the harness to",
        "continue, warn, or stop (with a warm-restart packet).",
        "",
        "## Model",
        f"- base: {cls.get('base')}, decoder layers kept: {cls.get('n_layers')}, head: {cls.get('head_kind')}",
        f"- boundary features: {cls.get('pooling', 'last')} (last = hidden state at the step "
        "boundary; last+mean = also the running mean of the window's hidden states)",
        f"- signals appended to the hidden state: {len(manifest['signal_names'])}",
        *(
            [
                f"- text columns: the probe also reads each prefix's TF-IDF terms; their logit "
                f"({cls['text_head']}) is added to the graphs' (train.probe_text)"
            ]
            if cls.get("text_head")
            else []
        ),
        *(
            [
                f"- second probe (candidate monitor_text): a head fitted with each prefix's TF-IDF "
                f"terms beside the hidden state, the graphs' second logit plus {cls['text_probe']}'s "
                "(train.text_candidate)"
            ]
            if cls.get("text_probe")
            else []
        ),
        f"- graphs: model.onnx (whole rendering), model_kv.onnx (live sessions, KV cache); "
        f"ORT vs torch max |diff| {manifest['export']['full_max_abs_diff']:.2g} / "
        f"{manifest['export']['kv_max_abs_diff']:.2g}",
        "",
        "## Data",
        *(_fmt_metrics(data) if data else ["- no data summary was available at export time"]),
        "",
        "## Validation metrics (per agent first; a pooled figure mostly measures which agent wrote the run)",
        *(_fmt_metrics(manifest.get("metrics") or {}) or ["- none recorded"]),
        "",
        *_thresholds_section(manifest),
        "",
        *_served_section(
            candidates,
            float(manifest.get("target") or 0.05),
            (manifest.get("thresholds") or {}).get("calibration"),
            text_probe=bool(cls.get("text_probe")),
        ),
        "",
        "## Intended use and limits",
        "- Early stopping and warm restart of SWE-bench-style agent runs, checked at step boundaries.",
        "- Trained on a few agents (mostly GPT-4-era and one mini-swe-agent/Gemini set); scores for",
        "  other agents or tasks are uncalibrated until thresholds are fitted on their own runs.",
        "- A false positive kills a run that would have succeeded: the FPR target is per run.",
        "- Labels are SWE-bench harness verdicts; unknown labels were excluded, never counted as failures.",
        "",
        "Versions and sha256 of every file: monitor.json.",
        "",
    ]
    return "\n".join(lines)
