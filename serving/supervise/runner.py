"""The attempts of one task: run each (serving.supervise.attempt), reset the work tree between
them, keep the totals and write the summary.

After a stop the repository is reset to the attempt's snapshot when another attempt follows (the
last attempt's changes are left in place: nothing follows that needs a clean tree, and its diff is
in its packet); the next attempt's prompt carries the stop's reason and the stopped diff.
"""

from __future__ import annotations

import glob
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from serving.supervise import git
from serving.supervise.attempt import Attempt
from serving.supervise.config import SuperviseConfig
from serving.supervise.packet import write_atomic
from serving.watch import Opener

__all__ = ["EXIT_FINISHED", "EXIT_PROBLEM", "EXIT_STOPPED", "SuperviseConfig", "Supervisor"]

EXIT_FINISHED, EXIT_STOPPED, EXIT_PROBLEM = 0, 1, 2


def _stderr(line: str) -> None:
    sys.stderr.write(f"failfast supervise: {line}\n")
    sys.stderr.flush()


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
        self._current: Attempt | None = None
        self._repo = git.is_repo(cfg.workdir)
        # our own files stay out of every diff and survive every reset (serving.supervise.git)
        own = [cfg.transcript] + ([cfg.summary] if cfg.summary is not None else [])
        self._keep = git.keep_specs(cfg.workdir, own, [cfg.kept_prefix]) if self._repo else []

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
                self._current = Attempt(
                    cfg,
                    n,
                    self.monitor,
                    keep=self._keep,
                    totals=self._totals,
                    add_totals=self._add_totals,
                    say=self.say,
                    repo=self._repo,
                )
                record, stop, watch = self._current.run(task, last, diff, packet)
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
            if self._current is not None:  # the supervisor itself was interrupted:
                self._current.kill()  # leave no agent behind
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
        prefix = self.cfg.kept_prefix
        own = [p for p in prefix.parent.glob(f"{glob.escape(prefix.name)}*") if p.is_file()]
        return own + ([self.cfg.summary] if self.cfg.summary is not None else [])

    def _add_totals(self, attempt: dict[str, float]) -> None:
        for k in ("steps", "tokens", "dollars"):
            self.totals[k] += attempt[k]

    def _totals(self, current: dict[str, float] | None = None) -> dict[str, float]:
        t = {k: v + (current or {}).get(k, 0) for k, v in self.totals.items()}
        t["wall_seconds"] = time.monotonic() - self._t0
        return t

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
