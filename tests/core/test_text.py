"""One tokenisation: words and CJK bigrams, shared by search, MMR, dream and the hash model."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.core.dreaming import content_tokens
from memoryd.core.keywords import extract_keywords, fts_text
from memoryd.core.ranking import snippet_tokens
from memoryd.core.text import CJK_RANGES, cjk_bigrams, is_cjk, words_and_bigrams

cjkish = st.text(
    alphabet="数据库東京データ・。한국어々〆 ab_c1.\n\u3000"
    + "\U00020000\U0002a6df\U0002b740\U00030000",
    max_size=40,
)


def reference_cjk(ch: str) -> bool:
    return any(low <= ord(ch) <= high for low, high in CJK_RANGES) and ch.isalnum()


@settings(max_examples=300)
@given(st.one_of(st.characters(), st.sampled_from("𠀀𪛟𫝀𬺰𰀀丂가ア・゛〆")))
def test_is_cjk_is_the_ranges_letters_and_numerals(ch: str) -> None:
    assert is_cjk(ch) == reference_cjk(ch)


@pytest.mark.parametrize(
    "ch", ["\U00020000", "\U0002a6df", "\U0002b740", "\U0002ceb0", "\U00030000"]
)
def test_extensions_b_to_h_are_cjk(ch: str) -> None:
    assert is_cjk(ch)
    assert snippet_tokens(f"{ch}{ch}") == frozenset({ch + ch})
    assert f"{ch}{ch}" in content_tokens(f"{ch}{ch}")


@settings(max_examples=400)
@given(st.one_of(st.text(), cjkish))
def test_words_and_bigrams_split_the_text_into_its_letters(text: str) -> None:
    words, bigrams = words_and_bigrams(text)
    for word in words:
        assert word.isalnum()
        assert not any(is_cjk(c) for c in word)
        assert "_" not in word
    for bigram in bigrams:
        assert 1 <= len(bigram) <= 2 and all(is_cjk(c) for c in bigram)
    # Every letter or numeral of the text is in some token.
    letters = "".join(words) + "".join(bigrams)
    for ch in text:
        if ch.isalnum():
            assert ch in letters


@settings(max_examples=300)
@given(cjkish)
def test_every_reader_tokenises_alike(text: str) -> None:
    lowered = text.lower()
    words, bigrams = words_and_bigrams(lowered)
    assert snippet_tokens(text) == frozenset(words) | frozenset(bigrams)
    _, nfkc_bigrams = words_and_bigrams(unicodedata.normalize("NFKC", lowered))
    assert frozenset(nfkc_bigrams) <= content_tokens(text)
    # Query keywords are whole CJK runs; their bigrams are the text's bigrams.
    keyword_bigrams = [b for k in extract_keywords(text) if is_cjk(k[0]) for b in cjk_bigrams(k)]
    assert set(keyword_bigrams) <= set(bigrams)
    # The FTS text holds the same bigrams, space separated.
    assert [t for t in fts_text(lowered).split() if all(is_cjk(c) for c in t)] == bigrams


def test_underscores_split_words_everywhere() -> None:
    assert words_and_bigrams("snake_case x1") == (["snake", "case", "x1"], [])
    assert snippet_tokens("snake_case") == frozenset({"snake", "case"})
