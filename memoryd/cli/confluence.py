"""CLI commands of the experience confluence: ``memoryd confluence run|status`` (SPEC §10, §12).

``run`` asks the daemon for one run now (``--force`` also when ``confluence.enabled`` is
false) and prints what it shared, what it rejected and why, and any error or refusal with
the next step. ``status`` shows the settings, the last run, and the rejections and reasons
of the last run that did work. Exit status 1 when a run failed, partly failed or was
refused.
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
)
from memoryd.cli.render import FAILED, confluence_status_line, render_run, run_line


@command
def _confluence_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "confluence", help="distil lessons across workspaces into experience.md"
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    run = actions.add_parser(
        "run", help="run the experience confluence once now and show what it shared"
    )
    add_common(run, workspace=False)
    run.add_argument(
        "--force", action="store_true", help="run even when confluence.enabled is false"
    )
    run.add_argument("--json", action="store_true", help="print the raw JSON result")
    run.set_defaults(handler=_run)
    status = actions.add_parser(
        "status", help="the last confluence run, its counts, rejections and their reasons"
    )
    add_common(status, workspace=False)
    status.add_argument("--json", action="store_true", help="print the raw JSON status")
    status.set_defaults(handler=_status)


def _run(args: argparse.Namespace) -> int:
    with client_for(args, timeout=None) as client:
        result: dict[str, Any] = client.call("confluence.run", force=bool(args.force))
    if args.json:
        print_json(result)
    else:
        print("\n".join(render_run(result)))
    return EXIT_ERROR if result.get("outcome") in FAILED else EXIT_OK


def _status(args: argparse.Namespace) -> int:
    with client_for(args, timeout=10.0) as client:
        status: dict[str, Any] = client.call("confluence.status")
    if args.json:
        print_json(status)
        return EXIT_OK
    print(confluence_status_line(status))
    if not status.get("enabled"):
        print('enable it with [confluence] enabled = true (and schedule = "daily" to run daily)')
    work = status.get("last_work")
    if work and work != status.get("last_run"):
        print(f"last run that did work: {run_line(work)}")
    if work:
        for line in render_run(work)[1:]:
            print(line)
    marks = status.get("watermarks") or {}
    if marks:
        print("workspaces (consolidated sections / distilled):")
        for name, mark in marks.items():
            print(f"  {name}: {mark['sections']} / {mark['distilled']}")
    return EXIT_OK
