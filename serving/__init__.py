"""Serving: onnxruntime scorer (no torch), incremental sessions, HTTP service, harness hooks.

The public face is `from serving import Scorer`. It is imported on first use, so a hook that only
talks HTTP (`failfast hook claude-code --url`) never loads onnxruntime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from serving.scorer import Scorer

__all__ = ["Scorer"]


def __getattr__(name: str) -> Any:
    if name == "Scorer":
        from serving.scorer import Scorer

        return Scorer
    raise AttributeError(f"module 'serving' has no attribute {name!r}")
