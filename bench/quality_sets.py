"""The retrieval-quality sets :mod:`bench.quality` runs, in one shape (SPEC §5, issue #19).

Each :class:`QualitySet` is a workspace (memory files by path) plus queries. A query names the
**fact** that answers it (a key of :attr:`QualitySet.facts`: a file and a sentence in it) or
``None`` when nothing in the memory answers it and a search must return nothing. A hit finds
the fact when it comes from the fact's file and its line range covers the sentence's first
line, so the sets measure the same thing whatever the chunker does with sections.

The sets, all written for this project and built deterministically here (no downloads):

- ``orchard`` (:mod:`bench.quality_set`): 50 short notes in ``MEMORY.md`` and three session
  logs, English and Chinese, keyword and paraphrase queries;
- ``dated`` (:mod:`bench.quality_dated`): 200 notes in a year of dated session logs whose
  answers are all 6–12 months old while recent notes share their words;
- ``chat`` (:mod:`bench.quality_chat`): a long conversation over 24 sessions, questions about
  facts said once in passing;
- every set also has queries that must return nothing (absent topics, only common words).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Kind = Literal["keyword", "paraphrase", "question", "identifier", "nothing"]


@dataclass(frozen=True, slots=True)
class SetQuery:
    text: str
    answer: str | None
    """Key of the fact that answers it; ``None``: the search must return nothing."""
    kind: Kind
    lang: Literal["en", "zh"] = "en"


@dataclass(frozen=True, slots=True)
class Fact:
    path: str
    """Relative to the workspace directory (``MEMORY.md``, ``sessions/…``)."""
    needle: str
    """A sentence of the file that states the fact (found verbatim)."""


@dataclass(frozen=True, slots=True)
class QualitySet:
    name: str
    files: Mapping[str, str]
    facts: Mapping[str, Fact]
    queries: tuple[SetQuery, ...]

    def fact_line(self, key: str) -> tuple[str, int]:
        """``(path, 1-based line)`` where fact ``key`` starts."""
        fact = self.facts[key]
        text = self.files[fact.path]
        at = text.find(fact.needle)
        if at < 0:
            raise ValueError(f"set {self.name}: fact {key!r} is not in {fact.path}")
        return fact.path, text.count("\n", 0, at) + 1

    def check(self) -> None:
        """Every answer names a fact that is where it says."""
        for query in self.queries:
            if query.answer is not None:
                self.fact_line(query.answer)


def all_sets() -> tuple[QualitySet, ...]:
    from bench import quality_chat, quality_dated, quality_set

    sets = (quality_set.quality_set(), quality_dated.quality_set(), quality_chat.quality_set())
    for one in sets:
        one.check()
    return sets
