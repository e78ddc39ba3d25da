"""`failfast train | evaluate | export | demo`: the training pipeline and its outputs (evaluate:
training/cli/evaluate.py; crossfit: training/cli/crossfit.py).

Imports at the top stay light; handlers import torch and the pipeline when they run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from training.cli import evaluate

if TYPE_CHECKING:
    from training.config import ExportConfig


def pipeline_args(
    p: argparse.ArgumentParser, *, data_help: str, out_help: str = "output folder"
) -> None:
    """--config, --data, --out and -o: what every command that runs the pipeline takes."""
    p.add_argument("--config", help="pipeline config YAML (configs/quick.yaml, ...)")
    p.add_argument("--data", nargs="+", required=True, help=data_help)
    p.add_argument("--out", required=True, help=out_help)
    p.add_argument(
        "-o", "--override", action="append", default=[], help="dotted override, e.g. train.lr=1e-4"
    )


def register(sub: argparse._SubParsersAction) -> None:
    """Add the training subcommands to the `failfast` parser."""
    _register_train(sub)
    evaluate.register(sub)
    _register_export(sub)
    _register_demo(sub)


def _register_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="export a trained classifier to an ONNX serving bundle",
        description="Write model.onnx, model_kv.onnx, tokenizer.json, monitor.json and README.md.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="saved classifier folder (OUT/model)")
    src.add_argument(
        "--train-dir", help="training output folder (uses OUT/model and its thresholds)"
    )
    p.add_argument("--out", required=True, help="bundle folder to write")
    p.add_argument(
        "--config",
        help="pipeline config YAML whose `export:` section is used (default: the training "
        "output's config.yaml with --train-dir; flags below override it)",
    )
    p.add_argument(
        "--int8", action="store_true", default=None, help="also write int8 graphs (export.int8)"
    )
    p.add_argument(
        "--int8-scheme",
        choices=["mixed", "blockwise", "dynamic", "per-channel"],
        default=None,
        help="how to quantise (training/export/quant.py; export.int8_scheme, default mixed)",
    )
    p.add_argument(
        "--target-fpr",
        type=float,
        default=None,
        help="run-level FPR target served (export.target, default 0.05)",
    )
    p.add_argument(
        "--val-data",
        nargs="+",
        help="with --int8 and --train-dir: the training data, to report the int8 AUROC change "
        "on the validation split (splits.json)",
    )
    p.add_argument("--val-max-runs", type=int, default=80, help="validation runs to score (cap)")
    p.add_argument(
        "--sign",
        metavar="KEYFILE",
        default=None,
        help="sign monitor.json with this Ed25519 private key (failfast keygen): writes "
        "monitor.json.sig, which `serve --trust PUBKEY` checks",
    )

    def handler(args: argparse.Namespace) -> int:
        from pathlib import Path

        from monitor.errors import BundleError, ConfigError
        from training.export.bundle import write_bundle
        from training.export.quant import quant_auroc_change
        from training.export.sign import load_private_key, sign_bundle

        try:  # the key is checked before the long export
            key = load_private_key(args.sign) if args.sign else None
        except BundleError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        train_dir = Path(args.train_dir) if args.train_dir else None
        model = Path(args.model) if args.model else Path(args.train_dir) / "model"
        try:
            cfg = export_config(args.config, train_dir, args)
            report = write_bundle(model, args.out, cfg=cfg, train_dir=train_dir)
        except (BundleError, ConfigError, OSError) as e:  # refused or unreadable: exit 2
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"model.onnx: max |onnxruntime - torch| = {report.full_max_abs_diff:.3g} (fp32)")
        print(f"model_kv.onnx: max |onnxruntime - torch| = {report.kv_max_abs_diff:.3g} (fp32)")
        if report.int8_max_abs_diff is not None:
            print(f"int8: max |int8 - fp32| logit = {report.int8_max_abs_diff:.3g}")
        if cfg.int8 and args.val_data and train_dir is not None:
            from training.data.runs import load_runs
            from training.data.splits import load_splits

            val = load_splits(train_dir / "splits.json").select(load_runs(args.val_data), "val")
            change = quant_auroc_change(args.out, val, max_runs=args.val_max_runs)
            for group, delta in change["delta"].items():
                cells = " ".join(
                    f"{k} {v:+.4f}" if v is not None else f"{k} n/a" for k, v in delta.items()
                )
                print(f"int8 - fp32 validation AUROC [{group}]: {cells}")
        if key is not None:
            sig, kid = sign_bundle(args.out, key)
            print(f"signed: {sig} (key {kid})")
        print(f"bundle: {args.out}")
        return 0

    p.set_defaults(func=handler)


def export_config(
    config: str | None, train_dir: Path | None, args: argparse.Namespace
) -> ExportConfig:
    """The `export:` section of `config` (else of the training output's config.yaml, else the
    defaults), with the flags the user gave on top. An unreadable file is read_config_data's
    ConfigError; a bad section is named here."""
    from pydantic import ValidationError

    from monitor.config import read_config_data
    from monitor.errors import ConfigError
    from training.config import ExportConfig

    path = Path(config) if config else None
    if path is None and train_dir is not None and (train_dir / "config.yaml").is_file():
        path = train_dir / "config.yaml"
    flags = {"int8": args.int8, "int8_scheme": args.int8_scheme, "target": args.target_fpr}
    section: dict = {}
    try:
        if path is not None:
            section = dict(read_config_data(path).get("export") or {})
        return ExportConfig.model_validate(
            {**section, **{k: v for k, v in flags.items() if v is not None}}
        )
    except (AttributeError, TypeError, ValueError) as e:
        where = f"{path}: export section" if path is not None else "export flags"
        detail = e.errors()[0]["msg"] if isinstance(e, ValidationError) else e
        raise ConfigError(f"{where}: {detail}") from e


def _register_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train the prefix classifier and baselines; write records, metrics, thresholds, bundle",
        description=(
            "Read labelled runs (raw transcripts + label files, or an ingest output folder), split "
            "them by instance, encode every prefix in one causal pass per window (cached), fit the "
            "head and the baselines, and write OUT/ (see configs/*.yaml for every option)."
        ),
    )
    pipeline_args(p, data_help="transcript paths or an ingest dir")

    def handler(args: argparse.Namespace) -> int:
        from training.config import load_pipeline_config
        from training.pipeline.summary import format_metrics
        from training.pipeline.train import main

        metrics = main(load_pipeline_config(args.config, args.override), args.data, args.out)
        print(format_metrics(metrics))
        print(f"wrote {args.out}")
        return 0

    p.set_defaults(func=handler)


def _register_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="the whole pipeline: ingest, train, thresholds, bundle, evaluate at 5%% and 10%% FPR",
        description=(
            "Ingest DATA into OUT/corpus, train with CONFIG into OUT (thresholds, OUT/bundle), "
            "evaluate on the saved test split at each target FPR (OUT/eval: JSON, markdown, "
            "plots) and print the results table and the wall time of each stage."
        ),
    )
    pipeline_args(p, data_help="folders of transcripts + label files")
    p.add_argument(
        "--targets", type=float, nargs="+", default=[0.05, 0.10], help="run-level FPR targets"
    )

    def handler(args: argparse.Namespace) -> int:
        from training.config import load_pipeline_config
        from training.pipeline.demo import run_demo

        cfg = load_pipeline_config(args.config, args.override)
        run_demo(cfg, args.data, args.out, targets=args.targets)
        return 0

    p.set_defaults(func=handler)
