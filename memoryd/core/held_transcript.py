"""What an open session holds of its transcript in memory (SPEC §7) — pure.

The session's journal keeps every message; memory keeps only what a later step needs, so a
session that runs all day does not grow the daemon with its transcript:

- **the flush window's tail**: the messages from where the window of the transcript so far
  starts (:func:`~memoryd.core.flushing.window_start`: the last 20 non-system messages,
  extended back to a user message). A later flush's window never starts earlier, so its
  prompt is the one the whole transcript gives. What lies before is let go at each append,
  whether flushes run, are off or fail.
- **a tally** (:class:`~memoryd.core.flushing.SessionTally`): the message count and the
  counts and first real user messages the close summary and the log's name need.
- **one 16-byte digest per message, counted**: what a rewritten agent transcript, read again
  from its start, is compared with (:meth:`HeldTranscript.unseen`), so that nothing the
  session holds is appended twice (counted as a multiset: a message held twice absorbs two
  equal candidates), over every message of the session.

A :class:`HeldTranscript` built from a journal's messages is the one the live session held.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import blake3

from memoryd.core.flushing import WINDOW_MESSAGES, Message, SessionTally, window_start

#: Bytes of a message digest (collisions: never, in practice, at 128 bits).
DIGEST_BYTES = 16


def message_digest(message: Message) -> bytes:
    """A message's identity for :meth:`HeldTranscript.unseen` (role and content)."""
    data = f"{message.role}\0{message.content}".encode("utf-8", "surrogatepass")
    return blake3.blake3(data).digest(length=DIGEST_BYTES)


@dataclass(eq=False, slots=True)
class HeldTranscript:
    """The part of one session's transcript kept in memory (see the module docstring)."""

    tail: list[Message] = field(default_factory=list)
    """The messages from :attr:`base` on (the flush window's and what came after)."""
    base: int = 0
    """How many messages came before :attr:`tail` (let go)."""
    tally: SessionTally = field(default_factory=SessionTally)
    digests: dict[bytes, int] = field(default_factory=dict)
    """Each message's :func:`message_digest`, with how many times the session holds it."""
    last_user: int | None = None
    """The index of the last user message (in the whole transcript)."""
    kept_since_user: int = 0
    """Non-system messages from the last user message on (itself included)."""

    @property
    def count(self) -> int:
        """The session's message count (every message, held or let go)."""
        return self.base + len(self.tail)

    def extend(self, messages: Iterable[Message], digests: Iterable[bytes] | None = None) -> None:
        """Add messages at the end, then let go of what no later flush window reaches
        (``digests``: their :func:`message_digest`, when taken already)."""
        batch = list(messages)
        if not batch:
            return
        self.tally.add(batch)
        for digest in (message_digest(m) for m in batch) if digests is None else digests:
            self.digests[digest] = self.digests.get(digest, 0) + 1
        for m in batch:
            if m.role == "user":
                self.last_user, self.kept_since_user = self.count, 1
            elif m.role != "system":
                self.kept_since_user += 1
            self.tail.append(m)
        cut = self._window_start()
        if cut:
            del self.tail[:cut]
            self.base += cut

    def _window_start(self) -> int:
        """:func:`window_start` of :attr:`tail`, without a scan back through a long turn:
        when 20 non-system messages or more followed the last user message, the window
        starts at it; with no user message at all, at the first non-system message."""
        if self.last_user is None:
            return next((i for i, m in enumerate(self.tail) if m.role != "system"), len(self.tail))
        if self.kept_since_user >= WINDOW_MESSAGES:
            return self.last_user - self.base
        return window_start(self.tail)  # a user message among the last 20: a short scan

    def window_messages(self, count: int) -> list[Message]:
        """The first ``count`` messages as far as they are held: what the flush window of
        the transcript's first ``count`` messages is taken from (``count`` is the session's
        count, or one taken since with no message appended in between)."""
        if count < self.base:
            raise ValueError(f"messages before {self.base} are no longer held (asked {count})")
        return self.tail[: count - self.base]

    def unseen(self, digests: Sequence[bytes]) -> list[bool]:
        """For each candidate's digest, in order: True when it is new — the session does not
        hold that message more often than the candidates before it repeated it (a message
        held twice absorbs two equal candidates)."""
        used: dict[bytes, int] = {}
        out: list[bool] = []
        for digest in digests:
            taken = used.get(digest, 0)
            if taken < self.digests.get(digest, 0):
                used[digest] = taken + 1
                out.append(False)
            else:
                out.append(True)
        return out
