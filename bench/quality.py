"""``python -m bench.quality [--json] [--speed] [--openai] [--misses]``: retrieval quality.

Runs every set of :mod:`bench.quality_sets` (``orchard``, ``dated``, ``chat``) through
:class:`~memoryd.runtime.workspace.memory.WorkspaceMemory` with ``embedding.provider = "none"``
(FTS-only) and with the offline ``local`` model (hybrid); ``--openai`` adds the ``openai``
provider against a loopback ``/v1/embeddings`` server that serves the local model, as an
unknown endpoint is used: uncalibrated (``openai``), and with the scale ``memoryd calibrate``
measures on the set's own notes (``openai-cal``). Each query is searched at the default settings, at
``min_score = 0`` (the ranking alone) and with decay off (``half_life_days = 0``).

Reported per set and query kind: recall@10 (the answer is among the first 10 results),
nDCG@10 (one relevant answer: ``1/log2(1 + rank)``) and the empty-answer rate (the share of
queries answered with no result at all; for the ``nothing`` queries that is the goal).

``--speed`` also measures the local model on this machine: load time, resident memory, chunks
embedded per second (batches of 64 English and Chinese chunks of ~210–230 model tokens, i.e.
~1000 and ~300 characters) and single-query latency.
Exits 1 when hybrid recall is below FTS-only on a set, 2 when the ``local`` extra is missing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from bench.quality_set import NOTES, QUERIES
from bench.quality_sets import QualitySet, SetQuery, all_sets
from memoryd.core.config import Config
from memoryd.core.ranking import SimilarityScale
from memoryd.providers.embeddings import EmbeddingProvider
from memoryd.providers.local import LocalProvider, local_available
from memoryd.providers.openai import OpenAIEmbeddings
from memoryd.runtime.adapters.logging import configure_logging
from memoryd.runtime.workspace.calibrate import calibrate
from memoryd.runtime.workspace.memory import WorkspaceMemory
from memoryd.store.layout import ensure_workspace_dirs, resolve_workspace

K = 10
NOW = datetime(2026, 6, 1, tzinfo=UTC).timestamp()  # fixed: session decay is reproducible
VARIANTS = ("default", "min0", "nodecay")
ENDPOINT_TIMEOUT = 300.0  # a numpy MiniLM on a shared machine takes its time


@dataclass(frozen=True, slots=True)
class Outcome:
    set_name: str
    query: SetQuery
    ranks: dict[str, int | None]
    """Per variant: 1-based rank of the answer in the first K results, None if absent."""
    counts: dict[str, int]
    """Per variant: how many results came back."""
    mode: str


def _variant(config: Config, name: str) -> Config:
    if name == "min0":
        return dataclasses.replace(config, search=dataclasses.replace(config.search, min_score=0.0))
    if name == "nodecay":
        search = dataclasses.replace(config.search, half_life_days=0.0)
        return dataclasses.replace(config, search=search)
    return config


async def run_set(
    qset: QualitySet,
    provider: EmbeddingProvider | None,
    workdir: Path,
    config: Config,
    *,
    calibrated: bool = False,
) -> list[Outcome]:
    """Index ``qset`` into a fresh workspace under ``workdir`` and run every query."""
    root = workdir / "memory"
    project = workdir / "project"
    project.mkdir(parents=True)
    ws = resolve_workspace(project, root)
    ensure_workspace_dirs(ws)
    for rel, text in qset.files.items():
        path = ws.dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    prefix = ws.dir.relative_to(root).as_posix() + "/"
    answers = {key: qset.fact_line(key) for key in {q.answer for q in qset.queries if q.answer}}
    memory = WorkspaceMemory(ws, root, config, provider, clock=lambda: NOW)
    await memory.open()
    try:
        await memory.sync()
        await memory.embed_all()
        if calibrated:  # what `memoryd calibrate` measures, set as the config keys would
            assert isinstance(provider, OpenAIEmbeddings)
            measured = await calibrate(memory)
            if measured["unrelated"] is not None and measured["strong"] is not None:
                if measured["problem"] is None:
                    scale = SimilarityScale(measured["unrelated"], measured["strong"])
                    memory.provider = OpenAIEmbeddings(
                        base_url=provider.base_url,
                        model=provider.model,
                        similarity=scale,
                        timeout_secs=provider.timeout_secs,
                    )
                    await memory.provider.probe()
        outcomes = []
        for query in qset.queries:
            ranks: dict[str, int | None] = {}
            counts: dict[str, int] = {}
            mode = ""
            for name in VARIANTS:
                memory.config = _variant(config, name)
                response = await memory.search(query.text, max_results=K, count_access=False)
                mode = mode or response.mode
                counts[name] = len(response.results)
                ranks[name] = None
                if query.answer is not None:
                    path, line = answers[query.answer]
                    for i, hit in enumerate(response.results, 1):
                        if hit.path == prefix + path and hit.start_line <= line <= hit.end_line:
                            ranks[name] = i
                            break
            memory.config = config
            outcomes.append(Outcome(qset.name, query, ranks, counts, mode))
        return outcomes
    finally:
        await memory.close()


def summarise(outcomes: Sequence[Outcome]) -> dict[str, dict[str, float | int]]:
    """Per group (``set/kind``, ``set/all`` and ``all/…``): recall@K, nDCG@K, empty rate."""
    groups: dict[str, list[Outcome]] = {}
    for o in outcomes:
        answerable = o.query.kind != "nothing"
        for name in (
            f"{o.set_name}/{o.query.kind}",
            f"{o.set_name}/answerable" if answerable else "",
            "all/answerable" if answerable else "all/nothing",
        ):
            if name:
                groups.setdefault(name, []).append(o)
    out: dict[str, dict[str, float | int]] = {}
    for name in sorted(groups):
        chosen = groups[name]
        n = len(chosen)
        row: dict[str, float | int] = {"queries": n}
        for variant in VARIANTS:
            row[f"empty_{variant}"] = round(sum(o.counts[variant] == 0 for o in chosen) / n, 3)
            if not name.endswith("nothing"):
                ranks = [o.ranks[variant] for o in chosen]
                row[f"recall_{variant}"] = round(sum(r is not None for r in ranks) / n, 3)
                ndcg = sum(1 / math.log2(1 + r) for r in ranks if r is not None) / n
                row[f"ndcg_{variant}"] = round(ndcg, 3)
        out[name] = row
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


def format_table(by_mode: dict[str, dict[str, dict[str, Any]]]) -> str:
    """One line per group and mode: recall@K / nDCG@K / empty rate for each variant."""
    lines = [
        f"recall@{K} / nDCG@{K} / empty-answer rate; variants: default settings, min_score 0, "
        "decay off",
        "",
        f"{'group':<22}{'n':>4}  {'mode':<8}" + "".join(f"{v:>22}" for v in VARIANTS),
    ]
    first = next(iter(by_mode.values()))
    for group in first:
        for mode, summary in by_mode.items():
            row = summary[group]
            cells = []
            for v in VARIANTS:
                if f"recall_{v}" in row:
                    cells.append(
                        f"{row[f'recall_{v}']:.3f} {row[f'ndcg_{v}']:.3f} {row[f'empty_{v}']:.2f}"
                    )
                else:
                    cells.append(f"empty {row[f'empty_{v}']:.2f}")
            lines.append(
                f"{group:<22}{row['queries']:>4}  {mode:<8}" + "".join(f"{c:>22}" for c in cells)
            )
    return "\n".join(lines)


@contextmanager
def _workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="memoryd-quality-") as tmp:
        yield Path(tmp)


async def evaluate(
    modes: Sequence[str], config: Config, endpoint: tuple[str, str] | None = None
) -> dict[str, list[Outcome]]:
    from bench.embed_server import local_embedding_server

    out: dict[str, list[Outcome]] = {}
    sets = all_sets()
    with _workdir() as tmp:
        for mode in modes:
            outcomes: list[Outcome] = []
            for qset in sets:
                work = tmp / mode / qset.name
                if mode == "fts":
                    outcomes += await run_set(qset, None, work, config)
                elif mode == "local":
                    outcomes += await run_set(qset, LocalProvider(threads=1), work, config)
                elif mode.startswith("endpoint"):
                    assert endpoint is not None
                    provider = OpenAIEmbeddings(
                        base_url=endpoint[0],
                        model=endpoint[1],
                        api_key_env="",
                        timeout_secs=ENDPOINT_TIMEOUT,
                    )
                    await provider.probe()
                    slow = dataclasses.replace(
                        config,
                        embedding=dataclasses.replace(
                            config.embedding, timeout_secs=ENDPOINT_TIMEOUT
                        ),
                    )
                    try:
                        outcomes += await run_set(
                            qset, provider, work, slow, calibrated=mode == "endpoint-cal"
                        )
                    finally:
                        await provider.aclose()
                else:
                    async with local_embedding_server(config) as provider:
                        outcomes += await run_set(
                            qset, provider, work, config, calibrated=mode == "openai-cal"
                        )
            out[mode] = outcomes
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--speed", action="store_true", help="also measure the local model")
    parser.add_argument(
        "--openai", action="store_true", help="also run the openai provider (local model served)"
    )
    parser.add_argument("--misses", action="store_true", help="list the queries each mode missed")
    parser.add_argument("--min-score", type=float, help="search.min_score (default: the default)")
    parser.add_argument(
        "--openai-url", help="also run an OpenAI-compatible endpoint (e.g. bench/minilm_server.py)"
    )
    parser.add_argument("--openai-model", default="minilm", help="its model name")
    args = parser.parse_args(argv)
    configure_logging("warning", "console")  # one search event per query would drown the table
    if not local_available():
        print("the 'local' extra is not installed: pip install 'memoryd[local]'", file=sys.stderr)
        return 2
    speed = measure_speed(LocalProvider(threads=1)) if args.speed else None
    modes = ["fts", "local"] + (["openai", "openai-cal"] if args.openai else [])
    if args.openai_url:
        modes += ["endpoint", "endpoint-cal"]
    config = Config()
    if args.min_score is not None:
        search = dataclasses.replace(config.search, min_score=args.min_score)
        config = dataclasses.replace(config, search=search)
    endpoint = (args.openai_url, args.openai_model) if args.openai_url else None
    outcomes = anyio.run(evaluate, modes, config, endpoint)
    by_mode = {mode: summarise(found) for mode, found in outcomes.items()}
    if args.json:
        print(json.dumps({"modes": by_mode, "speed": speed}, indent=2))
    else:
        print(format_table(by_mode))
        if speed:
            print(
                "\nlocal model on this machine: " + ", ".join(f"{k} {v}" for k, v in speed.items())
            )
    if args.misses:
        for mode, found in outcomes.items():
            for o in found:
                got = o.ranks["default"] if o.query.answer else None
                if (o.query.answer is not None and got is None) or (
                    o.query.answer is None and o.counts["default"]
                ):
                    print(f"{mode} missed ({o.set_name}/{o.query.kind}): {o.query.text}")
    ok = all(
        by_mode["local"][f"{name}/answerable"]["recall_default"]
        >= by_mode["fts"][f"{name}/answerable"]["recall_default"]
        for name in ("orchard", "dated", "chat")
    ) and {o.mode for o in outcomes["local"]} == {"hybrid"}
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
