"""`memoryd remember` with secrets, `memoryd secrets scan|purge`, and the `secrets:` status
line, against a live daemon (a real subprocess; see tests/test_cli_memory.py)."""

from __future__ import annotations

import json
import random
import string
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.core.secrets import fingerprint
from memoryd.store.layout import resolve_workspace
from tests.test_cli_memory import LiveDaemon, run, running_daemon

RNG = random.Random(1818)


def token() -> str:
    return "ghp_" + "".join(RNG.choice(string.ascii_letters + string.digits) for _ in range(36))


@pytest.fixture(scope="module")
def live_daemon() -> Iterator[LiveDaemon]:
    with running_daemon() as daemon:
        yield daemon


@pytest.fixture
def live(live_daemon: LiveDaemon, monkeypatch: pytest.MonkeyPatch) -> LiveDaemon:
    monkeypatch.setenv("MEMORYD_HOME", str(live_daemon.home))
    return live_daemon


def test_remember_redacts_and_warns_unless_allowed(
    live: LiveDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = str(live.project)
    secret = token()
    code, out, err = run(capsys, "remember", f"The CI bot uses {secret} to push tags", "-w", ws)
    assert code == 0, err
    redaction = f"[REDACTED:github-token:{fingerprint(secret)}]"
    assert redaction in err and "--allow-secrets" in err and secret not in err + out
    memory = resolve_workspace(live.project, live.memory).memory_file.read_text(encoding="utf-8")
    assert redaction in memory and secret not in memory

    kept = token()
    code, out, err = run(capsys, "remember", f"Test fixture {kept}", "-w", ws, "--allow-secrets")
    assert code == 0 and "warning" not in err
    memory = resolve_workspace(live.project, live.memory).memory_file.read_text(encoding="utf-8")
    assert kept in memory


def test_scan_lists_findings_then_purge_cleans_them(
    live: LiveDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = resolve_workspace(live.project, live.memory)
    run(capsys, "remember", "Warm up the workspace", "-w", str(live.project))
    secret = token()
    log = ws.sessions_dir / "2026-01-01-notes-0000abcd.md"
    log.write_text(f"## Notes\n\nline two\nexport GITHUB_TOKEN={secret}\n", encoding="utf-8")

    code, out, _ = run(capsys, "secrets", "scan", "-w", str(live.project))
    assert code == 1
    rel = log.relative_to(live.memory).as_posix()
    assert f"{rel}:4: github-token [{fingerprint(secret)}]" in out
    assert secret not in out and "memoryd secrets purge" in out

    code, out, err = run(capsys, "secrets", "purge", "-w", str(live.project))
    assert code == 0, err
    assert "redacted in" in out and "re-indexed" in out
    assert secret not in log.read_text(encoding="utf-8")

    code, out, _ = run(capsys, "secrets", "scan", "--all")
    assert code == 0 and out.startswith("0 secret(s)")

    code, out, _ = run(capsys, "status")
    assert code == 0
    assert "secrets: gitleaks-derived rules" in out and "redacted since start" in out


def test_purge_all_names_a_global_file_too_large_to_scan(
    live: LiveDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    big = live.memory / "pasted-build-log.md"
    with big.open("wb") as handle:
        handle.write(f"GITHUB_TOKEN={token()}\n".encode())
        handle.truncate(70 * 1024 * 1024)  # sparse, over the scan's 64 MiB
    try:
        code, out, err = run(capsys, "secrets", "purge", "--all")
    finally:
        big.unlink()
    assert code == 1, err  # like scan: the file may still hold secrets
    assert "pasted-build-log.md: not scanned (over 64 MiB)" in out, out


def test_doctor_shows_the_rule_set_and_user_patterns(
    memoryd_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (memoryd_home / "config.toml").write_text(
        '[embedding]\nprovider = "none"\n[secrets]\nextra_patterns = ["ACME-[0-9]{6}"]\n',
        encoding="utf-8",
    )
    _, out, _ = run(capsys, "doctor", "--json")
    checks = {check["name"]: check for check in json.loads(out)["checks"]}
    secrets = checks["secrets"]
    assert secrets["ok"] is True and secrets["rule_set"] == "gitleaks-derived"
    assert "1 extra / 0 allow patterns" in secrets["detail"]
