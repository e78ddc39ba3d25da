"""One pair of the GPU crossfit (training.pipeline.gpu_crossfit): the tuning / calibration split
of its training runs, the probe and baselines fitted on the tuning runs' frozen features, the
LoRA tune from the probe, and the calibration and test runs encoded by the tuned model.

`MemoWindows` lets every pair reuse the windows the frozen pass rendered; `bf16_autocast` is the
autocast of the GPU feature passes (a no-op on the CPU).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from monitor.types import Trajectory
from training.config import PipelineConfig
from training.data.examples import window_examples
from training.data.folds import instance_folds
from training.pipeline import stages
from training.pipeline.crossfit import _fit_on_training
from training.pipeline.encode import Encoded, Encoder, encode


@contextlib.contextmanager
def bf16_autocast(on_gpu: bool) -> Iterator[None]:
    """bf16 autocast for the GPU feature passes (the weights stay fp32 for the optimiser)."""
    import torch

    if on_gpu:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            yield
    else:
        yield


class MemoWindows:
    """A featuriser that renders each run once: every pair re-encodes and trains on runs the
    frozen pass already rendered, and the CPU rendering would otherwise cost every pair again."""

    def __init__(self, featuriser: Any) -> None:
        self._featuriser = featuriser
        self._windows: dict[str, list[Any]] = {}

    def windows(self, traj: Trajectory) -> list[Any]:
        if traj.id not in self._windows:
            self._windows[traj.id] = self._featuriser.windows(traj)
        return self._windows[traj.id]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._featuriser, name)


def split_tuning(train: Encoded, k: int, seed: int) -> tuple[Encoded, Encoded]:
    """(tuning runs, calibration runs): one instance fold of k (at least 2) held out."""
    fold = instance_folds(train.runs, max(k, 2), seed=seed + 1)
    tune = [i for i, f in enumerate(fold) if f != 0]
    cal = [i for i, f in enumerate(fold) if f == 0]
    return train.subset(tune), train.subset(cal)


def tune_and_score(
    cfg: PipelineConfig, encoder: Encoder, tune: Encoded, parts: Sequence[Encoded], out_dir: Path
) -> tuple[stages.HeadFit, dict[str, Any], list[Encoded], list[float], int]:
    """Probe + baselines on `tune`'s frozen features, LoRA from the probe on its windows, then
    `parts` encoded by the tuned model. The model ends fp32 on the CPU (for the head scores)."""
    import torch

    from training.model.finetune import tune_backbone

    tc = cfg.train
    grid = [(c, s) for s in tc.probe_hidden_scale for c in tc.probe_C]
    if len(grid) > 1:  # chosen by the tuning runs' out-of-fold scores, as `failfast crossfit` does
        head, _ = _fit_on_training(cfg, encoder, tune, grid)
    else:
        head = stages.fit_head(cfg, encoder.model, tune, grid=grid)
    baselines = stages.fit_baselines(cfg, encoder, tune, head)
    windows = window_examples(encoder.featuriser, tune.runs, tune.signals, head.examples)
    gpu = torch.cuda.is_available()
    encoder.model.to("cuda" if gpu else "cpu")
    losses = tune_backbone(encoder.model, windows, tc, head="lora", out_dir=out_dir)
    encoder.model.eval()
    with bf16_autocast(gpu):
        tuned = [encode(encoder, p.runs, cached=False) for p in parts]
    encoder.model = encoder.model.float().cpu().eval()
    return head, baselines, tuned, losses, len(windows)
