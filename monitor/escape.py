"""One escaping rule for names that come from outside (run ids, instance ids, agents, sources,
threshold groups, folder and file names) wherever they are shown.

- `prom_label`: a Prometheus label value per the text exposition format (backslash, double
  quote and line feed escaped), so a name can never end its series or start another line.
- `visible`: terminal and log text with every control character (C0, DEL, C1; line breaks and
  escape codes included) shown as `\\xNN` / `\\uNNNN`, so a name cannot forge a line, clear the
  screen or move the cursor. Printable text is unchanged (a backslash too: task text and
  commands stay readable; a literal "\\x1b" can look like an escaped one, never act as one).
- `md`: `visible`, then `|` and a backtick escaped and `<` `>` as entities, so a name in a
  markdown report stays on its line and in its table cell and cannot open HTML or a code span
  (other markdown punctuation is left: "mini-swe-agent" reads as it is).
- `check_name`: the rule names from API clients must follow (length, no control characters):
  the reason a name is refused, or None.
"""

from __future__ import annotations

import re
import unicodedata

MAX_NAME = 200
"""Longest agent, source or run name a client may give (the service answers 422 beyond)."""

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_MD = {"|": "\\|", "`": "\\`", "<": "&lt;", ">": "&gt;"}


def _show(m: re.Match[str]) -> str:
    c = m.group(0)
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def visible(text: object) -> str:
    """`text` with control characters (and bidi overrides) made visible; one line always."""
    s = str(text)
    return _CONTROL.sub(_show, s) if _CONTROL.search(s) else s


def md(text: object) -> str:
    """`text` safe inside a markdown line or table cell."""
    s = visible(text)
    return "".join(_MD.get(c, c) for c in s) if any(c in s for c in _MD) else s


def prom_label(value: object) -> str:
    """A Prometheus label value (without its quotes), escaped per the text format."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def check_name(value: str, *, max_length: int = MAX_NAME) -> str | None:
    """Why `value` is not acceptable as a client-given name, or None when it is."""
    if len(value) > max_length:
        return f"{len(value)} characters, over the limit of {max_length}"
    bad = next(
        (c for c in value if _CONTROL.match(c) or unicodedata.category(c) in ("Cs", "Co")),
        None,
    )
    if bad is not None:
        return f"contains the control character U+{ord(bad):04X}"
    return None
