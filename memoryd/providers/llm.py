"""Chat models used by flush, dream and confluence (SPEC §7).

A :class:`ChatModel` answers one prompt (a system text and a user text) with one string.
:class:`FakeChatModel` ships in the package for tests: it returns queued answers in order
(or raises queued exceptions) and records every prompt it was given.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import anyio

from memoryd.errors import ModelError


@runtime_checkable
class ChatModel(Protocol):
    """One prompt in, one answer out."""

    @property
    def model_id(self) -> str: ...

    async def complete(self, system: str, user: str) -> str: ...


@dataclass(frozen=True, slots=True)
class Prompt:
    system: str
    user: str


class FakeChatModel:
    """A chat model with queued answers, for tests (never used unless a test builds it).

    Each queued item is a string (the answer) or an exception (raised instead). When the
    queue is empty, :meth:`complete` raises :class:`ModelError`. ``delay`` makes each call
    sleep first, so tests can act while a model call is in flight; ``gate``, when given,
    is awaited before answering.
    """

    def __init__(
        self,
        answers: Iterable[str | BaseException] = (),
        *,
        model_id: str = "fake",
        delay: float = 0.0,
    ) -> None:
        self._answers: deque[str | BaseException] = deque(answers)
        self._model_id = model_id
        self.delay = delay
        self.gate: anyio.Event | None = None
        self.prompts: list[Prompt] = []

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def calls(self) -> int:
        return len(self.prompts)

    def queue(self, *answers: str | BaseException) -> None:
        self._answers.extend(answers)

    async def complete(self, system: str, user: str) -> str:
        self.prompts.append(Prompt(system, user))
        if self.delay:
            await anyio.sleep(self.delay)
        if self.gate is not None:
            await self.gate.wait()
        if not self._answers:
            raise ModelError("the fake chat model has no queued answer")
        answer = self._answers.popleft()
        if isinstance(answer, BaseException):
            raise answer
        return answer
