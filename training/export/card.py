"""The bundle's README.md (model card), rendered from its manifest; plain text, no torch."""

from __future__ import annotations

from typing import Any

from monitor.escape import md


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


def model_card(manifest: dict[str, Any]) -> str:
    """The bundle's README.md: data, metrics, limits, intended use."""
    cls = manifest["classifier"]
    th = manifest.get("thresholds") or {}
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
        "## Thresholds",
        f"- mode: {th.get('mode', 'none')}, confidence {th.get('confidence', '-')}, schedule {th.get('schedule', '-')}",
        f"- served target (run-level FPR): {manifest['target']}; thresholds per "
        f"{th.get('group_by', 'agent')} ({', '.join(md(g) for g in sorted(th.get('per_agent') or {})) or 'none'}:",
        "  pass that name as the session's `agent`) with a pooled fallback (warning) for one never",
        "  calibrated; a refused target means no stop by score.",
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
