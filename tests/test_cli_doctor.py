"""`memoryd doctor` probes the model endpoints, names what `auto` resolved to, exits 1 when
something is broken, and has `--json` (the other checks: tests/test_cli_daemon.py)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memoryd.providers.local import local_available
from tests.support.fake_embeddings import EmbeddingServer
from tests.support.fake_llm import FakeLLM
from tests.test_cli_memory import run


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture
def config_file(memoryd_home: Path) -> Iterator[Path]:
    yield memoryd_home / "config.toml"


def _checks(out: str) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in json.loads(out)["checks"]}


def test_doctor_with_the_chat_model_server_stopped_exits_1_naming_the_endpoint(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = closed_port()
    config_file.write_text(
        f'[embedding]\nprovider = "none"\n[llm]\nbase_url = "http://127.0.0.1:{port}/v1"\n'
        'model = "gpt-test"\n'
    )
    code, out, _ = run(capsys, "doctor", "--timeout", "3")
    assert code == 1
    line = next(line for line in out.splitlines() if "chat model" in line)
    assert line.startswith("BAD")
    assert f"http://127.0.0.1:{port}/v1/chat/completions" in line

    code, out, _ = run(capsys, "doctor", "--timeout", "3", "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    chat = _checks(out)["chat model"]
    assert chat["ok"] is False
    assert chat["endpoint"] == f"http://127.0.0.1:{port}/v1/chat/completions"


def test_doctor_with_the_chat_model_answering_is_ok_and_says_how_long_it_took(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeLLM(respond=lambda prompt: "OK") as llm:
        config_file.write_text('[embedding]\nprovider = "none"\n' + llm.config_toml())
        code, out, _ = run(capsys, "doctor", "--json")
        assert llm.requests == 1
        base_url = llm.base_url
    chat = _checks(out)["chat model"]
    assert chat["ok"] is True, chat
    assert f"{base_url}/chat/completions answered in" in chat["detail"]
    assert code == 0, out


def test_doctor_probes_an_openai_embedding_endpoint_and_reports_a_down_or_slow_one(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with EmbeddingServer() as server:
        config_file.write_text(
            f'[embedding]\nprovider = "openai"\nbase_url = "{server.base_url}"\nmodel = "mini"\n'
        )
        code, out, _ = run(capsys, "doctor", "--json")
    emb = _checks(out)["embeddings"]
    assert emb["ok"] is True and code == 0, out
    assert emb["detail"].startswith("provider = openai: openai/mini@16 at ")
    assert "(16-d)" in emb["detail"]

    with EmbeddingServer(hang=True) as server:
        config_file.write_text(
            f'[embedding]\nprovider = "openai"\nbase_url = "{server.base_url}"\nmodel = "mini"\n'
        )
        code, out, _ = run(capsys, "doctor", "--timeout", "0.5")
    assert code == 1
    line = next(line for line in out.splitlines() if "embeddings" in line)
    assert line.startswith("BAD") and f"{server.base_url}/embeddings" in line
    assert "0.5 s" in line

    port = closed_port()
    config_file.write_text(
        f'[embedding]\nprovider = "openai"\nbase_url = "http://127.0.0.1:{port}/v1"\n'
        'model = "mini"\n'
    )
    code, out, _ = run(capsys, "doctor", "--json", "--timeout", "3")
    emb = _checks(out)["embeddings"]
    assert code == 1 and emb["ok"] is False
    assert emb["endpoint"] == f"http://127.0.0.1:{port}/v1/embeddings"
    assert str(port) in emb["detail"]


def test_doctor_names_what_auto_resolved_to(
    config_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("memoryd.providers.probes.local_available", lambda: False)
    monkeypatch.setattr("memoryd.providers.factory.local_available", lambda: False)
    code, out, _ = run(capsys, "doctor", "--json")
    emb = _checks(out)["embeddings"]
    assert (emb["configured"], emb["resolved"]) == ("auto", "none")
    assert emb["detail"].startswith("provider = auto → none: no provider")
    assert code == 0, out


@pytest.mark.skipif(not local_available(), reason="needs the local extra")
def test_doctor_resolves_auto_to_the_local_model_and_embeds_with_it(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "doctor", "--json")
    emb = _checks(out)["embeddings"]
    assert (emb["configured"], emb["resolved"], emb["ok"]) == ("auto", "local", True)
    assert "(512-d)" in emb["detail"]
    assert code == 0


def test_doctor_reports_a_memory_root_it_cannot_write(
    config_file: Path, memoryd_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = memoryd_home / "not-a-dir"  # a file where the root's parent should be
    blocker.write_text("")
    root = blocker / "memory"
    config_file.write_text(f'[embedding]\nprovider = "none"\n[memory]\nroot = "{root}"\n')
    code, out, _ = run(capsys, "doctor", "--json")
    check = _checks(out)["memory root"]
    assert code == 1 and check["ok"] is False
    assert check["detail"] == f"{root}: {blocker} is not a directory"


def test_status_and_doctor_say_when_embedding_calls_time_out_and_what_to_change(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_cli_daemon import wait_until
    from tests.test_cli_memory import running_daemon, workspace_dir

    # 40 ms per text: a batch of 32 needs 1.3 s, more than embedding.timeout_secs = 0.5
    with EmbeddingServer(secs_per_text=0.04) as slow:
        env = {
            "MEMORYD_EMBEDDING_PROVIDER": "openai",
            "MEMORYD_EMBEDDING_BASE_URL": slow.base_url,
            "MEMORYD_EMBEDDING_MODEL": "mini",
            "MEMORYD_EMBEDDING_DIMENSIONS": "16",  # no probe: the first call is a full batch
            "MEMORYD_EMBEDDING_TIMEOUT_SECS": "0.5",
        }
        with running_daemon(**env) as daemon:
            monkeypatch.setenv("MEMORYD_HOME", str(daemon.home))
            for key, value in env.items():
                monkeypatch.setenv(key, value)
            ws = str(daemon.project)
            sessions = daemon.memory / workspace_dir(daemon) / "sessions"
            sessions.mkdir(parents=True)
            for i in range(40):  # 40 files before the workspace starts: one cold start
                text = f"# Log {i}\n\n## Note {i}\n\nslow servers, small batches, part {i}\n"
                (sessions / f"2026-01-01-slow-{i:08d}.md").write_text(text)
            # Started by a read, not a search: a search's query is embedded first (#19), and
            # its measured speed sizes the first batch to fit, so nothing would time out.
            first = f"{workspace_dir(daemon)}/sessions/2026-01-01-slow-00000000.md"
            assert run(capsys, "get", first, "-w", ws)[0] == 0  # starts it

            def advised() -> bool:
                _, out, _ = run(capsys, "status", "--json")
                return bool(json.loads(out).get("embedding_advice"))

            wait_until(advised, "the daemon reports the timeouts", timeout=30)
            code, out, _ = run(capsys, "status")
            line = next(line for line in out.splitlines() if line.startswith("embeddings:"))
            assert "timed out after 0.5 s" in line and "raise embedding.timeout_secs" in line

            code, out, _ = run(capsys, "doctor", "--json")
            timeouts = _checks(out)["embedding timeouts"]
            assert code == 1 and timeouts["ok"] is False
            assert "embedding.batch_size" in timeouts["detail"]
            embeddings = _checks(out)["embeddings"]  # its own probe of one text, with advice
            assert embeddings["ok"] is True

            def embedded() -> bool:  # and the vectors get made all the same
                _, out, _ = run(capsys, "status", "--json")
                actor = json.loads(out)["actors"][0]
                return bool(actor["index"].get("vectors_pending") == 0)

            wait_until(embedded, "every chunk has its vector", timeout=30)
