"""Words and CJK runs: how memoryd tokenises text — pure.

Words are runs of letters and digits; ``_`` and every other character split them, as
FTS5's ``unicode61`` tokenizer does. Chinese, Japanese and Korean are written without
spaces between words, so their runs are compared as overlapping character bigrams
(:func:`cjk_bigrams`). One definition of both serves the FTS text and queries
(:mod:`memoryd.core.keywords`), MMR's snippet tokens (:mod:`memoryd.core.ranking`), the
dream loss check (:mod:`memoryd.core.dreaming`) and the ``hash`` embedding provider.
"""

from __future__ import annotations

import re

__all__ = [
    "CJK_RANGES",
    "CJK_RUN",
    "WORD",
    "cjk_bigrams",
    "is_cjk",
    "words_and_bigrams",
]

# Inclusive code point ranges of the scripts written without spaces between words (plus
# Hangul, whose words unicode61 would still keep whole with their particles attached).
CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x3005, 0x3007),  # 々 〆 〇 (iteration mark, closing mark, ideographic zero)
    (0x3040, 0x309F),  # Hiragana
    (0x30A0, 0x30FF),  # Katakana
    (0x3130, 0x318F),  # Hangul Compatibility Jamo
    (0x31F0, 0x31FF),  # Katakana Phonetic Extensions
    (0x3400, 0x4DBF),  # CJK Unified Ideographs Extension A
    (0x4E00, 0x9FFF),  # CJK Unified Ideographs
    (0xA960, 0xA97F),  # Hangul Jamo Extended-A
    (0xAC00, 0xD7AF),  # Hangul Syllables
    (0xD7B0, 0xD7FF),  # Hangul Jamo Extended-B
    (0xF900, 0xFAFF),  # CJK Compatibility Ideographs
    (0xFF66, 0xFF9F),  # Halfwidth Katakana
    (0x20000, 0x2FA1F),  # Extensions B-F and Compatibility Ideographs Supplement
    (0x30000, 0x323AF),  # Extensions G-H
)

WORD = re.compile(r"[^\W_]+")
"""A word: a run of letters and digits ('_' splits, as in unicode61)."""

_CJK_CLASS = "".join(f"{re.escape(chr(low))}-{re.escape(chr(high))}" for low, high in CJK_RANGES)
CJK_RUN = re.compile(f"[{_CJK_CLASS}]+")
"""A run of characters in :data:`CJK_RANGES` (a few of them punctuation: see :func:`is_cjk`)."""


def is_cjk(ch: str) -> bool:
    """True for a Han ideograph, kana or Hangul letter (not CJK punctuation or symbols).

    Only letters and numerals count (``str.isalnum``), so the katakana middle dot ``・`` or
    the voiced sound marks ``゛`` separate runs exactly as they separate FTS5 tokens.
    """
    return CJK_RUN.fullmatch(ch) is not None and ch.isalnum()


def cjk_bigrams(run: str) -> list[str]:
    """Overlapping character bigrams of a CJK run; a one-character run stays a unigram."""
    if len(run) <= 1:
        return [run] if run else []
    return [run[i : i + 2] for i in range(len(run) - 1)]


def words_and_bigrams(text: str) -> tuple[list[str], list[str]]:
    """The words of ``text`` outside its CJK runs, and the bigrams of those runs.

    In text order, duplicates kept, case as given. A CJK run is cut at characters that are
    not letters or numerals (:func:`is_cjk`); those, like all other non-word characters,
    only separate tokens.
    """
    bigrams: list[str] = []
    for run in CJK_RUN.findall(text):
        for piece in WORD.findall(run):
            bigrams.extend(cjk_bigrams(piece))
    return WORD.findall(CJK_RUN.sub(" ", text)), bigrams
