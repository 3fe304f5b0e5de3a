"""Detection measured on the deterministic corpora of ``bench/secrets_corpus.py`` (SPEC §18).

The README quotes the figures these tests hold: recall on ≥ 200 planted secrets of ≥ 20
kinds, and the share of ≥ 2,000 clean notes the scrubber alters.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from bench.secrets_corpus import CONTEXTS, clean_notes, planted
from memoryd.core.secrets import scrubber


def test_the_planted_corpus_has_enough_secrets_kinds_and_contexts() -> None:
    corpus = planted()
    assert len(corpus) >= 200
    assert len({p.kind for p in corpus}) >= 20
    assert {p.context for p in corpus} == set(CONTEXTS)


def test_recall_on_planted_secrets_is_at_least_99_percent() -> None:
    s = scrubber()
    corpus = planted()
    missed = [p for p in corpus if any(v in s.text(p.text) for v in p.values)]
    recall = 1 - len(missed) / len(corpus)
    assert recall >= 0.99, [(p.kind, p.context) for p in missed]


def test_every_kind_is_caught_in_every_context() -> None:
    s = scrubber()
    missed = Counter(
        (p.kind, p.context)
        for p in planted(per_kind=12)
        if any(v in s.text(p.text) for v in p.values)
    )
    assert not missed, missed


def test_false_positives_on_clean_notes_are_at_most_half_a_percent() -> None:
    s = scrubber()
    notes = clean_notes()
    assert len(notes) >= 2000
    altered = [n for n in notes if s.scan(n)]
    assert len(altered) / len(notes) <= 0.005, altered[:3]


def test_the_projects_own_docs_and_sources_are_left_alone() -> None:
    # Independent of the corpora above: real prose and code that talk about tokens, keys
    # and passwords all the time (the scrubber's own rule table excepted: it quotes prefixes).
    root = Path(__file__).resolve().parents[2]
    files = [*root.glob("*.md"), *(root / "memoryd").rglob("*.py")]
    files = [f for f in files if f.name != "secret_rules.py"]
    sections = [
        part
        for f in files
        for part in re.split(r"\n(?=## |def |class )", f.read_text(encoding="utf-8"))
        if part.strip()
    ]
    assert len(sections) > 500
    s = scrubber()
    altered = [part[:200] for part in sections if s.scan(part)]
    assert altered == []


def test_the_bench_scenario_reports_cost_recall_and_false_positives() -> None:
    from bench.scrubbing import scrubbing_rows

    rows = {row.scenario: row for row in scrubbing_rows(messages=20, repeats=1)}
    assert rows["secret scrubbing, 1 KB message p50"].unit == "ms"
    assert rows["secret detection: recall on planted secrets"].passed
    assert rows["secret detection: clean notes altered"].passed
