"""``memoryd hook AGENT``: one agent lifecycle hook event, handed to the daemon (SPEC §17).

Claude Code and Codex run this command with one JSON event on stdin. It sends the event to
the daemon (``hook.run``) with a short timeout and prints only what the agent reads (the
``additionalContext`` JSON of ``SessionStart`` / ``UserPromptSubmit``, or nothing). It
never hurts the agent: whatever happens — no daemon, a bad event, a daemon error, a slow
stdin — it writes one line on stderr, nothing on stdout, and exits 0 within about a second.
The slow work (reading the transcript, flush, close) runs in the daemon after the reply.

:func:`main_hook` is reached by ``memoryd hook`` without building the whole command line
(:func:`memoryd.cli.main` routes it here first), so a hook costs one short process.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import sys
import time
from collections.abc import Sequence
from typing import NoReturn

from memoryd.cli.common import Subcommands, add_common, command
from memoryd.core.hooks import AGENTS

#: Seconds the hook waits for stdin to close, and for stdin and the daemon's reply in all.
STDIN_SECS = 0.3
TOTAL_SECS = 0.8
#: The largest event read from stdin (a prompt can be long; transcripts are not sent).
MAX_EVENT_BYTES = 1024 * 1024


@command
def add_parser(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "hook",
        help="handle one agent hook event read on stdin (run by Claude Code or Codex; "
        "always exits 0)",
    )
    parser.add_argument("agent", choices=AGENTS, metavar="AGENT", help="claude-code or codex")
    add_common(parser, workspace=False)
    parser.set_defaults(handler=lambda args: run(args.agent, args.config))


def _read_stdin(deadline: float) -> bytes:
    """stdin until EOF, at most :data:`MAX_EVENT_BYTES`, giving up at ``deadline``."""
    fd = sys.stdin.fileno()
    parts: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("stdin did not close in time")
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        part = os.read(fd, 65536)
        if not part:
            return b"".join(parts)
        parts.append(part)
        size += len(part)
        if size > MAX_EVENT_BYTES:
            raise ValueError(f"the event is larger than {MAX_EVENT_BYTES} bytes")


def _hook(agent: str, config: str | None) -> str | None:
    from memoryd.client import Client
    from memoryd.store import configfile

    started = time.monotonic()
    raw = _read_stdin(started + STDIN_SECS)
    try:
        event = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"the event on stdin is not JSON: {exc}") from None
    socket_path = configfile.load(config).paths.socket_path
    left = max(0.05, started + TOTAL_SECS - time.monotonic())
    with Client(socket_path, timeout=left) as client:
        result = client.call("hook.run", agent=agent, event=event)
    output = result.get("output") if isinstance(result, dict) else None
    return output if isinstance(output, str) else None


def run(agent: str, config: str | None = None) -> int:
    """Handle one event; always 0 (see the module docstring)."""
    try:
        output = _hook(agent, config)
    except Exception as exc:  # noqa: BLE001 - a hook never fails the agent
        print(f"memoryd hook {agent}: {exc}", file=sys.stderr)
        return 0
    if output:
        sys.stdout.write(output + "\n")
        sys.stdout.flush()
    return 0


def end_process(code: int) -> NoReturn:
    """Flush stdout and stderr and end the process now, without the interpreter's teardown
    of every module and object (20-30 ms of the hook's wall time on a loaded machine, which
    the agent waits for). Nothing on the hook path needs an ``atexit`` handler."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # the agent closed the pipe: nothing more to say
            pass
    os._exit(code)


def quick_args(argv: Sequence[str]) -> tuple[str, str | None] | None:
    """``(agent, config)`` for the forms an agent runs — ``AGENT``, ``AGENT --config F``,
    ``--config F AGENT`` (or ``--config=F``) with a known AGENT — else None (the parser
    decides)."""
    match list(argv):
        case [agent]:
            config = None
        case [agent, "--config", config] | ["--config", config, agent]:
            pass
        case [agent, option] if option.startswith("--config="):
            config = option.removeprefix("--config=")
        case [option, agent] if option.startswith("--config="):
            config = option.removeprefix("--config=")
        case _:
            return None
    if agent not in AGENTS or (config is not None and config.startswith("-")):
        return None
    return agent, config


def main_hook(argv: Sequence[str]) -> int:
    """``memoryd hook …`` without the rest of the command line.

    The forms agents run are read by :func:`quick_args`: building an argparse parser costs
    ~8 ms (its help formatter and message catalogue lookups), more than the daemon's whole
    answer. Anything else goes to the parser :func:`add_parser` builds, which says what is
    wrong.
    """
    quick = quick_args(argv)
    if quick is not None:
        return run(*quick)
    parser = argparse.ArgumentParser(prog="memoryd")
    subcommands = parser.add_subparsers(dest="command", required=True)
    add_parser(subcommands)
    try:
        args = parser.parse_args(["hook", *argv])
    except SystemExit:  # a bad AGENT (argparse said why on stderr): never fail the agent
        return 0
    return run(args.agent, args.config)
