"""Agent hooks end to end (issue 15, Done when 1 and 2): ``memoryd hook AGENT`` processes
against a real daemon process, transcripts in the agents' formats (tests/fixtures), the
model a fake OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memoryd.cli import main
from memoryd.core.transcripts import Format, parse
from memoryd.store.layout import resolve_workspace
from tests.runtime.daemon_fixtures import (
    DaemonProcess,
    cli_env,
    home_fixture,  # noqa: F401 - the `home` fixture
    memoryd_cli,
    processes_fixture,  # noqa: F401 - the `processes` fixture
    project,
)
from tests.support.fake_llm import FakeLLM

Processes = Callable[..., DaemonProcess]
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "transcripts"
NOTE = "Deploys go through the blue-green switch in infra/deploy.sh, never by hand."
FLUSH = (
    "## Checkout 500 after login\n\nA stale CSRF token cached in Redis under `csrf:<user>` "
    "outlived the login rotation; `login()` now deletes the key when it rotates the session.\n"
)


@pytest.fixture
def llm() -> Any:
    with FakeLLM() as server:
        yield server


def hook(
    home: Path, agent: str, event: dict[str, Any] | bytes
) -> subprocess.CompletedProcess[bytes]:
    data = event if isinstance(event, bytes) else json.dumps(event).encode()
    return subprocess.run(
        [sys.executable, "-m", "memoryd", "hook", agent],
        input=data,
        env=cli_env(home),
        capture_output=True,
        timeout=30,
        check=False,
    )


def event(name: str, sid: str, cwd: Path, transcript: Path, **extra: Any) -> dict[str, Any]:
    return {
        "session_id": sid,
        "transcript_path": str(transcript),
        "cwd": str(cwd),
        "hook_event_name": name,
        "permission_mode": "default",
        **extra,
    }


def turns(data: bytes, fmt: Format) -> list[bytes]:
    """The transcript's prefixes that end before each real user prompt, then the whole."""
    lines = data.splitlines(keepends=True)
    cuts: list[int] = []
    for i, line in enumerate(lines):
        parsed = parse(fmt, line)
        if any(m.role == "user" for m in parsed.messages) and i > 0:
            cuts.append(i)
    return [b"".join(lines[:cut]) for cut in cuts] + [data]


def session_state(daemon: DaemonProcess, sid: str) -> dict[str, Any] | None:
    for actor in daemon.call("daemon.status")["actors"]:
        for session in actor.get("sessions") or []:
            if session["session_id"] == sid:
                return dict(session)
    return None


def poll(check: Callable[[], Any], within: float = 15.0) -> Any:
    deadline = time.monotonic() + within
    while not (value := check()):
        assert time.monotonic() < deadline, f"not true within {within}s"
        time.sleep(0.05)
    return value


def wait_count(daemon: DaemonProcess, sid: str, count: int) -> dict[str, Any]:
    """The session once it holds ``count`` messages (and stays there a moment)."""
    state = poll(lambda: (s := session_state(daemon, sid)) and s["messages"] == count and s)
    time.sleep(0.3)  # a background ingest that appended too much would show by now
    state = session_state(daemon, sid)
    assert state is not None and state["messages"] == count, state
    return state


def test_claude_code_session_lifecycle(home: Path, processes: Processes, llm: FakeLLM) -> None:
    ws_path = project(home, "shop")
    ws = resolve_workspace(ws_path, home / "memory")
    data = (FIXTURES / "claude-code-session.jsonl").read_bytes()
    prefixes = turns(data, "claude-code")
    assert len(prefixes) == 4  # before turn 1, 2, 3, and the whole session
    counts = [len(parse("claude-code", p).messages) for p in prefixes]
    assert counts == [0, 7, 11, 16]
    sid = "7f3c1a52-9d4e-4b1a-8c2f-3e5d6a7b8c90"
    transcript = home / "transcripts" / f"{sid}.jsonl"
    transcript.parent.mkdir()
    transcript.write_bytes(prefixes[0])

    daemon = processes(env=llm.env()).start()
    daemon.call("memory.remember", workspace=str(ws_path), text=NOTE)

    # SessionStart: opens the session, prints the injection JSON holding the MEMORY.md note
    started = hook(
        home, "claude-code", event("SessionStart", sid, ws_path, transcript, source="startup")
    )
    assert started.returncode == 0, started.stderr
    injected = json.loads(started.stdout)
    assert injected["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert NOTE in injected["hookSpecificOutput"]["additionalContext"]
    assert session_state(daemon, sid) is not None

    # Stop x2: exactly the new messages each time
    for prefix, count in zip(prefixes[1:3], counts[1:3], strict=True):
        transcript.write_bytes(prefix)
        stopped = hook(home, "claude-code", event("Stop", sid, ws_path, transcript))
        assert stopped.returncode == 0 and stopped.stdout == b"", stopped.stderr
        state = wait_count(daemon, sid, count)
        assert state["last_ingest"]["path"] == str(transcript)
        assert state["last_ingest"]["offset"] == len(prefix)
    status = memoryd_cli(home, "status")
    assert f"session {sid}: {counts[2]} messages" in status.stdout
    assert "last ingest" in status.stdout

    # PreCompact: ingests, then one flush whose log holds the session's facts
    llm.queue(FLUSH)
    compact = hook(
        home, "claude-code", event("PreCompact", sid, ws_path, transcript, trigger="auto")
    )
    assert compact.returncode == 0 and compact.stdout == b""
    state = poll(lambda: (s := session_state(daemon, sid)) and s["last_flush"] and s)
    assert state["last_flush"]["trigger"] == "pre_compaction"
    assert state["last_flush"]["outcome"] == "written"
    [prompt] = llm.prompts
    assert "stale CSRF token" in prompt.user and "PRIVATE-REASONING" not in prompt.user
    log_text = (home / "memory" / state["log_path"]).read_text(encoding="utf-8")
    assert "csrf:<user>" in log_text and "trigger=pre_compaction" in log_text

    # SIGKILL between hooks: nothing acknowledged is lost, nothing is read twice
    daemon.kill()
    daemon = processes(env=llm.env()).start()
    poll(lambda: session_state(daemon, sid))
    wait_count(daemon, sid, counts[2])
    transcript.write_bytes(prefixes[3])
    assert hook(home, "claude-code", event("Stop", sid, ws_path, transcript)).returncode == 0
    wait_count(daemon, sid, counts[3])
    assert hook(home, "claude-code", event("Stop", sid, ws_path, transcript)).returncode == 0
    wait_count(daemon, sid, counts[3])  # nothing new: nothing appended

    # A rewritten transcript (an early line changed, the file shorter) is not re-appended
    lines = data.splitlines(keepends=True)
    rewritten = b"".join(line for line in lines if b'"type": "progress"' not in line)
    assert len(rewritten) < len(data)
    transcript.write_bytes(rewritten)
    assert hook(home, "claude-code", event("Stop", sid, ws_path, transcript)).returncode == 0
    wait_count(daemon, sid, counts[3])
    with transcript.open("ab") as f:  # then it grows again: only the new message comes in
        f.write(
            b'{"type":"user","message":{"role":"user","content":"One more question."},'
            b'"sessionId":"' + sid.encode() + b'"}\n'
        )
    assert hook(home, "claude-code", event("Stop", sid, ws_path, transcript)).returncode == 0
    wait_count(daemon, sid, counts[3] + 1)

    # SessionEnd: ingests, then closes (the summary is written, the journal removed)
    ended = hook(home, "claude-code", event("SessionEnd", sid, ws_path, transcript, reason="exit"))
    assert ended.returncode == 0 and ended.stdout == b""
    poll(lambda: session_state(daemon, sid) is None)
    log_text = (home / "memory" / state["log_path"]).read_text(encoding="utf-8")
    assert "## Session Summary" in log_text
    assert "- The checkout page returns HTTP 500 after login." in log_text
    assert not list(ws.live_dir.glob("*.jsonl"))

    # The agent resumes the session later: what was read before is not read again
    hook(home, "claude-code", event("SessionStart", sid, ws_path, transcript, source="resume"))
    poll(lambda: session_state(daemon, sid))
    wait_count(daemon, sid, 0)


def test_codex_session_lifecycle(home: Path, processes: Processes, llm: FakeLLM) -> None:
    ws_path = project(home, "api")
    data = (FIXTURES / "codex-rollout.jsonl").read_bytes()
    prefixes = turns(data, "codex")
    counts = [len(parse("codex", p).messages) for p in prefixes]
    assert counts == [0, 6, 12, 16]
    sid = "019ad2f1-7c3e-7b20-9a41-5e6f7a8b9c0d"
    transcript = home / f"rollout-2026-11-30T11-00-00-{sid}.jsonl"
    transcript.write_bytes(prefixes[0])
    daemon = processes(env=llm.env()).start()
    started = hook(home, "codex", event("SessionStart", sid, ws_path, transcript, source="startup"))
    assert started.returncode == 0 and started.stdout == b""  # empty memory: no output
    for prefix, count in zip(prefixes[1:3], counts[1:3], strict=True):
        transcript.write_bytes(prefix)
        assert hook(home, "codex", event("Stop", sid, ws_path, transcript)).returncode == 0
        wait_count(daemon, sid, count)

    llm.queue("## Slow /orders\n\norders.user_id had no index; migration 0042 adds it.\n")
    compact = hook(home, "codex", event("PreCompact", sid, ws_path, transcript, trigger="auto"))
    assert compact.returncode == 0 and compact.stdout == b""
    state = poll(lambda: (s := session_state(daemon, sid)) and s["last_flush"] and s)
    assert state["last_flush"]["outcome"] == "written"
    [prompt] = llm.prompts
    assert "sequential scan" in prompt.user and "PRIVATE-REASONING" not in prompt.user

    daemon.kill()  # between hooks
    daemon = processes(env=llm.env()).start()
    poll(lambda: session_state(daemon, sid))
    transcript.write_bytes(prefixes[3])
    assert hook(home, "codex", event("Stop", sid, ws_path, transcript)).returncode == 0
    state = wait_count(daemon, sid, counts[3])
    assert state["usage"]["tokens"] == 20200 and state["usage"]["compaction_count"] == 1
    transcript.write_bytes(data.replace(b"Why?", b"Why??"))  # rewritten before the offset
    assert hook(home, "codex", event("Stop", sid, ws_path, transcript)).returncode == 0
    wait_count(daemon, sid, counts[3] + 1)  # only the changed message is new
    assert hook(home, "codex", event("SessionEnd", sid, ws_path, transcript)).returncode == 0
    poll(lambda: session_state(daemon, sid) is None)


def _timed_hook(stdin: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[int, float, str]:
    read, write = os.pipe()
    os.write(write, stdin)
    os.close(write)
    with os.fdopen(read, "rb") as stdin_file:
        monkeypatch.setattr(sys, "stdin", stdin_file)
        started = time.monotonic()
        code = main(["hook", "claude-code"])
        return code, time.monotonic() - started, ""


@pytest.mark.parametrize(
    "stdin",
    [
        b'{"session_id": "s1", "cwd": "/tmp", "hook_event_name": "Stop"}',
        b"\x00\xff garbage {{{",
        b"",
        b'{"hook_event_name": 5}',
    ],
    ids=["no-daemon", "garbage", "empty", "bad-event"],
)
def test_a_hook_exits_0_within_a_second_without_a_daemon_or_with_garbage(
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stdin: bytes,
) -> None:
    code, took, _ = _timed_hook(stdin, monkeypatch)
    captured = capsys.readouterr()
    assert code == 0 and took < 1.0
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("memoryd hook claude-code:")


def test_a_hook_with_a_daemon_error_prints_nothing_and_exits_0(
    home: Path, processes: Processes
) -> None:
    processes().start()
    bad = {"session_id": "s", "cwd": "relative/dir", "hook_event_name": "Stop"}
    done = hook(home, "claude-code", bad)
    assert done.returncode == 0 and done.stdout == b""
    assert b"absolute" in done.stderr and done.stderr.count(b"\n") == 1
    done = hook(home, "gemini", bad)  # an agent it does not know: still 0
    assert done.returncode == 0 and done.stdout == b""


def test_prompt_injection_is_off_by_default_and_finds_hits_when_on(
    home: Path, processes: Processes
) -> None:
    ws_path = project(home, "app")
    transcript = home / "t.jsonl"
    transcript.write_bytes(b"")
    note = "The zebrafish build cache lives in /var/cache/zebrafish; wipe it after a bump."
    prompt = event("UserPromptSubmit", "p-1", ws_path, transcript, prompt="zebrafish cache?")
    daemon = processes().start()
    daemon.call("memory.remember", workspace=str(ws_path), text=note)
    off = hook(home, "claude-code", prompt)
    assert off.returncode == 0 and off.stdout == b""
    daemon.kill()

    env = {"MEMORYD_INJECT_ON_PROMPT": "true", "MEMORYD_INJECT_MIN_SCORE": "0.01"}
    daemon = processes(env=env).start()
    on = hook(home, "claude-code", prompt)
    assert on.returncode == 0, on.stderr
    output = json.loads(on.stdout)["hookSpecificOutput"]
    assert output["hookEventName"] == "UserPromptSubmit"
    assert "/var/cache/zebrafish" in output["additionalContext"]
    assert output["additionalContext"].count("\n- ") <= 3


def test_a_huge_prompt_is_searched_by_its_beginning_only(home: Path, processes: Processes) -> None:
    """A prompt holding a pasted log (900 KB) is searched as ``memory.search`` would take it:
    its first 10,000 characters. Searched whole it took the daemon 40 s of CPU per prompt
    (0.03 s for 10,000 characters), long after the hook had given up."""
    ws_path = project(home, "app")
    transcript = home / "t.jsonl"
    transcript.write_bytes(b"")
    note = "The zebrafish build cache lives in /var/cache/zebrafish; wipe it after a bump."
    env = {"MEMORYD_INJECT_ON_PROMPT": "true", "MEMORYD_INJECT_MIN_SCORE": "0.01"}
    daemon = processes(env=env).start()
    daemon.call("memory.remember", workspace=str(ws_path), text=note)
    log = " ".join(f"w{i:06d}x{(i * 7919) % 100_003:05d}" for i in range(70_000))
    prompt = ("zebrafish cache? " + log)[:900_000]
    started = time.monotonic()
    reply = daemon.call(
        "hook.run",
        agent="claude-code",
        event=event("UserPromptSubmit", "p-2", ws_path, transcript, prompt=prompt),
    )
    took = time.monotonic() - started
    assert (
        "/var/cache/zebrafish"
        in json.loads(reply["output"])["hookSpecificOutput"]["additionalContext"]
    )
    assert took < 5.0, f"hook.run took {took:.1f} s for a 900 KB prompt"


def test_injected_memory_is_scrubbed_on_its_way_to_the_agent(
    home: Path, processes: Processes
) -> None:
    """A secret a person typed into MEMORY.md (or one written before the scrubber) is not
    put into the agent's context (SPEC §18: text leaving for a model), neither from the
    curated memory nor from a prompt's hits."""
    ws_path = project(home, "app")
    ws = resolve_workspace(ws_path, home / "memory")
    secret = "ghp_" + "Q7mZ2xR9kL4vB8nT1wY6pH3sD5fG0jK2aE4c"
    ws.memory_file.parent.mkdir(parents=True, exist_ok=True)
    ws.memory_file.write_text(
        f"# Memory\n\n- The quokka deploy bot pushes with token {secret} from CI.\n",
        encoding="utf-8",
    )
    transcript = home / "t.jsonl"
    transcript.write_bytes(b"")
    env = {"MEMORYD_INJECT_ON_PROMPT": "true", "MEMORYD_INJECT_MIN_SCORE": "0.01"}
    daemon = processes(env=env).start()
    for name, extra in (("SessionStart", {"source": "startup"}), ("UserPromptSubmit", {})):
        reply = daemon.call(
            "hook.run",
            agent="claude-code",
            event=event(name, "s-1", ws_path, transcript, prompt="quokka deploy token", **extra),
        )
        assert reply["output"], name
        context = json.loads(reply["output"])["hookSpecificOutput"]["additionalContext"]
        assert "quokka deploy bot" in context, name
        assert secret not in context and "[REDACTED:" in context, name


def test_a_huge_memory_file_is_read_only_as_far_as_the_injection_goes(
    home: Path, processes: Processes
) -> None:
    """``SessionStart`` reads ``MEMORY.md`` up to what ``[inject] max_chars`` can hold: a
    1 GB file (sparse: its tail is NUL bytes) was read, decoded and scrubbed whole for every
    session start."""
    ws_path = project(home, "app")
    ws = resolve_workspace(ws_path, home / "memory")
    ws.memory_file.parent.mkdir(parents=True, exist_ok=True)
    with ws.memory_file.open("wb") as handle:
        handle.write(b"# Memory\n\n- The marmot queue drains every night at 02:00.\n")
        handle.truncate(1 << 30)
    transcript = home / "t.jsonl"
    transcript.write_bytes(b"")
    daemon = processes().start()
    started = time.monotonic()
    reply = daemon.call(
        "hook.run",
        agent="claude-code",
        event=event("SessionStart", "s-2", ws_path, transcript, source="startup"),
    )
    took = time.monotonic() - started
    context = json.loads(reply["output"])["hookSpecificOutput"]["additionalContext"]
    assert "marmot queue drains" in context
    assert took < 3.0, f"SessionStart took {took:.1f} s with a 1 GB MEMORY.md"
