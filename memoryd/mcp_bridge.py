"""The MCP bridge behind ``memoryd mcp``: memory tools for any MCP client, through the daemon.

A stdio MCP server (the ``mcp`` SDK's low-level :class:`~mcp.server.lowlevel.Server`) that is
a thin client of the running daemon: every tool call is one request on the daemon's socket
(:class:`~memoryd.client.AsyncClient`), for one workspace fixed at start (the directory the
agent runs the bridge in, or ``-w``). It never opens an index and never starts a daemon.

Tools (:data:`TOOLS`), each with a description that tells a model when to use it:

    memory_search   {query, max_results?, min_score?}   → memory.search
    memory_get      {path, from?, lines?}               → memory.get
    memory_remember {text, scope?}                      → memory.remember
    memory_flush    {session_id?}                       → session.flush

Arguments are checked here (pydantic models, unknown keys refused) before the daemon checks
them again. Every answer is text a model reads well plus ``structuredContent`` matching the
tool's ``outputSchema``. Every failure is a tool result with ``isError`` (never a protocol
error), so the model sees it: bad arguments name the argument; no daemon says so and how to
start it; the next call after the daemon is back simply works (the client reconnects).

Importing this module needs the ``mcp`` extra; :mod:`memoryd.cli.mcp` imports it lazily.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import mcp.types as mt
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from memoryd import __version__
from memoryd.client import AsyncClient
from memoryd.core.secrets import redaction_mark
from memoryd.errors import DaemonNotRunning, DaemonTimeout, MemorydError

#: Seconds to wait for the daemon; a flush waits for a chat model, so this is generous.
CALL_TIMEOUT_SECS = 300.0
SNIPPET_LINES = 12

INSTRUCTIONS = (
    "memoryd is this user's long-term memory across coding sessions: curated notes for this "
    "project and for all projects (MEMORY.md) and logs of past sessions. Search it before you "
    "start a task or make a decision that earlier work may have settled; save durable lessons "
    "with memory_remember."
)

# --------------------------------------------------------------------------- arguments


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SearchArgs(_Args):
    query: str = Field(
        min_length=1,
        max_length=10_000,
        description="Keywords or a short question, e.g. 'sqlite locking' or 'how do we deploy'.",
    )
    max_results: int | None = Field(
        None, ge=1, le=50, description="At most this many results (default: the daemon's, 6)."
    )
    min_score: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Relevance threshold in [0, 1] (default 0.35); lower it to see weaker hits.",
    )


class GetArgs(_Args):
    path: str = Field(
        min_length=1,
        max_length=4096,
        description="A path exactly as memory_search shows it (relative to the memory root).",
    )
    from_: int = Field(1, alias="from", ge=1, description="First line to read, 1-based.")
    lines: int | None = Field(None, ge=1, description="How many lines (default: to the end).")


class RememberArgs(_Args):
    text: str = Field(
        min_length=1,
        max_length=200_000,
        description="The note: one self-contained line becomes a '## ' heading; several lines "
        "keep the first (if short) as the heading.",
    )
    scope: Literal["workspace", "global"] = Field(
        "workspace",
        description="'workspace': this project's MEMORY.md. 'global': the user's memory shared "
        "by every project (preferences and knowledge that hold everywhere).",
    )


class FlushArgs(_Args):
    session_id: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="The memoryd session id to flush; leave it out to flush this project's "
        "most recent open session (the one memoryd's agent hooks opened).",
    )


# --------------------------------------------------------------------------- outputs


class SearchHitOut(BaseModel):
    path: str
    start_line: int
    end_line: int
    score: float
    source: Literal["global", "workspace", "session"]
    heading: str
    snippet: str
    chunk_time: str | None
    age_days: float | None = Field(description="Age of a session log chunk, in days.")


class SearchOut(BaseModel):
    workspace: str
    query: str
    mode: str = Field(description="hybrid, fts_only or fts_fallback")
    results: list[SearchHitOut]


class GetOut(BaseModel):
    path: str
    start_line: int
    end_line: int
    total_lines: int
    text: str


class RememberOut(BaseModel):
    path: str
    scope: Literal["workspace", "global"]
    written: bool
    redacted: list[str] = Field(
        default_factory=list,
        description="Secrets memoryd redacted from the note, as [REDACTED:kind:fingerprint]",
    )


class FlushOut(BaseModel):
    session_id: str
    outcome: str = Field(description="written, nothing_to_store, rejected or duplicate")
    path: str | None


# --------------------------------------------------------------------------- rendering


def age_days(chunk_time: str | None, now: datetime) -> float | None:
    """Days from ``chunk_time`` (ISO 8601) to ``now``; None when unknown or unreadable."""
    if not chunk_time:
        return None
    try:
        then = datetime.fromisoformat(chunk_time)
    except ValueError:
        return None
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    return max(0.0, (now - then).total_seconds() / 86400)


def age_note(days: float | None) -> str:
    """``from today``, ``1 day old``, ``12 days old`` (whole days, rounded down)."""
    if days is None:
        return "age unknown"
    whole = math.floor(days)
    if whole == 0:
        return "from today"
    return "1 day old" if whole == 1 else f"{whole} days old"


def _where(path: str, start: int, end: int) -> str:
    return f"{path}, line {start}" if start == end else f"{path}, lines {start}-{end}"


def render_search(out: SearchOut, max_snippet_lines: int = SNIPPET_LINES) -> str:
    """Numbered hits: where (path, 1-based lines), score, source, age of session logs, snippet."""
    if not out.results:
        return (
            f'No memory matches "{out.query}". Try other keywords, a shorter query, or a lower '
            "min_score."
        )
    lines = [f'{len(out.results)} memory result(s) for "{out.query}" ({out.mode}):', ""]
    for number, hit in enumerate(out.results, 1):
        match hit.source:
            case "session":
                source = f"session log, {age_note(hit.age_days)}"
            case "workspace":
                source = "project memory"
            case "global":
                source = "global memory"
        where = _where(hit.path, hit.start_line, hit.end_line)
        lines.append(f"[{number}] {where} (score {hit.score:.2f}, {source})")
        snippet = hit.snippet.splitlines()
        section = hit.heading.rsplit(" > ", 1)[-1]
        if section and not (snippet and section in snippet[0]):
            lines.append(f"    (in: {hit.heading})")  # a chunk cut from a longer section
        lines.extend(f"    {line}".rstrip() for line in snippet[:max_snippet_lines])
        if len(snippet) > max_snippet_lines:
            lines.append("    …")
        lines.append("")
    lines.append("Read more of a file with memory_get (path, from, lines).")
    return "\n".join(lines)


def render_get(out: GetOut) -> str:
    """The lines with their 1-based numbers, and how to read on."""
    if out.total_lines == 0 or not out.text:
        return f"{out.path} has no lines from line {out.start_line} (it has {out.total_lines})."
    width = len(str(out.end_line))
    body = [
        f"{out.start_line + offset:>{width}}  {line}".rstrip()
        for offset, line in enumerate(out.text.splitlines())
    ]
    head = f"{_where(out.path, out.start_line, out.end_line)} of {out.total_lines}:"
    tail = []
    if out.end_line < out.total_lines:
        tail = ["", f"({out.total_lines - out.end_line} more line(s): from={out.end_line + 1})"]
    return "\n".join([head, *body, *tail])


def render_remember(out: RememberOut) -> str:
    where = "this project's memory" if out.scope == "workspace" else "the global memory"
    if not out.written:
        return "Nothing remembered: the note was empty."
    done = f"Remembered in {where} ({out.path}); memory_search finds it from now on."
    if out.redacted:
        done += (
            " Secrets were redacted before saving (never store credentials in memory): "
            + ", ".join(out.redacted)
        )
    return done


FLUSH_OUTCOMES: Mapping[str, str] = {
    "written": "Flushed: what this session found worth keeping is in {path}.",
    "nothing_to_store": "Flushed: the model found nothing new worth keeping; nothing stored.",
    "rejected": "Not stored: the model's summary was not usable markdown.",
    "duplicate": "Not stored: memory already holds the same (a near-duplicate).",
}


def render_flush(out: FlushOut) -> str:
    template = FLUSH_OUTCOMES.get(out.outcome, "Flush outcome: {outcome}.")
    return template.format(path=out.path, outcome=out.outcome)


def error_text(exc: Exception, timeout: float) -> str:
    """What the model reads when the daemon could not answer as asked."""
    match exc:
        case DaemonNotRunning():
            return (
                f"{exc} (or run it as a service: `memoryd install-service`). memoryd mcp never "
                "starts it itself; once it runs, call this tool again. Nothing was read or written."
            )
        case DaemonTimeout():
            return f"memoryd did not answer within {timeout:g} s; it may be busy. Try again."
        case MemorydError(code="invalid_params"):
            return f"Invalid argument: {exc}"
        case MemorydError():
            return f"memoryd could not do it ({exc.code}): {exc}"
    return f"memoryd bridge error: {exc}"


def validation_text(tool: str, exc: ValidationError) -> str:
    """One line per bad argument, named as the model sent it."""
    problems = []
    for error in exc.errors():
        name = ".".join(str(part) for part in error["loc"]) or "arguments"
        if error["type"] == "extra_forbidden":
            problems.append(f"unknown argument '{name}'")
        else:
            problems.append(f"'{name}': {error['msg']} (got {error.get('input')!r})")
    return f"Invalid arguments for {tool}: " + "; ".join(problems)


# --------------------------------------------------------------------------- tools


@dataclass(frozen=True)
class ToolSpec:
    """One MCP tool: its schema side and how it maps to one daemon method."""

    name: str
    title: str
    description: str
    args: type[_Args]
    output: type[BaseModel]
    method: str
    read_only: bool

    def tool(self) -> mt.Tool:
        return mt.Tool(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema=self.args.model_json_schema(by_alias=True),
            output_schema=self.output.model_json_schema(),
            annotations=mt.ToolAnnotations(
                title=self.title,
                read_only_hint=self.read_only,
                destructive_hint=False,
                idempotent_hint=self.read_only,
                open_world_hint=False,
            ),
        )


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "memory_search",
        "Search long-term memory",
        "Search the long-term memory of this project and of the user: curated notes "
        "(MEMORY.md) and logs of past sessions. Use it before starting a task, before a "
        "decision earlier work may have settled, and when something looks familiar (an error, "
        "a module, a convention): results give path, 1-based line range, score, source and a "
        "snippet. Session logs decay with age: prefer curated memory when they disagree.",
        SearchArgs,
        SearchOut,
        "memory.search",
        read_only=True,
    ),
    ToolSpec(
        "memory_get",
        "Read a memory file",
        "Read lines of a memory file that memory_search returned. Use it when a snippet is "
        "not enough: pass the path exactly as shown, 'from' the first 1-based line (e.g. the "
        "hit's start line) and 'lines' how many. Only this project's memory files and the "
        "global MEMORY.md can be read.",
        GetArgs,
        GetOut,
        "memory.get",
        read_only=True,
    ),
    ToolSpec(
        "memory_remember",
        "Save to long-term memory",
        "Save a durable note to long-term memory: a decision and its reason, a convention, a "
        "command that works, a pitfall and its fix, a preference the user stated. Use it when "
        "you learn something a future session should know; not for progress reports or "
        "secrets. scope 'workspace' (default) is this project; 'global' is every project.",
        RememberArgs,
        RememberOut,
        "memory.remember",
        read_only=False,
    ),
    ToolSpec(
        "memory_flush",
        "Flush this session to memory",
        "Ask memoryd to summarise the current session into today's session log now (one "
        "model call). Use it before the context is compacted or at a natural checkpoint. "
        "Without session_id it flushes this project's most recent open session (opened by "
        "memoryd's agent hooks, `memoryd integrate`); with none open, use memory_remember.",
        FlushArgs,
        FlushOut,
        "session.flush",
        read_only=False,
    ),
)
TOOLS_BY_NAME: Mapping[str, ToolSpec] = {spec.name: spec for spec in TOOLS}


def _failure(text: str) -> mt.CallToolResult:
    return mt.CallToolResult(content=[mt.TextContent(type="text", text=text)], is_error=True)


class Bridge:
    """The tools' implementation: validate, ask the daemon, render. Owns one daemon client."""

    def __init__(
        self,
        socket_path: Path,
        workspace: str,
        *,
        timeout: float = CALL_TIMEOUT_SECS,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.workspace = workspace
        self.timeout = timeout
        self.client = AsyncClient(socket_path, timeout=timeout)
        self._clock = clock

    async def call(self, name: str, arguments: Mapping[str, Any] | None) -> mt.CallToolResult:
        """Run one tool call; every failure is an ``isError`` result the model can read."""
        spec = TOOLS_BY_NAME.get(name)
        if spec is None:
            return _failure(f"Unknown tool {name!r}; this server has {', '.join(TOOLS_BY_NAME)}.")
        try:
            args = spec.args.model_validate(dict(arguments or {}))
        except ValidationError as exc:
            return _failure(validation_text(name, exc))
        try:
            result = await self.client.request(spec.method, self._params(args))
        except MemorydError as exc:
            return _failure(error_text(exc, self.timeout))
        text, structured = self._render(args, result)
        return mt.CallToolResult(
            content=[mt.TextContent(type="text", text=text)],
            structured_content=structured.model_dump(mode="json"),
        )

    def _params(self, args: _Args) -> dict[str, Any]:
        ws = {"workspace": self.workspace}
        match args:
            case SearchArgs():
                optional = {"max_results": args.max_results, "min_score": args.min_score}
                chosen = {k: v for k, v in optional.items() if v is not None}
                return {**ws, "query": args.query, **chosen}
            case GetArgs():
                window = {"lines": args.lines} if args.lines is not None else {}
                return {**ws, "path": args.path, "from": args.from_, **window}
            case RememberArgs():
                return {**ws, "text": args.text, "scope": args.scope}
            case FlushArgs():
                if args.session_id is None:
                    return ws
                return {"session_id": args.session_id}
        raise AssertionError(f"no daemon method for {type(args).__name__}")

    def _render(self, args: _Args, result: Mapping[str, Any]) -> tuple[str, BaseModel]:
        match args:
            case SearchArgs():
                now = self._clock()
                hits = [
                    SearchHitOut(
                        **{k: hit[k] for k in SearchHitOut.model_fields if k != "age_days"},
                        age_days=(
                            age_days(hit["chunk_time"], now) if hit["source"] == "session" else None
                        ),
                    )
                    for hit in result["results"]
                ]
                search = SearchOut(
                    workspace=self.workspace, query=args.query, mode=result["mode"], results=hits
                )
                return render_search(search), search
            case GetArgs():
                text = result["text"]
                count = len(text.splitlines())
                start = int(result["start_line"])
                got = GetOut(
                    path=result["path"],
                    start_line=start,
                    end_line=start + count - 1 if count else start - 1,
                    total_lines=result["total_lines"],
                    text=text,
                )
                return render_get(got), got
            case RememberArgs():
                saved = RememberOut(
                    path=result["path"],
                    scope=args.scope,
                    written=result.get("written", True),
                    redacted=[
                        redaction_mark(r["kind"], r["fingerprint"])
                        for r in result.get("redacted", [])
                    ],
                )
                return render_remember(saved), saved
            case FlushArgs():
                flushed = FlushOut(
                    session_id=result.get("session_id") or args.session_id or "",
                    outcome=result["outcome"],
                    path=result.get("path"),
                )
                return render_flush(flushed), flushed
        raise AssertionError(f"no rendering for {type(args).__name__}")


def build_server(bridge: Bridge) -> Server[Any]:
    """The MCP server exposing :data:`TOOLS` through ``bridge``."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: mt.PaginatedRequestParams | None
    ) -> mt.ListToolsResult:
        return mt.ListToolsResult(tools=[spec.tool() for spec in TOOLS])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: mt.CallToolRequestParams
    ) -> mt.CallToolResult:
        return await bridge.call(params.name, params.arguments)

    return Server(
        "memoryd",
        version=__version__,
        title="memoryd",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve_stdio(socket_path: Path, workspace: str) -> None:
    """Serve MCP on stdin/stdout until the client closes stdin."""
    bridge = Bridge(socket_path, workspace)
    server = build_server(bridge)
    try:
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        await bridge.client.aclose()
