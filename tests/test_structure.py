"""The package's shape (issue 14 items 4 and 5): imports flow one way, MLflow is reached
through :mod:`lipsweep.tracking` only, and ``demo`` calls functions, not the parser.

Static checks (``ast`` and text), no Ray and no MLflow: each test takes well under a second.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "lipsweep"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, name: str, modules: set[str]) -> set[str]:
    """The lipsweep modules ``name`` imports, at module level or in a function (a deferred
    import is still a dependency); imports under ``if TYPE_CHECKING:`` are left out."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[: len(package) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in modules else base)
    return {m for m in out if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in PKG.rglob("*.py")}
    return {m: _imports(p, m, set(paths)) for m, p in paths.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

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
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_cycles(graph) == [frozenset("abc")]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_sees_deferred_imports():
    graph = import_graph()
    assert "lipsweep.decide.commands" in graph["lipsweep.__main__"]  # inside cmd_pareto
    assert "lipsweep.tracking.writer" in graph["lipsweep.tracking"]


def test_no_import_cycles():
    """``__main__``<->``demo``, ``pareto``<->``selection`` and the regularizer registry<->config
    cycles are gone (deferred imports count); nothing new appears."""
    assert [sorted(c) for c in import_cycles(import_graph())] == []


def _sources() -> list[Path]:
    files = [
        *PKG.rglob("*.py"),
        *(ROOT / "tests").glob("*.py"),
        *(ROOT / "docs").glob("*.py"),
        *(ROOT / "benchmarks").glob("*.py"),
        *(ROOT / "deploy").glob("*.py"),
    ]
    return [p for p in files if PKG / "tracking" not in p.parents and p != Path(__file__)]


def test_mlflow_is_reached_through_the_tracking_package_only():
    """Nothing outside lipsweep/tracking/ uses a tracker's ``.client`` or its retrying
    ``_call``; no lipsweep module outside it imports mlflow."""
    private = re.compile(r"\.client\b|\._call\(")
    hits = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in _sources()
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert hits == []
    mlflow = re.compile(r"^\s*(import mlflow|from mlflow\b)|MlflowClient", re.M)
    assert [
        str(p.relative_to(ROOT))
        for p in _sources()
        if PKG in p.parents and mlflow.search(p.read_text())
    ] == []


def test_demo_calls_functions_with_the_parsers_defaults(monkeypatch):
    """``demo`` builds each command's options itself (no ``__main__`` import); they are
    exactly what the parser makes of the same command line, every other flag at its default."""
    from lipsweep.__main__ import build_parser
    from lipsweep.sweep.demo import export_args, pareto_args, sweep_args

    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    parse = build_parser().parse_args
    common = ["--experiment", "e", "--tracking-uri", "sqlite:///m.db"]
    assert vars(sweep_args("s.yaml", "e", "/st", "sqlite:///m.db", True, 2)) == vars(
        parse(["sweep", "s.yaml", "--storage", "/st", *common, "--resume", "--num-cpus", "2"])
    )
    assert vars(sweep_args("s.yaml", "e", "/st", "sqlite:///m.db", False, None)) == vars(
        parse(["sweep", "s.yaml", "--storage", "/st", *common])
    )
    assert vars(pareto_args("e", "sqlite:///m.db")) == vars(parse(["pareto", *common]))
    assert vars(export_args("e", "sqlite:///m.db", "out")) == vars(
        parse(["export", *common, "--out", "out", "--force"])
    )
    assert "lipsweep.__main__" not in import_graph()["lipsweep.sweep.demo"]
