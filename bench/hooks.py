"""Agent hook latency (issue 15): what each ``memoryd hook`` event costs against a running
daemon with a 10k-chunk workspace.

Sessions of a Claude Code-like agent run against the daemon: SessionStart, then turns of
UserPromptSubmit + Stop (each turn appends a user prompt, a reply split over lines sharing
``message.id``, a tool call and its result and hook-progress lines to the transcript),
PreCompact, SessionEnd. Two figures per event:

- ``hook.run`` — the request a hook sends, on a fresh connection as ``memoryd hook`` opens
  one, timed from connect to reply: the daemon's share (the ingest, flush and close it
  hands to the actor run after the reply, and load the daemon while later events come in);
- the whole ``memoryd hook claude-code`` process (interpreter start, imports, stdin, the
  request) for a sample of events, which is what the agent waits for.

Raw: ``daemon.ping`` on a fresh connection (the socket round trip alone); for the whole
process, a bare ``python -c pass`` run right after each hook process (the interpreter's own
start and exit on this machine at that moment).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.daemon import DaemonProcess
from bench.report import Row, Target, percentile
from memoryd.client import Client

MS = 1000.0
EVENTS = ("SessionStart", "UserPromptSubmit", "Stop", "PreCompact", "SessionEnd")


def _turn(sid: str, n: int) -> bytes:
    prompt = f"Turn {n}: why does the checkout job {n} time out against the orders API?"
    lines: list[dict[str, Any]] = [
        {"type": "user", "sessionId": sid, "message": {"role": "user", "content": prompt}},
    ]
    mid = f"msg_{sid[:6]}_{n}"
    blocks: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": "private reasoning " * 20},
        {"type": "text", "text": f"Looking at the orders client used by job {n}. " * 4},
        {
            "type": "tool_use",
            "id": f"toolu_{n}",
            "name": "Bash",
            "input": {"command": f"pytest tests/test_orders_{n}.py -q"},
        },
    ]
    usage = {"input_tokens": 5, "cache_read_input_tokens": 20000 + 900 * n}
    lines.extend(
        {
            "type": "assistant",
            "sessionId": sid,
            "message": {"id": mid, "role": "assistant", "content": [b], "usage": usage},
        }
        for b in blocks
    )
    lines += [
        {"type": "progress", "sessionId": sid, "data": {"type": "hook_progress", "i": i}}
        for i in range(6)
    ]
    lines.append(
        {
            "type": "user",
            "sessionId": sid,
            "message": {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{n}",
                        "content": "1 failed: ReadTimeout after 30s\n" + "log line\n" * 40,
                        "is_error": True,
                    }
                ],
            },
        }
    )
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def _event(name: str, sid: str, ws: Path, transcript: Path) -> dict[str, Any]:
    event: dict[str, Any] = {
        "session_id": sid,
        "transcript_path": str(transcript),
        "cwd": str(ws),
        "hook_event_name": name,
    }
    match name:
        case "SessionStart":
            event["source"] = "startup"
        case "UserPromptSubmit":
            event["prompt"] = "why does the checkout job time out?"
        case "PreCompact":
            event["trigger"] = "auto"
        case "SessionEnd":
            event["reason"] = "exit"
    return event


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def hook_latency(
    daemon: DaemonProcess,
    ws: Path,
    workdir: Path,
    *,
    sessions: int,
    turns: int,
    process_samples: int,
    label: str,
) -> list[Row]:
    socket = daemon.home.socket
    request: dict[str, list[float]] = {name: [] for name in EVENTS}
    ping: list[float] = []
    transcripts = workdir / "transcripts"
    transcripts.mkdir(parents=True, exist_ok=True)

    def run_hook(event: dict[str, Any]) -> dict[str, Any]:
        with Client(socket, timeout=10.0) as client:
            result: dict[str, Any] = client.call("hook.run", agent="claude-code", event=event)
        return result

    def send(name: str, sid: str, transcript: Path) -> None:
        event = _event(name, sid, ws, transcript)
        request[name].append(_timed(lambda: run_hook(event)))

    def ping_once() -> None:
        with Client(socket, timeout=10.0) as client:
            client.call("daemon.ping")

    for s in range(sessions):
        sid = f"bench-{s:04d}-7f3c1a52-9d4e-4b1a-8c2f"
        transcript = transcripts / f"{sid}.jsonl"
        transcript.write_bytes(b"")
        send("SessionStart", sid, transcript)
        for n in range(turns):
            with transcript.open("ab") as handle:
                handle.write(_turn(sid, n))
            send("UserPromptSubmit", sid, transcript)
            send("Stop", sid, transcript)
            ping.append(_timed(ping_once))
        send("PreCompact", sid, transcript)
        send("SessionEnd", sid, transcript)

    # The whole process, as the agent runs it, each followed by a bare interpreter.
    process: list[float] = []
    by_event: dict[str, list[float]] = {}
    bare: list[float] = []
    env = dict(daemon.env)
    for i in range(process_samples):
        sid = f"bench-proc-{i:04d}"
        transcript = transcripts / f"{sid}.jsonl"
        transcript.write_bytes(_turn(sid, 0))
        for name in ("SessionStart", "Stop", "SessionEnd"):
            data = json.dumps(_event(name, sid, ws, transcript)).encode()
            started = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "memoryd", "hook", "claude-code"],
                input=data,
                env=env,
                capture_output=True,
                check=False,
                timeout=30,
            )
            process.append(time.perf_counter() - started)
            by_event.setdefault(name, []).append(process[-1])
            if done.returncode != 0 or (name != "SessionStart" and done.stdout):
                raise RuntimeError(f"memoryd hook misbehaved: {done!r}")
            bare.append(
                _timed(
                    lambda: subprocess.run(
                        [sys.executable, "-c", "pass"], env=env, check=True, timeout=30
                    )
                )
            )

    ping_p99 = percentile(ping, 99) * MS
    rows: list[Row] = []
    for name in EVENTS:
        values = request[name]
        rows.append(
            Row(
                f"hook {name} p99 ({label})",
                "ms",
                percentile(values, 99) * MS,
                ping_p99,
                "daemon.ping on a fresh connection",
                target=Target("memoryd", "<=", 100.0, "ms"),
                note=f"{len(values)} events; hook.run p50 {percentile(values, 50) * MS:.1f} ms",
                details={"p50_ms": percentile(values, 50) * MS, "events": len(values)},
            )
        )
    rows.extend(
        Row(
            f"hook process p{q} (python start + imports + request)",
            "ms",
            percentile(process, q) * MS,
            percentile(bare, q) * MS,
            "`python -c pass`, run after each hook",
            target=Target("memoryd", "<=", 100.0, "ms") if q == 99 else None,
            note=f"{len(process)} `memoryd hook claude-code` runs (SessionStart, Stop, "
            f"SessionEnd); over a bare interpreter p{q}: "
            f"{(percentile(process, q) - percentile(bare, q)) * MS:.0f} ms",
            details={
                "runs": len(process),
                "bare_ms": percentile(bare, q) * MS,
                "min_ms": min(process) * MS,
                "bare_min_ms": min(bare) * MS,
                "by_event_ms": {e: percentile(v, q) * MS for e, v in by_event.items()},
            },
        )
        for q in (50, 99)
    )
    return rows
