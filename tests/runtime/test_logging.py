"""Log output: event shape, JSON off a terminal, stdlib routing, levels, reloads."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from memoryd.errors import ConfigError
from memoryd.runtime.adapters.logging import NOISY_LOGGERS, configure_logging


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """configure_logging changes process-wide state; put it all back after each test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    noisy = {name: logging.getLogger(name).level for name in NOISY_LOGGERS}
    yield
    for handler in root.handlers:
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
    for name, old in noisy.items():
        logging.getLogger(name).setLevel(old)
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_is_one_parseable_line_per_event_with_bound_context() -> None:
    out = io.StringIO()
    configure_logging("info", "json", out)
    structlog.contextvars.bind_contextvars(request_id=7)
    log = structlog.get_logger("memoryd.actor").bind(workspace="/src/app")
    log.info("search", took_ms=3.5, mode="hybrid", results=2)
    log.debug("below the level")
    log.warning("sync", synced=1)

    first, second = json_lines(out)
    assert first["event"] == "search"
    assert first["level"] == "info"
    assert first["workspace"] == "/src/app"
    assert first["request_id"] == 7
    assert first["logger"] == "memoryd.actor"
    assert (first["took_ms"], first["mode"], first["results"]) == (3.5, "hybrid", 2)
    stamp = datetime.fromisoformat(first["timestamp"])
    assert stamp.tzinfo is not None
    assert stamp.utcoffset() == UTC.utcoffset(None)
    assert (second["event"], second["level"], second["synced"]) == ("sync", "warning", 1)


def test_auto_writes_json_off_a_terminal_and_console_on_one() -> None:
    piped = io.StringIO()
    configure_logging("info", "auto", piped)
    structlog.get_logger().info("started", pid=1)
    assert json_lines(piped)[0]["event"] == "started"

    terminal = Terminal()
    configure_logging("info", "auto", terminal)
    structlog.get_logger().info("started", pid=1)
    text = terminal.getvalue()
    assert "started" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_console_off_a_terminal_is_plain_text() -> None:
    out = io.StringIO()
    configure_logging("info", "console", out)
    structlog.get_logger().bind(workspace="/src/app").info("search", results=2)
    text = out.getvalue()
    assert "search" in text
    assert "workspace=/src/app" in text
    assert "\x1b[" not in text


def test_stdlib_logging_is_routed_through_the_same_format_and_level() -> None:
    out = io.StringIO()
    configure_logging("warning", "json", out)
    library = logging.getLogger("some.library")
    library.info("routine %s", "work")
    library.warning("disk %s", "full", extra={"path": "/x"})
    [line] = json_lines(out)
    assert line["event"] == "disk full"
    assert line["level"] == "warning"
    assert line["logger"] == "some.library"
    assert line["path"] == "/x"
    assert "timestamp" in line


def test_exceptions_are_rendered_on_the_same_json_line() -> None:
    out = io.StringIO()
    configure_logging("info", "json", out)
    try:
        _ = 1 / 0
    except ZeroDivisionError:
        structlog.get_logger().exception("flush failed", session="abc")
    [line] = json_lines(out)
    assert line["event"] == "flush failed"
    assert line["level"] == "error"
    assert "ZeroDivisionError" in line["exception"]
    assert "Traceback" in line["exception"]


def test_exceptions_are_rendered_on_the_console() -> None:
    out = io.StringIO()
    configure_logging("info", "console", out)
    try:
        raise ValueError("bad value")
    except ValueError:
        logging.getLogger("lib").exception("lib failed")
    assert "ValueError: bad value" in out.getvalue()


def test_reconfiguring_replaces_the_handler_and_applies_the_new_level() -> None:
    first = io.StringIO()
    configure_logging("info", "json", first)
    log = structlog.get_logger("memoryd.main")
    second = io.StringIO()
    configure_logging("debug", "json", second)  # e.g. a SIGHUP with a new log_level
    log.debug("reloaded")
    log.info("once")

    assert first.getvalue() == ""
    assert [line["event"] for line in json_lines(second)] == ["reloaded", "once"]
    owned = [h for h in logging.getLogger().handlers if type(h).__name__ == "_MemorydHandler"]
    assert len(owned) == 1


def test_noisy_libraries_are_quiet_unless_debugging() -> None:
    out = io.StringIO()
    configure_logging("info", "json", out)
    logging.getLogger("watchfiles.main").info("1 change detected")
    logging.getLogger("httpx").info("HTTP Request: POST http://model/v1")
    assert out.getvalue() == ""

    configure_logging("debug", "json", out)
    logging.getLogger("watchfiles.main").info("1 change detected")
    assert [line["event"] for line in json_lines(out)] == ["1 change detected"]


def test_loggers_used_before_a_reload_follow_it_and_are_captured() -> None:
    configure_logging("info", "json", io.StringIO())
    log = structlog.get_logger("memoryd.actor").bind(workspace="w")
    log.info("warm up")  # a cached logger would keep the first configuration from here on
    configure_logging("info", "json", io.StringIO())
    with capture_logs() as captured:
        log.info("search", took_ms=2, mode="keyword", results=0)
    assert captured == [
        {
            "event": "search",
            "log_level": "info",
            "workspace": "w",
            "took_ms": 2,
            "mode": "keyword",
            "results": 0,
        }
    ]


@pytest.mark.parametrize(
    ("level", "fmt", "key"),
    [("verbose", "json", "daemon.log_level"), ("info", "xml", "daemon.log_format")],
)
def test_bad_settings_name_the_config_key(level: str, fmt: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        configure_logging(level, fmt, io.StringIO())
    assert caught.value.key == key


def test_under_journald_each_line_carries_its_syslog_priority(tmp_path: Any) -> None:
    import os

    path = tmp_path / "journal-stream"
    with open(path, "w", encoding="utf-8") as stream:
        st = os.fstat(stream.fileno())
        configure_logging(
            "debug", "json", stream, env={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        )
        log = structlog.get_logger("memoryd.test")
        log.debug("d")
        log.info("i")
        log.warning("w")
        log.error("e")
        logging.getLogger("httpx").warning("a library's record")
        stream.flush()
        lines = path.read_text().splitlines()
        assert [line[:3] for line in lines] == ["<7>", "<6>", "<4>", "<3>", "<4>"]
        assert [json.loads(line[3:])["event"] for line in lines][:4] == ["d", "i", "w", "e"]

        other = tmp_path / "not-the-journal"  # JOURNAL_STREAM names another file: no prefix
        with open(other, "w", encoding="utf-8") as elsewhere:
            configure_logging(
                "info", "json", elsewhere, env={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
            )
            structlog.get_logger("memoryd.test").info("plain")
        assert other.read_text().startswith("{")


def test_syslog_priorities_of_the_levels() -> None:
    from memoryd.runtime.adapters.logging import syslog_priority

    assert [syslog_priority(level) for level in (10, 20, 30, 40, 50)] == [7, 6, 4, 3, 2]
