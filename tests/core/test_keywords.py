"""Keyword extraction, MATCH query building and CJK bigrams: the pure rules (SPEC §3)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.core.keywords import build_match_query, extract_keywords, fts_text
from memoryd.core.text import cjk_bigrams, is_cjk


@pytest.mark.parametrize(
    "ch",
    [
        "数",  # CJK Unified Ideographs
        "㐀",  # Extension A
        "𠀀",  # Extension B
        "ひ",  # Hiragana
        "カ",  # Katakana
        "ー",  # Katakana prolonged sound mark, part of words
        "ｶ",  # Halfwidth Katakana
        "한",  # Hangul syllable
        "ᄀ",  # Hangul Jamo
        "ㄱ",  # Hangul Compatibility Jamo
        "豈",  # CJK Compatibility Ideographs
        "々",  # iteration mark, as in 人々
    ],
)
def test_cjk_letters(ch: str) -> None:
    assert is_cjk(ch)


@pytest.mark.parametrize("ch", ["a", "é", "Я", "1", " ", "。", "、", "「", "・", "＊", "ａ", "😀"])
def test_not_cjk(ch: str) -> None:
    assert not is_cjk(ch)


def test_bigrams_of_a_run() -> None:
    assert cjk_bigrams("数据库") == ["数据", "据库"]
    assert cjk_bigrams("数据") == ["数据"]
    assert cjk_bigrams("数") == ["数"]
    assert cjk_bigrams("") == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("数据库", "数据 据库"),
        ("用SQLite存数据", "用 SQLite 存数 数据"),
        ("我们用数据库。然后", "我们 们用 用数 数据 据库 。 然后"),
        ("a 数 b", "a 数 b"),
        ("東京でデータ", "東京 京で でデ デー ータ"),
        ("이 데이터는 빠르다", "이 데이 이터 터는 빠르 르다"),
        ("データ・ベース", "デー ータ ・ ベー ース"),
        ("plain English text.", "plain English text."),
        ("", ""),
    ],
)
def test_fts_text_turns_cjk_runs_into_bigrams(text: str, expected: str) -> None:
    assert fts_text(text) == expected


@settings(max_examples=300)
@given(st.text())
def test_fts_text_leaves_everything_but_cjk_untouched(text: str) -> None:
    out = fts_text(text)
    if not any(is_cjk(ch) for ch in text):
        assert out == text
    # Removing CJK characters and the spaces around them gives the same non-CJK text.
    assert [ch for ch in out if not is_cjk(ch) and not ch.isspace()] == [
        ch for ch in text if not is_cjk(ch) and not ch.isspace()
    ]


@settings(max_examples=300)
@given(st.text(alphabet="数据库东京データ한국어 a.\n", max_size=40))
def test_fts_text_bigrams_are_exactly_those_of_each_run(text: str) -> None:
    tokens = [t for t in fts_text(text).replace(".", " ").split() if is_cjk(t[0])]
    runs: list[str] = []
    current = ""
    for ch in text + " ":
        if is_cjk(ch):
            current += ch
        elif current:
            runs.append(current)
            current = ""
    assert tokens == [b for run in runs for b in cjk_bigrams(run)]


def test_keywords_are_lowercased_deduplicated_and_in_order() -> None:
    assert extract_keywords("SQLite WAL sqlite wal Mode") == ["sqlite", "wal", "mode"]


def test_stop_words_short_numbers_and_single_letters_are_dropped() -> None:
    query = "How do I fix the 2024 error 42 in a v2 build, x 7?"
    assert extract_keywords(query) == ["fix", "2024", "error", "v2", "build"]


def test_numbers_of_three_or_more_digits_are_keywords() -> None:
    query = "port 5173, HTTP 502 and issue #1234"
    assert extract_keywords(query) == ["port", "5173", "http", "502", "issue", "1234"]
    assert build_match_query("502") == '"502"'
    assert build_match_query("10 2") is None


def test_keywords_split_on_every_non_word_character() -> None:
    assert extract_keywords('foo-bar/baz_qux:quux.rs "NEAR(x)" AND*') == [
        "foo",
        "bar",
        "baz",
        "qux",
        "quux",
        "rs",
        "near",
    ]


def test_cjk_runs_are_kept_whole_and_split_from_latin() -> None:
    assert extract_keywords("配置SQLite数据库，然后 重启") == [
        "配置",
        "sqlite",
        "数据库",
        "然后",
        "重启",
    ]
    assert extract_keywords("数") == ["数"]


def test_a_cjk_run_is_dropped_only_when_it_is_entirely_a_stop_word() -> None:
    assert extract_keywords("的 了 是 目的 现在 是否 的话") == ["目的", "现在", "是否", "的话"]


@pytest.mark.parametrize("query", ["", "   ", "?!...", "the and of", "的 了", "12 4.5", "a b c"])
def test_nothing_to_search_builds_no_query(query: str) -> None:
    assert extract_keywords(query) == []
    assert build_match_query(query) is None


def test_match_query_quotes_and_ors_keywords() -> None:
    assert build_match_query("Running tests") == '"running" OR "tests"'


def test_cjk_keywords_become_bigram_phrases_plus_their_bigrams() -> None:
    assert build_match_query("数据") == '"数据"'
    assert build_match_query("数据库") == '"数据 据库" OR "数据" OR "据库"'


def test_a_single_cjk_character_is_a_prefix_query() -> None:
    assert build_match_query("数") == '"数"*'


def test_terms_shared_by_keywords_appear_once() -> None:
    assert build_match_query("数据库 数据") == '"数据 据库" OR "数据" OR "据库"'


@settings(max_examples=500)
@given(st.text())
def test_every_term_is_a_closed_fts5_string(query: str) -> None:
    built = build_match_query(query)
    if built is None:
        assert extract_keywords(query) == []
        return
    for term in built.split(" OR "):
        body = term.removesuffix("*")
        assert body.startswith('"') and body.endswith('"') and len(body) >= 2
        assert '"' not in body[1:-1].replace('""', "")
        assert "\0" not in body
