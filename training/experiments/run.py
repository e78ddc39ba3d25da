"""`failfast experiment NAME`: read the runs, split them as `failfast train` does, run the
experiment, write OUT/experiments/NAME.json and .md and print its table.

- `transfer`: leave one agent out (training.experiments.transfer).
- `ablate`: what each part of the monitor buys (training.experiments.ablations).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from training.config import PipelineConfig
from training.experiments.common import write_result

log = logging.getLogger(__name__)


def run_experiment(
    name: str,
    cfg: PipelineConfig,
    data: Sequence[str | Path],
    out: str | Path,
    *,
    variants: Sequence[str] | None = None,
    subset_train: int = 20,
    subset_test: int = 25,
    probe_grid: bool = False,
) -> dict[str, Any]:
    """Run `transfer` or `ablate`, write OUT/experiments/, print the table; returns the JSON."""
    from training.data.runs import load_runs
    from training.pipeline.stages import split

    if name not in ("transfer", "ablate"):
        raise ValueError(f"unknown experiment {name!r} (transfer, ablate)")
    out = Path(out)
    t = time.perf_counter()
    runs = load_runs(data)
    if not any(r.resolved is not None and r.steps for r in runs):
        raise ValueError(f"no labelled runs with steps in {', '.join(map(str, data))}")
    sr = split(cfg, runs)
    log.info("runs: %s", {n: len(rs) for n, rs in sr.use.items()})
    if name == "transfer":
        from training.experiments.transfer import run_transfer, transfer_table

        result = run_transfer(cfg, sr)
        table, stem = transfer_table(result), "transfer"
    else:
        from training.experiments.ablation_report import ablation_table, plot_ablations
        from training.experiments.ablations import run_ablations

        def partial(res: dict[str, Any]) -> None:
            write_result(out, "ablations", res, ablation_table(res))

        result = run_ablations(
            cfg,
            sr,
            variants=variants,
            subset_train=subset_train,
            subset_test=subset_test,
            on_variant=partial,
            records_dir=out / "experiments" / "ablation_records",
            probe_grid=probe_grid,
        )
        table, stem = ablation_table(result), "ablations"
    result["seconds"] = round(time.perf_counter() - t, 1)
    result["config"] = cfg.model_dump(mode="json")
    write_result(out, stem, result, table)
    if name == "ablate":  # after the JSON and table are safe on disk
        plot_ablations(result, out / "experiments" / "ablations.png")
    print(table)  # noqa: T201 - the CLI's output
    print(f"wrote {out / 'experiments' / stem}.json and .md ({result['seconds']} s)")  # noqa: T201
    return result
