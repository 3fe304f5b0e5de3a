"""Hybrid search through WorkspaceMemory on a real index (SPEC §4, §5)."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import anyio
import pytest
from structlog.testing import capture_logs

from memoryd.core.config import Config
from memoryd.core.dreaming import with_footer
from memoryd.providers.embeddings import HashProvider
from memoryd.store.connection import connect
from tests.runtime.conftest import Env, MemoryFactory, TableProvider, with_index, with_search

pytestmark = pytest.mark.anyio


def today(delta_days: int = 0) -> str:
    return (datetime.now(UTC) - timedelta(days=delta_days)).strftime("%Y-%m-%d")


async def test_fts_only_without_provider_finds_a_remembered_note(
    env: Env, open_memory: MemoryFactory
) -> None:
    mem = await open_memory()
    await mem.remember("Use pnpm, never npm, in this repository")
    res = await mem.search("pnpm")
    assert res.mode == "fts_only"
    assert [h.source for h in res.results] == ["workspace"]
    assert res.results[0].heading.endswith("Use pnpm, never npm, in this repository")
    assert res.results[0].path == f"{env.workspace.key.dirname}/MEMORY.md"


async def test_candidate_limit_is_three_times_max_results(
    env: Env, open_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem = await open_memory()
    env.workspace.memory_file.write_text("# M\n\n## Deploy\n\ndeploy with fly\n")
    mem.mark_dirty([env.workspace.memory_file])
    limits: list[int] = []
    real_fts = mem.index.fts

    def spy(match: str, limit: int, sources: Sequence[str] | None) -> list[tuple[int, float]]:
        limits.append(limit)
        return real_fts(match, limit, sources)

    monkeypatch.setattr(mem.index, "fts", spy)
    await mem.search("deploy", max_results=4)
    assert limits and set(limits) == {12}


async def test_curated_chunk_survives_thirty_matching_session_chunks(
    env: Env, open_memory: MemoryFactory
) -> None:
    # Thirty older session logs match a little more strongly by BM25 (shorter text); the
    # workspace MEMORY.md is as relevant and evergreen, so it comes first — if the curated
    # pass brought it in. (A hundred unrelated logs keep "postgres" from being a term of
    # most chunks, which would make it carry no information.)
    for i in range(30):
        env.session(
            f"{today(45)}-s{i}-abcdef{i:02d}.md",
            f"## Note {i}\n\npostgres postgres postgres connection pool tuning {i}\n",
        )
    for i in range(100):
        env.session(f"{today(45)}-u{i}-fedcba{i:02d}.md", f"## Other {i}\n\nfrontend work {i}\n")
    env.workspace.memory_file.write_text(
        "# Memory\n\n## Database\n\npostgres postgres postgres connection pool tuning, "
        "for every environment\n"
    )
    mem = await open_memory()
    res = await mem.search("postgres", max_results=6)
    assert len(res.results) == 6
    assert res.results[0].source == "workspace"
    # Without the curated-only pass, plain FTS with candidate_limit would have cut it.
    plain = {seq for seq, _ in mem.index.fts('"postgres"', 18, None)}
    curated = mem.index.fts('"postgres"', 18, ["workspace"])
    assert curated and curated[0][0] not in plain


async def test_vector_only_strong_match_passes_default_min_score(
    env: Env, open_memory: MemoryFactory
) -> None:
    # The note shares no keyword with the query; only the vectors connect them.
    provider = TableProvider(
        {
            "ferrets": [1.0, 0.0, 0.0, 0.0],
            "small mammals": [0.8, 0.6, 0.0, 0.0],  # cosine 0.8 with the note
        }
    )
    env.workspace.memory_file.write_text("# M\n\n## Pets\n\nThe office keeps two ferrets.\n")
    mem = await open_memory(provider)
    await mem.sync()
    await mem.embed_all()
    res = await mem.search("small mammals")
    assert res.mode == "hybrid"
    assert [h.heading for h in res.results] == ["M > Pets"]
    weak = TableProvider({"ferrets": [1.0, 0.0, 0.0, 0.0], "small mammals": [0.52, 0.854, 0, 0]})
    mem.provider = weak
    assert (await mem.search("small mammals")).results == []


class FailingProvider(HashProvider):
    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise ConnectionError("embedding endpoint down")


async def test_failing_provider_falls_back_to_fts_with_one_warning(
    env: Env, open_memory: MemoryFactory
) -> None:
    mem = await open_memory(HashProvider(64))
    await mem.remember("The staging database lives on port 5433")
    await mem.embed_all()
    mem.provider = FailingProvider(64)
    with capture_logs() as logs:
        res = await mem.search("staging database")
    assert res.mode == "fts_fallback"
    assert res.results and "5433" in res.results[0].snippet
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert len(warnings) == 1 and "embedding endpoint down" in warnings[0]["error"]


async def test_hybrid_mode_with_hash_provider(env: Env, open_memory: MemoryFactory) -> None:
    mem = await open_memory(HashProvider(128))
    await mem.remember("Release checklist: bump version, tag, push the tag")
    assert await mem.embed_all() >= 1
    res = await mem.search("release checklist")
    assert res.mode == "hybrid"
    assert res.results[0].score >= 0.35


async def test_mmr_is_off_by_default_and_lambda_does_nothing_while_off(
    env: Env, open_memory: MemoryFactory
) -> None:
    assert Config().search.mmr.enabled is False
    body = "".join(f"## Cache {i}\n\nredis cache eviction policy lru {i}\n\n" for i in range(8))
    env.workspace.memory_file.write_text("# M\n\n" + body)
    mem = await open_memory()
    base = [h.chunk_id for h in (await mem.search("redis cache", min_score=0)).results]
    mmr = dataclass_replace_mmr(mem.config, lambda_=0.1)
    mem.set_config(mmr)
    again = [h.chunk_id for h in (await mem.search("redis cache", min_score=0)).results]
    assert base == again


def dataclass_replace_mmr(config: Config, **changes: object) -> Config:
    import dataclasses

    mmr = dataclasses.replace(config.search.mmr, **changes)
    return with_search(config, mmr=mmr)


async def test_sessions_decay_but_curated_memory_does_not(
    env: Env, open_memory: MemoryFactory
) -> None:
    env.session(f"{today(0)}-new-aaaaaaaa.md", "## Fix\n\nkafka consumer lag fix\n")
    env.session(f"{today(60)}-old-bbbbbbbb.md", "## Fix\n\nkafka consumer lag fix\n")
    env.workspace.memory_file.write_text("# M\n\n## Kafka\n\nkafka consumer lag fix\n")
    mem = await open_memory()
    res = await mem.search("kafka consumer lag", min_score=0)
    by_path = {h.path.rsplit("/", 1)[-1]: h.score for h in res.results}
    new = by_path[f"{today(0)}-new-aaaaaaaa.md"]
    old = by_path[f"{today(60)}-old-bbbbbbbb.md"]
    curated = by_path["MEMORY.md"]
    # Two half-lives of 30 days: decay 0.25, of which recency takes its 10 % share.
    assert old == pytest.approx(new * (1 - 0.1 * 0.75), rel=0.01)
    assert curated >= new


async def test_old_session_that_is_the_only_relevant_hit_is_returned(
    env: Env, open_memory: MemoryFactory
) -> None:
    env.session(f"{today(400)}-old-cccccccc.md", "## Quirk\n\nthe flaky zookeeper test\n")
    mem = await open_memory()
    res = await mem.search("zookeeper", count_access=False)
    assert len(res.results) == 1
    mem.set_config(with_search(mem.config, half_life_days=0.0))
    undecayed = (await mem.search("zookeeper", count_access=False)).results[0].score
    assert res.results[0].score >= 0.9 * undecayed  # recency takes at most 10 %


async def test_comment_only_and_scaffold_chunks_are_never_returned(
    env: Env, open_memory: MemoryFactory
) -> None:
    mem = await open_memory()
    await mem.remember("Prefer tabs")  # creates MEMORY.md from the scaffold template
    env.session(f"{today()}-x-dddddddd.md", "<!-- flush 2026-01-01T00:00:00Z trigger=manual -->\n")
    mem.mark_dirty([env.workspace.sessions_dir / f"{today()}-x-dddddddd.md"])
    for query in ("memory curated workspace", "flush trigger manual"):
        res = await mem.search(query, min_score=0)
        assert all("Prefer tabs" in h.heading for h in res.results), res.results
    found = await mem.search("prefer tabs")
    assert [h.snippet for h in found.results] == ["## Prefer tabs"]


async def test_only_returned_results_bump_access_count(
    env: Env, open_memory: MemoryFactory
) -> None:
    env.workspace.memory_file.write_text("# M\n\n## Alpha\n\nalpha note\n\n## Beta\n\nbeta note\n")
    mem = await open_memory(config=with_index(Config(), min_chunk_chars=0))  # a chunk a section
    await mem.search("alpha")
    await mem.search("alpha", count_access=False)
    await mem.stats()  # any later phase records the accesses of earlier searches
    counts = dict(mem.index.conn.execute("SELECT heading, access_count FROM chunks"))
    assert counts["M > Alpha"] == 1
    assert counts["M > Beta"] == 0


async def test_edit_marked_dirty_is_seen_by_next_search(
    env: Env, open_memory: MemoryFactory
) -> None:
    mem = await open_memory()
    path = env.workspace.memory_file
    path.write_text("# M\n\n## Tooling\n\nwe lint with flake8\n")
    mem.mark_dirty([path])
    assert (await mem.search("flake8")).synced_paths == 1
    path.write_text("# M\n\n## Tooling\n\nwe lint with ruff\n")
    mem.mark_dirty([path])
    res = await mem.search("ruff")
    assert res.synced_paths == 1 and len(res.results) == 1
    assert (await mem.search("flake8")).results == []


async def test_deleted_file_is_never_returned(env: Env, open_memory: MemoryFactory) -> None:
    log = env.session(f"{today()}-gone-eeeeeeee.md", "## Temp\n\nephemeral gizmo\n")
    mem = await open_memory()
    assert (await mem.search("gizmo")).results
    log.unlink()
    mem.mark_dirty([log])
    assert (await mem.search("gizmo")).results == []


async def test_reconcile_finds_edits_made_while_nothing_watched(
    env: Env, open_memory: MemoryFactory
) -> None:
    mem = await open_memory()
    await mem.remember("first fact about widgets")
    await mem.close()
    # Edited while no one watched, and no one marks it dirty.
    env.workspace.memory_file.write_text("# M\n\n## Widgets\n\nsecond fact about gadgets\n")
    mem2 = await open_memory()  # open() runs the reconcile scan
    assert (await mem2.search("gadgets")).results
    env.session(f"{today()}-later-ffffffff.md", "## Later\n\nsprockets appear\n")
    assert await mem2.reconcile() == 1
    assert (await mem2.search("sprockets")).results


async def test_chinese_japanese_korean_and_stemming(env: Env, open_memory: MemoryFactory) -> None:
    env.workspace.memory_file.write_text(
        "# M\n\n## 数据库\n\n我们把数据库连接池的大小设为二十。\n\n"
        "## 日本語\n\n東京の開発チームはテストを毎朝実行します。\n\n"
        "## 한국어\n\n서울 팀은 배포를 금요일에 하지 않습니다.\n\n"
        "## Runner\n\nThe CI runs nightly.\n"
    )
    mem = await open_memory(config=with_index(Config(), min_chunk_chars=0))  # a chunk a section
    cases = {
        "连接": "M > 数据库",
        "開発": "M > 日本語",
        "배포": "M > 한국어",
        "running": "M > Runner",
    }
    for query, heading in cases.items():
        res = await mem.search(query, min_score=0)
        assert [h.heading for h in res.results] == [heading], query
    assert (await mem.search("the of and ???")).results == []


class GatedProvider(HashProvider):
    """Blocks inside embed() until released, so the test can act during the await."""

    def __init__(self) -> None:
        super().__init__(32)
        self.entered = anyio.Event()
        self.release = anyio.Event()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.entered.set()
        await self.release.wait()
        return await super().embed(texts)


def write_with_no_wait(env: Env) -> None:
    conn, _ = connect(env.workspace.index_path, busy_timeout_ms=0)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('probe', 'x') "
            "ON CONFLICT(key) DO UPDATE SET value = 'y'"
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


@pytest.mark.parametrize("during", ["search", "indexing"])
async def test_no_transaction_is_held_while_an_embedding_is_awaited(
    env: Env, open_memory: MemoryFactory, during: str
) -> None:
    provider = GatedProvider()
    mem = await open_memory(provider)
    await mem.remember("phase rule note")
    results: list[object] = []

    async def run() -> None:
        if during == "search":
            results.append(await mem.search("phase rule"))
        else:
            results.append(await mem.embed_pending())

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            await provider.entered.wait()
            # Another connection writes with busy_timeout = 0 while the await is pending.
            await anyio.to_thread.run_sync(write_with_no_wait, env)
            provider.release.set()
    assert results


async def test_index_search_scores_are_finite_and_clamped(
    env: Env, open_memory: MemoryFactory
) -> None:
    env.workspace.memory_file.write_text("# M\n\n## A\n\nalpha beta gamma\n")
    mem = await open_memory(HashProvider(64))
    await mem.embed_all()
    for h in (await mem.search("alpha beta", min_score=0)).results:
        assert math.isfinite(h.score) and 0.0 <= h.score <= 1.0


async def test_vector_scan_runs_on_the_reader_and_falls_back_to_the_index(
    env: Env, open_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = TableProvider({"ferrets": [1.0, 0.0, 0.0, 0.0], "small mammals": [0.8, 0.6, 0, 0]})
    env.workspace.memory_file.write_text("# M\n\n## Pets\n\nThe office keeps two ferrets.\n")
    mem = await open_memory(provider, with_index(Config(), vectors_in_memory="off"))
    await mem.sync()
    await mem.embed_all()
    scans: list[int] = []
    real = mem._vectors.knn

    def reader_knn(
        query: Sequence[float], k: int, *, rebuilds: int
    ) -> list[tuple[int, float]] | None:
        scans.append(k)
        return real(query, k, rebuilds=rebuilds)

    monkeypatch.setattr(mem._vectors, "knn", reader_knn)
    assert [h.heading for h in (await mem.search("small mammals")).results] == ["M > Pets"]
    assert scans == [18]  # the vector-only hit came from the reader's scan
    monkeypatch.setattr(mem._vectors, "knn", lambda *a, **k: None)  # the reader fails
    assert [h.heading for h in (await mem.search("small mammals")).results] == ["M > Pets"]


async def test_vectors_in_memory_answer_without_the_reader_scan(
    env: Env, open_memory: MemoryFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider = TableProvider({"ferrets": [1.0, 0.0, 0.0, 0.0], "small mammals": [0.8, 0.6, 0, 0]})
    env.workspace.memory_file.write_text("# M\n\n## Pets\n\nThe office keeps two ferrets.\n")
    mem = await open_memory(provider)  # vectors_in_memory = "auto", numpy is installed
    await mem.sync()
    await mem.embed_all()

    def reader_knn(*args: object, **kwargs: object) -> None:
        raise AssertionError("the vec0 reader must not scan when vectors are in memory")

    monkeypatch.setattr(mem._vectors, "knn", reader_knn)
    assert mem.index.mirror is not None
    real_scan, threads = mem.index.mirror.knn, []

    def scan(query: Sequence[float], k: int) -> list[tuple[int, float]]:
        threads.append(threading.current_thread().name)
        return real_scan(query, k)

    monkeypatch.setattr(mem.index.mirror, "knn", scan)
    found = await mem.search("small mammals")
    assert [h.heading for h in found.results] == ["M > Pets"] and found.mode == "hybrid"
    # Scanned beside the FTS query, on its own thread (not the index's phase thread).
    assert len(threads) == 1 and threads[0].startswith("memoryd-knn")
    stats = await mem._run(mem.index.stats)
    assert stats["vectors_pending"] == 0
    assert stats["vectors_in_memory"] == stats["chunks"] >= 1


async def test_get_pages_a_huge_file_instead_of_one_huge_reply(
    env: Env, open_memory: MemoryFactory
) -> None:
    from memoryd.runtime.workspace.notes import MAX_GET_CHARS

    line = "x" * 99 + "\n"
    env.workspace.memory_file.write_text("# M\n" + line * (3 * MAX_GET_CHARS // len(line)))
    mem = await open_memory()
    rel = f"{env.workspace.key.dirname}/MEMORY.md"
    first = await mem.get(rel)
    assert len(first["text"]) <= MAX_GET_CHARS and first["text"].endswith("\n")
    pages, page = [first["text"]], first
    while "next_from" in page:
        page = await mem.get(rel, page["next_from"])
        pages.append(page["text"])
    assert len(pages) == 4
    assert "".join(pages) == env.workspace.memory_file.read_text()
    small = await mem.get(rel, 1, 3)
    assert "next_from" not in small and small["text"].count("\n") == 3


async def test_get_pages_inside_a_line_longer_than_a_reply(
    env: Env, open_memory: MemoryFactory
) -> None:
    """Issue #17: a first line over 256 KiB used to return ``next_from == from`` (a client
    following it looped forever); the cursor now moves inside the line."""
    from memoryd.runtime.workspace.notes import MAX_GET_CHARS

    text = "é" * (2 * MAX_GET_CHARS + 17) + "\nsecond line\n" + "x" * (MAX_GET_CHARS + 1)
    env.workspace.memory_file.write_text(text)
    mem = await open_memory()
    rel = f"{env.workspace.key.dirname}/MEMORY.md"
    pages: list[str] = []
    cursors: set[tuple[int, int]] = set()
    page = await mem.get(rel)
    while True:
        assert len(page["text"]) <= MAX_GET_CHARS
        pages.append(page["text"])
        if "next_from" not in page:
            break
        cursor = (page["next_from"], page.get("next_char", 0))
        assert cursor not in cursors and cursor != (page["start_line"], page.get("start_char", 0))
        cursors.add(cursor)
        page = await mem.get(rel, cursor[0], None, cursor[1])
    assert "".join(pages) == text
    assert len(pages) == 5  # 256K + 256K + 17 chars and line 2, then line 3 in two


async def test_a_word_only_inside_an_html_comment_is_never_found(
    env: Env, open_memory: MemoryFactory
) -> None:
    # Issue #19: comments are not indexed text, for FTS or vectors; a dream footer (which
    # names the session logs it consumed) never matches either.
    body = "# M\n\n## Deploy\n\nShip on Tuesdays. <!-- zanzibar was the old host -->\n"
    consumed = ["sessions/2026-05-01-quokka-abcd1234.md"]
    env.workspace.memory_file.write_text(
        with_footer(body, consumed, datetime(2026, 5, 2, tzinfo=UTC))
    )
    assert "quokka" in env.workspace.memory_file.read_text()
    for provider in (None, HashProvider(64)):
        mem = await open_memory(provider)
        await mem.sync()
        await mem.embed_all()
        for query in ("zanzibar", "quokka", "zanzibar old host"):
            res = await mem.search(query)
            assert res.results == [], (provider, query, res.results)
        found = await mem.search("tuesdays")
        assert [h.heading for h in found.results] == ["M > Deploy"]
        assert "zanzibar" in found.results[0].snippet  # the text shown is the file's
        await mem.close()


FILLER = "Nobody remembers the wording of this note, only what it was about. " * 3


async def test_a_number_of_three_or_more_digits_finds_its_note(
    env: Env, open_memory: MemoryFactory
) -> None:
    # A port, an error code, an issue number: the one word a user remembers of a note.
    notes = [
        ("Dev server", "The Vite dev server listens on 5173; the API stays on 8000."),
        ("Gateway errors", "The load balancer answered 502 while the workers restarted."),
        ("Retries", "Jobs retry 3 times with 10 seconds between tries."),
    ]
    env.workspace.memory_file.write_text(
        "# M\n\n"  # each note long enough to be a chunk of its own
        + "".join(f"## {title}\n\n{text} {FILLER}\n\n" for title, text in notes)
    )
    mem = await open_memory(None)
    await mem.sync()
    for query, heading in (("5173", "Dev server"), ("error 502", "Gateway errors")):
        res = await mem.search(query)
        assert res.results, query
        assert [h.heading for h in res.results] == [f"M > {heading}"], query
    assert (await mem.search("10")).results == []  # one or two digits match by chance
    await mem.close()


async def test_no_chunk_returned_is_shorter_than_min_chunk_chars_unless_its_file_is(
    env: Env, open_memory: MemoryFactory
) -> None:
    env.session(
        f"{today(3)}-log-eeeeeeee.md",
        "# Session 4\n\n2026-05-01 with Ana and Bo\n\n## Cache\n\n"
        + "The cache layer uses Redis with allkeys-lru eviction. " * 5
        + "\n\n## Tail\n\nana\n",
    )
    env.session(f"{today(2)}-tiny-ffffffff.md", "## Ana\n\nhi ana\n")
    mem = await open_memory()
    res = await mem.search("ana", min_score=0)
    assert len(res.results) == 2
    for hit in res.results:
        if hit.path.endswith("tiny-ffffffff.md"):
            continue  # the whole file is shorter than that
        assert len(hit.snippet) >= Config().index.min_chunk_chars
        assert hit.heading == "Session 4 > Cache"
