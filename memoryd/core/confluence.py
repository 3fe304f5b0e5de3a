"""Experience confluence decisions, prompts and answer checks (SPEC §10) — pure.

Everything the confluence run decides without touching a file, the clock or a model:

- :func:`consolidated_sections` — the ``##`` sections of a workspace ``MEMORY.md`` (the
  material), each with a digest and its source pointer ``<workspace>:MEMORY.md#<heading>``;
- :class:`Watermark` and :func:`unseen` — which sections are new since the last run. The
  watermark counts sections by content digest, never by file times: touching a file, or a
  dream that rewrites it with the same sections, brings nothing new;
- :func:`plan_batches` — new sections cut into distiller batches (ids ``S1``, ``S2`` …);
- :func:`distiller_prompt` / :func:`distiller_input` / :func:`parse_candidates` — the
  distiller call; an answer that is not a JSON list of ``{title, body, sources}`` raises
  :class:`~memoryd.errors.ModelError` (an error, never "no lessons");
- :func:`screener_prompt` / :func:`screener_input` / :func:`parse_verdict` — the screener
  call, which sees only a title and a body. ``shareable`` must be a JSON boolean; anything
  else is *not shareable*, with the reason and the start of the answer recorded;
- :func:`leak_check` — a local backstop: a lesson naming a registered workspace (its memory
  directory, ``org/repo`` or path) is rejected without asking the screener;
- :func:`render_lessons` — accepted lessons as ``experience.md`` sections with their sources;
- :func:`next_daily_run` — when the daily schedule runs next.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from blake3 import blake3

from memoryd.core.dreaming import normalize_heading, strip_footer
from memoryd.core.flushing import strip_control
from memoryd.core.markdown import Fences, heading, sections, unwrap_fence
from memoryd.core.templates import is_scaffold
from memoryd.core.times import rfc3339
from memoryd.errors import ModelError

#: Characters of section text one distiller batch holds (a longer section is cut).
BATCH_CHARS = 12_000
#: Sections one distiller batch holds at most.
BATCH_SECTIONS = 24
#: A single section is cut to this many characters in the distiller prompt.
SECTION_CHARS = 4_000
#: Distiller batches of one run; sections beyond them wait for the next run.
MAX_BATCHES = 8
#: Candidates of one batch that are screened; the rest are rejected unscreened.
MAX_CANDIDATES = 12
MAX_TITLE_CHARS = 160
MAX_BODY_CHARS = 3_000
#: How much of an unusable model answer a reason quotes.
QUOTE_CHARS = 160
#: Markers shorter than this are too generic for :func:`leak_check`.
MIN_MARKER_CHARS = 5
DAY = timedelta(days=1)
#: The daily schedule waits this long after the daemon starts before its first run.
STARTUP_DELAY = timedelta(minutes=5)

EXPERIENCE_HEADER = (
    "# Experience\n\n"
    "> Lessons memoryd's confluence distilled from the curated memory of all workspaces. "
    "Each names its sources. Edit freely.\n"
)

_SOURCE_ID = re.compile(r"\A\[?\s*(S\d{1,4})\s*\]?\Z", re.I)


# ---------------------------------------------------------------------------- material


@dataclass(frozen=True, slots=True)
class MemorySection:
    """One ``##`` section of a workspace's curated ``MEMORY.md``."""

    workspace: str
    """The workspace's memory directory name, ``<slug>-<hash8>``."""
    heading: str
    body: str
    """The text under the heading, ``###`` subsections included, trimmed."""

    @property
    def digest(self) -> str:
        """16 hex chars of blake3 over the normalised heading and whitespace-collapsed body."""
        text = f"{normalize_heading(self.heading)}\n{' '.join(self.body.split())}"
        return blake3(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]

    @property
    def pointer(self) -> str:
        """``<workspace>:MEMORY.md#<heading>``: where a person finds the section."""
        return f"{self.workspace}:MEMORY.md#{self.heading}"


def consolidated_sections(workspace: str, text: str | None) -> list[MemorySection]:
    """The ``##`` sections of ``text`` (a workspace ``MEMORY.md``), in file order.

    Headings inside code fences do not count; a ``#`` title ends a section; ``###`` and
    deeper stay inside theirs. A missing, scaffold-only or heading-less file has none, and
    dream footers are ignored (they change with every dream).
    """
    if not text or is_scaffold(text):
        return []
    lines = strip_footer(text.replace("\r\n", "\n")).split("\n")
    found: list[MemorySection] = []
    title: str | None = None  # the open ## section's title
    first = 0  # its first body line
    for part in sections(lines):
        h = part.heading
        if h is None or h.level > 2:
            continue  # text before the first heading; ### and deeper stay in their section
        if title is not None:
            found.append(MemorySection(workspace, title, _body(lines, first, part.first)))
        title = h.title if h.level == 2 and h.title else None
        first = part.first + 1
    if title is not None:
        found.append(MemorySection(workspace, title, _body(lines, first, len(lines))))
    return found


def _body(lines: Sequence[str], first: int, stop: int) -> str:
    return "\n".join(lines[first:stop]).strip()


# ---------------------------------------------------------------------------- watermark


@dataclass(frozen=True, slots=True)
class Watermark:
    """What one workspace had already been distilled at the last run.

    ``sections`` is how many consolidated sections its ``MEMORY.md`` had then; ``digests``
    are the sections already taken by a distiller batch (pruned to those still present).
    """

    sections: int = 0
    digests: frozenset[str] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        return {"sections": self.sections, "digests": sorted(self.digests)}

    @classmethod
    def from_dict(cls, raw: object) -> Watermark:
        """A watermark read from the state file; anything malformed is an empty one."""
        if not isinstance(raw, Mapping):
            return cls()
        count, digests = raw.get("sections"), raw.get("digests")
        if not isinstance(count, int) or isinstance(count, bool) or not isinstance(digests, list):
            return cls()
        return cls(max(count, 0), frozenset(d for d in digests if isinstance(d, str)))

    def advance(self, current: Sequence[MemorySection], taken: Iterable[str]) -> Watermark:
        """The watermark after a run that took the digests ``taken`` from ``current``."""
        present = {s.digest for s in current}
        return Watermark(len(current), frozenset((self.digests | set(taken)) & present))


def unseen(sections: Sequence[MemorySection], mark: Watermark) -> list[MemorySection]:
    """The sections the watermark has not seen (one per digest, file order kept)."""
    out: list[MemorySection] = []
    seen = set(mark.digests)
    for section in sections:
        if section.digest not in seen:
            seen.add(section.digest)
            out.append(section)
    return out


# ---------------------------------------------------------------------------- distiller


@dataclass(frozen=True, slots=True)
class Batch:
    """Sections sent to one distiller call; ``S<n>`` is the id of ``sections[n-1]``."""

    sections: tuple[MemorySection, ...]

    def by_id(self) -> dict[str, MemorySection]:
        return {f"S{i}": s for i, s in enumerate(self.sections, 1)}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def plan_batches(
    sections: Sequence[MemorySection],
    *,
    max_chars: int = BATCH_CHARS,
    max_sections: int = BATCH_SECTIONS,
    max_batches: int = MAX_BATCHES,
) -> list[Batch]:
    """Cut ``sections`` (in order) into at most ``max_batches`` batches.

    A batch holds at most ``max_sections`` sections and ``max_chars`` characters of
    (cut) section text, but always at least one section. Sections that do not fit in
    ``max_batches`` are left for the next run.
    """
    batches: list[Batch] = []
    current: list[MemorySection] = []
    size = 0
    for section in sections:
        length = len(section.heading) + min(len(section.body), SECTION_CHARS)
        if current and (size + length > max_chars or len(current) >= max_sections):
            batches.append(Batch(tuple(current)))
            current, size = [], 0
            if len(batches) >= max_batches:
                return batches
        current.append(section)
        size += length
    if current and len(batches) < max_batches:
        batches.append(Batch(tuple(current)))
    return batches


def distiller_prompt() -> str:
    """The system prompt of a distiller call."""
    return """\
You distil reusable engineering lessons from the curated memory of software projects.
You are given sections of project memory; each starts with its id in brackets, e.g. [S1].

Write only lessons that would help in ANY other software project:
- general practices, pitfalls of tools, languages and libraries, debugging techniques,
  problem -> solution pairs that are not tied to one codebase;
- leave out everything specific to where it came from: names of projects, products,
  companies, customers and people; repository names, hostnames, URLs, IP addresses, file
  paths, internal service, table or variable names, credentials, business numbers;
- do not invent anything the sections do not support; several sections may support one
  lesson; most sections hold only project-specific facts: skip those.

Answer with a JSON array only: no prose and no code fence. Each item is
{"title": "<a short title, one line>", "body": "<the lesson in one to five sentences>",
 "sources": ["S1"]}
where "sources" lists the ids of the sections the lesson came from.
Answer [] when no section holds a reusable lesson.
"""


def distiller_input(batch: Batch) -> str:
    """The user message of a distiller call: each section under its id (no workspace)."""
    parts = [
        f"[{sid}] ## {section.heading}\n{_cut(section.body, SECTION_CHARS)}".rstrip()
        for sid, section in batch.by_id().items()
    ]
    return "\n\n".join(parts) + "\n"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A lesson the distiller proposed; ``problem`` set = rejected before screening."""

    title: str
    body: str
    sources: tuple[MemorySection, ...]
    problem: str | None = None

    @property
    def pointers(self) -> list[str]:
        return [s.pointer for s in self.sources]


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError(f"duplicate key in an object: {sorted(keys)}")
    return dict(pairs)


def _load_json(answer: str) -> Any:
    """The JSON value of ``answer`` (one code fence around it is allowed); ValueError."""
    text = answer.replace("\r\n", "\n").strip()
    inside = unwrap_fence(text, ("", "json"))
    if inside is not None:
        text = inside.strip()
    return json.loads(text, object_pairs_hook=_no_duplicate_keys)


def quote(answer: str) -> str:
    """The start of a model answer, on one line, for a reason or an error message."""
    return repr(_cut(" ".join(answer.split()), QUOTE_CHARS))


def _one_line(text: str) -> str:
    return " ".join(text.split()).lstrip("#").strip()


def parse_candidates(answer: str, batch: Batch) -> list[Candidate]:
    """The candidates of a distiller answer for ``batch``.

    The answer must be a JSON array (``[]`` = no lessons) of objects with a non-blank
    string ``title`` and ``body`` and a list of strings ``sources``; anything else raises
    :class:`ModelError` naming what is wrong. A well-formed candidate that cites no
    section of the batch (ids ``S<n>`` or exact pointers), is too long or comes after
    :data:`MAX_CANDIDATES` carries a ``problem`` and is not screened.
    """
    try:
        value = _load_json(answer)
    except ValueError as exc:
        raise ModelError(f"the distiller answer is not JSON ({exc}): {quote(answer)}") from None
    if not isinstance(value, list):
        raise ModelError(
            f"the distiller answer is a JSON {type(value).__name__}, not a list: {quote(answer)}"
        )
    by_id = batch.by_id()
    by_pointer = {s.pointer: s for s in batch.sections}
    out: list[Candidate] = []
    for number, item in enumerate(value, 1):
        if not isinstance(item, dict):
            raise ModelError(f"distiller item {number} is not an object: {quote(answer)}")
        title, body, sources = item.get("title"), item.get("body"), item.get("sources")
        if not isinstance(title, str) or not title.strip():
            raise ModelError(f"distiller item {number} has no string 'title': {quote(answer)}")
        if not isinstance(body, str) or not body.strip():
            raise ModelError(f"distiller item {number} has no string 'body': {quote(answer)}")
        if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
            raise ModelError(
                f"distiller item {number} has no list of strings 'sources': {quote(answer)}"
            )
        found: list[MemorySection] = []
        unknown: list[str] = []
        for raw in sources:
            match = _SOURCE_ID.match(raw.strip())
            section = by_id.get(match.group(1).upper()) if match else by_pointer.get(raw.strip())
            if section is None:
                unknown.append(raw)
            elif section not in found:
                found.append(section)
        title, body = _one_line(strip_control(title)), strip_control(body).strip()
        problem = None
        if unknown:
            problem = f"cites sources that are not in its batch: {', '.join(map(repr, unknown))}"
        elif not found:
            problem = "cites no source"
        elif len(title) > MAX_TITLE_CHARS or len(body) > MAX_BODY_CHARS:
            problem = f"longer than {MAX_TITLE_CHARS} (title) or {MAX_BODY_CHARS} (body) chars"
        elif len(out) >= MAX_CANDIDATES:
            problem = f"over the limit of {MAX_CANDIDATES} candidates per batch"
        out.append(Candidate(title or "untitled", body, tuple(found), problem))
    return out


# ---------------------------------------------------------------------------- screener

#: The screener is told it cannot see the material; a test keeps this sentence in its prompt.
SCREENER_BLIND = (
    "You cannot see the material it was written from, nor which project that was: "
    "this is deliberate."
)


def screener_prompt() -> str:
    """The system prompt of a screener call."""
    return f"""\
You are a privacy screener. You are shown ONE lesson, a title and a body, that another
assistant wrote from the private memory of some software project. {SCREENER_BLIND}
Judge only the text in front of you.

Decide whether this text may be shown to ANY other project, of any other company.
It may not be shown if it names or reveals a project, product, company, customer or
person; a repository, hostname, URL, IP address, file path, internal service, table or
variable name; a credential or key; business figures; or anything that only makes sense
inside one particular codebase. General engineering knowledge may be shown.
If you are unsure, it is not shareable.

Answer with one JSON object only, no prose and no code fence:
{{"shareable": true or false, "reason": "<one sentence>"}}
"""


def screener_input(title: str, body: str) -> str:
    """The user message of a screener call: the title and the body, nothing else."""
    return f"Title: {title}\n\nBody:\n{body}\n"


@dataclass(frozen=True, slots=True)
class Verdict:
    shareable: bool
    reason: str


def parse_verdict(answer: str) -> Verdict:
    """The screener's verdict; never raises.

    Only a JSON object whose ``shareable`` is the JSON boolean ``true`` and whose
    ``reason`` is a string is shareable. ``false`` is a rejection with the screener's
    reason; anything else — not JSON, not an object, ``"true"``, ``1``, a missing or
    non-string reason, a duplicated key — is *not shareable*, and the reason quotes the
    start of the answer so a person can tell "rejected" from "broken".
    """

    def unusable(why: str) -> Verdict:
        return Verdict(False, f"screener answer unusable ({why}): {quote(answer)}")

    try:
        value = _load_json(answer)
    except ValueError:
        return unusable("not JSON")
    if not isinstance(value, dict):
        return unusable(f"a JSON {type(value).__name__}, not an object")
    shareable, reason = value.get("shareable"), value.get("reason")
    if not isinstance(shareable, bool):
        return unusable("'shareable' is not a JSON boolean")
    if not isinstance(reason, str):
        return unusable("'reason' is not a string")
    reason = " ".join(reason.split())
    if not shareable:
        return Verdict(False, f"screener: {reason or 'no reason given'}")
    return Verdict(True, reason)


def leak_check(title: str, body: str, markers: Iterable[str]) -> str | None:
    """Why the lesson must not be shared because it names a workspace, or None.

    ``markers`` are the memory directory names, ``org/repo`` identities and paths of the
    registered workspaces; one occurring in the title or body (ignoring case) rejects it.
    """
    text = f"{title}\n{body}".casefold()
    for marker in markers:
        if len(marker) >= MIN_MARKER_CHARS and marker.casefold() in text:
            return f"names a workspace ({marker!r})"
    return None


# ---------------------------------------------------------------------------- output


@dataclass(frozen=True, slots=True)
class Lesson:
    """An accepted lesson and the pointers to the sections it came from."""

    title: str
    body: str
    sources: tuple[str, ...]


def existing_titles(text: str | None) -> set[str]:
    """The normalised ``##`` headings of ``experience.md`` (to skip a lesson already there)."""
    return {normalize_heading(s.heading) for s in consolidated_sections("", text)}


def _escape_headings(body: str) -> str:
    """``body`` with heading lines outside code fences escaped, so a lesson stays one section."""
    out: list[str] = []
    fences = Fences()
    for line in body.split("\n"):
        if not fences.feed(line) and heading(line) is not None:
            at = line.index("#")
            line = f"{line[:at]}\\{line[at:]}"
        out.append(line)
    return "\n".join(out)


def render_lessons(lessons: Sequence[Lesson], now: datetime) -> str:
    """The ``experience.md`` sections of ``lessons``, each with its sources and the time."""
    when = rfc3339(now)
    blocks = []
    for lesson in lessons:
        sources = "\n".join(f"- {pointer}" for pointer in lesson.sources)
        blocks.append(
            f"## {_one_line(lesson.title)}\n\n{_escape_headings(lesson.body.strip())}\n\n"
            f"Sources:\n{sources}\n<!-- confluence {when} -->"
        )
    return "\n\n".join(blocks)


def next_daily_run(last_started: datetime | None, daemon_started: datetime) -> datetime:
    """When the daily schedule runs next: a day after the last run (any trigger), and not
    before :data:`STARTUP_DELAY` after the daemon started."""
    earliest = daemon_started + STARTUP_DELAY
    if last_started is None:
        return earliest
    return max(last_started + DAY, earliest)
