"""The git guard: a file inside a git repository is changed only when git can take it back
(SPEC §10).

:func:`check_git_write` allows a write to ``path`` when

- ``path`` is in no git repository (no ``.git`` at or above its directory: no ``git`` is
  run at all), or
- git tracks ``path`` and it has no uncommitted changes (staged or not).

Anything else refuses, with the reason and the exact next step (``git add``/``commit`` an
untracked file, commit or stash the changes of a modified one, then run the command named
by ``retry`` again). When it cannot tell — git is not installed, does not answer within
``timeout`` seconds, or cannot read the repository — it refuses too. It never commits or
stashes on anyone's behalf: uncommitted changes may be another session's work in progress.

``git`` runs as a subprocess with the caller's ``GIT_*`` variables removed (so ``GIT_DIR``
cannot point it elsewhere), ``GIT_OPTIONAL_LOCKS=0`` (``status`` never takes the index
lock) and literal pathspecs. Check and write are not atomic: a change made between them is
not seen (best effort, like every tool that reads ``git status``).

:func:`write_guarded` is the one way the confluence writes a file: check, then an atomic
write only when allowed.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memoryd.store.files import atomic_write_text
from memoryd.store.gitinfo import find_git_dir

GIT_TIMEOUT_SECS = 10.0
RETRY = "memoryd confluence run"


@dataclass(frozen=True, slots=True)
class GitWriteCheck:
    """Whether ``path`` may be written, why, and what to do when it may not."""

    path: str
    allowed: bool
    reason: str
    next_step: str | None = None
    repository: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "allowed": self.allowed,
            "reason": self.reason,
            "next_step": self.next_step,
            "repository": self.repository,
        }


class _GitFailed(Exception):
    """git could not answer (missing, timed out, or failed)."""


def _git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
    return env


def _git(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", "--literal-pathspecs", "-C", str(cwd), *args],
            capture_output=True,
            text=True,
            errors="replace",
            env=_git_env(),
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError:
        raise _GitFailed("git is not installed (not found on PATH)") from None
    except subprocess.TimeoutExpired:
        raise _GitFailed(f"git did not answer within {timeout:g} s") from None
    except OSError as exc:
        raise _GitFailed(f"git could not run: {exc}") from None


def _failed(result: subprocess.CompletedProcess[str]) -> _GitFailed:
    detail = " ".join(result.stderr.split()) or f"exit status {result.returncode}"
    return _GitFailed(f"git failed: {detail}")


def _existing_dir(path: Path) -> Path:
    directory = path.parent
    while not directory.is_dir() and directory != directory.parent:
        directory = directory.parent
    return directory


def check_git_write(
    path: Path, *, retry: str = RETRY, timeout: float = GIT_TIMEOUT_SECS
) -> GitWriteCheck:
    """May ``path`` be written? See the module docstring. Never raises."""
    path = Path(os.path.abspath(path))
    shown = str(path)
    real = Path(os.path.realpath(path))  # a symlinked file is guarded where it really lives
    directory = _existing_dir(real)
    if find_git_dir(directory) is None:
        return GitWriteCheck(shown, True, "not inside a git repository")
    again = f"then run `{retry}` again"
    try:
        top_result = _git(["rev-parse", "--show-toplevel"], directory, timeout)
        if top_result.returncode != 0:
            raise _failed(top_result)
        top = Path(os.path.realpath(top_result.stdout.strip()))
        try:
            rel = real.relative_to(top).as_posix()
        except ValueError:
            raise _GitFailed(f"{real} is outside the work tree {top}") from None
        tracked = _git(["ls-files", "--error-unmatch", "--", rel], top, timeout)
        if tracked.returncode not in (0, 1):
            raise _failed(tracked)
        status = None
        if tracked.returncode == 0:
            status = _git(
                ["status", "--porcelain=v1", "-z", "--untracked-files=no", "--", rel],
                top,
                timeout,
            )
            if status.returncode != 0:
                raise _failed(status)
    except _GitFailed as exc:
        return GitWriteCheck(
            shown,
            False,
            f"cannot tell whether git tracks {shown} cleanly: {exc}",
            f"make `git -C {shlex.quote(str(directory))} status` work, {again}",
        )
    repo, q_rel = shlex.quote(str(top)), shlex.quote(rel)
    if status is None:
        if real.exists():
            reason = f"{shown} is not tracked by git (repository {top})"
            first = ""
        else:
            reason = f"{shown} does not exist yet, so git (repository {top}) does not track it"
            first = f"touch {shlex.quote(shown)} && "
        step = (
            f"add and commit it: {first}git -C {repo} add -- {q_rel} && "
            f"git -C {repo} commit -m {shlex.quote('Track ' + rel)} -- {q_rel}; {again}"
        )
        return GitWriteCheck(shown, False, reason, step, str(top))
    changes = [entry for entry in status.stdout.split("\0") if entry.strip()]
    if changes:
        codes = ", ".join(sorted({entry[:2].strip() or "?" for entry in changes}))
        return GitWriteCheck(
            shown,
            False,
            f"{shown} has uncommitted changes (git status {codes})",
            f"commit or stash your changes to {shown} (git -C {repo} commit -- {q_rel}, "
            f"or git -C {repo} stash push -- {q_rel}); {again}",
            str(top),
        )
    return GitWriteCheck(shown, True, "tracked by git with no uncommitted changes", None, str(top))


def write_guarded(
    path: Path, text: str, *, retry: str = RETRY, timeout: float = GIT_TIMEOUT_SECS
) -> GitWriteCheck:
    """Write ``text`` to ``path`` atomically if :func:`check_git_write` allows it.

    Returns the check (``allowed`` False = nothing was written). A failed write raises
    :class:`~memoryd.errors.StorageError`.
    """
    check = check_git_write(path, retry=retry, timeout=timeout)
    if check.allowed:
        atomic_write_text(path, text)
    return check
