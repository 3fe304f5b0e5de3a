"""Shared fixtures: every test runs with its own MEMORYD_HOME, so no state leaks out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--slow", action="store_true", help="also run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def memoryd_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Relocate all memoryd state into a temp dir and keep the user's env out of tests."""
    home = tmp_path / "memoryd-home"
    home.mkdir()
    monkeypatch.setenv("MEMORYD_HOME", str(home))
    for name in list(__import__("os").environ):
        if name.startswith("MEMORYD_") and name != "MEMORYD_HOME":
            monkeypatch.delenv(name)
    yield home


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
