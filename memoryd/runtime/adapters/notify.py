"""Telling the service manager how the daemon is doing: ``sd_notify`` without a dependency.

Under systemd with ``Type=notify`` (``systemd/memoryd.service``) the daemon must send
``READY=1`` once its socket listens, or systemd considers the start hung. The protocol is one
datagram of ``KEY=VALUE`` lines to the ``AF_UNIX`` socket named by ``$NOTIFY_SOCKET`` — a
path, or an abstract name written ``@name``. Outside systemd (launchd, a terminal, tests)
the variable is unset and every call here is a cheap no-op returning False.

A notification is best effort: a failure to send is logged and reported as False, never
raised, so it can never take the daemon down.

The daemon's sequence: :func:`ready` once listening (and ``status`` lines as it likes),
:func:`reloading` then :func:`ready` around a SIGHUP reload, :func:`stopping` when a graceful
stop begins.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping

import structlog

log = structlog.get_logger(__name__)


def notify(message: str, env: Mapping[str, str] = os.environ) -> bool:
    """Send ``message`` (``KEY=VALUE`` lines) to ``$NOTIFY_SOCKET``; True if it was sent.

    False when the variable is unset or empty, names neither an absolute path nor an
    abstract ``@name``, or the send fails (the failure is logged at debug level).
    """
    address = env.get("NOTIFY_SOCKET", "")
    if address.startswith("@"):
        target = "\0" + address[1:]  # Linux abstract namespace
    elif address.startswith("/"):
        target = address
    else:
        if address:
            log.debug("notify.bad_socket", notify_socket=address)
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.sendto(message.encode("utf-8"), target)
    except OSError as exc:
        log.debug("notify.failed", notify_socket=address, error=str(exc))
        return False
    return True


def ready(env: Mapping[str, str] = os.environ) -> bool:
    """The daemon is up and its socket listens (also ends a reload)."""
    return notify(f"READY=1\nMAINPID={os.getpid()}", env)


def stopping(env: Mapping[str, str] = os.environ) -> bool:
    """A graceful stop has begun."""
    return notify("STOPPING=1", env)


def reloading(env: Mapping[str, str] = os.environ) -> bool:
    """A configuration reload (SIGHUP) has begun; send :func:`ready` when it is done.

    Carries ``MONOTONIC_USEC``, which systemd requires to match the reload to its request.
    """
    usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    return notify(f"RELOADING=1\nMONOTONIC_USEC={usec}", env)


def status(text: str, env: Mapping[str, str] = os.environ) -> bool:
    """A one-line status shown by ``systemctl --user status memoryd``."""
    return notify("STATUS=" + " ".join(text.split()), env)
