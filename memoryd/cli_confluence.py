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

from memoryd.cli import EXIT_ERROR, EXIT_OK, Subcommands, command
from memoryd.cli_memory import add_common, client_for, print_json

FAILED = ("failed", "partial", "refused")


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


def counts_text(counts: dict[str, Any] | None) -> str:
    """``3 candidates, 1 shared, 2 rejected, 4 model calls, 0 errors``."""
    c = counts or {}
    text = (
        f"{c.get('candidates', 0)} candidates, {c.get('shared', 0)} shared, "
        f"{c.get('rejected', 0)} rejected, {c.get('model_calls', 0)} model calls, "
        f"{c.get('errors', 0)} errors"
    )
    if c.get("duplicates"):
        text += f", {c['duplicates']} already in experience.md"
    return text


def run_line(run: dict[str, Any]) -> str:
    """One line for a run: when, trigger, outcome and counts."""
    outcome = str(run.get("outcome"))
    if run.get("skipped"):
        outcome += f" ({run['skipped']})"
    counts = counts_text(run.get("counts"))
    return f"{run.get('started_at')} ({run.get('trigger')}): {outcome}; {counts}"


def confluence_status_line(info: dict[str, Any]) -> str:
    """The ``confluence:`` line of ``memoryd status`` from ``daemon.status``'s entry."""
    state = "on" if info.get("enabled") else "off"
    schedule = info.get("schedule") or "off"
    parts = [f"{state}, schedule {schedule}"]
    if info.get("next_run"):
        parts.append(f"next run {info['next_run']}")
    if info.get("running"):
        parts.append("running now")
    last = info.get("last_run")
    parts.append(f"last run {run_line(last)}" if last else "never run")
    return "confluence: " + "; ".join(parts)


def render_run(run: dict[str, Any]) -> list[str]:
    """The readable report of a run: counts, shared lessons, rejections, errors, refusal."""
    lines = [f"confluence run {run_line(run)}"]
    if run.get("message"):
        lines.append(str(run["message"]))
    if run.get("skipped") == "no_new_material":
        lines.append("no workspace has new consolidated sections since the last run")
    accepted = run.get("accepted") or []
    if accepted:
        lines.append("shared (appended to experience.md):")
        for lesson in accepted:
            lines.append(f"  + {lesson['title']}")
            lines.extend(f"      from {source}" for source in lesson.get("sources") or [])
    rejections = run.get("rejections") or []
    if rejections:
        lines.append("rejected:")
        lines.extend(f"  - {r['title']}: {r['reason']}" for r in rejections)
    errors = run.get("errors") or []
    if errors:
        lines.append("errors:")
        for error in errors:
            where = f" batch {error['batch']}" if "batch" in error else ""
            where += f" {error['workspace']}" if "workspace" in error else ""
            lines.append(f"  ! {error['stage']}{where}: {error['message']}")
    refused = run.get("refused")
    if refused:
        lines.append(f"refused to write: {refused['reason']}")
        if refused.get("next_step"):
            lines.append(f"next step: {refused['next_step']}")
    return lines


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
