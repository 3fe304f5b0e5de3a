"""How the CLI shows the daemon's replies to people: the status table, lock and dream lines,
confluence runs, the progress bar. Pure functions of the reply (and ``now``), no I/O."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any


def _mb(value: Any) -> str:
    return f"{int(value) / 1e6:.1f} MB" if isinstance(value, int | float) else "-"


def _duration(secs: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs / size:.0f}{unit}"
    return f"{secs:.0f}s"


def render_status(status: dict[str, Any], now: float | None = None) -> str:
    """The readable status table (what ops look at); ``now`` is a Unix time (default: now).

    One row per workspace; a failing actor's last error and an index rebuilt at open are
    printed under its row.
    """
    now = time.time() if now is None else now
    provider = status.get("embedding") or status.get("embedding_provider") or "none (FTS only)"
    if status.get("embedding_error"):
        provider += f" — not ready: {status['embedding_error']}"
    lines = [
        f"memoryd {status['version']}  pid {status['pid']}  up {_duration(status['uptime_secs'])}"
        f"  rss {_mb(status.get('rss_bytes'))}  loop {status.get('loop', '?')}",
        f"embeddings: {provider}",
        f"chat model: {status.get('chat_model') or 'not configured (flush and dream are off)'}",
        f"socket {status['socket']}",
        f"memory {status['memory_root']}",
        "",
    ]
    if status.get("restart_pending"):
        lines.insert(
            -1,
            "restart needed: changed settings not applied yet: "
            + ", ".join(status["restart_pending"])
            + " (memoryd restart)",
        )
    if isinstance(status.get("confluence"), dict):
        lines.insert(-1, confluence_status_line(status["confluence"]))
    if isinstance(status.get("secrets"), dict):
        lines.insert(-1, secrets_status_line(status["secrets"]))
    actors: list[dict[str, Any]] = status.get("actors") or []
    if not actors:
        lines.append("no workspaces served yet (they start on first use)")
        return "\n".join(lines)
    header = (
        "WORKSPACE",
        "STATE",
        "WATCHER",
        "DIRTY",
        "FILES",
        "CHUNKS",
        "VEC PENDING",
        "LAST SEARCH",
    )
    rows: list[tuple[tuple[str, ...], list[str]]] = [(header, [])]
    rows.extend(_status_row(actor, now) for actor in actors)
    widths = [max(len(row[i]) for row, _ in rows) for i in range(len(header))]
    for row, notes in rows:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        lines.extend(f"  {note}" for note in notes)
    return "\n".join(lines)


def _status_row(actor: dict[str, Any], now: float) -> tuple[tuple[str, ...], list[str]]:
    """One workspace's cells and the notes printed under them."""
    index: dict[str, Any] = actor.get("index") or {}
    last = actor.get("last_search")
    last_text = f"{_ago(now, last['at'])}, {last['took_ms']:.1f} ms {last['mode']}" if last else "-"
    pending = index.get("vectors_pending") if index.get("embedding_model") else None
    cells = (
        f"{actor['workspace']} ({actor['memory_dir']})",
        str(actor.get("state", "?")),
        str(actor.get("watcher") or "-"),
        _cell(actor.get("dirty")),
        _cell(index.get("files")),
        _cell(index.get("chunks")),
        _cell(pending),
        last_text,
    )
    notes: list[str] = []
    scan = actor.get("scan") or {}
    if scan.get("total"):
        notes.append(f"scanning files {progress_bar(scan['done'], scan['total'])}")
    if actor.get("last_error"):
        failures = actor.get("failures") or 0
        notes.append(
            f"last error ({failures} failure(s), restarted with backoff): {actor['last_error']}"
        )
    if actor.get("watcher_error"):
        notes.append(f"watcher: {actor['watcher_error']}")
    if actor.get("read_only"):
        notes.append(f"read-only (search works, writes are refused): {actor['read_only']}")
    warned = index.get("file_warnings") or []
    notes.extend(f"{e['path']}: {'; '.join(e['warnings'])}" for e in warned[:5])
    more = int(index.get("file_warnings_total") or 0) - min(len(warned), 5)
    if more > 0:
        notes.append(f"… and {more} more file(s) with warnings (status --json lists them)")
    if index.get("rebuilt_reason"):
        when = index.get("rebuilt_at")
        ago = f" {_duration(max(0.0, now - when))} ago" if isinstance(when, int | float) else ""
        notes.append(f"index rebuilt from the markdown files{ago}: {index['rebuilt_reason']}")
    embedding = index.get("embedding")
    if isinstance(embedding, dict) and (embedding.get("pending") or embedding.get("last_error")):
        notes.append(_embedding_note(embedding))
    notes.extend(_session_note(session, now) for session in actor.get("sessions") or [])
    dream = actor.get("dream")
    if isinstance(dream, dict):
        notes.append(_dream_note(dream))
    return cells, notes


def render_sessions(sessions: list[dict[str, Any]], now: float) -> str:
    """``memoryd sessions list``: one line per open session."""
    if not sessions:
        return "no open sessions"
    lines = []
    for s in sessions:
        close_at = _epoch(s.get("idle_close_at"))
        closes = (
            "no idle close"
            if close_at is None
            else f"idle close in {_duration(max(0.0, close_at - now))}"
        )
        kind = " (sub-agent)" if s.get("subagent") else ""
        lines.append(
            f"{s['session_id']}{kind}  {s.get('memory_dir')}  {s.get('messages')} messages, "
            f"{s.get('unflushed')} unflushed, last seen {_ago(now, s.get('last_seen'))}, {closes}"
        )
    return "\n".join(lines)


def _ago(now: float, then: Any) -> str:
    when = _epoch(then)
    return "-" if when is None else f"{_duration(max(0.0, now - when))} ago"


def _epoch(value: Any) -> float | None:
    """A reply's time (RFC 3339, or Unix seconds) as Unix seconds; None if it is neither."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


def _embedding_note(e: dict[str, Any]) -> str:
    text = f"vectors: {e.get('done')}/{e.get('total')}"
    if e.get("rate_per_sec"):
        text += f" at {e['rate_per_sec']}/s"
    if e.get("eta_secs") is not None and e.get("pending"):
        text += f", ETA {_duration(float(e['eta_secs']))}"
    if e.get("last_error"):
        text += f"; last error: {e['last_error']}"
    return text


def _session_note(session: dict[str, Any], now: float) -> str:
    flush = session.get("last_flush") or {}
    idle = _epoch(session.get("next_idle_flush"))
    due = "off" if idle is None else f"in {_duration(max(0.0, idle - now))}"
    kind = " (sub-agent)" if session.get("subagent") else ""
    ingest = session.get("last_ingest")
    read = f", last ingest {_ago(now, ingest['at'])}" if isinstance(ingest, dict) else ""
    return (
        f"session {session['session_id']}{kind}: {session.get('messages', 0)} messages, "
        f"last activity {_ago(now, session.get('last_activity'))}{read}, idle flush {due}, "
        f"last flush {flush.get('outcome') or 'never'}"
    )


def _dream_note(dream: dict[str, Any]) -> str:
    if dream.get("error"):
        return f"dream: status unavailable ({dream['error']})"
    g = dream.get("gates") or {}
    hours = g.get("hours_since_last")
    parts = [
        f"gates {g.get('outcome', '?')}" + ("" if g.get("enabled", True) else " (disabled)"),
        f"hours {'never' if hours is None else hours}/{g.get('min_hours', '?')}",
        f"sessions {g.get('sessions_since_last', '?')}/{g.get('min_sessions', '?')}",
    ]
    parts.append(describe_lock(dream.get("lock") or {}))
    last = dream.get("last_run") or {}
    parts.append(f"last consolidation {dream.get('last_consolidation') or 'never'}")
    if last:
        parts.append(f"last run {last.get('outcome')}")
    parts.append(f"next check {dream.get('next_check') or 'off'}")
    return "dream: " + "; ".join(parts)


def lock_details(lock: dict[str, Any]) -> list[str]:
    """A held DreamLock's state in words: ``["dead", "10m old", "not stale"]``."""
    age = lock.get("age_secs")
    return [
        "alive" if lock.get("alive") else "dead",
        f"{_duration(float(age))} old" if isinstance(age, int | float) else "age unknown",
        "stale" if lock.get("stale") else "not stale",
    ]


def describe_lock(lock: dict[str, Any]) -> str:
    """``lock pid 123 (dead, 10m old)`` / ``(alive, 2h old, stale)``, or ``lock free``."""
    pid = lock.get("holder_pid")
    if not pid:
        return "lock free"
    details = [d for d in lock_details(lock) if d != "not stale"]
    return f"lock pid {pid} ({', '.join(details)})"


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


FAILED = ("failed", "partial", "refused")


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


def secrets_status_line(info: dict[str, Any]) -> str:
    """The ``secrets:`` line of ``memoryd status`` and ``doctor`` from the scrubber's entry."""
    rules = f"{info.get('rule_set')} rules ({info.get('rules')})"
    user = f"{info.get('extra_patterns', 0)} extra / {info.get('allow_patterns', 0)} allow patterns"
    line = f"secrets: {rules}, {user}; {info.get('redactions', 0)} redacted since start"
    by_kind = info.get("by_kind") or {}
    if by_kind:
        top = list(by_kind.items())[:5]
        more = len(by_kind) - len(top)
        line += " (" + ", ".join(f"{kind} {n}" for kind, n in top)
        line += f", {more} more kinds)" if more else ")"
    return line


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


def render_dream_status(status: dict[str, Any]) -> str:
    """``dream.status`` for people: each gate's value against its threshold, the lock, the
    last consolidation and run, the next periodic check."""
    gates = status.get("gates") or {}
    hours = gates.get("hours_since_last")
    lines = [
        f"dream {'enabled' if status.get('enabled') else 'disabled'}; "
        f"gates: {gates.get('outcome', '?')}",
        f"  gate hours since last consolidation: {'never' if hours is None else hours} "
        f"(min {gates.get('min_hours', '?')})",
        f"  gate sessions since last consolidation: {gates.get('sessions_since_last', '?')} "
        f"(min {gates.get('min_sessions', '?')})",
    ]
    lock = status.get("lock") or {}
    if lock.get("holder_pid"):
        lines.append(f"  lock: pid {lock['holder_pid']}, {', '.join(lock_details(lock))}")
    else:
        lines.append("  lock: free")
    lines.append(f"  last consolidation: {status.get('last_consolidation') or 'never'}")
    if status.get("memory_too_large"):
        lines.append(
            f"  MEMORY.md too large: {status.get('memory_chars')} characters leave no room "
            f"for a session log within dream.max_input_chars = {status.get('max_input_chars')}"
            "; dreams stop until it is shorter or the limit is raised"
        )
    last = status.get("last_run") or {}
    if last:
        reason = f" ({last['reason']})" if last.get("reason") else ""
        lines.append(f"  last run: {last.get('time')} {last.get('outcome')}{reason}")
    lines.append(f"  next periodic check: {status.get('next_check') or 'off'}")
    return "\n".join(lines)


def progress_bar(done: int, total: int, width: int = 30) -> str:
    frac = 1.0 if total <= 0 else min(1.0, done / total)
    filled = round(frac * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} ({frac:.0%})"
