"""The secret scrubber's cost and detection (SPEC §18), measured in the bench process.

Cost: 500 session messages of 1 KB (``bench.secrets_corpus.messages_1kb``: clean notes, one
in ten with a planted secret), each scrubbed ``repeats`` times; a message's time is the
median of its runs, and the rows give the p50 and p99 over messages (the target: p50 ≤ 0.2
ms). Detection: recall on the planted corpus and the share of clean notes altered — the
figures ``tests/core/test_secrets_corpus.py`` holds, reported beside the cost.
"""

from __future__ import annotations

import statistics
import time

from bench.report import Row, Target, percentile
from bench.secrets_corpus import clean_notes, messages_1kb, planted
from memoryd.core.secrets import scrubber


def scrubbing_rows(*, messages: int = 500, repeats: int = 5) -> list[Row]:
    s = scrubber()
    texts = messages_1kb(messages)
    for text in texts:  # warm up: regexes compiled, caches filled
        s.scan(text)
    per_message: list[float] = []
    for text in texts:
        runs = []
        for _ in range(repeats):
            started = time.perf_counter()
            s.scrub(text)
            runs.append(time.perf_counter() - started)
        per_message.append(statistics.median(runs))
    with_secret = per_message[::10]
    clean = [t for i, t in enumerate(per_message) if i % 10]
    corpus = planted()
    missed = sum(1 for p in corpus if any(v in s.text(p.text) for v in p.values))
    notes = clean_notes()
    altered = sum(1 for n in notes if s.scan(n))
    note = (
        f"{messages} messages of 1 KB (1 in 10 with a planted secret), median of {repeats} runs "
        f"each; clean ones p50 {percentile(clean, 50) * 1000:.3f} ms, with a secret p50 "
        f"{percentile(with_secret, 50) * 1000:.3f} ms; in-process"
    )
    return [
        Row(
            "secret scrubbing, 1 KB message p50",
            "ms",
            percentile(per_message, 50) * 1000,
            target=Target("memoryd", "<=", 0.2, "ms"),
            note=note,
        ),
        Row("secret scrubbing, 1 KB message p99", "ms", percentile(per_message, 99) * 1000),
        Row(
            "secret detection: recall on planted secrets",
            "%",
            100 * (1 - missed / len(corpus)),
            target=Target("memoryd", ">=", 99, "%"),
            note=f"{len(corpus)} secrets of {len({p.kind for p in corpus})} kinds, {missed} missed",
        ),
        Row(
            "secret detection: clean notes altered",
            "%",
            100 * altered / len(notes),
            target=Target("memoryd", "<=", 0.5, "%"),
            note=f"{altered} of {len(notes)} notes",
        ),
    ]
