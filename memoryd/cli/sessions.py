"""CLI commands for sessions and dream: ``memoryd flush``, ``memoryd sessions``,
``memoryd dream``."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from memoryd.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    Subcommands,
    add_common,
    client_for,
    command,
    memory_root,
    print_json,
    workspace_of,
)
from memoryd.cli.paths import shown
from memoryd.cli.render import render_dream_status, render_sessions

DREAM_DONE = ("written", "nothing_to_store")


@command
def _flush_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "flush", help="ask the model what an open session found worth keeping, and store it"
    )
    parser.add_argument("--session", required=True, metavar="ID", help="the session id")
    add_common(parser, workspace=False)
    parser.add_argument("--json", action="store_true", help="print the raw JSON result")
    parser.set_defaults(handler=_flush)


def _flush(args: argparse.Namespace) -> int:
    with client_for(args, timeout=None) as client:
        result = client.call("session.flush", session_id=args.session)
    if args.json:
        print_json(result)
    elif result.get("path"):
        print(f"{result['outcome']}: {shown(memory_root(args), result['path'], os.getcwd())}")
    else:
        print(result["outcome"])
    return EXIT_OK


@command
def _sessions_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser("sessions", help="list the open sessions, or close one")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser(
        "list",
        help="open sessions of every running workspace (or of -w DIR): messages, "
        "unflushed, last activity, when an idle session is closed",
    )
    add_common(listing)
    listing.add_argument("--json", action="store_true", help="print the raw JSON result")
    listing.set_defaults(handler=_sessions_list)
    closing = actions.add_parser(
        "close", help="end a session: its summary is written (when due) and its journal removed"
    )
    closing.add_argument("session_id", metavar="ID", help="the session id")
    add_common(closing, workspace=False)
    closing.add_argument("--json", action="store_true", help="print the raw JSON result")
    closing.set_defaults(handler=_sessions_close)


def _sessions_list(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {}
    if args.workspace is not None:
        params["workspace"] = workspace_of(args)
    with client_for(args) as client:
        result = client.call("session.list", **params)
    if args.json:
        print_json(result)
    else:
        print(render_sessions(result["sessions"], time.time()))
    return EXIT_OK


def _sessions_close(args: argparse.Namespace) -> int:
    with client_for(args, timeout=None) as client:
        result = client.call("session.close", session_id=args.session_id)
    if args.json:
        print_json(result)
        return EXIT_OK
    summary = "summary written" if result.get("summary_written") else "no summary (too short)"
    print(f"closed {args.session_id}: {result.get('messages', 0)} messages, {summary}")
    return EXIT_OK


@command
def _dream_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "dream",
        help="consolidate the workspace's session logs into its MEMORY.md now "
        "(skips the time and session gates, never the lock)",
    )
    add_common(parser)
    what = parser.add_mutually_exclusive_group()
    parser.add_argument(
        "--force",
        action="store_true",
        help="run even when dream.enabled is false; with --undo, undo even though MEMORY.md "
        "changed since that dream (the current file is saved in .history/ first)",
    )
    what.add_argument(
        "--undo",
        action="store_true",
        help="restore the MEMORY.md the last dream replaced and the session logs it archived",
    )
    what.add_argument(
        "--status", action="store_true", help="show the gates, the lock and the last consolidation"
    )
    parser.add_argument("--json", action="store_true", help="print the raw JSON result")
    parser.set_defaults(handler=_dream)


def _dream(args: argparse.Namespace) -> int:
    workspace = workspace_of(args)
    with client_for(args, timeout=None) as client:
        if args.undo:
            result = client.call("dream.undo", workspace=workspace, force=args.force)
        elif args.status:
            result = client.call("dream.status", workspace=workspace)
        else:
            result = client.call("dream.run", workspace=workspace, force=args.force)
    if args.json:
        print_json(result)
    elif args.undo:
        _print_undo(result)
    elif args.status:
        print(render_dream_status(result))
    else:
        _print_run(result)
    if args.undo or args.status or dream_ran(result):
        return EXIT_OK
    return EXIT_ERROR


def dream_ran(result: dict[str, Any]) -> bool:
    """Whether a requested dream did its job: it wrote, the model found nothing to store, or
    there was nothing to consolidate. Anything else (the lock held, dream disabled, no
    model, a refused or failed answer, an edit meanwhile) exits 1."""
    outcome = result.get("outcome")
    return outcome in DREAM_DONE or (outcome, result.get("reason")) == ("skipped", "nothing_to_do")


def _print_undo(result: dict[str, Any]) -> None:
    when = result.get("dream_time")
    if result.get("removed"):
        print(f"removed {result['path']}: the dream of {when} had created it")
    else:
        backup = result["restored"]
        print(f"restored {result['path']} from .history/{backup} (before the dream of {when})")
    logs = result.get("logs_restored") or []
    if logs:
        print(f"{len(logs)} session log(s) back in sessions/:")
        for name in logs:
            print(f"  {name}")
    else:
        print("no session logs came back (that dream archived none)")
    if result.get("saved_current"):
        kind = "the changed file" if result.get("forced") else "the replaced file"
        print(f"{kind} was saved as .history/{result['saved_current']}")


def _print_run(result: dict[str, Any]) -> None:
    outcome, reason = result.get("outcome"), result.get("reason")
    print(f"dream: {outcome}" + (f" ({reason})" if reason else ""))
    for key in ("consumed", "archived", "kept", "waiting", "truncated"):
        values = result.get(key) or []
        if values:
            print(f"  {key}: {', '.join(str(v).rsplit('/', 1)[-1] for v in values)}")
    if result.get("archived"):
        print(f"  archived logs are in {result['archive']} (dream --undo brings them back)")
    if result.get("backup"):
        print(f"  previous MEMORY.md saved as .history/{result['backup']}")
    if result.get("detail"):
        print(f"  {result['detail']}")
    if result.get("error"):
        print(f"  error: {result['error']}", file=sys.stderr)
