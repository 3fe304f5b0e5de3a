"""Deterministic benchmark corpora: realistic session logs and MEMORY.md files (SPEC §16).

A corpus is what a coding agent's memory looks like after months of work: a workspace
``MEMORY.md`` of curated sections, and many session logs (``sessions/YYYY-MM-DD-<slug>-<sid8>.md``)
made of flush sections (``<!-- flush <time> trigger=... -->`` then ``##`` headings) with
bullets, prose, fenced code and file paths. About one section in seven is written in Chinese
(with English identifiers mixed in, as people write). Word frequencies follow a Zipf curve so
keyword queries match a realistic share of the chunks.

Everything depends only on the seed: :func:`session_files` yields the same files, byte for
byte, on every machine. Files are generated until the memoryd chunker
(:func:`memoryd.core.chunking.chunk_markdown`, the daemon's settings) says the corpus holds at
least the requested number of chunks, so the figure is exact before the daemon sees it.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memoryd.core.chunking import Chunk, chunk_markdown
from memoryd.core.config import Config
from memoryd.store.index import ChunkSettings

BASE_DATE = datetime(2026, 6, 1, tzinfo=UTC)

TECH = """
sqlite index migration schema wal checkpoint vacuum fts5 bm25 tokenizer porter embedding vector
cosine knn cache invalidation latency throughput timeout retry backoff deadlock mutex semaphore
asyncio anyio uvloop thread pool executor socket unix json rpc ndjson framing protocol handshake
daemon supervisor actor watcher inotify debounce reconcile checksum blake3 hash digest atomic
rename fsync journal rollback transaction isolation snapshot replica lease heartbeat quorum
docker compose kubernetes helm ingress nginx certificate tls oauth token refresh session cookie
csrf cors webhook queue kafka redis postgres mysql pgbouncer connection pooling prepared
statement query planner explain analyze partition shard rebalance compaction tombstone ttl
eviction lru memory leak profiler flamegraph pyspy cprofile tracemalloc benchmark regression
pytest fixture hypothesis property mock fake stub coverage mypy ruff lint formatter pre-commit
ci pipeline runner artifact release changelog semver wheel sdist pip poetry uv pnpm npm yarn
typescript react vite webpack eslint prettier tailwind component hook state reducer selector
graphql rest endpoint pagination cursor rate limiter quota throttle circuit breaker fallback
logging structlog metrics prometheus grafana alert dashboard tracing opentelemetry span
config toml yaml environment variable secret vault keyring permission chmod umask symlink
path traversal sandbox seccomp namespace cgroup systemd launchd service unit restart watchdog
git rebase merge conflict bisect cherry-pick worktree submodule hook branch tag origin remote
parser lexer grammar ast visitor codegen serializer deserializer schema validation pydantic
dataclass frozen slots protocol generic typevar overload literal union enum dispatch
"""

GENERIC = """
fix bug issue error failure crash flaky slow fast small large first last new old cheap
review refactor rename extract inline split merge move delete add remove update upgrade
downgrade pin bump revert test check verify measure compare reproduce investigate debug
trace log warn handle catch raise return await spawn cancel shield close open read write
flush sync load store fetch send receive parse encode decode compress decompress stream
batch chunk window buffer limit budget deadline interval period schedule trigger gate lock
user client server request response reply payload header body field column row table file
directory module package function method class object value list map set key default option
flag setting decision reason rationale tradeoff approach solution problem workaround root
cause symptom regression improvement cleanup docs readme example note lesson pattern rule
"""

CHINESE = """
数据库 索引 迁移 缓存 失效 性能 测试 延迟 吞吐量 超时 重试 死锁 线程 进程 内存 泄漏
配置 环境 变量 部署 容器 日志 监控 告警 向量 检索 分词 中文 搜索 排序 召回 相关性
事务 回滚 快照 副本 心跳 队列 消息 认证 令牌 会话 权限 目录 文件 路径 符号链接 守护进程
重构 代码 审查 修复 问题 原因 方案 决定 权衡 依赖 版本 发布 构建 流水线 基准 回归
"""

PATHS = """
src/index.py src/db/migrations.py src/server/socket.py src/api/routes.ts app/models/user.py
web/components/Table.tsx scripts/release.sh deploy/helm/values.yaml docs/architecture.md
tests/test_search.py tests/conftest.py pyproject.toml package.json Dockerfile
.github/workflows/ci.yml
"""

HEADINGS = (
    "Decision: {a} for {b}",
    "Fixed {a} {b} in {c}",
    "Why {a} {b} was slow",
    "How to {a} the {b}",
    "{a} {b} notes",
    "Problem: {a} {b} → solution",
    "Debugging {a} {b}",
    "Lesson: {a} before {b}",
)
ZH_HEADINGS = ("关于{a}的决定", "{a}{b}问题的修复", "{a}和{b}的经验", "排查{a}{b}")
TRIGGERS = ("idle", "pre_compaction", "manual")


def _words(block: str) -> list[str]:
    return block.split()


FUNCTION = "the we to and is because of in for with it that this when so was on a be not"

TECH_WORDS = _words(TECH)
FUNCTION_WORDS = _words(FUNCTION)
GENERIC_WORDS = _words(GENERIC)
ZH_WORDS = _words(CHINESE)
PATH_WORDS = _words(PATHS)


def _zipf(words: list[str], seed: int, exponent: float) -> tuple[list[str], list[float]]:
    """The words in a fixed shuffled order with cumulative Zipf weights."""
    order = list(words)
    random.Random(seed).shuffle(order)
    weights = (1.0 / (rank + 1) ** exponent for rank in range(len(order)))
    return order, list(itertools.accumulate(weights))


def _identifiers(count: int, seed: int) -> list[str]:
    """A long tail of code identifiers (``CamelCase`` names, ``ERR_`` codes, ticket ids)."""
    rng = random.Random(seed)
    parts = [w.capitalize() for w in TECH_WORDS + GENERIC_WORDS if w.isalpha()]
    out: dict[str, None] = {}
    while len(out) < count:
        roll = rng.random()
        if roll < 0.7:
            out.setdefault("".join(rng.sample(parts, rng.randint(2, 3))))
        elif roll < 0.85:
            out.setdefault("ERR" + "".join(rng.sample(parts, 2)).upper())
        else:
            out.setdefault(f"{rng.choice(('PROJ', 'OPS', 'BUG', 'MEM'))}{rng.randint(100, 9999)}")
    return list(out)


IDENTIFIERS = _identifiers(6000, 4)

_TECH_Z = _zipf(TECH_WORDS, 1, 0.6)
_GEN_Z = _zipf(GENERIC_WORDS, 2, 0.5)
_ZH_Z = _zipf(ZH_WORDS, 3, 0.75)
_ID_Z = _zipf(IDENTIFIERS, 5, 0.8)


def _mixed() -> tuple[list[str], list[float]]:
    """English running text: function words 30 %, tech 25 %, generic 20 %, identifiers 20 %,
    paths and numbers 5 %."""
    words: list[str] = []
    weights: list[float] = []
    for (table, cumulative), mass in ((_TECH_Z, 0.25), (_GEN_Z, 0.20), (_ID_Z, 0.20)):
        plain = [b - a for a, b in zip([0.0, *cumulative], cumulative, strict=False)]
        words += table
        weights += [w * mass / cumulative[-1] for w in plain]
    words += FUNCTION_WORDS
    weights += [0.30 / len(FUNCTION_WORDS)] * len(FUNCTION_WORDS)
    words += ["#path", "#num"]
    weights += [0.03, 0.02]
    return words, list(itertools.accumulate(weights))


_MIXED = _mixed()


class TextWriter:
    """Random text of one file, from one seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def pick(self, table: tuple[list[str], list[float]], k: int = 1) -> list[str]:
        words, cumulative = table
        return self.rng.choices(words, cum_weights=cumulative, k=k)

    def sentence(self, min_words: int = 6, max_words: int = 18) -> str:
        words = self.rng.choices(
            _MIXED[0], cum_weights=_MIXED[1], k=self.rng.randint(min_words, max_words)
        )
        for i, word in enumerate(words):
            if word == "#path":
                words[i] = f"`{self.rng.choice(PATH_WORDS)}`"
            elif word == "#num":
                words[i] = str(self.rng.randint(2, 5000))
        text = " ".join(words)
        return text[0].upper() + text[1:] + "."

    def zh_sentence(self) -> str:
        parts = self.pick(_ZH_Z, self.rng.randint(4, 9))
        if self.rng.random() < 0.5:
            parts.insert(self.rng.randrange(len(parts)), f" {self.pick(_TECH_Z)[0]} ")
        return "".join(parts) + "。"

    def heading(self, chinese: bool) -> str:
        if chinese:
            a, b = self.pick(_ZH_Z, 2)
            return self.rng.choice(ZH_HEADINGS).format(a=a, b=b)
        a, b, c = self.pick(_TECH_Z, 3)
        return self.rng.choice(HEADINGS).format(a=a, b=b, c=c)

    def body(self, chinese: bool) -> list[str]:
        lines: list[str] = []
        kinds = self.rng.choices(("prose", "bullets", "code"), weights=(5, 4, 1), k=3)
        for kind in kinds[: self.rng.randint(1, 3)]:
            if chinese:
                count = self.rng.randint(1, 4)
                lines.extend(f"- {self.zh_sentence()}" for _ in range(count))
            elif kind == "prose":
                lines.append(" ".join(self.sentence() for _ in range(self.rng.randint(1, 3))))
            elif kind == "bullets":
                count = self.rng.randint(2, 5)
                lines.extend(f"- {self.sentence(4, 12)}" for _ in range(count))
            else:
                name = self.pick(_TECH_Z)[0].replace("-", "_")
                lines += ["```python", f"def {name}(conn, limit=100):"]
                lines += [f"    # {self.sentence(3, 8)}", f"    return conn.{name}(limit)", "```"]
            lines.append("")
        if self.rng.random() < 0.04:  # now and then a section long enough to be split
            lines.extend(self.sentence(10, 24) + "\n" for _ in range(self.rng.randint(8, 16)))
        return lines


def session_text(index: int, seed: int) -> tuple[str, str]:
    """The name and text of session log number ``index`` of the corpus ``seed``."""
    w = TextWriter(seed * 1_000_003 + index)
    day = BASE_DATE - timedelta(days=w.rng.randint(0, 180))
    slug = "-".join(w.pick(_TECH_Z, 2))
    sid8 = f"{w.rng.getrandbits(32):08x}"
    name = f"{day:%Y-%m-%d}-{slug}-{sid8}.md"
    out: list[str] = []
    for flush in range(w.rng.randint(1, 4)):
        when = day + timedelta(hours=8 + flush * 2, minutes=w.rng.randint(0, 59))
        trigger = w.rng.choice(TRIGGERS)
        out += [f"<!-- flush {when.isoformat(timespec='seconds')} trigger={trigger} -->", ""]
        for _ in range(w.rng.randint(2, 7)):
            chinese = w.rng.random() < 0.15
            out += [f"## {w.heading(chinese)}", "", *w.body(chinese)]
    return name, "\n".join(out).rstrip() + "\n"


def memory_text(seed: int, sections: int) -> str:
    """A curated workspace ``MEMORY.md`` with ``sections`` sections under a few topics."""
    w = TextWriter(seed * 7_919 + 17)
    out = ["# Memory: benchmark workspace", ""]
    for topic in range(max(1, sections // 8)):
        out += [f"## {w.heading(False)} ({topic})", ""]
        for _ in range(8):
            chinese = w.rng.random() < 0.15
            out += [f"### {w.heading(chinese)}", "", *w.body(chinese)]
    return "\n".join(out).rstrip() + "\n"


GLOBAL_TEXT = (
    "# Global memory\n\n"
    "## Preferences\n\n- Use pnpm, not npm, in JavaScript projects.\n"
    "- Prefer small modules and frozen dataclasses.\n\n"
    "## 习惯\n\n- 代码审查时先看测试。\n"
)


_INDEX = Config().index


def daemon_chunks(text: str) -> list[Chunk]:
    """The chunks of ``text`` as the daemon makes them (its default ``[index]`` settings,
    small sections merged)."""
    return chunk_markdown(
        text, _INDEX.max_chunk_chars, _INDEX.chunk_overlap_chars, _INDEX.min_chunk_chars
    )


DAEMON_CHUNKS = ChunkSettings.of(_INDEX)
"""For an :class:`~memoryd.store.index.Index` opened on an index the daemon built (other
settings would make it re-chunk every file)."""


def count_chunks(text: str) -> int:
    return len(daemon_chunks(text))


@dataclass(frozen=True, slots=True)
class CorpusFile:
    rel: str
    """Path relative to the workspace memory directory (``MEMORY.md``, ``sessions/…``)."""
    text: str
    chunks: int


@dataclass(frozen=True, slots=True)
class Written:
    files: int
    chunks: int
    bytes: int
    session_names: tuple[str, ...]


def corpus_files(target_chunks: int, seed: int) -> Iterator[CorpusFile]:
    """The files of a corpus of at least ``target_chunks`` chunks (MEMORY.md first)."""
    memory = memory_text(seed, sections=max(16, min(400, target_chunks // 250)))
    first = CorpusFile("MEMORY.md", memory, count_chunks(memory))
    yield first
    total = first.chunks
    for index in itertools.count():
        if total >= target_chunks:
            return
        name, text = session_text(index, seed)
        chunks = count_chunks(text)
        total += chunks
        yield CorpusFile(f"sessions/{name}", text, chunks)


def write_corpus(ws_dir: Path, target_chunks: int, seed: int) -> Written:
    """Write a corpus into a workspace memory directory; returns what was written."""
    (ws_dir / "sessions").mkdir(parents=True, exist_ok=True)
    files = chunks = size = 0
    names: list[str] = []
    for item in corpus_files(target_chunks, seed):
        data = item.text.encode()
        (ws_dir / item.rel).write_bytes(data)
        files, chunks, size = files + 1, chunks + item.chunks, size + len(data)
        if item.rel.startswith("sessions/"):
            names.append(item.rel)
    return Written(files, chunks, size, tuple(names))


def write_global(root: Path) -> int:
    """Write the global ``MEMORY.md``; returns its chunk count."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "MEMORY.md").write_text(GLOBAL_TEXT, encoding="utf-8")
    return count_chunks(GLOBAL_TEXT)


def queries(count: int, seed: int) -> list[str]:
    """Search queries like an agent's: 2–4 keywords, some phrased as questions, ~15 % Chinese."""
    w = TextWriter(seed * 31 + 5)
    out: list[str] = []
    for _ in range(count):
        roll = w.rng.random()
        if roll < 0.15:
            out.append("".join(w.pick(_ZH_Z, w.rng.randint(1, 2))))
        elif roll < 0.35:
            a, b = w.pick(_TECH_Z, 2)
            out.append(f"how did we fix the {a} {b} problem")
        elif roll < 0.6:
            words = w.pick(_TECH_Z, w.rng.randint(1, 2)) + w.pick(_ID_Z, 1)
            out.append(" ".join(words))
        else:
            words = w.pick(_TECH_Z, w.rng.randint(1, 2)) + w.pick(_GEN_Z, 1)
            out.append(" ".join(words))
    return out


def needle_section(token: str, when: datetime) -> str:
    """A flush section holding the unique ``token`` (for time-to-searchable)."""
    stamp = when.isoformat(timespec="seconds")
    return (
        f"\n<!-- flush {stamp} trigger=manual -->\n\n## Found {token}\n\n"
        f"- The {token} marker was written by the benchmark editor.\n"
    )
