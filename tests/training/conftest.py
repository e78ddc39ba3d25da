"""Shared fixtures of the training tests: constructed runs, the featuriser and a tiny classifier."""

from __future__ import annotations

import random

import pytest

from monitor.featurise import Featuriser, FeaturiserConfig
from monitor.signals import SIGNAL_NAMES
from monitor.types import Step, Trajectory

FEAT = FeaturiserConfig(
    window_tokens=128, task_chars=80, action_chars=40, obs_head_chars=30, obs_tail_chars=20
)


def make_runs(n_instances: int = 16, seed: int = 0) -> list[Trajectory]:
    """Two agents, two runs per instance; unresolved runs mostly show failing tests."""
    rng = random.Random(seed)
    runs = []
    for i in range(n_instances):
        for agent, p_fail in (("alpha", 0.4), ("beta", 0.7)):
            for j in range(2):
                fail = rng.random() < p_fail
                steps = []
                for k in range(rng.randint(3, 9)):
                    bad = fail and rng.random() < 0.8
                    steps.append(
                        Step(
                            index=k,
                            tool="bash",
                            action="python -m pytest tests -x" if k % 2 else f"grep -rn def{k} src",
                            observation="Traceback (most recent call last): Error"
                            if bad
                            else "3 passed",
                            is_error=bad,
                            tokens_in=100 + k,
                            tokens_out=10,
                        )
                    )
                runs.append(
                    Trajectory(
                        id=f"{agent}/{j}/inst-{i}",
                        instance_id=f"inst-{i}",
                        agent=agent,
                        source=f"src-{agent}",
                        task=f"Task {i}: fix the bug in django/db/models.py",
                        steps=steps,
                        resolved=not fail,
                    )
                )
    return runs


@pytest.fixture(scope="module")
def runs() -> list[Trajectory]:
    return make_runs()


@pytest.fixture(scope="module")
def featuriser(tiny_model_dir) -> Featuriser:
    return Featuriser.from_tokenizer_file(tiny_model_dir, FEAT)


@pytest.fixture
def model(tiny_model_dir):
    torch = pytest.importorskip("torch")
    from training.model.classifier import build_classifier

    torch.manual_seed(0)
    return build_classifier(str(tiny_model_dir), None, SIGNAL_NAMES).eval()
