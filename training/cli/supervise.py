"""`failfast supervise`: run an agent command, stop it on a stop decision and warm-restart it
(serving.supervise). Exit 0: an attempt ended without a stop; 1: the last allowed attempt was
stopped or a budget ran out; 2: a usage, bundle or transcript problem."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from monitor.errors import BundleError


def register(sub: argparse._SubParsersAction) -> None:
    """Add `failfast supervise` to the `failfast` parser."""
    from serving.limits import MAX_STEPS, MAX_TRANSCRIPT_BYTES
    from training.cli.scorer_args import bundle_or_url_args, group_args

    p = sub.add_parser(
        "supervise",
        help="run an agent, stop it on a stop decision, restart it with its diff offered "
        "(exit 0: finished, 1: stopped or out of budget, 2: problem)",
        description="failfast supervise --bundle B --transcript run.jsonl --max-attempts 2 "
        "--summary out.json -- CMD ARGS... ; `{restart}` in ARGS becomes the path of the "
        "attempt's prompt file; the agent sees FAILFAST_ATTEMPT and, on a restart, "
        "FAILFAST_RESTART=<restart packet>.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--bundle", help="bundle folder (OUT/bundle of `failfast train` or `demo`, or `export`)"
    )
    src.add_argument(
        "--url",
        help="a running `failfast serve`, e.g. http://127.0.0.1:8000; sends $FAILFAST_API_KEY "
        "as its key when set (a 401 is a monitor_error: the agent runs on)",
    )
    bundle_or_url_args(p)
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per call to --url")
    p.add_argument("--transcript", required=True, help="the file the agent writes its run to")
    p.add_argument("--format", default=None, help="reader name (sniffed when absent)")
    group_args(p)
    p.add_argument("--max-attempts", type=int, default=2, help="attempts in all (default 2)")
    p.add_argument("--summary", default=None, metavar="OUT.json", help="write the summary here")
    p.add_argument(
        "--workdir", default=".", help="the git work tree to diff and reset (default: .)"
    )
    task = p.add_mutually_exclusive_group()
    task.add_argument("--task", default="", help="the task text (default: the transcript's)")
    task.add_argument("--task-file", default=None, help="read the task text from this file")
    p.add_argument("--budget-steps", type=int, default=None, help="total steps, all attempts")
    p.add_argument("--budget-tokens", type=int, default=None, help="total tokens, all attempts")
    p.add_argument("--budget-dollars", type=float, default=None, help="total dollars")
    p.add_argument("--budget-seconds", type=float, default=None, help="total wall clock")
    p.add_argument(
        "--budget-file",
        default=None,
        metavar="CAPS.yaml",
        help="caps from `failfast fit-budget --out` (p95 of resolved runs), applied to the "
        "totals of all attempts; the --budget-* flags override it",
    )
    p.add_argument(
        "--warn-fraction", type=float, default=0.6, help="warn band of each budget (0.6)"
    )
    p.add_argument("--interval", type=float, default=0.5, help="seconds between polls")
    p.add_argument("--grace", type=float, default=10.0, help="seconds from SIGTERM to SIGKILL")
    p.add_argument("--max-bytes", type=int, default=MAX_TRANSCRIPT_BYTES, help="transcript limit")
    p.add_argument("--max-steps", type=int, default=MAX_STEPS, help="transcript step limit")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    p.set_defaults(func=_supervise)


def _problem(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _supervise(args: argparse.Namespace) -> int:
    from monitor.formats import FORMATS
    from serving.supervise import Budgets, SuperviseConfig, Supervisor
    from serving.supervise.budget import read_caps

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        return _problem("no agent command: give it after `--`")
    if args.max_attempts < 1:
        return _problem("--max-attempts must be at least 1")
    if args.format is not None and args.format not in FORMATS:
        return _problem(f"unknown format {args.format!r} (known: {', '.join(FORMATS)})")
    if not 0 < args.warn_fraction <= 1:
        return _problem("--warn-fraction must be in (0, 1]")
    workdir = Path(args.workdir)
    if not workdir.is_dir():
        return _problem(f"--workdir {workdir} is not a folder")
    try:
        caps = read_caps(args.budget_file) if args.budget_file else {}
        task = Path(args.task_file).read_text() if args.task_file else args.task
    except (ValueError, OSError) as e:
        return _problem(str(e))
    flags = {
        "max_steps": args.budget_steps,
        "max_tokens": args.budget_tokens,
        "max_cost_usd": args.budget_dollars,
        "max_wall_seconds": args.budget_seconds,
    }
    for name, value in flags.items():
        if value is not None:
            if value <= 0:
                return _problem(f"a budget must be positive ({name}={value})")
            caps[name] = float(value)
    if args.url:
        from serving.remote import RemoteMonitor

        monitor = RemoteMonitor(args.url, timeout=args.timeout)
    else:
        try:
            monitor = _local_monitor(args)
        except (BundleError, OSError, ValueError) as e:
            return _problem(str(e))
    cfg = SuperviseConfig(
        cmd=cmd,
        transcript=Path(args.transcript),
        max_attempts=args.max_attempts,
        summary=Path(args.summary) if args.summary else None,
        workdir=workdir.resolve(),
        fmt=args.format,
        agent=args.agent,
        source=args.source,
        instance_id=args.instance_id,
        task=task,
        budgets=Budgets(caps, warn_fraction=args.warn_fraction),
        interval=args.interval,
        grace=args.grace,
        max_bytes=args.max_bytes,
        max_steps=args.max_steps,
    )

    def terminated(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds through Supervisor.run: the agent is ended too

    signal.signal(signal.SIGTERM, terminated)
    try:
        return Supervisor(cfg, monitor).run()
    except OSError as e:  # the command cannot be started, the transcript folder is missing
        logging.getLogger("failfast.supervise").error("failfast supervise: %s", e)
        return _problem(str(e))


def _local_monitor(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from monitor.decision_log import DecisionLog
    from monitor.policy import PolicyConfig
    from monitor.session import Monitor
    from training.cli.scorer_args import load_scorer

    scorer = load_scorer(args)
    return Monitor(PolicyConfig.model_validate(scorer.policy), scorer=scorer, log=DecisionLog())
