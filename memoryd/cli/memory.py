"""CLI commands that talk to the daemon about memory: search, get, remember, reindex, calibrate.

Each command finds the socket from the configuration (``--config``, environment, file) and
the workspace from ``-w/--workspace`` (default: the current directory). With no daemon they
fail with exit status 3 and say how to start it.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import Any

from memoryd.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    Subcommands,
    add_common,
    age,
    client_for,
    command,
    memory_root,
    print_json,
    workspace_of,
)
from memoryd.cli.paths import requested, shown
from memoryd.cli.progress import Progress
from memoryd.client import Client

PROGRESS_POLL_SECS = 0.5


# --- search --------------------------------------------------------------------------------


@command
def _search_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser("search", help="search the workspace's memory")
    parser.add_argument("query", metavar="QUERY", help="what to look for (keywords or a question)")
    add_common(parser)
    parser.add_argument(
        "-n",
        "--max-results",
        type=int,
        default=None,
        metavar="N",
        help="at most N results (default: search.max_results)",
    )
    parser.add_argument(
        "--min-score",
        type=float,
        default=None,
        metavar="S",
        help="relevance threshold in [0, 1] (default: search.min_score)",
    )
    parser.add_argument(
        "--source",
        action="append",
        choices=("global", "workspace", "session"),
        help="only this source (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print the raw JSON result")
    parser.set_defaults(handler=_search)


def _search(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"workspace": workspace_of(args), "query": args.query}
    if args.max_results is not None:
        params["max_results"] = args.max_results
    if args.min_score is not None:
        params["min_score"] = args.min_score
    if args.source:
        params["sources"] = args.source
    with client_for(args) as client:
        result = client.request("memory.search", params)
    if args.json:
        print_json(result)
        return EXIT_OK
    hits = result["results"]
    root, cwd = memory_root(args), os.getcwd()
    for hit in hits:
        when = f", {age(hit['chunk_time'])} old" if hit["source"] == "session" else ""
        start, end = hit["start_line"], hit["end_line"]
        lines = f"{start}" if start == end else f"{start}-{end}"
        path = shown(root, hit["path"], cwd)
        print(f"{path}:{lines}  score {hit['score']:.2f}  [{hit['source']}{when}]")
        for line in hit["snippet"].splitlines()[:6]:
            print(f"    {line}")
        print()
    print(
        f"{len(hits)} result(s), {result['mode']}, {result['took_ms']:.1f} ms"
        f" ({result['synced_paths']} file(s) synced first)",
        file=sys.stderr,
    )
    return EXIT_OK


# --- get -----------------------------------------------------------------------------------


@command
def _get_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "get", help="print a memory file with line numbers (a path as search prints it)"
    )
    parser.add_argument(
        "path",
        metavar="PATH",
        help="a path as search prints it (absolute or from here, optionally with :LINE or "
        ":START-END), or relative to the memory root (MEMORY.md, <workspace-dir>/MEMORY.md)",
    )
    add_common(parser)
    parser.add_argument(
        "--from",
        dest="start",
        type=int,
        default=None,
        metavar="LINE",
        help="first line (1-based; default 1, or the START of PATH:START-END)",
    )
    parser.add_argument("--lines", type=int, default=None, metavar="N", help="at most N lines")
    parser.add_argument("--json", action="store_true", help="print the raw JSON result")
    parser.set_defaults(handler=_get)


def _get(args: argparse.Namespace) -> int:
    wanted = requested(args.path, memory_root(args), os.getcwd(), os.path.isfile)
    start = args.start if args.start is not None else (wanted.start or 1)
    params: dict[str, Any] = {"workspace": workspace_of(args), "path": wanted.path, "from": start}
    if args.lines is not None:
        params["lines"] = args.lines
    elif args.start is None and wanted.end is not None:
        params["lines"] = wanted.end - start + 1
    with client_for(args) as client:
        result = client.request("memory.get", params)
    if args.json:
        print_json(result)
        return EXIT_OK
    width = len(str(result["total_lines"]))
    for offset, line in enumerate(result["text"].splitlines()):
        number = f"{result['start_line'] + offset:>{width}}"
        print(f"{number}  {line}" if line else number)
    return EXIT_OK


# --- remember ------------------------------------------------------------------------------


@command
def _remember_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "remember", help="append a note to the workspace's (or the global) MEMORY.md"
    )
    parser.add_argument("text", metavar="TEXT", help="the note; one line becomes a ## heading")
    add_common(parser)
    parser.add_argument(
        "--global",
        dest="global_",
        action="store_true",
        help="write to the global MEMORY.md instead of the workspace's",
    )
    parser.add_argument("--json", action="store_true", help="print the raw JSON result")
    parser.add_argument(
        "--allow-secrets",
        action="store_true",
        help="keep what looks like a secret in the note (it is redacted otherwise)",
    )
    parser.set_defaults(handler=_remember)


def _remember(args: argparse.Namespace) -> int:
    scope = "global" if args.global_ else "workspace"
    extra = {"allow_secrets": True} if args.allow_secrets else {}
    with client_for(args) as client:
        result = client.call(
            "memory.remember", workspace=workspace_of(args), text=args.text, scope=scope, **extra
        )
    if result.get("warning") and not args.json:
        print(f"warning: {result['warning']}", file=sys.stderr)
    if args.json:
        print_json(result)
    elif result.get("written", True):
        print(f"remembered in {shown(memory_root(args), result['path'], os.getcwd())}")
    else:
        print("nothing to remember (empty note)", file=sys.stderr)
    return EXIT_OK


# --- calibrate -----------------------------------------------------------------------------


@command
def _calibrate_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "calibrate",
        help="measure the embedding model's similarity scale on this workspace's notes",
    )
    add_common(parser)
    parser.add_argument("--json", action="store_true", help="print the raw JSON result")
    parser.set_defaults(handler=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    with client_for(args, timeout=None) as client:
        result = client.call("index.calibrate", workspace=workspace_of(args))
    if args.json:
        print_json(result)
        return EXIT_OK
    in_use = result["in_use"]
    print(
        f"{result['model_id']}: a title and another file's note {result['unrelated']} (90th "
        f"percentile), a title and its own note {result['strong']} (median; {result['halves']} "
        f"notes, {result['pairs']} pairs); in use: "
        f"unrelated {in_use['unrelated']}, strong {in_use['strong']}"
    )
    if result["problem"]:
        print(f"no scale to suggest: {result['problem']}", file=sys.stderr)
        return EXIT_ERROR
    print("put these under [embedding] in the config file, then `memoryd restart`:")
    for line in result["config_lines"]:
        print(f"  {line}")
    return EXIT_OK


# --- reindex -------------------------------------------------------------------------------


@command
def _reindex_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser(
        "reindex", help="re-read every memory file of the workspace into its index"
    )
    add_common(parser)
    parser.add_argument(
        "--embeddings",
        action="store_true",
        help="also drop and rebuild every vector (progress on stderr)",
    )
    parser.add_argument(
        "--no-wait", action="store_true", help="do not wait for vectors to be rebuilt"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the raw JSON result (after the vectors)"
    )
    parser.set_defaults(handler=_reindex)


def _reindex(args: argparse.Namespace) -> int:
    workspace = workspace_of(args)
    with client_for(args, timeout=None) as client:
        result = _reindex_with_progress(args, client, workspace)
        if not args.json:
            print(
                f"reindexed {result['files']} file(s): {result['changed']} changed, "
                f"{result['chunks_added']} chunk(s) added in {result['took_ms']:.0f} ms"
            )
        total = int(result["vectors_pending"])
        if total and not args.no_wait:
            result["vectors_pending"], result["embedding_error"] = _wait_for_vectors(
                client, workspace, total, quiet=args.json
            )
        elif total and not args.json:
            print(f"{total} chunk(s) wait for vectors (see `memoryd status`)")
    if args.json:
        print_json(result)
    return EXIT_OK


def _reindex_with_progress(
    args: argparse.Namespace, client: Client, workspace: str
) -> dict[str, Any]:
    """``index.reindex``, with the file scan's progress on stderr (unless ``--json``): the
    call runs in a thread while ``daemon.status`` on a second connection shows the scan."""
    outcome: list[Any] = []

    def call() -> None:
        try:
            params = {"workspace": workspace, "embeddings": args.embeddings}
            outcome.append(client.request("index.reindex", params))
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            outcome.append(exc)

    worker = threading.Thread(target=call, name="memoryd-reindex", daemon=True)
    worker.start()
    progress = Progress("files", sys.stderr)
    seen: dict[str, int] | None = None
    with client_for(args, timeout=30.0) as watcher:
        while True:
            worker.join(PROGRESS_POLL_SECS)
            if not worker.is_alive():
                break
            scan = _scan_of(watcher, workspace)
            if scan is not None and not args.json:
                seen = scan
                progress.update(scan["done"], scan["total"])
    if seen is not None:
        progress.finish(seen["total"], seen["total"])
    (result,) = outcome
    if isinstance(result, BaseException):
        raise result
    return dict(result)


def _scan_of(client: Client, workspace: str) -> dict[str, int] | None:
    """The file scan under way in ``workspace`` (``daemon.status``), if any."""
    canonical = os.path.realpath(workspace)
    for actor in client.call("daemon.status").get("actors") or []:
        scan = actor.get("scan") or {}
        if actor.get("workspace") == canonical and scan.get("total"):
            return dict(actor["scan"])
    return None


def _wait_for_vectors(
    client: Client, workspace: str, total: int, *, quiet: bool
) -> tuple[int, str | None]:
    """Poll ``index.stats`` until no vector is pending (progress on stderr unless ``quiet``);
    returns what is still pending and the provider's error when it fails before any."""
    progress = Progress("vectors", sys.stderr)
    pending = total
    while pending > 0:
        if not quiet:
            progress.update(total - pending, total)
        time.sleep(PROGRESS_POLL_SECS)
        stats = client.call("index.stats", workspace=workspace)
        pending = int(stats["vectors_pending"])
        error = stats.get("embedding_last_error")
        if error and pending == total:
            if not quiet:
                progress.interrupt(
                    f"embedding is failing: {error} (vectors are retried in the background)"
                )
            return pending, str(error)
    if not quiet:
        progress.finish(total, total)
    return 0, None
