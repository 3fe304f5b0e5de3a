"""Keyword extraction, FTS5 query building and CJK bigrams for text search (SPEC §3). Pure.

The FTS table uses ``porter unicode61``, which treats a whole run of Han, kana or Hangul
characters as one token. So the text given to FTS5 (never the stored text) has each CJK run
rewritten as overlapping character bigrams (:func:`fts_text`), and queries are built from
the same bigrams (:func:`build_match_query`).

A user's query is never passed raw to ``MATCH``: :func:`extract_keywords` keeps only word
characters, every keyword is quoted as an FTS5 string, and the keywords are ORed. The query
built from any string whatsoever is valid FTS5 syntax, or ``None`` when nothing is left to
search for (the caller then returns no results).
"""

from __future__ import annotations

import re

from memoryd.core.text import CJK_RUN, WORD, cjk_bigrams, is_cjk

__all__ = [
    "STOP_WORDS",
    "build_match_query",
    "extract_keywords",
    "fts_text",
]

STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing done down during
    each else etc few for from further get got had has have having he her here hers herself
    him himself his how if in into is it its itself just let me more most my myself no nor
    not now of off on once only or other our ours ourselves out over own same she should so
    some such than that the their theirs them themselves then there these they this those
    through to too under until up upon us very was we were what when where which while who
    whom why will with would you your yours yourself yourselves
    的 了 是 在 和 与 或 也 就 都 而 及 着 吗 呢 吧 啊 这 那 之 把 被 我 你 他 她 它
    我们 你们 他们 这个 那个 什么 怎么 如何 一个 没有 可以 の は が を に で と も へ
    """.split()
)
"""Dropped from queries: English function words, and CJK runs that are *entirely* one of a
few common Chinese function words or Japanese particles (a run containing one, like 目的
or 现在, is kept)."""


def fts_text(text: str) -> str:
    """The text given to FTS5 for ``text``: each CJK run replaced by its bigrams.

    The bigrams are separated by spaces and padded by a space from any neighbouring
    character; everything else is left as it is. ``"用SQLite存数据"`` becomes
    ``"用 SQLite 存数 数据"``.
    """
    if text.isascii():
        return text  # the common case: nothing to rewrite
    return CJK_RUN.sub(_bigrammed, text)


def _bigrammed(match: re.Match[str]) -> str:
    """What :func:`fts_text` puts in place of one CJK run."""
    text, run = match.string, match.group()
    start = match.start()
    if run.isalnum():  # the common case, spelled out
        end = match.end()
        body = " ".join([run[i : i + 2] for i in range(len(run) - 1)]) if len(run) > 1 else run
        if start > 0 and not text[start - 1].isspace():
            body = " " + body
        if end < len(text) and not text[end].isspace():
            body += " "
        return body
    out: list[str] = []
    done = 0  # in run
    for offset, piece in _alnum_pieces(run):
        if not piece.isalnum():
            continue  # CJK punctuation inside the range stays as it is
        run_start, run_end = start + offset, start + offset + len(piece)
        out.append(run[done:offset])
        if run_start > 0 and not text[run_start - 1].isspace():
            out.append(" ")
        out.append(" ".join(cjk_bigrams(piece)))
        if run_end < len(text) and not text[run_end].isspace():
            out.append(" ")
        done = offset + len(piece)
    out.append(run[done:])
    return "".join(out)


def _alnum_pieces(run: str) -> list[tuple[int, str]]:
    """``run`` cut where it switches between letters/numerals and other characters."""
    if run.isalnum():
        return [(0, run)]
    pieces: list[tuple[int, str]] = []
    start = 0
    for index in range(1, len(run) + 1):
        if index == len(run) or run[index].isalnum() != run[start].isalnum():
            pieces.append((start, run[start:index]))
            start = index
    return pieces


def _split_script(word: str) -> list[str]:
    """Cut a word where it switches between CJK and other characters."""
    parts: list[str] = []
    for ch in word:
        if parts and is_cjk(parts[-1][-1]) == is_cjk(ch):
            parts[-1] += ch
        else:
            parts.append(ch)
    return parts


MIN_NUMBER_CHARS = 3
"""A pure number is a keyword from this many characters up (see :func:`extract_keywords`)."""


def extract_keywords(query: str) -> list[str]:
    """The search keywords of ``query``, in order, without duplicates.

    Lowercased and split on every non-word character (``_`` included); a CJK run stays one
    keyword, whatever its length, unless it is entirely a stop word. Other words are kept
    when they have two or more characters and are not stop words; a pure number needs three
    (a port, an error code, an issue number, a year: ``5173``, ``502``, ``2024`` — keyword
    scores are absolute, so a number in many chunks counts little and one in a single
    chunk is as specific as a rare word, while ``10`` or ``2`` would match by chance).
    """
    keywords: dict[str, None] = {}  # ordered set
    for word in WORD.findall(query.lower()):
        for part in _split_script(word):
            if is_cjk(part[0]):
                keep = part not in STOP_WORDS
            else:
                shortest = MIN_NUMBER_CHARS if part.isnumeric() else 2
                keep = len(part) >= shortest and part not in STOP_WORDS
            if keep:
                keywords.setdefault(part)
    return list(keywords)


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def build_match_query(query: str) -> str | None:
    """An FTS5 ``MATCH`` expression for ``query``, or ``None`` when it has no keywords.

    Every keyword is a quoted FTS5 string and the terms are ORed:

    - a word: ``"running"`` (the porter tokenizer stems it, so it finds ``runs``);
    - a single CJK character: the prefix query ``"数"*``, which matches the bigrams that
      start with it;
    - a CJK run of two or more characters: the phrase of its bigrams, ``"数据 据库"``, and,
      for three or more characters, each of its bigrams on its own as well. The phrase
      ranks text holding the exact run first; the single bigrams keep recall when the run
      is a whole sentence (CJK queries have no spaces between words, so a question is one
      run that no document contains verbatim).

    The result is valid FTS5 syntax for any input string.
    """
    terms: dict[str, None] = {}  # ordered set
    for keyword in extract_keywords(query):
        if is_cjk(keyword[0]):
            bigrams = cjk_bigrams(keyword)
            if len(keyword) == 1:
                candidates = [_quote(keyword) + "*"]
            else:
                candidates = [_quote(" ".join(bigrams))]
                if len(bigrams) > 1:
                    candidates.extend(_quote(bigram) for bigram in bigrams)
        else:
            candidates = [_quote(keyword)]
        for term in candidates:
            terms.setdefault(term)
    return " OR ".join(terms) if terms else None
