"""`failfast experiment transfer | ablate`: the research experiments (training/experiments/)."""

from __future__ import annotations

import argparse

from training.cli.training import pipeline_args


def register(sub: argparse._SubParsersAction) -> None:
    """Add `failfast experiment` to the `failfast` parser."""
    p = sub.add_parser(
        "experiment",
        help="cross-agent transfer (leave one agent out) or ablations, on the saved test split",
        description=(
            "transfer: train the head on three agents, evaluate on the fourth (pooled threshold "
            "of the training agents). ablate: signals only / LM probe / LM + signals / layers "
            "from the feature cache, and window / LoRA / layer variants on a stated subset. "
            "Writes OUT/experiments/NAME.json and .md."
        ),
    )
    p.add_argument("name", choices=["transfer", "ablate"], help="which experiment")
    pipeline_args(
        p,
        data_help="transcripts or an ingest folder",
        out_help="output folder (results in OUT/experiments/)",
    )
    p.add_argument(
        "--variants",
        nargs="+",
        help="ablate: SCOPE:WHAT variants (default: training.experiments.ablations.VARIANTS)",
    )
    p.add_argument(
        "--subset-train", type=int, default=20, help="ablate: subset training runs per agent"
    )
    p.add_argument("--subset-test", type=int, default=25, help="ablate: subset test runs per agent")
    p.add_argument(
        "--probe-grid",
        action="store_true",
        help="ablate: subset variants also report the test AUROC of every (C, hidden scale) of "
        "the config's probe grid (hindsight sensitivity of the fixed pair)",
    )

    def handler(args: argparse.Namespace) -> int:
        from training.config import load_pipeline_config
        from training.experiments.run import run_experiment

        cfg = load_pipeline_config(args.config, args.override)
        run_experiment(
            args.name,
            cfg,
            args.data,
            args.out,
            variants=args.variants,
            subset_train=args.subset_train,
            subset_test=args.subset_test,
            probe_grid=args.probe_grid,
        )
        return 0

    p.set_defaults(func=handler)
