"""Log configuration: structlog events, JSON off a terminal, stdlib logging routed through it.

memoryd logs *events* with bound context (``log.bind(workspace=…)`` once per actor, then
``log.info("search", took_ms=…, mode=…, results=…)``). :func:`configure_logging` decides how
they are written:

- ``json``: one JSON object per line — ``event``, ``level``, ``timestamp`` (ISO 8601, UTC),
  ``logger`` and every bound key; an exception becomes an ``exception`` string. This is what
  the journal and log files get.
- ``console``: structlog's aligned, human renderer (colours on a terminal).
- ``auto`` (the default): ``console`` when the stream is a terminal, else ``json``.

Everything goes through one stdlib :class:`logging.StreamHandler` on the root logger, with a
:class:`structlog.stdlib.ProcessorFormatter`: structlog events and records of libraries that
use stdlib ``logging`` come out in the same format, filtered at the same level. Loud
libraries (``watchfiles`` logs every change batch, ``httpx`` every request at INFO) are held
at WARNING unless the level is ``debug``.

Under systemd (``$JOURNAL_STREAM`` names the very stream memoryd logs to), each line starts
with its syslog priority (``<7>`` debug, ``<6>`` info, ``<4>`` warning, ``<3>`` error), which
journald strips and records, so ``journalctl -p warning`` filters. The detached daemon logs
to a file; :func:`reopen_log` (on SIGHUP) reopens it by name, so a rotated log (logrotate's
default ``create`` mode) is followed.

Calling it again (SIGHUP reload) replaces the handler it installed before, never stacks a
second one; other handlers on the root logger (pytest's, say) are left alone. Loggers are not
cached, so a logger bound before a reload follows the new configuration, and
``structlog.testing.capture_logs`` sees its events in tests.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

import structlog
from structlog.typing import Processor

from memoryd.errors import ConfigError

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
FORMATS = ("auto", "json", "console")
#: Libraries that log routine work at INFO; quiet unless memoryd itself logs at debug.
NOISY_LOGGERS = ("watchfiles", "httpx", "httpcore")


# Processors every event passes, whether it comes from structlog or from stdlib logging.
_SHARED: tuple[Processor, ...] = (
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
)
# structlog's own chain. It is the same for every level and format (those live in the stdlib
# handler), and it is one list object for the life of the process: a logger bound before a
# reload keeps a reference to it, and so follows the reload (and ``capture_logs``, which
# edits the list in place).
_STRUCTLOG_CHAIN: list[Processor] = [
    structlog.stdlib.filter_by_level,
    *_SHARED,
    structlog.stdlib.PositionalArgumentsFormatter(),
    structlog.processors.StackInfoRenderer(),
    structlog.processors.UnicodeDecoder(),
    structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
]


class _MemorydHandler(logging.StreamHandler[TextIO]):
    """The root handler :func:`configure_logging` owns (its type marks it for replacement)."""


#: syslog priorities (RFC 5424 severities) of the stdlib levels.
SYSLOG_PRIORITIES = ((logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))


def syslog_priority(levelno: int) -> int:
    """The syslog priority of a stdlib level: critical 2, error 3, warning 4, info 6, debug 7."""
    if levelno >= logging.CRITICAL:
        return 2
    return next((prio for floor, prio in SYSLOG_PRIORITIES if levelno >= floor), 7)


class _PriorityFormatter(structlog.stdlib.ProcessorFormatter):
    """Prefix each line with ``<priority>`` for journald."""

    def format(self, record: logging.LogRecord) -> str:
        return f"<{syslog_priority(record.levelno)}>{super().format(record)}"


def under_journald(stream: TextIO, env: Mapping[str, str] | None = None) -> bool:
    """Whether ``stream`` is the journal stream systemd gave us (``JOURNAL_STREAM=dev:ino``)."""
    value = (os.environ if env is None else env).get("JOURNAL_STREAM", "")
    try:
        device, inode = (int(part) for part in value.split(":"))
        st = os.fstat(stream.fileno())
    except (ValueError, OSError, AttributeError):
        return False
    return (st.st_dev, st.st_ino) == (device, inode)


def reopen_log(path: Path) -> None:
    """Point stdout and stderr at ``path`` again (created ``0600`` if it was moved away)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    finally:
        os.close(fd)


def configure_logging(
    level: str, fmt: str, stream: TextIO | None = None, env: Mapping[str, str] | None = None
) -> None:
    """Configure structlog and stdlib logging for the daemon; safe to call again on reload.

    Args:
        level: ``debug``, ``info``, ``warning`` or ``error`` (``daemon.log_level``).
        fmt: ``auto``, ``json`` or ``console`` (``daemon.log_format``).
        stream: where log lines go; ``sys.stderr`` (looked up at call time) by default.
        env: the environment (``JOURNAL_STREAM``); ``os.environ`` by default.

    Raises:
        ConfigError: an unknown level or format, naming the config key.
    """
    if level not in LEVELS:
        raise ConfigError(
            f"daemon.log_level: {level!r} is not one of {', '.join(LEVELS)}",
            key="daemon.log_level",
        )
    if fmt not in FORMATS:
        raise ConfigError(
            f"daemon.log_format: {fmt!r} is not one of {', '.join(FORMATS)}",
            key="daemon.log_format",
        )
    out = sys.stderr if stream is None else stream
    threshold = LEVELS[level]
    is_tty = _is_tty(out)
    as_json = fmt == "json" or (fmt == "auto" and not is_tty)

    renderer: list[Processor] = (
        [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
        if as_json
        else [structlog.dev.ConsoleRenderer(colors=is_tty)]
    )
    handler = _MemorydHandler(out)
    formatter = (
        _PriorityFormatter if under_journald(out, env) else structlog.stdlib.ProcessorFormatter
    )
    handler.setFormatter(
        formatter(
            foreign_pre_chain=[*_SHARED, structlog.stdlib.ExtraAdder()],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderer],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _MemorydHandler)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(threshold)
    noisy_threshold = threshold if threshold <= logging.DEBUG else logging.WARNING
    for name in NOISY_LOGGERS:
        logging.getLogger(name).setLevel(noisy_threshold)

    if structlog.get_config()["processors"] is not _STRUCTLOG_CHAIN:
        structlog.configure(
            processors=_STRUCTLOG_CHAIN,
            logger_factory=structlog.stdlib.LoggerFactory(),
            wrapper_class=structlog.stdlib.BoundLogger,
            context_class=dict,
            cache_logger_on_first_use=False,
        )


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
