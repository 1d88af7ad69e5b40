"""The shape of the house: imports point one way, no circles in core, small files and functions.

Imports are read from the source with ``ast`` (every ``import`` statement,
module-level or inside a function, except those under ``if TYPE_CHECKING:``),
so a lazy import counts as a dependency just like a top-level one.
Layers, lowest first: ``marl`` core; the plugins ``marl.envs``, ``marl.algos``
and ``marl.benchmarks``, which import core and never each other (the
benchmarks drive core's public API only).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import pytest

REPO = Path(__file__).resolve().parents[1]
# source folder -> the package it installs as (setup.py's package_dir)
PACKAGES = {"marl": "marl", "envs": "marl.envs", "algos": "marl.algos", "benchmarks": "marl.benchmarks"}
PLUGINS = ("marl.envs", "marl.algos", "marl.benchmarks")
# modules inside marl.envs that sibling adapters may share (everything else in envs/ is one family each)
ENV_SHARED = ("marl.envs.common", "marl.envs.grid", "marl.envs.jax_batch")
MAX_FILE_LINES, MAX_FUNCTION_LINES = 600, 60


def _modules() -> Dict[str, Path]:
    out = {}
    for folder, package in PACKAGES.items():
        root = REPO / folder
        for path in root.rglob("*.py") if root.is_dir() else []:
            rel = path.relative_to(root).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


MODULES = _modules()


def _type_checking_lines(tree: ast.AST) -> Set[int]:
    lines: Set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(module: str) -> Set[str]:
    """Modules of this repository that ``module`` imports (module level or inside functions)."""
    tree = ast.parse(MODULES[module].read_text())
    skip = _type_checking_lines(tree)
    package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
    out: Set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", 0) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            # an import of a.b.c depends on a.b.c, or on the closest enclosing module we have
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                out.add(name)
    return out


GRAPH = {m: imports_of(m) for m in MODULES}


def _cycles(nodes: List[str]) -> List[List[str]]:
    """Strongly connected components with more than one module (Tarjan), restricted to ``nodes``."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out: List[List[str]] = []
    counter = iter(range(10**9))

    def visit(v: str) -> None:
        index[v] = low[v] = next(counter)
        stack.append(v)
        on.add(v)
        for w in sorted(GRAPH[v] & set(nodes)):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return out


def _core() -> List[str]:
    return sorted(m for m in MODULES if not m.startswith(PLUGINS))


def _plugin_of(module: str) -> str:
    return next((p for p in PLUGINS if module == p or module.startswith(p + ".")), "marl")


def test_core_has_no_import_circle():
    assert _cycles(_core()) == [], "modules of marl/ that import each other in a circle"


def test_core_never_imports_a_plugin():
    bad = [(m, t) for m in _core() for t in sorted(GRAPH[m]) if t.startswith(PLUGINS)]
    assert bad == [], "core modules importing an env, wrapper, algorithm or benchmark module directly"


def test_plugins_import_core_not_each_other():
    bad = [
        (m, t)
        for m in MODULES
        if m.startswith(PLUGINS)
        for t in sorted(GRAPH[m])
        if _plugin_of(t) not in ("marl", _plugin_of(m))
    ]
    assert bad == [], "a plugin importing another plugin"


def _env_family(module: str) -> str:
    """The family a module of marl.envs belongs to: its first name below marl.envs."""
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) > 2 else module


def test_env_families_share_only_through_the_common_module():
    bad = []
    for m in MODULES:
        if not m.startswith("marl.envs.") or m.startswith(ENV_SHARED):
            continue
        for t in GRAPH[m]:
            if t.startswith("marl.envs.") and not t.startswith(ENV_SHARED) and _env_family(t) != _env_family(m):
                bad.append((m, t))
    assert bad == [], (
        "env families importing each other (share helpers through marl.envs.common, marl.envs.grid or marl.envs.jax_batch)"
    )


def _functions(tree: ast.AST) -> Iterator[Tuple[str, int, int]]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = 0
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                doc = first.end_lineno - first.lineno + 1
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1 - doc


@pytest.mark.parametrize("folder", sorted(PACKAGES))
def test_no_long_files_or_functions(folder):
    long_files, long_functions = [], []
    for path in sorted((REPO / folder).rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > MAX_FILE_LINES:
            long_files.append((str(path.relative_to(REPO)), text.count("\n")))
        for name, line, length in _functions(ast.parse(text)):
            if length > MAX_FUNCTION_LINES:
                long_functions.append((f"{path.relative_to(REPO)}:{line} {name}", length))
    assert long_files == [], f"files over {MAX_FILE_LINES} lines"
    assert long_functions == [], f"functions over {MAX_FUNCTION_LINES} lines (docstrings not counted)"


def test_the_checker_sees_lazy_imports_and_circles(tmp_path, monkeypatch):
    """The walker itself: a function-level import is an edge and a two-module circle is found."""
    (tmp_path / "a.py").write_text("def f():\n    from marl.zz_b import x\n")
    (tmp_path / "b.py").write_text("import marl.zz_a\n")
    monkeypatch.setitem(MODULES, "marl.zz_a", tmp_path / "a.py")
    monkeypatch.setitem(MODULES, "marl.zz_b", tmp_path / "b.py")
    monkeypatch.setitem(GRAPH, "marl.zz_a", imports_of("marl.zz_a"))
    monkeypatch.setitem(GRAPH, "marl.zz_b", imports_of("marl.zz_b"))
    assert GRAPH["marl.zz_a"] == {"marl.zz_b"} and GRAPH["marl.zz_b"] == {"marl.zz_a"}
    assert ["marl.zz_a", "marl.zz_b"] in _cycles(["marl.zz_a", "marl.zz_b"])


def test_docs_architecture_names_every_core_module():
    """docs/architecture.md lists the module graph: a new core module must be placed in it."""
    text = (REPO / "docs" / "architecture.md").read_text()
    missing = []
    for m in _core():
        parts = m.split(".")
        if m == "marl":
            continue
        named = f"`{m}`" in text or f"`{'/'.join(parts)}.py`" in text
        if len(parts) > 2:  # a submodule may be listed by its last name beside its package
            named = named or (f"`{'.'.join(parts[:2])}`" in text and f"`{parts[-1]}`" in text)
        if not named:
            missing.append(m)
    assert missing == [], "core modules not placed in docs/architecture.md"


def test_every_source_folder_is_a_regular_package():
    """setup.py's find_packages skips folders without __init__.py: a non-editable install
    (pip install ., a wheel) would then miss their modules, as it once missed marl.engine."""
    missing = sorted(
        {
            str(p.parent.relative_to(REPO))
            for top in ("marl", "envs", "algos", "benchmarks", "configs")
            for p in (REPO / top).rglob("*.py")
            if not (p.parent / "__init__.py").exists()
        }
    )
    assert missing == []
