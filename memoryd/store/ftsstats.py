"""What FTS5 knows about its own table: the row count its BM25 IDFs are computed over.

FTS5 keeps an "averages" record at rowid 1 of its ``<table>_data`` shadow table: the number
of rows, then the total token count of each column, as SQLite varints. BM25 reads ``N`` from
there; :func:`fts_rows` reads the same number in O(1), so the absolute keyword score of
:func:`memoryd.core.ranking.keyword_score` uses exactly the ``N`` of the ``bm25()`` values
it rescales (``SELECT count(*)`` would scan an index).
"""

from __future__ import annotations

from memoryd.store.connection import Connection

FTS_TABLE = "chunks_fts"
AVERAGES_ROWID = 1


def decode_varint(buf: bytes, at: int = 0) -> tuple[int, int]:
    """A SQLite varint at ``buf[at:]``: ``(value, next offset)``; raises IndexError if cut."""
    value = 0
    for k in range(8):
        byte = buf[at + k]
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, at + k + 1
    return (value << 8) | buf[at + 8], at + 9


def fts_rows(conn: Connection, table: str = FTS_TABLE) -> int:
    """Rows in the FTS5 ``table`` as its BM25 sees them; 0 when the record is unreadable."""
    row = conn.execute(
        f"SELECT block FROM {table}_data WHERE id = ?",  # table: a constant of ours
        (AVERAGES_ROWID,),
    ).fetchone()
    if row is None or not isinstance(row[0], bytes):
        return 0
    try:
        return decode_varint(row[0])[0]
    except IndexError:
        return 0
