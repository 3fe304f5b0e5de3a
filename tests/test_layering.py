"""The package's layers depend only downwards, no import circle anywhere, small modules.

core (pure) ← store, providers (I/O) ← runtime (async) ← cli (the edge). Computed from the
import statements of every module under ``memoryd/`` (read with ``ast``, not imported), the
ones inside functions and ``TYPE_CHECKING`` blocks included: a lazy import is a dependency
too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import memoryd

PACKAGE_DIR = Path(memoryd.__file__).parent
# STYLE.md: aim under 400 lines; 600 is a reason to split. #21: no module over 600 lines.
MAX_LINES = 600

# layer → the layers it must not import
FORBIDDEN = {
    "memoryd.core": ("memoryd.store", "memoryd.providers", "memoryd.runtime", "memoryd.cli"),
    "memoryd.store": ("memoryd.runtime", "memoryd.providers", "memoryd.cli"),
    "memoryd.providers": ("memoryd.runtime", "memoryd.cli"),
    "memoryd.runtime": ("memoryd.cli",),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def imports_of(name: str, path: Path) -> set[str]:
    """The memoryd modules ``name`` imports (``from pkg import mod`` names the module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # ``from pkg import mod`` depends on mod, ``from mod import name`` on mod
            targets = [f"{source}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            # the longest known module the target names
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: imports_of(name, path) for name, path in MODULES.items()}


def test_the_readme_tree_names_every_package() -> None:
    readme = (PACKAGE_DIR.parent / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^### The package\n+```\n(.*?)```", readme, re.M | re.S)
    assert match, "README has no '### The package' tree"
    named = set(re.findall(r"^ *([a-z_]+)/", match.group(1), re.M))
    packages = {p.parent.name for p in PACKAGE_DIR.rglob("__init__.py")}
    assert packages - named == set(), "packages missing from the README tree"
    assert named - packages == set(), "the README tree names packages that do not exist"


def test_the_graph_sees_the_package() -> None:
    assert len(MODULES) > 50
    assert "memoryd.store.index" in GRAPH["memoryd.runtime.workspace.memory"]
    assert "memoryd.runtime.rpc.table" in GRAPH["memoryd.runtime.rpc.registry"]
    assert "memoryd.core.ranking" in GRAPH["memoryd.store.index.reader"]


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layers_import_only_downwards(layer: str) -> None:
    bad = sorted(
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        if _within(name, layer)
        for target in targets
        if any(_within(target, upper) for upper in FORBIDDEN[layer])
    )
    assert not bad, "\n".join(bad)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def test_no_import_cycle() -> None:
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles: " + "; ".join(" ↔ ".join(c) for c in cycles)


def test_the_cycle_finder_finds_one() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_over_the_size_limit(name: str) -> None:
    lines = len(MODULES[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines (split it: STYLE.md habit 5)"
