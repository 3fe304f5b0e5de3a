"""CLI commands of the secret scrubber: ``memoryd secrets scan|purge`` (SPEC §18).

``scan`` lists the secrets already in memory files (file, line, kind, fingerprint — never the
value); exit status 1 when it found any, so a script or a git hook can stop on it.
``purge`` redacts them in place (atomic rewrites, ``.history/`` backups included), drops the
affected chunks' vectors and embedding-cache entries, and re-syncs the index; exit status 1
when it left a file unscanned (over 64 MiB), which may still hold secrets, as ``scan`` says.
"""

from __future__ import annotations

import argparse
from typing import Any

from memoryd.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    Subcommands,
    add_common,
    client_for,
    command,
    print_json,
    workspace_of,
)


@command
def _secrets_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "secrets", help="find and redact secrets already in memory files"
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    scan = actions.add_parser(
        "scan", help="list the secrets in memory files (file, line, kind, fingerprint)"
    )
    purge = actions.add_parser("purge", help="redact them in place, history included, and re-index")
    for sub, handler in ((scan, _scan), (purge, _purge)):
        add_common(sub)
        sub.add_argument(
            "--all", action="store_true", help="the whole memory root, not one workspace"
        )
        sub.add_argument("--json", action="store_true", help="print the raw JSON result")
        sub.set_defaults(handler=handler)


def _target(args: argparse.Namespace) -> dict[str, Any]:
    return {"all": True} if args.all else {"workspace": workspace_of(args)}


def _scan(args: argparse.Namespace) -> int:
    with client_for(args, timeout=None) as client:
        result: dict[str, Any] = client.call("secrets.scan", **_target(args))
    if args.json:
        print_json(result)
    else:
        for entry in result["files"]:
            for f in entry["findings"]:
                print(f"{entry['path']}:{f['line']}: {f['kind']} [{f['fingerprint']}]")
        print(
            f"{result['findings']} secret(s) in {len(result['files'])} of "
            f"{result['scanned']} file(s) ({result['rule_set']} rules)"
        )
        if result["findings"]:
            print("redact them with: memoryd secrets purge" + (" --all" if args.all else ""))
        for path in result.get("too_large", []):
            print(f"{path}: not scanned (over 64 MiB): check or remove it by hand")
    return EXIT_ERROR if result["findings"] or result.get("too_large") else EXIT_OK


def _purge(args: argparse.Namespace) -> int:
    with client_for(args, timeout=None) as client:
        result: dict[str, Any] = client.call("secrets.purge", **_target(args))
    glob = result.get("global")
    unscanned = bool((glob or {}).get("too_large")) or any(
        ws.get("too_large") for ws in result["workspaces"]
    )
    if args.json:
        print_json(result)
        return EXIT_ERROR if unscanned else EXIT_OK
    if glob:
        print(f"global memory: {glob['redacted']} redacted in {len(glob['files'])} file(s)")
        for path in glob.get("too_large", []):
            print(f"{path}: not scanned (over 64 MiB): check or remove it by hand")
    for ws in result["workspaces"]:
        line = f"{ws['workspace']}: {ws['redacted']} redacted in {len(ws['files'])} file(s)"
        if "history_files" in ws:
            line += (
                f" ({ws['history_files']} in .history/, {ws['journals']} open-session "
                f"journal(s)), {ws['chunks_dropped']} chunk(s) and "
                f"{ws['cache_entries_dropped']} cached vector(s) dropped, re-indexed"
            )
        if ws.get("index_removed"):
            line += f"; index removed ({ws.get('error')})"
        print(line)
        for path in ws.get("too_large", []):
            print(f"{path}: not scanned (over 64 MiB): check or remove it by hand")
    return EXIT_ERROR if unscanned else EXIT_OK
