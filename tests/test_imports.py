"""A harness that only scores must not import torch or transformers; imports go one direction."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Top-level modules each package must never import, anywhere (lazy imports inside functions too).
FORBIDDEN = {
    "monitor": {"serving", "training", "torch", "transformers", "peft", "onnxruntime"},
    "serving": {"training", "torch", "transformers", "peft"},
}

CODE = """
import pkgutil, importlib, sys
import monitor, serving
names = []
for pkg in (monitor, serving):
    for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        if m.name == "serving.hooks.minisweagent":
            continue  # imports fine, but checked below with its optional package absent too
        names.append(m.name)
for n in names:
    importlib.import_module(n)
import serving.hooks.minisweagent
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "transformers"))
print(len(names), "modules;", "heavy:", bad)
assert not bad, bad
"""


def test_serving_and_monitor_do_not_import_torch():
    p = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    n = int(p.stdout.split()[0])
    assert n >= 20  # really walked the packages
    assert "heavy: []" in p.stdout


def test_monitor_does_not_import_onnxruntime():
    code = (
        "import pkgutil, importlib, sys, monitor\n"
        "for m in pkgutil.walk_packages(monitor.__path__, 'monitor.'): importlib.import_module(m.name)\n"
        "assert 'onnxruntime' not in sys.modules\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')]\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, top-level module) of every import statement in `path`, nested ones included."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module.split(".")[0]))
    return out


def test_import_direction_monitor_serving_training():
    """monitor <- serving <- training, checked statically so lazy imports count too."""
    bad = []
    n = 0
    for pkg, forbidden in FORBIDDEN.items():
        for path in sorted((ROOT / pkg).rglob("*.py")):
            n += 1
            bad += [
                f"{path.relative_to(ROOT)}:{line} imports {mod}"
                for line, mod in _imports(path)
                if mod in forbidden
            ]
    assert n >= 20
    assert not bad, "\n".join(bad)
