"""The arguments and loaders the scoring commands share (score, serve, hook, watch, supervise,
calibrate): how a command names its bundle, threshold group and transcript limits, how it loads
the scorer, and the one exit code of a monitor problem.
"""

from __future__ import annotations

import argparse
import sys

from monitor.escape import visible


def scorer_args(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    """--bundle (required unless `required` is False), --int8, --threads, --target and the
    bundle pins: what `load_scorer` reads."""
    p.add_argument(
        "--bundle",
        required=required,
        help="bundle folder (OUT/bundle of `failfast train` or `demo`, or written by `failfast "
        "export` or `calibrate`)",
    )
    p.add_argument("--int8", action="store_true", help="use the int8 graphs")
    p.add_argument("--threads", type=int, default=None, help="onnxruntime threads per call")
    p.add_argument(
        "--target", type=float, default=None, help="run-level FPR target (default: bundle's)"
    )
    pin_arg(p)


def transcript_args(p: argparse.ArgumentParser, what: str) -> None:
    """The bundle, one transcript (`what` it is), its reader and its threshold group: the
    arguments of `score` and `watch`."""
    scorer_args(p)
    p.add_argument("transcript", help=what)
    p.add_argument("--format", default=None, help="reader name (sniffed when absent)")
    group_args(p)


def pin_arg(p: argparse.ArgumentParser) -> None:
    """--bundle-sha256 and --trust: the bundle is refused unless it matches (serving.trust)."""
    p.add_argument(
        "--bundle-sha256",
        default=None,
        metavar="HEX",
        help="refuse the bundle unless its monitor.json has this sha256 (it lists the sha256 of "
        "every other file); see docs/USAGE.md, trust model",
    )
    p.add_argument(
        "--trust",
        action="append",
        default=[],
        metavar="PUBKEY",
        help="refuse the bundle unless monitor.json.sig is a valid signature by this Ed25519 "
        "public key (failfast keygen; repeat for several keys)",
    )


def bundle_or_url_args(p: argparse.ArgumentParser) -> None:
    """How a command that takes `--bundle` or `--url` loads the bundle (the hook, supervise)."""
    p.add_argument("--int8", action="store_true", help="use the int8 graphs (--bundle)")
    p.add_argument("--threads", type=int, default=None, help="onnxruntime threads (--bundle)")
    p.add_argument("--target", type=float, default=None, help="run-level FPR target (--bundle)")
    pin_arg(p)


def group_args(p: argparse.ArgumentParser) -> None:
    """--agent, --source and --instance-id, as `score`, `watch`, `supervise` and the Claude Code
    hook take them."""
    p.add_argument(
        "--agent",
        default=None,
        help="agent name the model reads in each window's header (`### agent: NAME`: it changes "
        "the scores) and the threshold group of an agent-keyed bundle (default: the "
        "transcript's)",
    )
    p.add_argument(
        "--source",
        default=None,
        help="threshold group of a source-keyed bundle (the quick and default configs), e.g. the "
        "name given to `failfast calibrate --agent`; the group's thresholds, and its scorer "
        "where the bundle serves another for that group (docs/USAGE.md, section 4) (default: "
        "the transcript's source, its folder name for most formats)",
    )
    p.add_argument(
        "--instance-id",
        default=None,
        metavar="ID",
        help="the task's id, e.g. a SWE-bench instance id: a bundle with a table of known tasks "
        "serves a task other agents have run by its known-task choice (docs/USAGE.md, known "
        "tasks); scores unchanged otherwise (default: the transcript's)",
    )


def limit_args(p: argparse.ArgumentParser) -> None:
    """--max-bytes and --max-steps: the transcript limits `read_limited` applies."""
    from serving.transcripts import MAX_STEPS, MAX_TRANSCRIPT_BYTES

    p.add_argument(
        "--max-bytes",
        type=int,
        default=MAX_TRANSCRIPT_BYTES,
        help=f"refuse a transcript larger than this once decompressed (default {MAX_TRANSCRIPT_BYTES})",
    )
    p.add_argument(
        "--max-steps",
        type=int,
        default=MAX_STEPS,
        help=f"refuse a transcript with more steps (default {MAX_STEPS})",
    )


def load_scorer(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The bundle's serving.scorer.Scorer as `scorer_args` named it (BundleError when refused)."""
    from serving.scorer import Scorer

    return Scorer.load(
        args.bundle,
        threads=args.threads,
        int8=args.int8,
        target=args.target,
        sha256=args.bundle_sha256,
        trust=args.trust,
    )


def read_limited(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """The transcript of `args`, within --max-bytes and --max-steps (TranscriptError otherwise)."""
    from monitor.errors import TranscriptTooLarge
    from serving.transcripts import read_transcript

    traj = read_transcript(args.transcript, args.format, max_bytes=args.max_bytes)
    if len(traj.steps) > args.max_steps:
        raise TranscriptTooLarge(
            args.transcript,
            f"{len(traj.steps)} steps, over the limit of {args.max_steps} (--max-steps)",
        )
    return traj


def problem(e: BaseException) -> int:
    """Exit code 2 (a monitor problem, never 1: 1 means "stop the run"), with the reason."""
    print(f"error: {visible(e)}", file=sys.stderr)
    return 2


def labels_problem(paths: list[str]) -> str:
    """What is wrong with the first `--labels` file that cannot be read as a label file (""
    when all can): a file a flag names must be usable, or nothing it names gets a verdict."""
    from monitor.errors import LabelError
    from monitor.labels import load_label

    for f in paths:
        try:
            load_label(f, explicit=True)
        except LabelError as e:
            return f"--labels {e}"
    return ""
