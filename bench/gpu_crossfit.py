"""The command behind bench/gpu_crossfit.sh: LoRA on every layer, every run, cross-fitted by
instance (training.pipeline.gpu_crossfit). Prints the device found, each pair's time and the
projected total, then OUT/report.md. Exit status 3 when the budget stopped it early."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from training.config import load_pipeline_config
from training.data.runs import load_runs
from training.pipeline.gpu_crossfit import DRY_RUN, device_info, run_gpu_crossfit


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", nargs="+", required=True, help="ingest folder or transcript paths")
    p.add_argument("--out", required=True)
    p.add_argument("--config", default="configs/gpu-crossfit.yaml")
    p.add_argument("-o", "--override", action="append", default=[], help="dotted key=value")
    p.add_argument("--folds", type=int, default=5)
    p.add_argument("--budget-s", type=float, default=600.0, help="wall-clock budget (seconds)")
    p.add_argument("--max-runs", type=int, default=None, help="stratified subsample")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check the whole path on any device: ~40 runs, 2 folds, 2 layers, 3 optimiser steps",
    )
    a = p.parse_args(argv)
    print(f"device: {json.dumps(device_info())}", flush=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    overrides = [*DRY_RUN, *a.override] if a.dry_run else list(a.override)
    cfg = load_pipeline_config(a.config, overrides)
    max_runs = a.max_runs or (40 if a.dry_run else None)
    folds = 2 if a.dry_run else a.folds
    res = run_gpu_crossfit(
        cfg, load_runs(a.data), a.out, folds=folds, budget_s=a.budget_s, max_runs=max_runs,
        dry_run=a.dry_run,
    )  # fmt: skip
    print((Path(a.out) / "report.md").read_text())
    return 3 if res["meta"]["aborted"] else 0


if __name__ == "__main__":
    sys.exit(main())
