"""The package's import structure: dependencies point one way.

Every ``import`` of the package's own modules is read from the source (function-level imports
included, since a lazy import is still a dependency), grouped by subpackage, and checked:
the IR never imports the runtime or the op library, passes never import the pictures, and no
two subpackages import each other, directly or through others.
"""
from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import networkx as nx

ROOT = pathlib.Path(__file__).resolve().parents[1] / "singa_graph"


def _module_name(path: pathlib.Path) -> tuple[str, bool]:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    is_pkg = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_pkg else parts), is_pkg


def _imported(path: pathlib.Path):
    """(module imported, line) for every import of singa_graph code in ``path``."""
    mod, is_pkg = _module_name(path)
    for n in ast.walk(ast.parse(path.read_text())):
        if isinstance(n, ast.ImportFrom):
            if n.level:
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[:len(base) - (n.level - 1)]
                target = ".".join(base + ([n.module] if n.module else []))
            else:
                target = n.module or ""
            if target == "singa_graph" or n.module is None:
                for a in n.names:
                    yield f"{target}.{a.name}", n.lineno
            else:
                yield target, n.lineno
        elif isinstance(n, ast.Import):
            for a in n.names:
                yield a.name, n.lineno


def _unit(module: str) -> str | None:
    """The subpackage (``ir``, ``runtime``, ...) a module belongs to; None for top modules."""
    parts = module.split(".")
    if parts[0] != "singa_graph" or len(parts) < 2:
        return None
    return parts[1] if (ROOT / parts[1]).is_dir() else None


def package_graph() -> nx.DiGraph:
    """Subpackage -> subpackage edges, each with the (file, line) imports behind it."""
    g = nx.DiGraph()
    for path in ROOT.rglob("*.py"):
        src = _unit(_module_name(path)[0])
        if src is None:
            continue
        g.add_node(src)
        for target, line in _imported(path):
            dst = _unit(target)
            if dst is not None and dst != src:
                g.add_edge(src, dst)
                g.edges[src, dst].setdefault("at", []).append(
                    f"{path.relative_to(ROOT.parent)}:{line}")
    return g


def _where(g, a, b):
    return g.edges[a, b]["at"] if g.has_edge(a, b) else []


def test_ir_imports_neither_runtime_nor_ops():
    g = package_graph()
    assert _where(g, "ir", "runtime") == []
    assert _where(g, "ir", "ops") == []
    assert set(g.successors("ir")) == set(), _where(g, "ir", next(iter(g.successors("ir"))))


def test_passes_do_not_import_viz():
    g = package_graph()
    assert _where(g, "passes", "viz") == []


def test_runtime_imports_only_the_ir_and_the_formulas_of_ops():
    """Kernels are generated from the ops' scalar formulas (ops/formulas.py); nothing else of
    the package above the IR (passes, pictures, user API) is the runtime's business."""
    g = package_graph()
    assert set(g.successors("runtime")) <= {"ir", "ops"}, {
        d: _where(g, "runtime", d) for d in g.successors("runtime")}


def test_no_import_circle_between_subpackages():
    g = package_graph()
    cycles = list(nx.simple_cycles(g))
    assert cycles == [], [(c, [_where(g, a, b) for a, b in zip(c, c[1:] + c[:1])])
                          for c in cycles]


def test_the_ir_reads_without_the_runtime():
    """The IR loads without the runtime, the op library or numba; what needs them (a
    tensor's default device) says that ``import singa_graph`` binds them."""
    code = ("import sys, importlib.util\n"
            "spec = importlib.util.find_spec('singa_graph')\n"
            # load singa_graph.ir without running singa_graph/__init__ (which binds the runtime)
            "import types; pkg = types.ModuleType('singa_graph'); pkg.__path__ = spec.submodule_search_locations\n"
            "sys.modules['singa_graph'] = pkg\n"
            "import singa_graph.ir as ir\n"
            "try:\n"
            "    ir.Placeholder((2, 3))\n"
            "except Exception as e:\n"
            "    assert 'import singa_graph' in str(e), e\n"
            "else:\n"
            "    raise AssertionError('a Placeholder needs the runtime\\'s default device')\n"
            "bad = sorted(m for m in sys.modules if m.startswith(('singa_graph.runtime', 'singa_graph.ops', 'numba')))\n"
            "print(bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
