"""Flow exceptions of failfast-monitor: one place, no logic."""

from __future__ import annotations


class FailfastError(Exception):
    """Base class of every error this project raises on purpose."""


class TranscriptError(FailfastError):
    """A transcript could not be read. The message names the file and what is wrong."""

    def __init__(self, path: object, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class LabelError(FailfastError):
    """A label file could not be read or joined. Names the file and what is wrong."""

    def __init__(self, path: object, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class ConfigError(FailfastError):
    """A config file or override is invalid (unknown key, wrong type)."""


class BundleError(FailfastError):
    """A model bundle is missing files, has wrong hashes or incompatible versions."""


class TranscriptTooLarge(TranscriptError):
    """A transcript is over a size limit (bytes once decompressed, or steps)."""


class Cancelled(FailfastError):
    """Work stopped on request (e.g. the HTTP client that asked for it went away)."""


class VerdictError(FailfastError):
    """A run's verdict cannot be taken: unknown run or session, or a verdict already given."""


class CorpusError(FailfastError):
    """A corpus cannot be written where asked (the folder holds other files, or the runs)."""
