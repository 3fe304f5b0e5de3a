"""The ingest registry (``<workspace dir>/ingested.jsonl``): the last mark per transcript,
and a file that holds about one line per transcript however often sessions close."""

from __future__ import annotations

from pathlib import Path

from memoryd.store import ingested
from memoryd.store.journal import IngestMark


def _mark(path: str, offset: int) -> IngestMark:
    return IngestMark(path, "claude-code", offset, f"t{offset}", 0, float(offset))


def test_a_resumed_session_closed_again_and_again_keeps_the_file_small(tmp_path: Path) -> None:
    """Each close of a resumed agent session appended one more line for its transcript: 10,000
    closes were 3,000 lines (500 KB here), read whole again after each close."""
    registry = ingested.Registry(tmp_path)
    others = [_mark(f"/t/other-{n}.jsonl", n) for n in range(20)]
    registry.record(others, "first")
    for n in range(1, 3001):
        registry.record([_mark("/t/resumed.jsonl", n * 100)], f"s{n}")
    data = ingested.registry_path(tmp_path).read_bytes()
    assert len(data) <= 2 * ingested.COMPACT_MIN_BYTES, len(data)
    marks = ingested.load(tmp_path)
    assert marks["/t/resumed.jsonl"] == _mark("/t/resumed.jsonl", 300_000)
    assert [marks[m.path] for m in others] == others


def test_the_mark_after_a_torn_line_is_kept(tmp_path: Path) -> None:
    """A crash mid-append left a torn last line; the next mark was glued to it and lost."""
    ingested.record(tmp_path, [_mark("/t/a.jsonl", 1)], "s")
    with ingested.registry_path(tmp_path).open("ab") as handle:
        handle.write(b'{"path": "/t/b.jso')
    assert ingested.load(tmp_path) == {"/t/a.jsonl": _mark("/t/a.jsonl", 1)}
    ingested.record(tmp_path, [_mark("/t/c.jsonl", 2)], "s")
    assert ingested.load(tmp_path) == {
        "/t/a.jsonl": _mark("/t/a.jsonl", 1),
        "/t/c.jsonl": _mark("/t/c.jsonl", 2),
    }
    ingested.compact(tmp_path)
    assert ingested.registry_path(tmp_path).read_bytes().count(b"\n") == 2
    assert len(ingested.load(tmp_path)) == 2
