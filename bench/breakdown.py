"""Where the time goes: memoryd's own search and indexing steps timed one by one, in-process.

The socket figures say *how much* slower than raw memoryd is; these rows say *where*. They
call memoryd's own functions (``Index.fts``, ``Index.knn``, ``Index.load``, ``rank``, the
response encoding; ``chunk_markdown``, ``fts_text``, ``chunk_ids``) on the very index the
daemon built, with no socket and no threads, and put each next to the raw step that does
the same job. The difference between the sum of the steps and the socket figure is the
runtime's share (thread hops, event loop, socket, JSON decode in the client).

:func:`py_spy_profile` adds a sampled profile of the daemon itself when ``py-spy`` is on
the PATH (optional).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from bench.corpus import DAEMON_CHUNKS
from bench.raw import TOP_K, RawFts, RawVectors, numpy_available
from bench.report import Row, median
from memoryd.core.chunking import chunk_ids, chunk_markdown
from memoryd.core.keywords import build_match_query, fts_text
from memoryd.core.protocol import encode_result
from memoryd.core.ranking import Ranked, RankParams, rank
from memoryd.runtime.workspace.search import SearchHit, SearchResponse
from memoryd.store.index import CURATED, Index

MS = 1000.0
US = 1_000_000.0


T = TypeVar("T")


def _timed(fn: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def _clock(bucket: list[float], fn: Callable[..., T], *args: Any) -> T:
    """Call ``fn(*args)``, append the seconds it took to ``bucket``, return its result."""
    started = time.perf_counter()
    out = fn(*args)
    bucket.append(time.perf_counter() - started)
    return out


def _encode(items: Sequence[Ranked]) -> bytes:
    """What the daemon does with ranked results: hits, the response dict, the JSON line."""
    hits = [SearchHit.from_ranked(item) for item in items]
    return encode_result(1, SearchResponse(hits, "hybrid", 0, 0, 0.0).to_dict())


def search_steps(
    db: Path,
    root: Path,
    workspace_dir: Path,
    queries: Sequence[str],
    raw: RawFts,
    vectors: RawVectors | None,
    query_vectors: dict[str, list[float]] | None,
    label: str,
) -> list[Row]:
    """Median time of each step of one memoryd search, next to its raw counterpart."""
    index = Index(
        db,
        root=root,
        workspace_dir=workspace_dir,
        settings=DAEMON_CHUNKS,
        vectors_in_memory=numpy_available(),
    )
    index.open()
    scan = Index(db, root=root, workspace_dir=workspace_dir, settings=DAEMON_CHUNKS)  # no copy
    scan.open()
    steps: defaultdict[str, list[float]] = defaultdict(list)
    raw_steps: defaultdict[str, list[float]] = defaultdict(list)
    matches: list[int] = []
    try:
        for query in queries:
            match = build_match_query(query)
            if match is None:
                continue
            hits: dict[int, tuple[float | None, float | None]] = {}
            for seq, r in _clock(steps["fts"], index.fts, match, TOP_K, None):
                hits[seq] = (r, None)
            for seq, r in _clock(steps["fts_curated"], index.fts, match, TOP_K, list(CURATED)):
                hits.setdefault(seq, (r, None))
            _clock(raw_steps["fts"], raw.top_k, match)
            count = raw.conn.execute("SELECT count(*) FROM t WHERE t MATCH ?", (match,))
            matches.append(int(count.fetchone()[0]))
            if query_vectors is not None and index.vec_dims is not None:
                qv = query_vectors[query]
                if index.mirror is not None and not index.mirror.loaded:
                    index.knn(qv, TOP_K)  # the first scan reads the vectors into memory
                for seq, d in _clock(steps["knn"], index.knn, qv, TOP_K):
                    hits[seq] = (hits.get(seq, (None, None))[0], d)
                _clock(steps["knn_vec0"], scan.knn, qv, TOP_K)
                if vectors is not None:
                    _clock(raw_steps["knn"], vectors.top_k, qv)
            cands = _clock(steps["load"], index.load, hits)
            ranked = _clock(steps["rank"], rank, cands, RankParams(), time.time())
            _clock(steps["encode"], _encode, ranked)
    finally:
        index.close()
        scan.close()
    knn_title = (
        "KNN, in-memory vector copy (Index.knn)"
        if index.mirror is not None
        else "KNN, sqlite-vec vec0 scan (Index.knn)"
    )
    names = {
        "fts": ("FTS pass, all sources (Index.fts)", "raw FTS5 top-k"),
        "fts_curated": ("FTS pass, curated sources only (Index.fts)", ""),
        "knn": (knn_title, "numpy exact top-k"),
        "knn_vec0": ("KNN, sqlite-vec vec0 scan (vectors_in_memory = off)", "numpy exact top-k"),
        "load": ("load candidate rows (Index.load)", ""),
        "rank": ("merge + rank (core.ranking.rank)", ""),
        "encode": ("hits + JSON encoding of the reply", ""),
    }
    rows: list[Row] = []
    for key, (title, raw_title) in names.items():
        if key not in steps:
            continue
        raw_key = "knn" if key == "knn_vec0" else key
        raw_value = median(raw_steps[raw_key]) * MS if raw_key in raw_steps else None
        rows.append(
            Row(
                f"  step {label}: {title}",
                "ms",
                median(steps[key]) * MS,
                raw_value,
                raw_label="",
                note=f"raw = {raw_title}" if raw_title else "",
            )
        )
    rows.append(
        Row(
            f"  step {label}: FTS matches per query (p50)",
            "rows",
            median([float(m) for m in matches]),
            note=f"steps timed in-process on memoryd's index over the first {len(matches)} "
            "queries (a subset of the socket run's queries)",
        )
    )
    return rows


def indexing_steps(
    memory_dir: Path, raw_per_chunk_secs: float, label: str, files: int
) -> list[Row]:
    """Per-chunk cost of memoryd's pure indexing steps on a sample of the corpus files."""
    paths = sorted((memory_dir / "sessions").glob("*.md"))[:files]
    texts = [p.read_text(encoding="utf-8") for p in paths]
    chunks, t_chunk = _timed(lambda: [chunk_markdown(t) for t in texts])
    flat = [c for group in chunks for c in group]
    t_ids = _timed(lambda: [chunk_ids(p.name, c) for p, c in zip(paths, chunks, strict=True)])[1]
    t_fts = _timed(lambda: [fts_text(c.text) for c in flat])[1]
    n = max(1, len(flat))
    per = {"chunk": t_chunk / n, "ids": t_ids / n, "fts_text": t_fts / n}
    note = f"sample of {len(paths)} files, {n} chunks"
    return [
        Row(f"  step {label}: chunk_markdown per chunk", "µs", per["chunk"] * US, note=note),
        Row(f"  step {label}: chunk_ids per chunk", "µs", per["ids"] * US),
        Row(
            f"  step {label}: fts_text (CJK bigrams) per chunk",
            "µs",
            per["fts_text"] * US,
            raw_per_chunk_secs * US,
            note="raw = one row of the raw bulk FTS5 insert",
        ),
    ]


def py_spy_path() -> str | None:
    """``$BENCH_PY_SPY`` or ``py-spy`` on the PATH (``pip install py-spy``; optional)."""
    return os.environ.get("BENCH_PY_SPY") or shutil.which("py-spy")


def py_spy_profile(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes] | None:
    """Start ``py-spy record`` (raw collapsed stacks, all threads) on the daemon."""
    exe = py_spy_path()
    if exe is None:
        return None
    return subprocess.Popen(
        [
            exe,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(int(seconds)),
            "--rate",
            "200",
            "--format",
            "raw",
            "--threads",
            "--nonblocking",
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


FOCUS = (
    ("SQLite FTS query (Index.fts)", ".fts (memoryd/store/index/reader.py"),
    ("sqlite-vec KNN scan (*.knn in memoryd/store)", ".knn (memoryd/store/"),
    ("load candidate rows (Index.load)", ".load (memoryd/store/index/reader.py"),
    ("bump access count (Index.bump_access)", ".bump_access (memoryd/store/index/reader.py"),
    ("sync dirty files (Index.sync_paths)", ".sync_paths (memoryd/store/index/writer.py"),
    ("embed loop DB phases (pending_vectors)", ".pending_vectors (memoryd/store/index/vectors.py"),
    ("merge + rank (core.ranking.rank)", "rank (memoryd/core/ranking.py"),
    ("query keywords (build_match_query)", "build_match_query (memoryd/core/keywords.py"),
    ("query embedding (provider)", "embed (memoryd/providers/embeddings.py"),
    ("JSON encode reply (encode_result)", "encode_result (memoryd/core/protocol.py"),
    ("JSON decode request (decode_line)", "decode_line (memoryd/core/protocol.py"),
    ("structlog events", "structlog/"),
    ("socket send/receive", "UNIXSocketStream."),
    ("thread hand-off (anyio to_thread)", "run_sync_in_worker_thread"),
)
# Leaf frames where a thread waits rather than works (py-spy reports them as samples too).
IDLE_LEAVES = (
    "Condition.wait (threading",
    "Runner.run (asyncio/runners",
    "WorkerThread.run (anyio",
    "select (",
    "sleep (",
)


def summarize_profile(path: Path, rate: int = 200) -> dict[str, Any]:
    """From py-spy raw stacks: busy share per thread and per function of interest.

    ``percent_of_busy`` counts a function's samples (inclusive: it or anything it calls) in
    every thread, over all busy samples; a sample whose leaf frame is a wait is idle.
    """
    busy = 0
    threads: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        if any(frames[-1].startswith(leaf) for leaf in IDLE_LEAVES):
            continue
        busy += count
        head = frames[0].split(":", 1)
        threads[head[1].strip() if len(head) > 1 else head[0]] += count
        for title, needle in FOCUS:
            if needle in stack:
                counts[title] += count
    return {
        "busy_samples": busy,
        "rate_hz": rate,
        "busy_thread_seconds": {name: round(n / rate, 1) for name, n in threads.most_common()},
        "percent_of_busy": {
            title: round(100.0 * counts[title] / busy, 1) if busy else 0.0 for title, _ in FOCUS
        },
    }


def profile_rows(summary: dict[str, Any], label: str, seconds: float) -> list[Row]:
    """Table rows from :func:`summarize_profile`: where the daemon's busy time went."""
    threads = ", ".join(f"{k} {v} s" for k, v in summary["busy_thread_seconds"].items())
    rows = [
        Row(
            f"  profile {label}: daemon busy thread-time",
            "s",
            summary["busy_samples"] / summary["rate_hz"],
            note=f"py-spy, {seconds:.0f} s of back-to-back searches: {threads}",
        )
    ]
    for title, share in summary["percent_of_busy"].items():
        if share >= 0.5:
            rows.append(Row(f"  profile {label}: {title}", "% busy", share))
    return rows
