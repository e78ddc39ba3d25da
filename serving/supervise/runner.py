"""The attempts: start the agent in its own process group, watch its transcript, stop, restart.

One attempt: snapshot the work tree (git), write the prompt file, start CMD with `{restart}` in
its arguments replaced by the prompt file and FAILFAST_ATTEMPT (and from the second attempt on
FAILFAST_RESTART=<packet>) in its environment, poll the transcript and the budgets every
`interval` seconds. On a stop: SIGTERM to the whole process group, SIGKILL after `grace` seconds,
the diff of the work tree since the snapshot, the restart packet, the transcript moved to
FILE.attempt-N, the repository reset to the snapshot when another attempt follows (the last
attempt's changes are left in place: nothing follows that needs a clean tree, and its diff is in
its packet).

A monitor that fails (scorer, service, reader) never ends the agent: the poll is counted as a
monitor_error and the attempt goes on.
"""

from __future__ import annotations

import glob
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from monitor.errors import TranscriptError
from monitor.types import Decision, RestartPacket
from serving.limits import MAX_STEPS, MAX_TRANSCRIPT_BYTES
from serving.supervise import git
from serving.supervise.budget import Budgets
from serving.supervise.packet import prompt, write_atomic, write_packet
from serving.watch import Opener, TranscriptWatch

log = logging.getLogger(__name__)

EXIT_FINISHED, EXIT_STOPPED, EXIT_PROBLEM = 0, 1, 2


@dataclass
class SuperviseConfig:
    """What `failfast supervise` was asked to do (its flags)."""

    cmd: list[str]
    transcript: Path
    max_attempts: int = 2
    summary: Path | None = None
    workdir: Path = field(default_factory=Path.cwd)
    fmt: str | None = None
    agent: str | None = None
    source: str | None = None
    instance_id: str | None = None
    task: str = ""
    budgets: Budgets = field(default_factory=Budgets)
    interval: float = 0.5
    grace: float = 10.0
    max_bytes: int = MAX_TRANSCRIPT_BYTES
    max_steps: int = MAX_STEPS


def _stderr(line: str) -> None:
    sys.stderr.write(f"failfast supervise: {line}\n")
    sys.stderr.flush()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def _kept(path: Path, attempt: int, suffix: str = "") -> Path:
    return path.with_name(f"{path.name}.attempt-{attempt}{suffix}")


class Supervisor:
    """Runs the attempts of one task (`run()` returns the exit code and writes the summary).

    Args:
        cfg: the command, transcript, attempts, budgets.
        monitor: opens a monitor session per run (monitor.session.Monitor, or
            serving.remote.RemoteMonitor for `--url`).
        say: where progress lines go (default: stderr).
    """

    def __init__(
        self, cfg: SuperviseConfig, monitor: Opener, *, say: Callable[[str], None] | None = None
    ) -> None:
        self.cfg = cfg
        self.monitor = monitor
        self.say = say or _stderr
        self.attempts: list[dict[str, Any]] = []
        self.totals: dict[str, float] = {"steps": 0, "tokens": 0, "dollars": 0.0}
        self.outcome = ""
        self.reason = ""
        self._t0 = time.monotonic()
        self._proc: subprocess.Popen[bytes] | None = None
        self._repo = git.is_repo(cfg.workdir)
        # our own files stay out of every diff and survive every reset (serving.supervise.git)
        own = [cfg.transcript] + ([cfg.summary] if cfg.summary is not None else [])
        self._keep = (
            git.keep_specs(
                cfg.workdir, own, [cfg.transcript.with_name(f"{cfg.transcript.name}.attempt-")]
            )
            if self._repo
            else []
        )

    # ------------------------------------------------------------------ the loop

    def run(self) -> int:
        cfg = self.cfg
        if cfg.transcript.exists():
            self.say(f"{cfg.transcript} already exists; move it away (each attempt writes anew)")
            return EXIT_PROBLEM
        if not self._repo:
            self.say(f"{cfg.workdir} is not a git work tree: no diff is captured, nothing reset")
        task, last, diff, packet = cfg.task, None, "", None
        code = EXIT_FINISHED
        try:
            for n in range(1, cfg.max_attempts + 1):
                hit = cfg.budgets.hit(self._totals())
                if hit is not None:
                    self.outcome, self.reason = "budget", hit[0]
                    self.say(f"not starting attempt {n}: {hit[1]}")
                    code = EXIT_STOPPED
                    break
                record, stop, watch = self._attempt(n, task, last, diff, packet)
                task = task or (watch.traj.task if watch.traj is not None else "")
                self.attempts.append(record)
                if stop is None:
                    if record.get("transcript_error"):
                        self.outcome, self.reason = "monitor_error", record["transcript_error"]
                        code = EXIT_PROBLEM
                    else:  # the agent's own failure is its harness's to judge: say it, exit 0
                        rc = record.get("exit_code")
                        self.outcome = "finished"
                        self.reason = "ok" if rc in (0, None) else f"agent exited with code {rc}"
                    break
                last, diff, packet = stop, record.pop("_diff"), Path(record["restart_packet"])
                budget_stop = bool(record.get("budget_stop"))  # ours, across attempts: no retry
                if budget_stop or n == cfg.max_attempts:
                    self.outcome = "budget" if budget_stop else "stopped"
                    self.reason = stop.reason
                    code = EXIT_STOPPED
                    break
                if self._repo and record.get("_snapshot") is not None:
                    try:
                        protect = self._own_files() if self._keep else []  # inside the tree
                        git.restore(cfg.workdir, record["_snapshot"], self._keep, protect)
                        record["reset"] = True
                    except (git.GitError, OSError) as e:
                        self.say(f"could not reset {cfg.workdir}: {e}")
                        record["reset"] = False
                self._write_summary(code)
        finally:
            self._kill()  # the supervisor itself was interrupted: leave no agent behind
            for r in self.attempts:
                r.pop("_snapshot", None)
                r.pop("_diff", None)
            self._write_summary(code)
        self.say(
            f"{self.outcome} ({self.reason}) after {len(self.attempts)} attempt(s); exit {code}"
        )
        return code

    def _own_files(self) -> list[Path]:
        """The files of ours that exist now: the kept attempts, packets, prompts, the summary."""
        t = self.cfg.transcript
        own = [p for p in t.parent.glob(f"{glob.escape(t.name)}.attempt-*") if p.is_file()]
        return own + ([self.cfg.summary] if self.cfg.summary is not None else [])

    def _totals(self, current: dict[str, float] | None = None) -> dict[str, float]:
        t = {k: v + (current or {}).get(k, 0) for k, v in self.totals.items()}
        t["wall_seconds"] = time.monotonic() - self._t0
        return t

    def _attempt(
        self,
        n: int,
        task: str,
        last: Decision | None,
        diff: str,
        packet: Path | None,
    ) -> tuple[dict[str, Any], Decision | None, TranscriptWatch]:
        cfg = self.cfg
        snap = None
        if self._repo:
            try:
                snap = git.snapshot(cfg.workdir, self._keep)
            except (git.GitError, OSError) as e:
                self.say(f"could not snapshot {cfg.workdir}: {e}")
        prompt_path = _kept(cfg.transcript, n, ".prompt.md")
        write_atomic(prompt_path, prompt(task, n - 1, last, diff))
        env = {**os.environ, "FAILFAST_ATTEMPT": str(n)}
        if packet is not None:
            env["FAILFAST_RESTART"] = str(packet)
        else:
            env.pop("FAILFAST_RESTART", None)
        args = [a.replace("{restart}", str(prompt_path)) for a in cfg.cmd]
        record: dict[str, Any] = {"attempt": n, "started": _now(), "prompt": str(prompt_path)}
        errors: list[str] = []

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
        self._proc = subprocess.Popen(args, env=env, start_new_session=True)
        stop, final = self._watch_until_end(n, watch, record, errors)
        try:
            watch.end()
        except Exception as e:  # noqa: BLE001 - the end record is logging only
            errors.append(f"end record: {e!r}")
        proc, self._proc = self._proc, None
        shown = stop if stop is not None else final
        record.update(
            ended=_now(),
            exit_code=proc.returncode,
            stopped=stop is not None,
            reason=shown.reason if shown is not None else None,
            score=shown.score if shown is not None else None,
            steps=int(watch.totals["steps"]),
            tokens=int(watch.totals["tokens"]),
            dollars=round(watch.totals["dollars"], 6),
            runs=list(watch.runs),
            monitor_errors=len(errors),
        )
        if errors:
            record["monitor_error"] = errors[-1]
        if watch.traj is None and not watch.runs:
            record["transcript_error"] = f"{cfg.transcript} was never readable as a transcript" + (
                f": {errors[-1]}" if errors else " (not written, or no reader knows it)"
            )
        for k in ("steps", "tokens", "dollars"):
            self.totals[k] += watch.totals[k]
        if stop is None:
            record["transcript"] = str(cfg.transcript)
            return record, None, watch
        self._keep_stopped(n, stop, snap, task, watch, args, record)
        return record, stop, watch

    def _watch_until_end(
        self, n: int, watch: TranscriptWatch, record: dict[str, Any], errors: list[str]
    ) -> tuple[Decision | None, Decision | None]:
        """Poll the transcript and the budgets until a stop (the attempt is ended) or the agent
        exits: (the stop or None, the last decision)."""
        assert self._proc is not None
        stop: Decision | None = None
        final: Decision | None = None
        while True:
            running = self._proc.poll() is None
            for d in self._poll(watch, errors, final=not running):
                final = d
                if d.reason == "monitor_error":  # a remote monitor answers, it does not raise
                    msg = str(d.evidence.get("error") or "the monitor could not score a step")
                    if not errors or errors[-1] != msg:
                        self.say(f"monitor_error at step {d.step}: {msg}; the attempt goes on")
                    errors.append(msg)
                if d.stop and stop is None:
                    stop = d
            if stop is None:
                stop = self._budget_stop(watch)
                if stop is not None:
                    record["budget_stop"] = True
            if stop is not None and running:
                self.say(f"attempt {n}: stop ({stop.reason}) at step {stop.step}; ending it")
                self._kill()
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
        n: int,
        stop: Decision,
        snap: git.Snapshot | None,
        task: str,
        watch: TranscriptWatch,
        args: list[str],
        record: dict[str, Any],
    ) -> None:
        """After a stop: capture the diff, keep the transcript aside, write the restart packet."""
        cfg = self.cfg
        after_diff = ""
        if snap is not None:
            try:
                after_diff = git.diff(cfg.workdir, snap, git.snapshot(cfg.workdir, self._keep))
            except (git.GitError, OSError) as e:
                self.say(f"could not capture the diff: {e}")
        kept = _kept(cfg.transcript, n)
        if cfg.transcript.exists():
            os.replace(cfg.transcript, kept)  # never fed to the next attempt
        packet_path = _kept(cfg.transcript, n, ".restart.json")
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

    def _poll(
        self, watch: TranscriptWatch, errors: list[str], *, final: bool = False
    ) -> list[Decision]:
        """The watch's new decisions (`final`: the agent has exited, a last call is scored as
        it is); a failing monitor is counted, never raised."""
        try:
            return watch.poll(final=final)
        except TranscriptError as e:
            msg = str(e)
        except Exception as e:  # noqa: BLE001 - the agent goes on whatever the monitor does
            log.exception("monitor_error while watching %s", watch.path)
            msg = repr(e)
        if not errors or errors[-1] != msg:
            self.say(f"monitor_error: {msg}; the attempt goes on")
        errors.append(msg)
        return []

    def _budget_stop(self, watch: TranscriptWatch) -> Decision | None:
        totals = self._totals(watch.totals)
        for line in self.cfg.budgets.new_warnings(totals):
            self.say(f"warning: {line}")
        hit = self.cfg.budgets.hit(totals)
        if hit is None:
            return None
        summary = f"Stopped after {int(watch.totals['steps'])} steps ({hit[0]}). {hit[1]} over all attempts."
        return Decision(
            "stop",
            hit[0],
            step=int(watch.totals["steps"]),
            evidence={"totals": totals, "caps": self.cfg.budgets.caps},
            restart=RestartPacket(summary=summary),
        )

    def _kill(self) -> None:
        """SIGTERM to the agent's process group, SIGKILL after the grace period."""
        proc = self._proc
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

    # ------------------------------------------------------------------ the summary

    def summary(self, code: int) -> dict[str, Any]:
        totals = self._totals()
        stopped = [a for a in self.attempts if a.get("stopped")]
        last = self.attempts[-1] if self.attempts else {}
        return {
            "command": self.cfg.cmd,
            "transcript": str(self.cfg.transcript),
            "workdir": str(self.cfg.workdir),
            "max_attempts": self.cfg.max_attempts,
            "outcome": self.outcome,
            "reason": self.reason,
            "exit_code": code,
            "attempts": [
                {k: v for k, v in a.items() if not k.startswith("_")} for a in self.attempts
            ],
            "totals": {
                "attempts": len(self.attempts),
                "stopped_attempts": len(stopped),
                "steps": int(totals["steps"]),
                "tokens": int(totals["tokens"]),
                "dollars": round(totals["dollars"], 6),
                "wall_seconds": round(totals["wall_seconds"], 3),
            },
            # What a live warm restart changed, for users measuring it on their own runs.
            "warm_restart": {
                "restarts": max(0, len(self.attempts) - 1),
                "tokens_in_stopped_attempts": sum(a.get("tokens", 0) for a in stopped),
                "tokens_last_attempt": last.get("tokens", 0),
                "last_attempt_stopped": bool(last.get("stopped")),
            },
            "budgets": self.cfg.budgets.report(totals),
        }

    def _write_summary(self, code: int) -> None:
        if self.cfg.summary is None:
            return
        import json

        from monitor.textio import json_safe

        try:
            write_atomic(
                self.cfg.summary, json.dumps(json_safe(self.summary(code)), indent=1) + "\n"
            )
        except OSError as e:
            self.say(f"could not write the summary {self.cfg.summary}: {e}")
