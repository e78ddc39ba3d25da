"""What could not be read or joined, collected instead of raised so a walk goes on."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Problem:
    """Something that could not be read or joined: the path and what is wrong."""

    path: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"
