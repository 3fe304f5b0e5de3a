"""Smoke tests of the benchmark suite's pure parts: the corpus and the report (no timing)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench.corpus import corpus_files, count_chunks, queries, write_corpus
from bench.report import Row, Target, format_markdown, format_table, percentile, write_json
from memoryd.core.keywords import build_match_query
from memoryd.core.text import is_cjk
from memoryd.core.workspace import session_date_from_name

SESSION_NAME = re.compile(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+-[0-9a-f]{8}\.md")


def test_corpus_is_deterministic_and_sized_by_the_chunker() -> None:
    first = list(corpus_files(300, seed=3))
    again = list(corpus_files(300, seed=3))
    other = list(corpus_files(300, seed=4))
    assert first == again
    assert [f.text for f in first] != [f.text for f in other]
    total = sum(count_chunks(f.text) for f in first)
    assert total == sum(f.chunks for f in first)
    assert total >= 300
    assert total - first[-1].chunks < 300  # stops as soon as the target is reached


def test_corpus_looks_like_memory() -> None:
    files = list(corpus_files(200, seed=1))
    assert files[0].rel == "MEMORY.md"
    sessions = [f for f in files if f.rel.startswith("sessions/")]
    assert sessions
    for item in sessions:
        name = item.rel.removeprefix("sessions/")
        assert SESSION_NAME.fullmatch(name), name
        assert session_date_from_name(name) is not None
        assert item.text.startswith("<!-- flush ")
        assert "\n## " in item.text
    text = "".join(f.text for f in files)
    assert any(is_cjk(ch) for ch in text)


def test_write_corpus_writes_what_it_reports(tmp_path: Path) -> None:
    written = write_corpus(tmp_path / "ws", 150, seed=2)
    on_disk = sorted(tmp_path.joinpath("ws").rglob("*.md"))
    assert written.files == len(on_disk)
    assert written.chunks == sum(count_chunks(p.read_text()) for p in on_disk)


def test_queries_are_deterministic_and_searchable() -> None:
    assert queries(50, seed=9) == queries(50, seed=9)
    assert all(build_match_query(q) is not None for q in queries(50, seed=9))


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([3.0], 99) == 3.0


def test_report_table_shows_ratio_target_and_verdict(tmp_path: Path) -> None:
    rows = [
        Row("search p50", "ms", 3.0, 2.0, target=Target("ratio", "<=", 1.5), note="n=10"),
        Row("indexing", "chunks/s", 100.0, 1000.0, target=Target("ratio", ">=", 0.5)),
        Row("rss", "MB", 70.0, target=Target("memoryd", "<=", 80, "MB")),
        Row("info only", "ms", 1.0),
    ]
    assert [r.passed for r in rows] == [True, False, True, None]
    table = format_table(rows)
    lines = table.splitlines()
    assert lines[0].split() == ["scenario", "memoryd", "raw", "ratio", "target", "result"]
    search = next(line for line in lines if line.startswith("search p50"))
    assert "1.50×" in search and "ratio ≤ 1.5" in search and search.endswith("PASS")
    assert next(line for line in lines if line.startswith("indexing")).endswith("FAIL")
    assert "≤ 80.0 MB" in table
    assert "n=10" in table
    assert format_markdown(rows).count("\n") == len(rows) + 1
    path = write_json(tmp_path / "r.json", rows, {"mode": "test"})
    data = json.loads(path.read_text())
    assert data["meta"] == {"mode": "test"}
    assert data["rows"][1]["passed"] is False
    assert data["rows"][0]["ratio"] == 1.5
