"""Measuring an embedding model's similarity scale on the user's own notes (issue #19). Pure.

The ranking maps every model's cosines onto one reference scale
(:class:`~memoryd.core.ranking.SimilarityScale`: where *unrelated* texts and a *strong* match
fall), so ``min_score`` means the same with every model. The built-in ``local`` model ships
its measured scale; an ``openai`` endpoint's model is unknown, so ``memoryd calibrate``
measures it on the workspace's notes and prints the two config keys:

- **unrelated**: the median cosine between paragraphs of *different* files — what two notes
  that have nothing to do with each other score with this model, on these notes;
- **strong**: the median cosine between the two halves of one paragraph (its first and
  second half of words) — the same matter said in other words, the closest a measurement
  without labelled queries gets to a paraphrase.

Paragraphs (blocks between blank lines, headings left out), not whole chunks: a chunk may
hold several small notes, whose halves would be two different notes.

When the notes cannot tell the two apart (the halves of a note score no higher than two
different notes, as in a corpus of near-identical chat transcripts), there is no scale to
suggest and :attr:`Calibration.problem` says why.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from memoryd.core.chunking import indexed_text
from memoryd.core.markdown import heading

MIN_HALF_WORDS = 4
"""Each half of a note has at least this many words (shorter notes are not measured)."""
MIN_GAP = 0.05
"""``strong`` must exceed ``unrelated`` by this much for the scale to be suggested."""
MIN_SAMPLES = 5


@dataclass(frozen=True, slots=True)
class Calibration:
    unrelated: float | None
    """Median cosine of chunks of different files (None: too few)."""
    strong: float | None
    """Median cosine of the two halves of one chunk (None: too few)."""
    unrelated_p90: float | None
    pairs: int
    halves: int
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


def paragraphs(text: str) -> list[str]:
    """The paragraphs of a chunk's indexed text: blocks between blank lines, heading lines
    left out, each with at least ``2 × MIN_HALF_WORDS`` words."""
    out = []
    for block in indexed_text(text).split("\n\n"):
        kept = " ".join(line for line in block.split("\n") if heading(line) is None)
        if len(kept.split()) >= 2 * MIN_HALF_WORDS:
            out.append(kept.strip())
    return out


def note_halves(text: str) -> tuple[str, str] | None:
    """The first and second half (by words) of a paragraph, or None when it is too short to
    say the same thing twice."""
    words = indexed_text(text).split()
    if len(words) < 2 * MIN_HALF_WORDS:
        return None
    middle = len(words) // 2
    return " ".join(words[:middle]), " ".join(words[middle:])


def measure(pair_cosines: Sequence[float], half_cosines: Sequence[float]) -> Calibration:
    """The scale these cosines show (see the module docstring)."""
    unrelated = statistics.median(pair_cosines) if len(pair_cosines) >= MIN_SAMPLES else None
    strong = statistics.median(half_cosines) if len(half_cosines) >= MIN_SAMPLES else None
    p90 = statistics.quantiles(pair_cosines, n=10)[-1] if len(pair_cosines) >= MIN_SAMPLES else None
    problem = None
    if unrelated is None or strong is None:
        problem = (
            f"too few notes to measure ({len(pair_cosines)} pairs of chunks of different files, "
            f"{len(half_cosines)} chunks long enough to halve; at least {MIN_SAMPLES} each)"
        )
    elif not 0.0 < unrelated < strong < 1.0 or strong - unrelated < MIN_GAP:
        problem = (
            f"the notes cannot tell related from unrelated text with this model (two halves of "
            f"one note {strong:.3f}, two different notes {unrelated:.3f})"
        )
    return Calibration(unrelated, strong, p90, len(pair_cosines), len(half_cosines), problem)
