"""One attempt of `failfast supervise`: start the agent, watch its transcript, stop it.

The agent runs in its own process group with `{restart}` in its arguments replaced by the prompt
file and FAILFAST_ATTEMPT (and from the second attempt on FAILFAST_RESTART=<packet>) in its
environment; the transcript and the budgets are polled every `interval` seconds. On a stop:
SIGTERM to the whole group, SIGKILL after `grace` seconds, the diff of the work tree since the
attempt's snapshot, the transcript moved to FILE.attempt-N and the restart packet written beside
it. What happens between attempts (the reset, the next prompt) is serving.supervise.runner's.

A monitor that fails (scorer, service, reader) never ends the agent: the poll is counted as a
monitor_error and the attempt goes on.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from monitor.errors import TranscriptError
from monitor.types import Decision, RestartPacket
from serving.supervise import git
from serving.supervise.config import SuperviseConfig
from serving.supervise.packet import prompt, write_atomic, write_packet
from serving.watch import Opener, TranscriptWatch

log = logging.getLogger(__name__)

Totals = Callable[[dict[str, float] | None], dict[str, float]]


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Attempt:
    """Attempt `n` of a task: `run()` gives its record, its stop (None when the agent ended on
    its own) and its watch; `kill()` ends the agent's process group (safe to call any time).

    Args:
        cfg: the supervisor's flags.
        n: the attempt's number, from 1.
        monitor: opens a monitor session per run.
        keep: pathspecs of the supervisor's own files, kept out of snapshots and diffs.
        totals: the totals over all attempts with this attempt's added (for the budgets).
        add_totals: counts this attempt's steps, tokens and dollars into the task's totals, as
            soon as the agent has ended (before the stop's diff and packet, so an interrupt
            there still leaves them in the summary).
        say: where progress lines go.
        repo: whether the work directory is a git work tree.
    """

    def __init__(
        self,
        cfg: SuperviseConfig,
        n: int,
        monitor: Opener,
        *,
        keep: list[str],
        totals: Totals,
        add_totals: Callable[[dict[str, float]], None],
        say: Callable[[str], None],
        repo: bool,
    ) -> None:
        self.cfg, self.n, self.monitor = cfg, n, monitor
        self.keep, self.totals, self.say, self.repo = keep, totals, say, repo
        self.add_totals = add_totals
        self.proc: subprocess.Popen[bytes] | None = None
        self.errors: list[str] = []

    def run(
        self, task: str, last: Decision | None, diff: str, packet: Path | None
    ) -> tuple[dict[str, Any], Decision | None, TranscriptWatch]:
        cfg, n = self.cfg, self.n
        snap = None
        if self.repo:
            try:
                snap = git.snapshot(cfg.workdir, self.keep)
            except (git.GitError, OSError) as e:
                self.say(f"could not snapshot {cfg.workdir}: {e}")
        prompt_path = cfg.kept(n, ".prompt.md")
        write_atomic(prompt_path, prompt(task, n - 1, last, diff))
        env = {**os.environ, "FAILFAST_ATTEMPT": str(n)}
        if packet is not None:
            env["FAILFAST_RESTART"] = str(packet)
        else:
            env.pop("FAILFAST_RESTART", None)
        args = [a.replace("{restart}", str(prompt_path)) for a in cfg.cmd]
        record: dict[str, Any] = {"attempt": n, "started": now(), "prompt": str(prompt_path)}

        def new_run(run: str, why: str) -> None:
            if why:
                self.say(f"attempt {n}: {why}; scoring it as a new run {run!r}")

        watch = TranscriptWatch(
            cfg.transcript,
            self.monitor,
            fmt=cfg.fmt,
            agent=cfg.agent,
            source=cfg.source,
            instance_id=cfg.instance_id,
            max_bytes=cfg.max_bytes,
            max_steps=cfg.max_steps,
            on_new_run=new_run,
        )
        self.say(f"attempt {n}/{cfg.max_attempts}: {' '.join(args)}")
        self.proc = subprocess.Popen(args, env=env, start_new_session=True)
        stop, final = self._watch_until_end(watch, record)
        try:
            watch.end()
        except Exception as e:  # noqa: BLE001 - the end record is logging only
            self.errors.append(f"end record: {e!r}")
        shown = stop if stop is not None else final
        record.update(
            ended=now(),
            exit_code=self.proc.returncode,
            stopped=stop is not None,
            reason=shown.reason if shown is not None else None,
            score=shown.score if shown is not None else None,
            steps=int(watch.totals["steps"]),
            tokens=int(watch.totals["tokens"]),
            dollars=round(watch.totals["dollars"], 6),
            runs=list(watch.runs),
            monitor_errors=len(self.errors),
        )
        if self.errors:
            record["monitor_error"] = self.errors[-1]
        if watch.traj is None and not watch.runs:
            record["transcript_error"] = f"{cfg.transcript} was never readable as a transcript" + (
                f": {self.errors[-1]}" if self.errors else " (not written, or no reader knows it)"
            )
        self.add_totals(watch.totals)
        if stop is None:
            record["transcript"] = str(cfg.transcript)
            return record, None, watch
        self._keep_stopped(stop, snap, task, watch, args, record)
        return record, stop, watch

    def _watch_until_end(
        self, watch: TranscriptWatch, record: dict[str, Any]
    ) -> tuple[Decision | None, Decision | None]:
        """Poll the transcript and the budgets until a stop (the attempt is ended) or the agent
        exits: (the stop or None, the last decision)."""
        assert self.proc is not None
        stop: Decision | None = None
        final: Decision | None = None
        while True:
            running = self.proc.poll() is None
            for d in self._poll(watch, final=not running):
                final = d
                if d.reason == "monitor_error":  # a remote monitor answers, it does not raise
                    msg = str(d.evidence.get("error") or "the monitor could not score a step")
                    if not self.errors or self.errors[-1] != msg:
                        self.say(f"monitor_error at step {d.step}: {msg}; the attempt goes on")
                    self.errors.append(msg)
                if d.stop and stop is None:
                    stop = d
            if stop is None:
                stop = self._budget_stop(watch)
                if stop is not None:
                    record["budget_stop"] = True
            if stop is not None and running:
                self.say(f"attempt {self.n}: stop ({stop.reason}) at step {stop.step}; ending it")
                self.kill()
                break
            if not running:
                if stop is not None:  # seen only after the agent ended: it finished on its own
                    record["late_stop"] = stop.reason
                    stop = None
                    record.pop("budget_stop", None)
                break
            time.sleep(self.cfg.interval)
        return stop, final

    def _keep_stopped(
        self,
        stop: Decision,
        snap: git.Snapshot | None,
        task: str,
        watch: TranscriptWatch,
        args: list[str],
        record: dict[str, Any],
    ) -> None:
        """After a stop: capture the diff, keep the transcript aside, write the restart packet."""
        cfg, n = self.cfg, self.n
        after_diff = ""
        if snap is not None:
            try:
                after_diff = git.diff(cfg.workdir, snap, git.snapshot(cfg.workdir, self.keep))
            except (git.GitError, OSError) as e:
                self.say(f"could not capture the diff: {e}")
        kept = cfg.kept(n)
        if cfg.transcript.exists():
            os.replace(cfg.transcript, kept)  # never fed to the next attempt
        packet_path = cfg.kept(n, ".restart.json")
        write_packet(
            packet_path,
            stop,
            attempt=n,
            task=task or (watch.traj.task if watch.traj is not None else ""),
            diff=after_diff,
            extra={"transcript": str(kept), "command": args},
        )
        record.update(
            transcript=str(kept),
            restart_packet=str(packet_path),
            diff_bytes=len(after_diff.encode()),
            _diff=after_diff,
            _snapshot=snap,
        )

    def _poll(self, watch: TranscriptWatch, *, final: bool = False) -> list[Decision]:
        """The watch's new decisions (`final`: the agent has exited, a last call is scored as
        it is); a failing monitor is counted, never raised."""
        try:
            return watch.poll(final=final)
        except TranscriptError as e:
            msg = str(e)
        except Exception as e:  # noqa: BLE001 - the agent goes on whatever the monitor does
            log.exception("monitor_error while watching %s", watch.path)
            msg = repr(e)
        if not self.errors or self.errors[-1] != msg:
            self.say(f"monitor_error: {msg}; the attempt goes on")
        self.errors.append(msg)
        return []

    def _budget_stop(self, watch: TranscriptWatch) -> Decision | None:
        budgets = self.cfg.budgets
        totals = self.totals(watch.totals)
        for line in budgets.new_warnings(totals):
            self.say(f"warning: {line}")
        hit = budgets.hit(totals)
        if hit is None:
            return None
        steps = int(watch.totals["steps"])
        summary = f"Stopped after {steps} steps ({hit[0]}). {hit[1]} over all attempts."
        return Decision(
            "stop",
            hit[0],
            step=steps,
            evidence={"totals": totals, "caps": budgets.caps},
            restart=RestartPacket(summary=summary),
        )

    def kill(self) -> None:
        """SIGTERM to the agent's process group, SIGKILL after the grace period."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=self.cfg.grace)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            self.say(f"the agent did not end within {self.cfg.grace:g} s of SIGTERM; SIGKILL")
        try:  # the group too: children that ignored SIGTERM, or outlived the leader
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
