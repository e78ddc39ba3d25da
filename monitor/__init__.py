"""failfast-monitor core: trajectory model, readers, featuriser, signals, halts, decisions.

No torch and no onnxruntime here: a harness that only watches runs imports this alone.
"""

from monitor.errors import BundleError, ConfigError, LabelError, TranscriptError
from monitor.policy import PolicyConfig
from monitor.reading import read_runs, read_trajectory
from monitor.schedule import Schedule
from monitor.scripted import ScriptedScorer
from monitor.session import Monitor, Session
from monitor.thresholds import Thresholds, ThresholdTable
from monitor.types import Decision, Flag, RestartPacket, Step, Totals, Trajectory

__all__ = [
    "BundleError",
    "ConfigError",
    "Decision",
    "Flag",
    "LabelError",
    "Monitor",
    "PolicyConfig",
    "RestartPacket",
    "Schedule",
    "ScriptedScorer",
    "Session",
    "Step",
    "ThresholdTable",
    "Thresholds",
    "Totals",
    "Trajectory",
    "TranscriptError",
    "read_runs",
    "read_trajectory",
]
