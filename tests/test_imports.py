"""The import graph: monitor <- serving <- training, no cycle anywhere, training's stages in
layers, research code imported by nobody but the CLI, and no torch where a harness only scores."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("monitor", "serving", "training")
# Top-level modules each package must never import, anywhere (lazy imports inside functions too).
FORBIDDEN = {
    "monitor": {"serving", "training", "torch", "transformers", "peft", "onnxruntime"},
    "serving": {"training", "torch", "transformers", "peft"},
}
# training's subpackages in pipeline order: a module may import its own layer and those before.
LAYERS = {
    "config": 0,
    "train_config": 0,
    "data": 1,
    "model": 2,
    "baselines": 3,
    "calibrate": 3,
    "evaluate": 4,
    "export": 4,
    "pipeline": 5,
    "experiments": 6,
    "cli": 7,
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


def _modules() -> dict[str, Path]:
    """Dotted name -> file of every module of the three packages."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of every import statement in `path`, nested ones included; for
    `from a import b` the module a.b when it is one of ours, else a."""
    mods = _modules()
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                out.append((node.lineno, sub if sub in mods else node.module))
    return out


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {
        name: {m for _, m in _imports(path) if m in mods} - {name} for name, path in mods.items()
    }


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


def test_the_cli_without_a_model_never_imports_torch():
    """`failfast check` (and the parser every command builds) stays on the light core."""
    loop = ROOT / "tests" / "fixtures" / "claude_code_constructed_loop.jsonl"
    code = (
        "import sys\n"
        "from training.cli import main\n"
        f"rc = main(['check', {str(loop)!r}])\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers')]\n"
        "assert not heavy, heavy\n"
        "print('rc', rc)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "rc 1" in p.stdout  # the loop is stopped: the command really ran


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
                if mod.split(".")[0] in forbidden
            ]
    assert n >= 20
    assert not bad, "\n".join(bad)


def test_no_import_cycle():
    """No module reaches itself through imports (lazy ones included): Tarjan's SCCs."""
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                cycles.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert len(graph) >= 60
    assert not cycles, cycles


def test_training_layers_and_research_code():
    """training's stages import only earlier stages; nothing imports training.experiments but
    the experiments themselves and the CLI that runs them."""
    bad = []
    for name, deps in _graph().items():
        parts = name.split(".")
        if parts[0] != "training" or len(parts) < 2:
            continue
        layer = LAYERS[parts[1]]
        for dep in deps:
            dparts = dep.split(".")
            if dparts[0] != "training" or len(dparts) < 2:
                continue
            if LAYERS[dparts[1]] > layer:
                bad.append(f"{name} imports {dep} (a later stage)")
            if dparts[1] == "experiments" and parts[1] not in ("experiments", "cli"):
                bad.append(f"{name} imports research code {dep}")
    assert not bad, "\n".join(bad)


def test_every_package_is_installed():
    """pyproject's package list (setuptools find) is exactly the folders with an __init__.py."""
    from setuptools import find_packages

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    found = set(find_packages(ROOT, **cfg["tool"]["setuptools"]["packages"]["find"]))
    folders = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("__init__.py")
    }
    assert "training.pipeline" in folders
    assert found == folders
