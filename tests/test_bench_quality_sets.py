"""The quality sets of bench/ are well formed: every answer is where it says, built the same way
every time (no downloads, no randomness across runs)."""

from __future__ import annotations

from bench.quality_sets import all_sets


def test_every_answer_is_found_once_in_its_file() -> None:
    for qset in all_sets():
        for key, fact in qset.facts.items():
            assert qset.files[fact.path].count(fact.needle) == 1, (qset.name, key)
        kinds = {q.kind for q in qset.queries}
        assert "nothing" in kinds, qset.name
        assert all(q.answer is None for q in qset.queries if q.kind == "nothing")


def test_sets_are_deterministic() -> None:
    first, second = all_sets(), all_sets()
    assert [s.files for s in first] == [s.files for s in second]
    sizes = {s.name: sum(text.count("\n## ") for text in s.files.values()) for s in first}
    assert sizes["dated"] == 200
