"""Keyword queries against a real SQLite FTS5 table (`porter unicode61` + CJK bigrams)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.core.keywords import build_match_query, fts_text

try:
    import pysqlite3.dbapi2 as sqlite3  # type: ignore[import-untyped, unused-ignore]
except ImportError:  # pragma: no cover - platforms without pysqlite3-binary
    import sqlite3  # type: ignore[no-redef, unused-ignore]

DOCS = {
    1: "我们使用数据库存储用户的记忆内容",
    2: "今天天气很好，适合出去散步",
    3: "東京のサーバーでデータベースを設計しました",
    4: "이 데이터베이스는 아주 빠르다",
    5: "The watcher runs in its own thread",
    6: "Tests use a real SQLite file on a temp path",
    7: "Notes about the NEAR operator and column:filters",
}


@pytest.fixture(scope="module")
def conn() -> Iterator[Any]:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE notes USING fts5(text, tokenize='porter unicode61')")
    db.executemany(
        "INSERT INTO notes (rowid, text) VALUES (?, ?)",
        [(rowid, fts_text(text)) for rowid, text in DOCS.items()],
    )
    yield db
    db.close()


def search(conn: Any, query: str) -> set[int]:
    match = build_match_query(query)
    if match is None:
        return set()
    rows = conn.execute("SELECT rowid FROM notes WHERE notes MATCH ? ORDER BY rank", (match,))
    return {row[0] for row in rows}


def test_a_two_character_chinese_word_finds_the_sentence_holding_it(conn: Any) -> None:
    assert search(conn, "数据") == {1}
    assert search(conn, "记忆") == {1}
    assert search(conn, "天气") == {2}


def test_a_longer_chinese_run_ranks_the_exact_text_first() -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE notes USING fts5(text, tokenize='porter unicode61')")
    docs = ["数据很多，存储空间不够", "我们使用数据库存储用户的记忆内容", "天气很好"]
    db.executemany("INSERT INTO notes (text) VALUES (?)", [(fts_text(d),) for d in docs])
    match = build_match_query("数据库存储")
    assert match is not None
    rows = db.execute("SELECT rowid FROM notes WHERE notes MATCH ? ORDER BY rank", (match,))
    assert [row[0] for row in rows] == [2, 1]
    db.close()


def test_a_chinese_question_finds_the_answer_without_an_exact_phrase(conn: Any) -> None:
    assert 1 in search(conn, "用户记忆存在哪里")


def test_a_single_chinese_character_matches_bigrams_starting_with_it(conn: Any) -> None:
    assert search(conn, "散") == {2}


def test_japanese_words_are_found(conn: Any) -> None:
    assert search(conn, "データベース") == {3}
    assert search(conn, "設計") == {3}
    assert search(conn, "東京") == {3}


def test_korean_words_are_found(conn: Any) -> None:
    assert search(conn, "데이터베이스") == {4}
    assert search(conn, "빠르다") == {4}


def test_porter_stemming_lets_running_find_runs(conn: Any) -> None:
    assert search(conn, "running") == {5}
    assert search(conn, "testing SQLITE") == {6}


def test_english_stays_out_of_cjk_results(conn: Any) -> None:
    assert search(conn, "database") == set()
    assert search(conn, "数据") & {5, 6, 7} == set()


@pytest.mark.parametrize(
    "query",
    ["", "   ", "?!", "...", '"', "the of and", "的 了 是", "it is what it is", "42 7"],
)
def test_only_punctuation_or_stop_words_gives_no_query_and_no_results(
    conn: Any, query: str
) -> None:
    assert build_match_query(query) is None
    assert search(conn, query) == set()


@pytest.mark.parametrize(
    "query",
    [
        '"unbalanced',
        "watch*",
        "*",
        "NEAR(watcher runs)",
        "NEAR(",
        "-watcher",
        "text:watcher",
        "column:filters",
        "watcher AND",
        "OR runs",
        "NOT NOT",
        "^watcher",
        "(watcher",
        "watcher)",
        "{text}: runs",
        "runs\x00watcher",
        '"" "" ""',
        "AND OR NOT NEAR",
        "数据\x00库",
    ],
)
def test_fts5_syntax_in_a_query_never_raises(conn: Any, query: str) -> None:
    search(conn, query)


def test_fts5_operators_are_searched_as_words(conn: Any) -> None:
    assert search(conn, "NEAR(") == {7}
    assert search(conn, "column:filters") == {7}
    assert search(conn, "-watcher") == {5}


_fts_syntax = st.sampled_from(
    [
        '"',
        "*",
        "NEAR(",
        "NEAR",
        "-",
        ":",
        "AND",
        "OR",
        "NOT",
        "^",
        "(",
        ")",
        "{",
        "}",
        "\x00",
        "+",
        "数",
        "数据库",
        "runs",
        " ",
        "text:",
    ]
)


@settings(max_examples=300)
@given(st.one_of(st.text(), st.lists(st.one_of(_fts_syntax, st.text(max_size=3))).map("".join)))
def test_any_text_builds_a_query_fts5_accepts(conn: Any, query: str) -> None:
    search(conn, query)


def test_a_very_long_query_is_accepted(conn: Any) -> None:
    long_query = " ".join(f"word{i}" for i in range(2000)) + " " + "数据库存储" * 400
    assert 1 in search(conn, long_query)
