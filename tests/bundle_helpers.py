"""Helpers of the serving tests: a tiny bundle exported from the tiny model fixture, runs, a
real `failfast serve` process, and Claude Code hook events."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from monitor.types import Step, Trajectory

THRESHOLDS = {
    "mode": "bound",
    "confidence": 0.95,
    "method": "clopper-pearson",
    "schedule": {"min_steps": 2, "every": 1, "persist": 1},
    "targets": [0.05, 0.1],
    "per_agent": {
        "mini-swe-agent": {
            "n_resolved": 200,
            "stop": {
                "0.05": {"threshold": 0.61, "fpr_val": 0.04, "fpr_upper_bound": 0.05},
                "0.1": {"threshold": 0.55, "fpr_val": 0.08, "fpr_upper_bound": 0.1},
            },
            "warn": 0.45,
        },
        "swe-agent": {
            "n_resolved": 30,
            "stop": {"0.05": {"refused": "needs at least 59 resolved validation runs, has 30"}},
            "warn": 0.5,
        },
    },
    "pooled": {
        "n_resolved": 230,
        "stop": {"0.05": {"threshold": 0.7, "fpr_val": 0.04, "fpr_upper_bound": 0.05}},
        "warn": 0.42,
    },
}


def build_tiny_bundle(
    tiny_model_dir: Path,
    root: Path,
    *,
    int8: bool = False,
    window_tokens: int = 640,
    pooling: str = "last",
) -> Path:
    """Export a tiny PrefixClassifier (random head, all signals) into root/bundle."""
    import torch

    from monitor.featurise import FeaturiserConfig
    from monitor.signals import SIGNAL_NAMES
    from training.config import ExportConfig
    from training.export.bundle import write_bundle
    from training.model.backbone import load_backbone
    from training.model.classifier import PrefixClassifier
    from training.model.classifier_files import save_classifier

    torch.manual_seed(0)
    model = PrefixClassifier(load_backbone(tiny_model_dir), SIGNAL_NAMES, pooling=pooling)
    with torch.no_grad():
        torch.nn.init.normal_(model.head.weight, std=0.6)
        model.head.bias.fill_(-0.2)
        model.signal_std.fill_(500.0)
        model.signal_mean.fill_(1.0)
    fcfg = FeaturiserConfig(
        window_tokens=window_tokens, obs_head_chars=60, obs_tail_chars=30, task_chars=200
    )
    model_dir = save_classifier(
        model,
        root / "model",
        tokenizer_dir=tiny_model_dir,
        base=str(tiny_model_dir),
        head_kind="probe",
        featuriser=fcfg.model_dump(),
    )
    train = root / "train"
    (train / "baselines").mkdir(parents=True, exist_ok=True)
    (train / "baselines" / "signals_lr.joblib").write_bytes(b"not a real pipeline, copied as is")
    (train / "thresholds.json").write_text(json.dumps(THRESHOLDS))
    (train / "metrics.json").write_text(json.dumps({"auroc": {"mini-swe-agent": 0.7}}))
    write_bundle(model_dir, root / "bundle", cfg=ExportConfig(int8=int8), train_dir=train)
    return root / "bundle"


def make_run(n: int, *, agent: str = "mini-swe-agent", seed: int = 0) -> Trajectory:
    """A synthetic run of `n` steps with varied commands, errors and outputs."""
    cmds = [
        "grep -rn 'def separability_matrix' astropy/",
        "python -m pytest tests -x",
        "sed -n 1,80p django/db/models.py",
        "str_replace_editor create /tmp/x.py",
        "cat setup.py",
    ]
    steps = []
    for i in range(n):
        j = (i * 7 + seed) % len(cmds)
        err = (i + seed) % 3 == 1
        obs = (
            ("Traceback (most recent call last): Error: ModuleNotFoundError " * (1 + i % 2))
            if err
            else ("ok " + "line\n" * (1 + (i * 5 + seed) % 6))
        )
        steps.append(
            Step(
                index=i,
                tool="bash",
                action=f"{cmds[j]} # {i % 4}",
                thought=f"step {i}: try the next idea",
                observation=obs,
                is_error=err,
                tokens_in=1000 + 50 * i,
                tokens_out=80,
            )
        )
    return Trajectory(
        id=f"run-{seed}-{n}",
        instance_id=f"inst-{seed}",
        agent=agent,
        task="Fix the bug in separability_matrix for nested CompoundModels. " * 3,
        steps=steps,
    )


_SHARED: dict[str, Path] = {}


def shared_bundle(tiny_model_dir: Path, tmp_path_factory, *, pooling: str = "last") -> Path:
    """One tiny bundle per pooling per test session (tests must not modify it); the "last" one
    has int8 graphs too."""
    key = f"{tiny_model_dir}:{pooling}"
    if key not in _SHARED:
        _SHARED[key] = build_tiny_bundle(
            tiny_model_dir,
            tmp_path_factory.mktemp("shared-bundle"),
            int8=pooling == "last",
            pooling=pooling,
        )
    return _SHARED[key]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args: list[str], log: Path) -> tuple[str, subprocess.Popen]:
    """Start `failfast serve ARGS... --port P` on a free port, logging to `log`, and wait for
    /healthz (it needs no key): (its URL, the process). Fails the test if it never comes up."""
    import pytest

    port = free_port()
    cmd = [sys.executable, "-m", "training.cli", "serve", *args, "--port", str(port)]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"server did not start: {log.read_text()[-2000:]}")
        time.sleep(0.2)
    return url, proc


def serve(bundle: Path, log: Path, *extra: str) -> Iterator[str]:
    """Start `failfast serve --bundle BUNDLE --threads 1 EXTRA...` on a free port, wait for
    /healthz, yield its URL, stop it (a module fixture does `yield from serve(...)`)."""
    url, proc = start_server(["--bundle", str(bundle), "--threads", "1", *extra], log)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def claude_event(path: Path | str, name: str = "PreToolUse") -> dict:
    """A Claude Code hook event for the transcript at `path`."""
    return {
        "session_id": "s1",
        "transcript_path": str(path),
        "cwd": "/repo",
        "hook_event_name": name,
        "tool_name": "Bash",
        "tool_input": {"command": "pytest"},
    }
