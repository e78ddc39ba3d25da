"""`failfast ... | head`: the reader going away ends the command quietly (exit 141, as SIGPIPE),
without a BrokenPipeError traceback."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
import training.cli as c
p = c.build_parser()
def big(args):
    for i in range(200000):
        print("line", i)
    return 0
p._subparsers._group_actions[0].choices["check"].set_defaults(func=big)
c.build_parser = lambda: p
sys.exit(c.main(["check", "x"]))
"""


def test_a_closed_pipe_ends_the_command_quietly() -> None:
    p = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert p.stdout is not None
    assert p.stdout.readline() == b"line 0\n"
    p.stdout.close()  # as `head -1` does
    _, err = p.communicate(timeout=60)
    assert p.returncode == 141
    assert b"Traceback" not in err
    assert b"BrokenPipe" not in err
