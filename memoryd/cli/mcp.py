"""``memoryd mcp``: serve memoryd's memory tools over MCP on stdin/stdout.

An MCP client (Claude Code, Codex, Cursor …) starts this command; it talks to the running
daemon over its socket (see :mod:`memoryd.mcp_bridge`) for the workspace it was started in
(or ``-w``). stdout belongs to the protocol: this command prints only on stderr. The MCP SDK
is the optional ``mcp`` extra, imported only when the command runs, so the rest of the CLI
works without it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio

from memoryd.cli.common import EXIT_OK, Subcommands, add_common, command, workspace_of
from memoryd.client import Client
from memoryd.errors import DaemonNotRunning, MemorydError, WorkspaceNotFound
from memoryd.store import configfile

INSTALL_HINT = "pip install 'memoryd[mcp]'"


@command
def _mcp_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "mcp", help="serve memory tools to an MCP client over stdio (needs a running daemon)"
    )
    add_common(parser)
    parser.set_defaults(handler=_mcp)


def _mcp(args: argparse.Namespace) -> int:
    try:
        from memoryd.mcp_bridge import serve_stdio  # the optional `mcp` extra
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] not in ("mcp", "mcp_types", "pydantic"):
            raise
        raise MemorydError(
            f"memoryd mcp needs the MCP SDK, which is not installed ({exc.name}): {INSTALL_HINT}"
        ) from None
    socket_path = Path(configfile.load(args.config).paths.socket_path)
    workspace = workspace_of(args)
    if not Path(workspace).is_dir():
        raise WorkspaceNotFound(f"workspace {workspace!r} is not a directory", path=workspace)
    print(f"memoryd mcp: workspace {workspace}, daemon socket {socket_path}", file=sys.stderr)
    try:
        with Client(socket_path, timeout=5.0) as client:
            client.call("daemon.ping")
    except DaemonNotRunning as exc:
        print(f"memoryd mcp: {exc}; the tools say so until it runs", file=sys.stderr)
    except MemorydError:
        pass  # the tools report whatever is wrong, call by call
    anyio.run(serve_stdio, socket_path, workspace)
    return EXIT_OK
