"""Measuring an embedding model's similarity scale on the user's own notes (issue #19). Pure.

The ranking maps every model's cosines onto one reference scale
(:class:`~memoryd.core.ranking.SimilarityScale`: where *unrelated* texts and a *strong* match
fall), so ``min_score`` means the same with every model. The built-in ``local`` model ships
its measured scale; an ``openai`` endpoint's model is unknown, so ``memoryd calibrate``
measures it on the workspace's notes and prints the two config keys. It compares a note's
**title** (its heading, of at least :data:`MIN_TITLE_WORDS` words) with **bodies** (the
text under a heading, at least :data:`MIN_BODY_WORDS` words): a title says what its body
says in a few other words, like a question says what its answer says.

- **strong**: the median cosine of a title and its own body;
- **unrelated**: the 90th percentile of the cosines of a title and the body of a note in
  a *different* file — nine in ten unrelated notes of this project score at most that, so
  an off-topic neighbour of a query scores about 0 on the calibrated scale.

Texts of the same kind on both sides (short title, longer body) keep the two comparable,
and notes that share a template (session logs) or a vocabulary still differ by title. On
this project's quality sets the built-in model measures unrelated 0.11–0.16 and strong
0.23–0.39 this way (it ships 0.12 / 0.40). Notes without informative headings (chat
transcripts) give too few titles, and :attr:`Calibration.problem` says so; so it does when
titles score no higher with their own body than with others.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from memoryd.core.chunking import indexed_text
from memoryd.core.markdown import heading
from memoryd.core.text import words_and_bigrams

MIN_TITLE_WORDS = 2
"""A heading of fewer words (``## Conversation``) says too little to measure with (CJK text
counts its character bigrams: ``## 数据库`` has two)."""
MIN_BODY_WORDS = 8
MIN_GAP = 0.05
"""``strong`` must exceed ``unrelated`` by this much for the scale to be suggested."""
MIN_SAMPLES = 5


@dataclass(frozen=True, slots=True)
class Calibration:
    unrelated: float | None
    """90th percentile cosine of a title and a body of a different file (None: too few)."""
    strong: float | None
    """Median cosine of a title and its own body (None: too few)."""
    unrelated_p90: float | None
    """The same 90th percentile (what ``unrelated`` is)."""
    pairs: int
    halves: int
    """Notes measured (a title and its own body)."""
    problem: str | None
    """Why no scale is suggested, or None."""

    def config_lines(self) -> list[str]:
        """The ``[embedding]`` lines to put in the config file (none when there is a problem)."""
        if self.problem is not None or self.unrelated is None or self.strong is None:
            return []
        return [
            f"similarity_unrelated = {self.unrelated:.3f}",
            f"similarity_strong = {self.strong:.3f}",
        ]


def titled_notes(text: str) -> list[tuple[str, str]]:
    """``(title, body)`` of each section of a chunk's indexed text whose heading has at least
    :data:`MIN_TITLE_WORDS` words and whose body at least :data:`MIN_BODY_WORDS` (heading
    lines left out of bodies, whitespace collapsed)."""
    out: list[tuple[str, str]] = []
    title: str | None = None
    body: list[str] = []
    for line in [*indexed_text(text).split("\n"), None]:
        level = heading(line) if line is not None else 0
        if line is not None and level is None:
            body.append(line)
            continue
        words = " ".join(body).split()
        if title is not None and _title_words(title) >= MIN_TITLE_WORDS:
            if len(words) >= MIN_BODY_WORDS:
                out.append((title, " ".join(words)))
        title = line.lstrip("#").strip() if line is not None else None
        body = []
    return out


def _title_words(title: str) -> int:
    words, bigrams = words_and_bigrams(title)
    return len(words) + len(bigrams)


def measure(pair_cosines: Sequence[float], own_cosines: Sequence[float]) -> Calibration:
    """The scale these cosines show (see the module docstring): ``pair_cosines`` of titles
    and bodies of different files, ``own_cosines`` of titles and their own bodies."""
    enough = len(pair_cosines) >= MIN_SAMPLES and len(own_cosines) >= MIN_SAMPLES
    unrelated = statistics.quantiles(pair_cosines, n=10)[-1] if enough else None
    strong = statistics.median(own_cosines) if enough else None
    problem = None
    if unrelated is None or strong is None:
        problem = (
            f"too few notes to measure ({len(own_cosines)} notes with a heading of at least "
            f"{MIN_TITLE_WORDS} words over at least {MIN_BODY_WORDS} words of text, "
            f"{len(pair_cosines)} pairs of them in different files; at least {MIN_SAMPLES} each)"
        )
    elif not 0.0 < unrelated < strong < 1.0 or strong - unrelated < MIN_GAP:
        problem = (
            f"the notes cannot tell related from unrelated text with this model (a title and "
            f"its own note {strong:.3f}, a title and another note {unrelated:.3f})"
        )
    return Calibration(unrelated, strong, unrelated, len(pair_cosines), len(own_cosines), problem)
