"""Fixtures for the runtime tests: a real workspace, memory root and index on temp paths."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from memoryd.core.config import Config
from memoryd.providers.embeddings import EmbeddingProvider
from memoryd.runtime.workspace.memory import WorkspaceMemory
from memoryd.store.layout import Workspace, ensure_workspace_dirs, resolve_workspace


@dataclasses.dataclass
class Env:
    root: Path
    project: Path
    workspace: Workspace

    def session(self, name: str, text: str, *, age_days: float = 0.0) -> Path:
        path = self.workspace.sessions_dir / name
        path.write_text(text, encoding="utf-8")
        if age_days:
            stamp = path.stat().st_mtime - age_days * 86400
            os.utime(path, (stamp, stamp))
        return path


@pytest.fixture
def env(tmp_path: Path) -> Env:
    root = tmp_path / "memory"
    project = tmp_path / "project"
    project.mkdir()
    ws = resolve_workspace(project, root)
    ensure_workspace_dirs(ws)
    return Env(root=root, project=project, workspace=ws)


def with_search(config: Config, **changes: Any) -> Config:
    return dataclasses.replace(config, search=dataclasses.replace(config.search, **changes))


def with_index(config: Config, **changes: Any) -> Config:
    return dataclasses.replace(config, index=dataclasses.replace(config.index, **changes))


MemoryFactory = Callable[..., Any]


@pytest.fixture
async def open_memory(env: Env) -> AsyncIterator[MemoryFactory]:
    opened: list[WorkspaceMemory] = []

    async def factory(
        provider: EmbeddingProvider | None = None, config: Config | None = None
    ) -> WorkspaceMemory:
        mem = WorkspaceMemory(env.workspace, env.root, config or Config(), provider)
        await mem.open()
        opened.append(mem)
        return mem

    yield factory
    for mem in opened:
        await mem.close()


class TableProvider:
    """A fake provider at the model boundary: fixed vectors for known texts."""

    def __init__(self, table: dict[str, Sequence[float]], dims: int = 4) -> None:
        self.table = table
        self._dims = dims
        self.calls: list[list[str]] = []

    @property
    def model_id(self) -> str:
        return f"table-{self._dims}"

    @property
    def dims(self) -> int:
        return self._dims

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        out = []
        for text in texts:
            vec = next((v for key, v in self.table.items() if key in text), None)
            out.append(list(vec) if vec is not None else [0.0] * (self._dims - 1) + [1.0])
        return out
