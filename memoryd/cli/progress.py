"""Progress for long commands: a redrawn bar on a terminal, plain periodic lines otherwise.

On a terminal (``isatty``) the bar is redrawn in place with ``\\r``. Anywhere else (a file, a
pipe, a CI log) no control character is written: one plain line when the phase starts, one at
most every ``every`` seconds while it runs, and one when it ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from memoryd.cli.render import progress_bar

PLAIN_EVERY_SECS = 5.0


class Progress:
    def __init__(
        self,
        label: str,
        stream: TextIO,
        *,
        every: float = PLAIN_EVERY_SECS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.stream = stream
        self.tty = stream.isatty()
        self.every = every
        self.clock = clock
        self._last: float | None = None
        self._drawn = False

    def update(self, done: int, total: int) -> None:
        line = f"{self.label} {progress_bar(done, total)}"
        if self.tty:
            print(f"\r{line}", end="", file=self.stream, flush=True)
            self._drawn = True
            return
        now = self.clock()
        if self._last is None or now - self._last >= self.every:
            print(line, file=self.stream, flush=True)
            self._last = now

    def finish(self, done: int, total: int, note: str = "") -> None:
        line = f"{self.label} {progress_bar(done, total)}{note}"
        if self.tty:
            print(f"\r{line}", file=self.stream, flush=True)
        else:
            print(line, file=self.stream, flush=True)

    def interrupt(self, message: str) -> None:
        """End the bar's line (on a terminal) and print ``message`` on its own line."""
        if self.tty and self._drawn:
            print(file=self.stream)
        print(message, file=self.stream, flush=True)
