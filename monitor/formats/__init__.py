"""Readers, one module per transcript format.

Each module exposes `NAME`, `sniff(path, head) -> bool` and `read(path) -> Trajectory`
(see monitor.protocols.Reader) and cites the format's source of truth in its docstring.
`FORMATS` is the order in which auto-detection tries them (most specific first).
"""

from __future__ import annotations

from types import ModuleType

from monitor.formats import (
    aider,
    atif,
    autocoderover,
    claude_code,
    codex,
    codex_rollout,
    gemini_cli,
    gemini_stream,
    harbor,
    minisweagent,
    moatless,
    openhands,
    openhands_completions,
    openhands_sdk,
    sweagent,
)

FORMATS: dict[str, ModuleType] = {
    m.NAME: m
    for m in (
        minisweagent,
        sweagent,
        autocoderover,
        harbor,
        openhands,
        openhands_completions,
        openhands_sdk,
        moatless,
        gemini_cli,
        gemini_stream,
        claude_code,
        codex_rollout,
        codex,
        aider,
        atif,
    )
}
