"""``memoryd ingest`` reading a transcript's head (hostile paths, no daemon needed: the CLI
refuses before it calls one)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from memoryd.cli import main


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(home / "run"))
    return home


def test_a_fifo_transcript_is_refused_without_blocking(
    user_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = user_home / "session.jsonl"
    os.mkfifo(fifo)
    codes: list[int] = []
    worker = threading.Thread(target=lambda: codes.append(main(["ingest", str(fifo)])))
    worker.start()
    worker.join(5)
    if worker.is_alive():  # blocked opening the FIFO: let it go, then fail
        with open(fifo, "wb"):
            pass
        worker.join(5)
        pytest.fail("memoryd ingest blocked on a FIFO")
    assert codes == [2]
    assert "not a regular file" in capsys.readouterr().err


def test_a_missing_transcript_is_an_error_not_a_traceback(
    user_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ingest", str(user_home / "gone.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err
