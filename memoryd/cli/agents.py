"""CLI commands for sub-agent runtime configuration: ``memoryd agents list|resolve``.

``list`` shows every definition, role and persona visible from the workspace with where it
came from (project, user, bundled or config, and the file); malformed files are listed as
errors on stderr beside the rest, and make the exit status 1. ``resolve`` prints the
effective runtime config (SPEC §9) as a table or ``--json``; a ``persona_error`` (the
caller must not spawn) makes the exit status 1 too.
"""

from __future__ import annotations

import argparse
import sys
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
from memoryd.errors import NotFound

EFFORTS = ("low", "medium", "high", "xhigh", "max")
CAPABILITIES = ("read-only", "read-write", "execute", "all")
ISOLATIONS = ("none", "worktree")


@command
def _agents_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "agents", help="list sub-agent definitions, roles and personas, or resolve one"
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser(
        "list", help="every definition, role and persona visible here, and where each came from"
    )
    add_common(listing)
    listing.add_argument("--json", action="store_true", help="print the raw JSON result")
    listing.set_defaults(handler=_list)

    res = actions.add_parser(
        "resolve", help="the effective runtime config of a sub-agent of type TYPE"
    )
    res.add_argument("subagent_type", metavar="TYPE", help="the sub-agent type (definition name)")
    add_common(res)
    res.add_argument("--persona", metavar="P", help="persona to apply")
    res.add_argument("--model", metavar="M", help="spawn-time model override")
    res.add_argument("--effort", choices=EFFORTS, help="spawn-time reasoning effort override")
    res.add_argument("--capability", choices=CAPABILITIES, help="spawn-time capability mode")
    res.add_argument("--isolation", choices=ISOLATIONS, help="spawn-time isolation override")
    res.add_argument("--parent-model", metavar="M", help="the spawning agent's own model")
    res.add_argument("--json", action="store_true", help="print the raw JSON result")
    res.set_defaults(handler=_resolve)


def _list(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        result = client.call("agents.list", workspace=workspace_of(args))
    if args.json:
        print_json(result)
    else:
        for key in ("agents", "roles", "personas"):
            entries = result[key]
            print(f"{key}:" if entries else f"{key}: none")
            for entry in entries:
                line = (
                    f"  {entry['name']:<20} {entry['origin']:<8} {entry.get('description') or ''}"
                )
                print(line.rstrip())
                if entry.get("path"):
                    print(f"  {'':<20} {entry['path']}")
    for problem in result["errors"]:
        print(f"memoryd: error: {problem['message']}", file=sys.stderr)
    return EXIT_ERROR if result["errors"] else EXIT_OK


def _resolve(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {
        key: value
        for key, value in (
            ("persona", args.persona),
            ("model", args.model),
            ("reasoning_effort", args.effort),
            ("capability_mode", args.capability),
            ("isolation", args.isolation),
        )
        if value is not None
    }
    params: dict[str, Any] = {
        "workspace": workspace_of(args),
        "subagent_type": args.subagent_type,
        "overrides": overrides,
    }
    if args.parent_model:
        params["parent_model"] = args.parent_model
    with client_for(args) as client:
        try:
            result = client.request("agents.resolve", params)
        except NotFound as exc:
            known = exc.data.get("available")
            if not known:
                raise
            raise NotFound(f"{exc} (known here: {', '.join(known)})") from None
    if args.json:
        print_json(result)
    else:
        for key, value in result.items():
            if key == "definition":
                origin = f"{value['name']} ({value['origin']}: {value['path']})" if value else "-"
                print(f"{'definition':<20} {origin}")
            else:
                shown = "-" if value is None else str(value)
                if "\n" in shown:
                    shown = shown.replace("\n", "\n" + " " * 21)
                print(f"{key:<20} {shown}")
    if result.get("persona_error"):  # fail-closed: the caller must not spawn
        print(f"memoryd: error: {result['persona_error']}: do not spawn", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK
