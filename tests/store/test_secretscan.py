"""Redaction rewrites (:mod:`memoryd.store.secretscan`) of files holding what UTF-8 cannot:
a JSON line whose string holds a lone surrogate (a cut emoji, ``"\\ud83d"``) and a secret,
next to bytes that are not valid UTF-8. The rewrite keeps every other byte exactly."""

from __future__ import annotations

import codecs
import json
from pathlib import Path

from bench.secrets_corpus import planted
from memoryd.core.secrets import scrubber
from memoryd.store.files import append_section
from memoryd.store.secretscan import redact_file, redacted_text

SECRET = next(p.values[0] for p in planted(per_kind=1, seed=3) if p.kind == "github-token")
LATIN1 = b'{"content":"caf\xe9 au lait"}\n'  # not UTF-8: kept as it is
CUT_EMOJI = json.dumps({"content": f"a cut emoji \ud83d then {SECRET}"})  # "\ud83d" escaped


def test_a_lone_surrogate_escape_in_a_redacted_json_line_keeps_the_other_bytes(
    tmp_path: Path,
) -> None:
    log = tmp_path / "log.jsonl"
    log.write_bytes(LATIN1 + CUT_EMOJI.encode() + b"\n" + LATIN1)
    assert redact_file(log, scrubber((), ())) == 1
    first, redacted, last, end = log.read_bytes().split(b"\n")
    assert first + b"\n" == LATIN1 == last + b"\n" and end == b""  # byte for byte
    value = json.loads(redacted.decode("utf-8"))["content"]  # strict UTF-8, valid JSON
    assert value.startswith("a cut emoji \ud83d then [REDACTED:github-token:")


def test_a_lone_surrogate_escape_in_a_redacted_utf16_json_line_stays_valid(
    tmp_path: Path,
) -> None:
    log = tmp_path / "log.jsonl"
    log.write_bytes(codecs.BOM_UTF16_LE + f"{CUT_EMOJI}\n".encode("utf-16-le"))
    assert redact_file(log, scrubber((), ())) == 1
    data = log.read_bytes()
    assert data.startswith(codecs.BOM_UTF16_LE)
    text = data[2:].decode("utf-16-le")  # strict: no lone surrogate written raw
    value = json.loads(text)["content"]
    assert value.startswith("a cut emoji \ud83d then [REDACTED:github-token:")


def test_a_lone_surrogate_appended_keeps_the_files_other_bytes(tmp_path: Path) -> None:
    """A client's lone surrogate (``remember`` with ``"\\ud800"``) is replaced alone; the
    file's bytes that are not UTF-8 stay (the whole file was re-encoded with "replace")."""
    memory = tmp_path / "MEMORY.md"
    memory.write_bytes(b"# Memory\n\nThe caf\xe9 menu.\n")
    append_section(memory, "## Note\n\nbad \ud800 char")
    assert memory.read_bytes() == b"# Memory\n\nThe caf\xe9 menu.\n\n## Note\n\nbad ? char\n"


def test_a_redacted_journal_line_with_a_lone_surrogate_encodes_as_the_journal_does() -> None:
    """The purge of an open session's journal encodes the redacted text with
    ``surrogateescape``: a raw ``\\ud83d`` raised UnicodeEncodeError out of the purge."""
    text = f"{CUT_EMOJI}\n"
    data = redacted_text(text, scrubber((), ()), jsonl=True).encode("utf-8", "surrogateescape")
    value = json.loads(data)["content"]
    assert value.startswith("a cut emoji \ud83d then [REDACTED:github-token:")


def test_a_clients_lone_surrogates_appended_leave_the_file_valid(tmp_path: Path) -> None:
    """``remember`` or a flush summary with a lone surrogate (``"\\ud800"``, ``"\\udce9"``)
    appended to a UTF-16 ``MEMORY.md`` wrote the surrogate as a raw, invalid UTF-16 unit; to
    a UTF-8 one, ``"\\udce9"`` became the raw byte 0xE9: either way the file was no longer
    valid (the index warned about it on every read). They are replaced by ``?``."""
    wide = tmp_path / "wide.md"
    wide.write_bytes(codecs.BOM_UTF16_LE + "# Memory\n".encode("utf-16-le"))
    append_section(wide, "bad \ud800 and \udce9 chars")
    data = wide.read_bytes()
    assert data.startswith(codecs.BOM_UTF16_LE)
    assert data[2:].decode("utf-16-le") == "# Memory\n\nbad ? and ? chars\n"  # strict
    narrow = tmp_path / "narrow.md"
    narrow.write_bytes(b"# Memory\n")
    append_section(narrow, "bad \udce9 char")
    assert narrow.read_bytes().decode("utf-8") == "# Memory\n\nbad ? char\n"  # strict
