"""Another cross-fit's LM probe as one more candidate of the per-group choice (issue 26).

    python -m training.experiments.extra_candidate A B C --name monitor_text \\
        --views instance repo time
    python -m training.experiments.paired A C --config configs/quick.yaml \\
        --views instance repo time --extra monitor_text

A and B are `failfast crossfit` folders of the same runs (e.g. the shipped settings and the joint
text probe, `-o train.probe_text=1.0 -o train.max_prefixes_per_run=8`). C is A's records with B's
`monitor` scores added under NAME, for each view: records.parquet and, for the views without K
folds (time, benchmark), each pair's calibration-<i>.parquet (B's own out-of-fold calibration
scores) and pairs.json (less the runs C left out). The paired comparison with `--extra NAME`
then offers NAME to the choice beside A's candidates, calibrated and chosen exactly as they are:
the question is whether a bundle that served B's probe where the choice picks it, and A's
everywhere else, beats A alone. A run B did not score is left out of C (and counted).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from monitor.atomic import atomic_write_text
from training.data.records import load_records, save_records
from training.evaluate.views import PAIRS_JSON, calibration_files


def merge_file(
    a: Path, b: Path, out: Path, name: str, source: str = "monitor"
) -> tuple[set[str], int]:
    """A's records with B's `source` scores added as `name`, written to OUT; returns the run ids
    written and how many of A's runs were left out (B did not score them)."""
    by_id = {r.run_id: r for r in load_records(b)}
    merged, missing = [], 0
    for r in load_records(a):
        other = by_id.get(r.run_id)
        if other is None or source not in other.scores:
            missing += 1
            continue
        s = np.asarray(other.scores[source], dtype=np.float64)
        if len(s) != r.n_steps:
            raise ValueError(
                f"{b}: run {r.run_id} has {len(s)} {source} scores, {a} has {r.n_steps} steps "
                "(the two cross-fits read different transcripts)"
            )
        merged.append(dataclasses.replace(r, scores={**r.scores, name: s}))
    save_records(out, merged)
    return {r.run_id for r in merged}, missing


def merge_view(a: Path, b: Path, c: Path, name: str) -> dict[str, tuple[int, int]]:
    """C/<view> from A/<view> and B/<view> (module docstring); per file written, (runs written,
    runs left out)."""
    kept, missing = merge_file(a / "records.parquet", b / "records.parquet",
                               c / "records.parquet", name)  # fmt: skip
    done = {"records": (len(kept), missing)}
    if (a / PAIRS_JSON).exists():
        pairs = json.loads((a / PAIRS_JSON).read_text())
        if not (b / PAIRS_JSON).exists() or pairs != json.loads((b / PAIRS_JSON).read_text()):
            raise ValueError(f"{a} and {b}: not the same (train, test) pairs ({PAIRS_JSON})")
        atomic_write_text(
            c / PAIRS_JSON, json.dumps([[x for x in ids if x in kept] for ids in pairs])
        )
        for f in calibration_files(a):
            ids, missing = merge_file(f, b / f.name, c / f.name, name)
            done[f.name] = (len(ids), missing)
    return done


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("a", type=Path, help="the reference crossfit folder")
    p.add_argument("b", type=Path, help="the crossfit folder whose monitor is the extra candidate")
    p.add_argument("c", type=Path, help="output folder (A's records plus the extra scores)")
    p.add_argument("--name", default="monitor_text", help="the extra candidate's score name")
    p.add_argument("--views", nargs="+", default=["instance"])
    args = p.parse_args(argv)
    for view in args.views:
        for side in (args.a, args.b):
            if not (side / view / "records.parquet").is_file():
                p.error(f"{side / view / 'records.parquet'}: missing (run failfast crossfit)")
        done = merge_view(args.a / view, args.b / view, args.c / view, args.name)
        for f, (n, missing) in done.items():
            sys.stdout.write(f"{args.c / view} {f}: {n} runs, {missing} left out\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
