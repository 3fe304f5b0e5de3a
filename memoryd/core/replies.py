"""The socket's replies, one TypedDict per method result (SPEC §11; the README's method table).

The services build these and the handlers return them unchanged, so strict mypy checks the
wire shape from the code that fills a reply to the socket. A key that is not always sent is
``NotRequired``; a nested value whose shape belongs to another module (an agent's resolved
runtime config, a confluence run report) is typed where it is made. Pure: types only.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

# memory.* ---------------------------------------------------------------------------------


class SearchHitReply(TypedDict):
    chunk_id: str
    path: str
    start_line: int
    end_line: int
    score: float
    source: str
    snippet: str
    chunk_time: str | None
    heading: str


class SearchReply(TypedDict):
    results: list[SearchHitReply]
    mode: str  # hybrid | fts_only | fts_fallback
    synced_paths: int
    generation: int
    took_ms: float
    warning: NotRequired[str]


class PageCursor(TypedDict, total=False):
    start_char: int
    next_from: int
    next_char: int


class PageReply(PageCursor):
    """A window of a file's lines (:func:`memoryd.core.notes.page`)."""

    text: str
    start_line: int
    total_lines: int


class GetReply(PageReply):
    path: str
    truncated: NotRequired[int]
    """Present when the file is larger than ``index.max_file_bytes``: its size in bytes;
    only its first ``max_file_bytes`` (what is indexed) are served."""


class Redacted(TypedDict):
    kind: str
    fingerprint: str


class RedactionNotice(TypedDict, total=False):
    redacted: list[Redacted]
    warning: str


class RememberReply(TypedDict):
    path: str
    written: bool
    redacted: NotRequired[list[Redacted]]
    warning: NotRequired[str]
    indexed: NotRequired[bool]


class FileEntry(TypedDict):
    path: str
    size: int
    mtime: str  # RFC 3339 UTC
    chunks: int


class FilesReply(TypedDict):
    files: list[FileEntry]


# index.* ----------------------------------------------------------------------------------


class FileWarnings(TypedDict):
    path: str
    warnings: list[str]


class EmbeddingProgress(TypedDict):
    done: int
    total: int
    pending: int
    rate_per_sec: float | None
    eta_secs: float | None
    last_error: str | None
    last_error_at: float | None
    failures: int


class IndexStats(TypedDict):
    """What the index file reports (:meth:`memoryd.store.index.Index.stats`)."""

    path: str
    files: int
    chunks: int
    generation: int
    schema_version: int
    size_bytes: int
    sqlite_version: str | None
    fts5: bool
    vec: bool
    vec_error: str | None
    embedding_model: str | None
    embedding_dims: int | None
    vectors_pending: int
    vectors_in_memory: int | None
    vectors_in_memory_bytes: int | None
    rebuilt_reason: str | None
    rebuilt_at: float | None
    rebuilds: int
    file_warnings: list[FileWarnings]
    file_warnings_total: int


class EmbeddingPart(TypedDict, total=False):
    embedding: EmbeddingProgress


class StatsReply(IndexStats):
    """``index.stats``: the index file's figures and the workspace's embedding state."""

    dirty: int
    embedding_provider: str | None
    embedding_last_error: str | None
    embedding: NotRequired[EmbeddingProgress]


class CalibrateReply(TypedDict):
    model_id: str
    unrelated: float | None
    strong: float | None
    unrelated_p90: float | None
    pairs: int
    halves: int
    problem: str | None
    config_lines: list[str]
    in_use: dict[str, float]


class ReindexReply(TypedDict):
    files: int
    changed: int
    chunks_added: int
    vectors_pending: int
    took_ms: float


# session.* --------------------------------------------------------------------------------

FlushOutcome = Literal["written", "nothing_to_store", "rejected", "duplicate"]


class SessionOpenReply(TypedDict):
    session_id: str
    log_path: str
    messages: int
    resumed: bool


class SessionAppendReply(TypedDict):
    count: int


class FlushReply(TypedDict):
    outcome: FlushOutcome
    path: NotRequired[str]


class SessionFlushReply(FlushReply):
    session_id: str


class FlushError(TypedDict):
    outcome: Literal["error"]
    error: str
    code: str


class UsageReply(TypedDict):
    flushed: bool
    outcome: NotRequired[FlushOutcome]
    path: NotRequired[str]
    error: NotRequired[str]
    code: NotRequired[str]


class SessionClosed(TypedDict):
    """What closing a session did (:meth:`SessionManager.close`)."""

    summary_written: bool
    messages: int
    path: NotRequired[str]


class LastFlush(TypedDict):
    at: str | None
    outcome: str
    trigger: str | None
    error: str | None


class SessionStatus(TypedDict):
    """One open session in ``daemon.status`` (its actor's ``sessions``)."""

    session_id: str
    subagent: bool
    opened_at: str | None
    messages: int
    unflushed: int
    last_activity: str | None
    next_idle_flush: str | None
    flushing: bool
    closing: bool
    last_flush: LastFlush | None
    log_path: str
    usage: dict[str, Any] | None
    last_ingest: dict[str, Any] | None  # path, format, offset, at
    last_seen: str | None
    idle_close_at: str | None


class ListedSession(SessionStatus):
    workspace: str
    memory_dir: str


class SessionListReply(TypedDict):
    sessions: list[ListedSession]


class GatesError(TypedDict):
    outcome: Literal["error"]
    error: str


class SessionCloseReply(SessionClosed):
    """``session.close``: the close, then the dream gates it was checked against."""

    dream: dict[str, Any] | GatesError  # GateOutcome.to_dict()


class IngestReply(TypedDict, total=False):
    """``session.ingest``: what the transcript gained, and the flush or close after it
    (``{accepted: true}`` alone when it runs in the background; ``{ingested: 0, skipped:
    true}`` when a closed session already read the whole file)."""

    ingested: int
    count: int
    offset: int
    rewritten: bool
    usage: UsageReply
    flush: FlushReply | FlushError
    close: SessionCloseReply
    accepted: bool
    skipped: bool


class HookReply(TypedDict):
    output: str | None
    event: str


# dream.* ----------------------------------------------------------------------------------


class LossReply(TypedDict):
    sections: int
    lost: list[str]
    lost_fraction: float
    max_loss_fraction: float


class DreamRunReply(TypedDict):
    outcome: str
    reason: str | None
    gates: NotRequired[dict[str, Any]]  # GateOutcome.to_dict()
    holder_pid: NotRequired[int]
    consumed: NotRequired[list[str]]
    archived: NotRequired[list[str]]
    kept: NotRequired[list[str]]
    waiting: NotRequired[list[str]]
    truncated: NotRequired[list[str]]
    backup: NotRequired[str | None]
    chars: NotRequired[int]
    dream_id: NotRequired[str | None]
    archive: NotRequired[str]
    detail: NotRequired[str]
    loss: NotRequired[LossReply]
    error: NotRequired[str]


class DreamUndoReply(TypedDict):
    path: str
    restored: str | None
    removed: bool
    dream_time: str | None
    saved_current: str | None
    logs_restored: list[str]
    forced: bool


class DreamState(TypedDict):
    """The dreamer's gates, lock and last run (:meth:`Dreamer.status`)."""

    memory_chars: int
    max_input_chars: int
    memory_too_large: bool
    enabled: bool
    gates: dict[str, Any]  # GateOutcome.values()
    lock: dict[str, Any]  # LockInfo.to_dict()
    last_consolidation: str | None
    last_run: dict[str, Any] | None  # time, outcome, reason, inputs of the last journal entry


class DreamStatusReply(DreamState):
    next_check: str  # RFC 3339 UTC, or "off"


class DreamStatusError(TypedDict):
    error: str


# daemon.* ---------------------------------------------------------------------------------


class PingReply(TypedDict):
    ok: bool


class ActorStatus(TypedDict):
    """One workspace in ``daemon.status``'s ``actors``."""

    scan: dict[str, int] | None
    workspace: str
    memory_dir: str
    state: str
    watcher: str
    watcher_error: str | None
    read_only: str | None
    dirty: int
    last_used: str  # RFC 3339 UTC
    last_search: dict[str, Any] | None
    index: StatsReply | dict[str, Any]  # empty while starting or scanning
    sessions: list[SessionStatus]
    dream: DreamStatusReply | DreamStatusError


class SlotCounters(TypedDict):
    """What the supervisor adds to each workspace in ``daemon.status``."""

    failures: int
    restarts: int
    retry_in: float | None
    last_error: str | None


class RunningWorkspace(ActorStatus, SlotCounters):
    pass


class IdleWorkspace(SlotCounters):
    """A workspace whose actor is starting, stopping, stopped or failed."""

    workspace: str
    memory_dir: str
    state: str


class UnreportedWorkspace(IdleWorkspace):
    """A running actor whose status failed."""

    status_error: str


WorkspaceEntry = RunningWorkspace | IdleWorkspace | UnreportedWorkspace


class DaemonStatusReply(TypedDict):
    """``daemon.status``; the status hooks (confluence, secrets, restart_pending, service)
    add their own keys."""

    version: str
    pid: int
    uptime_secs: float
    rss_bytes: int
    loop: str
    python: str
    socket: str
    config_file: str | None
    memory_root: str
    embedding_provider: str | None
    embedding: str  # one line: the provider, its model and dimension
    embedding_error: str | None
    chat_model: str | None
    actors: list[WorkspaceEntry]
    # added by the status hooks (DaemonContext.extra_status)
    restart_pending: NotRequired[list[str]]
    service: NotRequired[str | None]
    embedding_advice: NotRequired[str | None]
    confluence: NotRequired[dict[str, Any]]
    secrets: NotRequired[dict[str, Any]]


# secrets.* --------------------------------------------------------------------------------


class WorkspacePurge(TypedDict, total=False):
    workspace: str
    files: list[str]
    redacted: int
    history_files: int
    journals: int
    chunks_dropped: int
    cache_entries_dropped: int
    reindexed_files: int
    index_removed: bool
    error: str
    too_large: list[str]
    """Files over 64 MiB, neither scanned nor redacted."""


class GlobalPurge(TypedDict):
    files: list[str]
    redacted: int
    too_large: NotRequired[list[str]]
    """Files outside any workspace over 64 MiB, neither scanned nor redacted."""


# "global" is a keyword: the functional form.
PurgeReply = TypedDict(
    "PurgeReply", {"global": NotRequired[GlobalPurge], "workspaces": list[WorkspacePurge]}
)


class ScanFindings(TypedDict):
    files: list[dict[str, Any]]  # path, findings: [{line, kind, fingerprint}]
    findings: int
    rule_set: Any


class ScanReply(ScanFindings):
    scanned: int
    too_large: NotRequired[list[str]]
    """Files over 64 MiB, not scanned (never reported clean)."""


# agents.* (SPEC §9) -----------------------------------------------------------------------


class EffectiveConfig(TypedDict):
    """The effective runtime config of a sub-agent: exactly the SPEC §9 fields."""

    model: str | None
    reasoning_effort: str | None
    capability_mode: str | None
    persona: str | None
    persona_instructions: str | None
    role_prompt: str | None
    role_prompt_warning: str | None
    role_name: str | None
    persona_error: str | None
    isolation: str


class DefinitionView(TypedDict):
    """An agent definition as clients see it (snake_case keys)."""

    name: str
    description: str
    prompt: str
    prompt_mode: str
    tool_config: dict[str, Any] | None
    capability_mode: str | None
    permission_mode: str | None
    tools: list[str] | None
    disallowed_tools: list[str]
    effort: str | None
    max_turns: int | None
    isolation: str
    model: str
    hooks: dict[str, Any] | None
    mcp_servers: list[str] | dict[str, Any] | None
    mcp_inheritance: str | dict[str, list[str]]
    skills: list[str]


class ResolvedDefinition(DefinitionView):
    origin: str | None
    path: str | None


class AgentsResolveReply(EffectiveConfig):
    definition: ResolvedDefinition | None


class AgentEntryView(TypedDict):
    name: str
    description: str
    origin: str
    path: str


class TableEntryView(TypedDict):
    name: str
    description: str | None
    origin: str
    path: str | None


class ConfigProblemView(TypedDict):
    file: str
    field: str | None
    message: str


class AgentsListReply(TypedDict):
    agents: list[AgentEntryView]
    roles: list[TableEntryView]
    personas: list[TableEntryView]
    errors: list[ConfigProblemView]


# confluence.* (SPEC §10) ------------------------------------------------------------------


class ConfluenceCounts(TypedDict):
    workspaces: int
    new_sections: int
    batches: int
    candidates: int
    shared: int
    rejected: int
    duplicates: int
    model_calls: int
    errors: int


class ConfluenceRunReply(TypedDict):
    """``confluence.run`` (and the state's ``last_run``/``last_work``)."""

    outcome: str  # done | partial | failed | refused | skipped
    skipped: str | None  # no_new_material | disabled
    trigger: str
    started_at: str
    finished_at: str | None
    counts: ConfluenceCounts
    errors: list[dict[str, Any]]  # stage, message, where
    rejections: list[dict[str, Any]]  # title, reason, by
    accepted: list[dict[str, Any]]  # title, sources
    refused: dict[str, Any] | None  # path, reason, next_step, repository
    path: str
    message: NotRequired[str]


class ConfluenceSummary(TypedDict):
    """``daemon.status``'s ``confluence`` entry."""

    enabled: bool
    schedule: str
    running: bool
    next_run: str | None
    last_run: dict[str, Any] | None  # started_at, trigger, outcome, skipped, counts


class ConfluenceStatusReply(ConfluenceSummary):
    last_work: dict[str, Any] | None
    watermarks: dict[str, dict[str, int]]  # <dir>: {sections, distilled}
    experience_path: str
    state_path: str
