"""``memoryd ingest``: import whole agent transcripts as closed sessions (SPEC §17).

For any agent without hooks, or to backfill past sessions: each transcript is read by the
daemon (``session.ingest`` with ``after=close``) into a session — its id from the
transcript (Claude Code's ``sessionId``, Codex's ``session_meta.id``) unless ``--session``
names one, its workspace ``-w`` or else the directory the transcript was recorded in — and
the session is closed (summary, dream gates). ``--all DIR`` imports every transcript in a
folder tree that was not imported before; a transcript that grew since is read on from
where the last import stopped.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import blake3

from memoryd.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    Subcommands,
    add_common,
    client_for,
    command,
    print_json,
)
from memoryd.client import Client
from memoryd.core.transcripts import FORMATS, Format, transcript_info
from memoryd.errors import InvalidParams, MemorydError
from memoryd.store.files import read_regular

#: Bytes of a transcript's head read for its session id and directory.
HEAD_BYTES = 64 * 1024
SUFFIXES = {"claude-code": (".jsonl",), "codex": (".jsonl",), "plain": (".jsonl", ".txt")}


@command
def _ingest_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "ingest", help="import agent transcripts as sessions, each closed when read"
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        default="claude-code",
        help="the transcript format (default: claude-code)",
    )
    parser.add_argument("file", nargs="?", metavar="FILE", help="one transcript to import")
    parser.add_argument(
        "--all",
        metavar="DIR",
        help="import every transcript under DIR not imported before (instead of FILE)",
    )
    parser.add_argument(
        "--session", metavar="ID", help="the session id (default: the transcript's own)"
    )
    parser.add_argument(
        "--flush",
        action="store_true",
        help="flush each session before closing it (one model call each; needs [llm])",
    )
    add_common(parser)
    parser.add_argument("--json", action="store_true", help="print the raw JSON results")
    parser.set_defaults(handler=_ingest)


def _files(args: argparse.Namespace) -> list[Path]:
    if (args.file is None) == (args.all is None):
        raise InvalidParams("give either FILE or --all DIR", param="file")
    if args.all is not None:
        if args.session:
            raise InvalidParams("--session names one session: not with --all", param="session")
        root = Path(args.all)
        if not root.is_dir():
            raise InvalidParams(f"{args.all} is not a directory", param="all")
        suffixes = SUFFIXES[args.format]
        return sorted(p for p in root.rglob("*") if p.suffix in suffixes and p.is_file())
    return [Path(args.file)]


def _head(path: Path) -> bytes:
    """The first :data:`HEAD_BYTES` of a transcript: a FIFO or device is refused unread."""
    try:
        return read_regular(path, HEAD_BYTES).data
    except (FileNotFoundError, NotADirectoryError):
        raise InvalidParams(f"transcript {path} does not exist", param="file") from None
    except OSError as exc:
        raise InvalidParams(f"transcript {path}: {exc.strerror}", param="file") from None


def _session_and_workspace(path: Path, fmt: Format, args: argparse.Namespace) -> tuple[str, str]:
    head = _head(path)
    info = transcript_info(fmt, head)
    session_id = args.session or info.session_id
    if not session_id:
        digest = blake3.blake3(str(path).encode("utf-8", "surrogateescape")).hexdigest(length=8)
        session_id = f"ingest-{digest}"
    if args.workspace:
        workspace = os.path.abspath(args.workspace)
    elif info.cwd and os.path.isabs(info.cwd) and os.path.isdir(info.cwd):
        workspace = info.cwd
    else:
        workspace = os.getcwd()
    return session_id, workspace


def _one(client: Client, path: Path, args: argparse.Namespace) -> dict[str, Any]:
    fmt: Format = args.format
    session_id, workspace = _session_and_workspace(path, fmt, args)
    result: dict[str, Any] = client.call(
        "session.ingest",
        session_id=session_id,
        path=str(path.resolve()),
        format=fmt,
        workspace=workspace,
        after="flush_close" if args.flush else "close",
    )
    return {"path": str(path), "session_id": session_id, "workspace": workspace, **result}


def _ingest(args: argparse.Namespace) -> int:
    files = _files(args)
    results: list[dict[str, Any]] = []
    failed = 0
    with client_for(args, timeout=None) as client:
        for path in files:
            try:
                result = _one(client, path, args)
            except (MemorydError, OSError) as exc:
                if args.all is None:
                    raise
                failed += 1
                result = {"path": str(path), "error": str(exc)}
                print(f"memoryd: error: {path}: {exc}", file=sys.stderr)
            results.append(result)
            if not args.json and "error" not in result:
                if result.get("skipped"):
                    print(f"skipped {path} (imported before, unchanged)")
                else:
                    print(
                        f"imported {result.get('ingested', 0)} messages from {path} "
                        f"(session {result['session_id']})"
                    )
    if args.json:
        print_json(results)
    elif args.all is not None:
        imported = sum(1 for r in results if "error" not in r and not r.get("skipped"))
        skipped = sum(1 for r in results if r.get("skipped"))
        print(f"{imported} imported, {skipped} skipped, {failed} failed")
    return EXIT_ERROR if failed else EXIT_OK
