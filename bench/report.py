"""Results: one :class:`Row` per figure, the printed table and the JSON file.

A row puts a memoryd figure next to the raw building-block figure for the same work,
measured in the same run; ``ratio`` is memoryd ÷ raw (for latencies lower is better, for
rates higher is better). A :class:`Target` applies either to the ratio or to the memoryd
figure itself, and decides pass/fail.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (``pct`` in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def median(values: Sequence[float]) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


@dataclass(frozen=True, slots=True)
class Target:
    """A pass/fail rule: ``on`` the ratio or the memoryd figure, ``op`` ``<=`` or ``>=``."""

    on: Literal["ratio", "memoryd"]
    op: Literal["<=", ">="]
    limit: float
    unit: str = ""

    def check(self, memoryd: float | None, ratio: float | None) -> bool | None:
        value = ratio if self.on == "ratio" else memoryd
        if value is None or math.isnan(value):
            return None
        return value <= self.limit if self.op == "<=" else value >= self.limit

    def describe(self) -> str:
        sign = "≤" if self.op == "<=" else "≥"
        if self.on == "ratio":
            return f"ratio {sign} {self.limit:g}"
        return f"{sign} {_number(self.limit)}{(' ' + self.unit) if self.unit else ''}"


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the table."""

    scenario: str
    unit: str
    memoryd: float | None
    raw: float | None = None
    raw_label: str = ""
    ratio: float | None = None
    target: Target | None = None
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def effective_ratio(self) -> float | None:
        if self.ratio is not None:
            return self.ratio
        if self.memoryd is None or self.raw is None or self.raw == 0:
            return None
        return self.memoryd / self.raw

    @property
    def passed(self) -> bool | None:
        if self.target is None:
            return None
        return self.target.check(self.memoryd, self.effective_ratio)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ratio"] = self.effective_ratio
        out["target"] = self.target.describe() if self.target else None
        out["passed"] = self.passed
        return out


def _number(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def _cell(value: float | None, unit: str) -> str:
    text = _number(value)
    return text if text == "—" or not unit else f"{text} {unit}"


def verdict(row: Row) -> str:
    passed = row.passed
    if row.target is None:
        return ""
    if passed is None:
        return "n/a"
    return "PASS" if passed else "FAIL"


def format_table(rows: Sequence[Row]) -> str:
    """A fixed-width text table: scenario, memoryd, raw, ratio, target, result."""
    header = ("scenario", "memoryd", "raw", "ratio", "target", "result")
    body = [
        (
            row.scenario,
            _cell(row.memoryd, row.unit),
            _cell(row.raw, row.unit) if row.raw is not None else (row.raw_label or "—"),
            f"{row.effective_ratio:.2f}×" if row.effective_ratio is not None else "—",
            row.target.describe() if row.target else "—",
            verdict(row) or "—",
        )
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]

    def render(line: Sequence[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))

    rule = "  ".join("-" * w for w in widths)
    out = [render(header), rule, *(render(line) for line in body)]
    notes = [f"  [{i + 1}] {row.scenario}: {row.note}" for i, row in enumerate(rows) if row.note]
    if notes:
        out += ["", "notes:", *notes]
    return "\n".join(line.rstrip() for line in out)


def format_markdown(rows: Sequence[Row]) -> str:
    """The same table as GitHub markdown (for the README)."""
    lines = [
        "| scenario | memoryd | raw | ratio | target | result |",
        "| --- | ---: | ---: | ---: | --- | --- |",
    ]
    for row in rows:
        raw = _cell(row.raw, row.unit) if row.raw is not None else (row.raw_label or "—")
        ratio = f"{row.effective_ratio:.2f}×" if row.effective_ratio is not None else "—"
        target = row.target.describe() if row.target else "—"
        lines.append(
            f"| {row.scenario} | {_cell(row.memoryd, row.unit)} | {raw} | {ratio} | {target} "
            f"| {verdict(row) or '—'} |"
        )
    return "\n".join(lines)


def failures(rows: Sequence[Row]) -> list[Row]:
    return [row for row in rows if row.passed is False]


def write_json(path: Path, rows: Sequence[Row], meta: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"meta": meta, "rows": [row.to_json() for row in rows]}
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n")
    return path
