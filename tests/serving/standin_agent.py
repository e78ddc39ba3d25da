"""A stand-in coding agent for the supervisor tests: writes a Claude Code stream-json transcript.

    python standin_agent.py MODE TRANSCRIPT WORKDIR SEEN_LOG PROMPT [--steps N] [--delay S]

MODE loop: edits x.py, then runs the same failing test again and again (N steps in all);
clean: a few different steps, the test passes, a success result. Each start appends one JSON
line to SEEN_LOG: the attempt, FAILFAST_RESTART and the prompt file's text.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

SESSION = "5a1e0000-0000-4000-8000-00000000000{}"
FAIL = (
    "============================= test session starts ==============================\n"
    "collected 1 item\n\ntests/test_x.py F\n\n"
    "FAILED tests/test_x.py::test_x - AssertionError: assert 2 == 3\n1 failed in 0.12s"
)


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("mode", "transcript", "workdir", "seen_log", "prompt"):
        ap.add_argument(name)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--delay", type=float, default=0.1)
    a = ap.parse_args()
    attempt = os.environ.get("FAILFAST_ATTEMPT", "?")
    restart = os.environ.get("FAILFAST_RESTART")
    with open(a.seen_log, "a") as f:
        seen = {"attempt": attempt, "restart": restart, "prompt": Path(a.prompt).read_text()}
        f.write(json.dumps(seen) + "\n")
    sid = SESSION.format(attempt if attempt.isdigit() else 0)
    out = open(a.transcript, "a", buffering=1)  # noqa: SIM115 - written line by line until killed

    def put(record: dict) -> None:
        out.write(json.dumps({**record, "session_id": sid}) + "\n")

    put({"type": "system", "subtype": "init", "cwd": a.workdir, "model": "stand-in"})
    usage = {"input_tokens": 100, "output_tokens": 20}
    work = Path(a.workdir)
    for i in range(a.steps):
        if a.mode == "loop":
            cmd, result, err = "python -m pytest tests/test_x.py", FAIL, True
            if i == 0:
                (work / "x.py").write_text(f"def f():\n    return 2  # attempt {attempt}\n")
                cmd, result, err = "edit x.py", "edited x.py", False
        else:
            cmd, result, err = (
                f"sed -n {i * 10 + 1},{i * 10 + 10}p src/mod_{i}.py",
                f"line {i}\n" * (i + 1),
                False,
            )
            if i == a.steps - 1:
                (work / "x.py").write_text("def f():\n    return 3\n")
                cmd, result = "python -m pytest tests/test_x.py", "1 passed in 0.01s"
        tid = f"toolu_{i}"
        put(
            {
                "type": "assistant",
                "message": {
                    "id": f"msg_{i}",
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": cmd}}
                    ],
                    "usage": usage,
                },
            }
        )
        put(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [
                        {
                            "tool_use_id": tid,
                            "type": "tool_result",
                            "content": result,
                            "is_error": err,
                        }
                    ],
                },
            }
        )
        time.sleep(a.delay)
    put({"type": "result", "subtype": "success", "is_error": False, "num_turns": a.steps})
    out.close()


if __name__ == "__main__":
    main()
