"""The pure core stays pure: no module under memoryd/core imports an I/O or runtime module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import memoryd.core

FORBIDDEN = {
    "sqlite3",
    "pysqlite3",
    "sqlite_vec",
    "aiosqlite",
    "os",
    "time",
    "socket",
    "anyio",
    "asyncio",
    "httpx",
    "subprocess",
    "shutil",
    "watchfiles",
    "memoryd.store",
    "memoryd.runtime",
    "memoryd.providers",
}

CORE_DIR = Path(memoryd.core.__file__).parent
CORE_MODULES = sorted(CORE_DIR.rglob("*.py"))


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _forbidden(name: str) -> bool:
    return any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN)


def test_core_has_the_modules_the_spec_names() -> None:
    names = {p.stem for p in CORE_MODULES}
    assert {"chunking", "keywords", "ranking", "config", "workspace"} <= names


@pytest.mark.parametrize("path", CORE_MODULES, ids=lambda p: p.relative_to(CORE_DIR).as_posix())
def test_core_module_imports_no_io(path: Path) -> None:
    bad = sorted(name for name in _imports(path) if _forbidden(name))
    assert not bad, f"{path.name} imports I/O or runtime modules: {bad}"


def test_the_check_catches_an_io_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import os.path\nfrom anyio import sleep\nimport math\n")
    assert sorted(n for n in _imports(sample) if _forbidden(n)) == ["anyio", "os.path"]
