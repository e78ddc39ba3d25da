"""Regex cost on adversarial run text: worst time per pattern set at 40 KB, 80 KB and 1 MB.

Every compiled pattern at module level in monitor/ and serving/ is collected and grouped by
module (a "pattern set"). Each one runs (`findall`) on strings built from its own literals:
runs of one character, a literal repeated, a literal followed by a long run (an opening that
never closes). The table prints the worst time of each set per size and the input that caused
it; a linear set grows ~25x from 40 KB to 1 MB, a quadratic one ~600x. The entry points of the
issue (a task of 40,000 "a", a 60 KB word in a Claude Code prompt) are timed as a whole too.

    python bench/bench_regex.py [--sizes 40000 80000 1000000]
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterator

FILLERS = [
    "a",
    " ",
    "\n",
    "0",
    ".",
    "/",
    "-",
    "_",
    "=",
    "'",
    '"',
    ">",
    "(",
    "\x1b",
    "a.",
    "a__",
    "-i ",
]
TAILS = (" ", "\n", "a.")
MAX_LITERALS = 12


def _bash_blocks(text: str) -> object:
    from monitor.formats.minisweagent import _bash_blocks

    return _bash_blocks(text)


GUARDED: dict[str, Callable[[str], object]] = {
    # Quadratic on its own (an opening fence with no closing one makes the lazy `(.*?)` rescan the
    # rest from every opening); the reader only ever searches up to the last closing fence.
    "monitor.formats.minisweagent._BASH_BLOCK": _bash_blocks,
}
"""Patterns that are not linear by themselves, and the only way the code applies them."""


def patterns() -> list[tuple[str, str, re.Pattern]]:
    """(module, name, pattern) of every module-level pattern in monitor/ and serving/ (also those
    in tuples, and in (literal, pattern) pairs)."""
    import monitor
    import serving

    found = []
    for package in (monitor, serving):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name == "serving.app":
                continue  # no patterns, and FastAPI is not needed to time regexes
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                values = value if isinstance(value, tuple) else (value,)
                for i, v in enumerate(values):
                    v = v[-1] if isinstance(v, tuple) and v else v
                    if isinstance(v, re.Pattern):
                        found.append((info.name, name + (f"[{i}]" if len(values) > 1 else ""), v))
    return found


def literals(pattern: re.Pattern) -> list[str]:
    """Words and tags of the pattern's source: the prefixes an attack would repeat."""
    src = pattern.pattern if isinstance(pattern.pattern, str) else pattern.pattern.decode("latin-1")
    src = src.replace("\\n", "\n").replace("\\(", "(").replace("\\.", ".")
    return sorted(set(re.findall(r"[A-Za-z_<>:=`(][A-Za-z_<>:=`( \n]{1,40}", src)))[:MAX_LITERALS]


def adversarial(pattern: re.Pattern, size: int) -> Iterator[tuple[str, str]]:
    """(name, text) pairs of about `size` characters aimed at `pattern`."""
    for f in FILLERS:
        yield f"{f!r}*n", f * (size // len(f))
    for lit in literals(pattern):
        yield f"{lit!r}*n", lit * (size // len(lit))
        for f in TAILS:
            yield f"{lit!r}+{f!r}*n", lit + f * (size // len(f))
            yield f"({lit!r}+{f!r})*n", (lit + f) * (size // (len(lit) + len(f)))


def matcher(module: str, name: str, pattern: re.Pattern) -> Callable[[str | bytes], object]:
    """How the code applies the pattern: `findall` (every start position), or its guard."""
    guard = GUARDED.get(f"{module}.{name}")
    if guard is not None:
        return guard  # type: ignore[return-value]
    return lambda text: pattern.findall(text)  # type: ignore[arg-type]


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def attacks(size: int) -> dict[str, Callable[[], object]]:
    """The slow inputs of issue 16 and those found since, through the code that runs them."""
    from monitor.flags import clean_path
    from monitor.render import clean
    from monitor.session import Monitor
    from monitor.textio import between
    from monitor.types import Step

    def observe(**kw: object) -> object:
        return Monitor().start(task="fix it").observe(Step(index=0, tool="bash", **kw))  # type: ignore[arg-type]

    return {
        "session: task of 'a'*n": lambda: Monitor().start(task="a" * size),
        "session: task of 'a.'*n": lambda: Monitor().start(task="a." * (size // 2)),
        "observe: sed -i -i ...": lambda: observe(action="sed " + "-i " * (size // 3)),
        "observe: tee + spaces": lambda: observe(action="tee" + " " * size + "!"),
        "observe: pytest '= passed ...'": lambda: observe(
            action="pytest", observation="= " + "passed " * (size // 7)
        ),
        "clean_path: /a__a__...": lambda: clean_path("/" + "a__" * (size // 3)),
        "render.clean: spaces, no newline": lambda: clean(" " * size + "x"),
        "reader: <pr_description> + spaces": lambda: between(
            "<pr_description>" + " " * size, "<pr_description>", "</pr_description>"
        ),
        "reader: ```bash + newlines": lambda: _bash_blocks("```bash" + "\n" * size),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[40_000, 80_000, 1_000_000])
    args = parser.parse_args()
    sets: dict[str, list[tuple[str, re.Pattern]]] = defaultdict(list)
    for module, name, pattern in patterns():
        sets[module].append((name, pattern))
    print(f"{len(sets)} pattern sets, {sum(map(len, sets.values()))} patterns")
    header = "".join(f"{n // 1000:>8d}K" for n in args.sizes)
    print(f"{'pattern set (worst pattern / input at the largest size)':70s}{header}  (seconds)")
    for module, pats in sorted(sets.items()):
        worst: dict[int, tuple[float, str]] = {}
        for size in args.sizes:
            for name, pattern in pats:
                run = matcher(module, name, pattern)
                for what, text in adversarial(pattern, size):
                    data = text.encode() if isinstance(pattern.pattern, bytes) else text
                    t = _timed(lambda r=run, d=data: r(d))
                    if t > worst.get(size, (-1.0, ""))[0]:
                        worst[size] = (t, f"{name} on {what}")
        times = "".join(f"{worst[n][0]:9.4f}" for n in args.sizes)
        label = f"{module.split('.', 1)[1]} ({worst[args.sizes[-1]][1]})"
        print(f"{label[:69]:70s}{times}")
    print(f"{'attack (through the code that runs it)':70s}{header}")
    for name in attacks(1):
        times = "".join(f"{_timed(attacks(n)[name]):9.4f}" for n in args.sizes)
        print(f"{name:70s}{times}")


if __name__ == "__main__":
    main()
