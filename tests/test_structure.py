"""The package's shape: imports flow one way, MLflow is reached
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
    assert "lipsweep.decide.sweep_runs" in graph["lipsweep.cli.commands"]  # in print_export
    assert "lipsweep.tracking.writer" in graph["lipsweep.tracking"]


def test_no_import_cycles():
    """``__main__``<->``demo``, ``pareto``<->``selection`` and the regularizer registry<->config
    cycles are gone (deferred imports count); nothing new appears."""
    assert [sorted(c) for c in import_cycles(import_graph())] == []


def layer_order() -> list[list[str]]:
    """The floors written in docs/architecture.md's ```layers block, top floor first."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md lost its ```layers block"
    return [
        line.split("#")[0].split() for line in block.group(1).splitlines() if line.split("#")[0]
    ]


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_arrows(graph: dict[str, set[str]], floors: list[list[str]]) -> list[str]:
    """Every import from a package to one on its own floor or a higher one."""
    floor = {pkg: len(floors) - i for i, line in enumerate(floors) for pkg in line}
    return sorted(
        f"{a} -> {b}"
        for a, targets in graph.items()
        for b in targets
        if _package(a) != _package(b) and floor[_package(a)] <= floor[_package(b)]
    )


def test_the_layer_check_finds_upward_and_sideways_arrows():
    floors = [["top"], ["left", "right"], ["core"]]
    graph = {
        "lipsweep.top.a": {"lipsweep.core.x", "lipsweep.left.y"},
        "lipsweep.left.y": {"lipsweep.right.z"},
        "lipsweep.core.x": {"lipsweep.top.a"},
        "lipsweep.right.z": set(),
    }
    assert upward_arrows(graph, floors) == [
        "lipsweep.core.x -> lipsweep.top.a",
        "lipsweep.left.y -> lipsweep.right.z",
    ]


def test_no_upward_arrows():
    """Every import points to a lower floor of docs/architecture.md's layer
    order, and every package of lipsweep/ stands on one floor."""
    floors = layer_order()
    graph = import_graph()
    placed = [pkg for line in floors for pkg in line]
    assert len(placed) == len(set(placed)), "a package stands on two floors"
    assert sorted({_package(m) for m in graph}) == sorted(placed)
    assert upward_arrows(graph, floors) == []


def test_ray_is_imported_under_sweep_only():
    """Ray is imported only by the modules that run Ray: lipsweep/sweep/ (docs/architecture.md)."""
    ray = re.compile(r"^\s*(import ray\b|from ray\b)", re.M)
    assert [
        str(p.relative_to(ROOT))
        for p in PKG.rglob("*.py")
        if PKG / "sweep" not in p.parents and ray.search(p.read_text())
    ] == []


def test_rays_private_modules_are_imported_by_ray_internals_only():
    """Ray's private modules (``ray._private``, ``ray._raylet``, ``ray.train._internal``, any
    ``_`` part) are imported in one module, lipsweep/sweep/ray_internals.py."""
    private = re.compile(r"^\s*(import|from)\s+ray(\.\w+)*\._", re.M)
    found = [str(p.relative_to(ROOT)) for p in PKG.rglob("*.py") if private.search(p.read_text())]
    assert found == ["lipsweep/sweep/ray_internals.py"]


def test_search_imports_no_ray_mlflow_or_torch():
    """lipsweep/search/ is the Ray-free search logic: none of its modules imports Ray, MLflow
    or torch, in its own code (deferred imports included) or through the modules it imports
    (each module imported in a fresh interpreter, then ``sys.modules`` read)."""
    import subprocess
    import sys

    banned = re.compile(r"^\s*(import|from)\s+(ray|mlflow|torch)\b", re.M)
    search = PKG / "search"
    assert [
        str(p.relative_to(ROOT)) for p in search.rglob("*.py") if banned.search(p.read_text())
    ] == []
    modules = sorted(_module_name(p) for p in search.rglob("*.py"))
    assert "lipsweep.search.replay" in modules and "lipsweep.search.space" in modules
    script = (
        "import importlib, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'mlflow', 'torch'}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _sources() -> list[Path]:
    files = [
        *PKG.rglob("*.py"),
        *(ROOT / "tests").glob("*.py"),
        *(ROOT / "docs").glob("*.py"),
        *(ROOT / "benchmarks").glob("*.py"),
        *(ROOT / "deploy").glob("*.py"),
    ]
    # the tracking package's own unit tests (tests/test_tracking.py) may test its retrying core
    own = {Path(__file__), ROOT / "tests" / "test_tracking.py"}
    return [p for p in files if PKG / "tracking" not in p.parents and p not in own]


def test_mlflow_is_reached_through_the_tracking_package_only():
    """Nothing outside lipsweep/tracking/ uses a tracker's ``.client`` or its retrying
    ``_call``; no lipsweep module outside it imports mlflow."""
    private = re.compile(r"(?<!boto3)\.client\b|\._call\(")  # boto3.client: S3 tests
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


def test_demo_calls_the_api_with_the_parsers_defaults(monkeypatch, tmp_path):
    """``demo`` builds each command's options itself, through :mod:`lipsweep.api` (no
    ``lipsweep.cli`` import, no ``argparse.Namespace``); they are exactly what the CLI makes of
    the same command line, every other flag at its default."""
    import os

    from lipsweep.api import DemoOptions, ExportOptions, ParetoOptions, SweepOptions
    from lipsweep.api._demo import demo_options
    from lipsweep.cli import build_parser
    from lipsweep.cli.commands import _options

    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    st = os.path.realpath(tmp_path / "st")
    parse = build_parser().parse_args
    common = ["--experiment", "e", "--tracking-uri", "sqlite:///m.db"]
    for resume, cpus, extra in ((True, 2, ["--resume", "--num-cpus", "2"]), (False, None, [])):
        demo = DemoOptions(
            space="s.yaml", experiment="e", out="out", storage=st, num_cpus=cpus,
            tracking_uri="sqlite:///m.db",
        )  # fmt: skip
        sweep, pareto, export = demo_options(demo, resume)
        argv = ["sweep", "s.yaml", "--storage", st, *common, *extra]
        assert sweep == _options(SweepOptions, parse(argv))
    assert pareto == _options(ParetoOptions, parse(["pareto", *common]))
    assert export == _options(ExportOptions, parse(["export", *common, "--out", "out", "--force"]))
    graph = import_graph()
    assert {_package(m) for m in graph["lipsweep.api._demo"]}.isdisjoint({"__main__", "cli"})


_METRIC_LIKE = re.compile(r"(acc|lip_jacobian|lip_softmax|lip_head|loss)(_[a-z0-9_]*)?")


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """The string constants of ``path`` that are code, not docstrings (a bare string
    statement, including a string after an assignment, is a docstring); f-string parts
    are included."""
    tree = ast.parse(path.read_text())
    docs = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


def _shown(path: Path) -> str:
    """A checked file as a hit names it: repo-relative, or its bare name (a tmp_path probe)."""
    return str(path.relative_to(ROOT)) if ROOT in path.parents else path.name


def _metric_name_literals(paths: list[Path], names: set[str], settings: set[str]) -> list[str]:
    return sorted(
        f"{_shown(p)}:{line}: {s!r}"
        for p in paths
        for line, s in _code_strings(p)
        if s not in settings and (s in names or _METRIC_LIKE.fullmatch(s))
    )


def test_metric_names_are_spelled_in_metric_names_only(tmp_path):
    """A metric name (or a family's prefix such as ``acc_`` or
    ``lip_head_``) is a quoted literal in ``core/metric_names.py`` and nowhere else in
    ``lipsweep/``; trial settings that share a stem (``lip_head_iters``) are not metrics."""
    from lipsweep.core import metric_names as mn
    from lipsweep.settings.config import TrialConfig

    names: set[str] = set()
    for key, value in vars(mn).items():
        if key.isupper() and key != "LIP_STATS":  # stat suffixes ("max"), not names
            values = value if isinstance(value, tuple) else (value,)
            names.update(v for v in values if isinstance(v, str))
    settings = set(TrialConfig.from_flat({}).to_flat())
    assert "lip_head_iters" in settings and "acc_clean" in names
    home = PKG / "core" / "metric_names.py"
    paths = [p for p in PKG.rglob("*.py") if p != home]
    assert _metric_name_literals(paths, names, settings) == []
    # the check sees code but not docstrings
    probe = tmp_path / "probe.py"
    probe.write_text('"""acc_clean"""\nX = 1\n"""loss"""\ny = {"acc_pgd_4": f"lip_head_{X}"}\n')
    hits = [h.split(": ", 1)[1] for h in _metric_name_literals([probe], names, settings)]
    assert sorted(hits) == ["'acc_pgd_4'", "'lip_head_'"]


_PRECISION = PKG / "vit" / "precision.py"


def _bf16_autocasts(paths: list[Path]) -> list[str]:
    """Each ``*.autocast(...)`` call of ``paths`` that names bfloat16 (``enabled=False``
    calls, which turn autocast off, name no dtype)."""
    hits = []
    for p in paths:
        for node in ast.walk(ast.parse(p.read_text())):
            if (
                isinstance(node, ast.Call)
                and ast.unparse(node.func).endswith("autocast")
                and "bfloat16" in ast.unparse(node)
            ):
                hits.append(f"{_shown(p)}:{node.lineno}")
    return hits


def test_bf16_autocast_is_entered_through_the_precision_module_only(tmp_path):
    """A bf16 autocast is ``lipsweep.vit.precision.bf16_autocast`` everywhere, so every bf16
    forward on the CPU takes its route around the flash kernel that fails on Intel AMX with
    ATen below AVX-512 (docs/reliability.md); a test that entered torch.autocast itself was
    the one that still failed there."""
    paths = [
        *PKG.rglob("*.py"),
        *(ROOT / "tests").glob("*.py"),
        *(ROOT / "benchmarks").glob("*.py"),
    ]
    assert _bf16_autocasts([p for p in paths if p != _PRECISION]) == []
    assert _bf16_autocasts([_PRECISION]) != []  # the one home: the check sees it there
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import torch\n"
        "with torch.autocast('cpu', dtype=torch.bfloat16):\n    pass\n"
        "with torch.autocast('cpu', enabled=False):\n    pass\n"
        "with torch.amp.autocast(device_type='cuda', dtype=torch.bfloat16):\n    pass\n"
    )
    assert _bf16_autocasts([probe]) == ["probe.py:2", "probe.py:6"]


# Each phrase is spelled so that this file does not match it (\s for a space, [:] for a colon).
_HISTORY = re.compile(
    r"\bissues? #?\d+\b|\bsessions? \d+\b|\bstop \d+\b|\bcommits? [0-9a-f]{7,40}\b"
    r"|(?<!\bis )(?<!\bare )(?<!\bbe )(?<!\bbeen )\bused\sto\b|\bprevious(?:ly)\b"
    r"|\bthe\sold\b|\bthe\sissue's|(?-i:\bBefore[:])|\bfixed\safter\b",
    re.I,
)
# A commit hash in prose: 7-40 lower-case hex digits with a digit and a letter among them
# (a float's exponent, 1.798e308, is not one).
# Prose only (a .py file's comments and docstrings, a .md file outside code), where run ids,
# checksums and test data do not appear.
_HASH = re.compile(r"(?<![.\w])(?!\d+e\d+\b)(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
_NOT_TEXT = {".csv", ".json", ".npz", ".png", ".db", ".lock", ".safetensors", ".txt"}
# CHANGELOG.md is where history goes.
_HISTORY_EXEMPT = {"CHANGELOG.md"}


def _py_prose(text: str) -> dict[int, str]:
    """Line number -> the comments and docstrings on that line of a Python file."""
    import io
    import tokenize

    prose: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            prose[tok.start[0]] = prose.get(tok.start[0], "") + " " + tok.string
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if not isinstance(body, list) or not body:
            continue
        first = body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            if isinstance(first.value.value, str):
                lines = ast.get_source_segment(text, first) or ""
                for no, line in enumerate(lines.splitlines(), first.lineno):
                    prose[no] = prose.get(no, "") + " " + line
    return prose


def _md_prose(text: str) -> dict[int, str]:
    """Line number -> a Markdown line outside fenced code, with its `code spans` removed."""
    prose: dict[int, str] = {}
    fenced = False
    for no, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced:
            prose[no] = re.sub(r"`[^`]*`", "", line)
    return prose


def _history_lines(name: str, text: str) -> list[str]:
    """The lines of one file that tell history: a phrase anywhere, a hash in prose."""
    found = [
        f"{name}:{no}: {line.strip()[:100]}"
        for no, line in enumerate(text.splitlines(), 1)
        if _HISTORY.search(line)
    ]
    if name.endswith((".py", ".md")):
        prose = _py_prose(text) if name.endswith(".py") else _md_prose(text)
        found += [
            f"{name}:{no}: hash in {line.strip()[:90]}"
            for no, line in prose.items()
            if _HASH.search(line)
        ]
    return found


def test_the_history_check_finds_planted_lines():
    planted = {  # phrases escaped (\x20 for a space) so this file does not match
        "a.py": '"""Fixed at 6d23397."""\nx = "0123abcd"  # the\x20old rule\n',
        "b.md": "It used\x20to fail.\n`39a15bef` is a run id.\n```\n6d23397\n```\nSee 6d23397.\n",
        "c.py": 'def f():\n    """Previous\x6cy, 1.798e308."""\n    return "is used\x20to"\n',
        "d.md": "Before\x3a it crashed. The\x20issue's rule. Fixed\x20after the study.\n",
    }
    found = {name: _history_lines(name, text) for name, text in planted.items()}
    assert [f.split(":")[1] for f in found["a.py"]] == ["2", "1"]  # the phrase, then the hash
    assert [f.split(":")[1] for f in found["b.md"]] == ["1", "6"]
    assert [f.split(":")[1] for f in found["c.py"]] == ["2"]
    assert len(found["d.md"]) == 1
    assert _history_lines("e.py", "x = 'ed25519 is used to sign'\n") == []


def test_no_file_but_the_changelog_tells_history():
    """Code, tests and docs describe the present: what changed, which issue or session asked
    for it, and at which commit, belongs in CHANGELOG.md and the commit messages. Every file
    git tracks (data and transcripts aside) is searched for the phrases, the prose of .py and
    .md files for commit hashes; the pattern's own spelling is split."""
    import subprocess

    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    found = []
    for name in tracked:
        path = ROOT / name
        if name in _HISTORY_EXEMPT or path.suffix in _NOT_TEXT or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += _history_lines(name, text)
    assert not found, "history outside CHANGELOG.md:\n" + "\n".join(found)
