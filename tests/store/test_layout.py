"""Workspaces on disk: git identity from real files, directories, and safe client paths
(SPEC §2, §11 memory.get, §15)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from memoryd.errors import PathOutsideMemory, WorkspaceNotFound
from memoryd.store.gitinfo import find_origin, remote_url
from memoryd.store.layout import (
    Workspace,
    ensure_workspace_dirs,
    global_memory_file,
    memory_relpath,
    resolve_client_path,
    resolve_workspace,
)

ORIGIN = "git@github.com:acme/widgets.git"


def _git_config(url: str) -> str:
    return (
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n"
        f'[remote "origin"]\n\turl = {url}\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n'
        '[branch "main"]\n\tremote = origin\n'
    )


def make_clone(path: Path, url: str | None = ORIGIN) -> Path:
    """A directory that looks like a git clone (``.git/config`` with the given origin)."""
    (path / ".git").mkdir(parents=True)
    (path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    config = _git_config(url) if url else "[core]\n\tbare = false\n"
    (path / ".git" / "config").write_text(config)
    return path


def make_worktree(main: Path, path: Path, name: str = "feature") -> Path:
    """A linked worktree of ``main``: a ``.git`` file → ``.git/worktrees/<name>`` with a
    ``commondir`` pointing back to the main ``.git``."""
    gitdir = main / ".git" / "worktrees" / name
    gitdir.mkdir(parents=True)
    (gitdir / "commondir").write_text("../..\n")
    (gitdir / "HEAD").write_text("ref: refs/heads/feature\n")
    path.mkdir(parents=True)
    (path / ".git").write_text(f"gitdir: {gitdir}\n")
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "memory"


# --- workspace identity from files --------------------------------------------------------


def test_two_clones_and_a_worktree_share_one_memory_dir(tmp_path: Path, root: Path) -> None:
    first = make_clone(tmp_path / "a" / "widgets")
    second = make_clone(tmp_path / "b" / "renamed-checkout", "https://github.com/acme/widgets")
    worktree = make_worktree(first, tmp_path / "c" / "widgets-feature")

    workspaces = [resolve_workspace(p, root) for p in (first, second, worktree)]

    assert {ws.dir for ws in workspaces} == {root / "widgets-7d43613e"}
    assert {ws.key.identity for ws in workspaces} == {"acme/widgets"}
    assert [ws.path for ws in workspaces] == [p.resolve() for p in (first, second, worktree)]


def test_a_subdirectory_of_a_clone_belongs_to_the_clone(tmp_path: Path, root: Path) -> None:
    clone = make_clone(tmp_path / "widgets")
    (clone / "src" / "pkg").mkdir(parents=True)
    assert resolve_workspace(clone / "src" / "pkg", root).key.dirname == "widgets-7d43613e"


def test_a_relative_gitdir_file_is_followed(tmp_path: Path, root: Path) -> None:
    """Submodules have ``.git`` files with a relative ``gitdir`` and their own config."""
    outer = make_clone(tmp_path / "outer", "git@github.com:acme/outer.git")
    modules = outer / ".git" / "modules" / "lib"
    modules.mkdir(parents=True)
    (modules / "config").write_text(_git_config("https://gitlab.com/group/sub/lib.git"))
    (outer / "lib").mkdir()
    (outer / "lib" / ".git").write_text("gitdir: ../.git/modules/lib\n")
    key = resolve_workspace(outer / "lib", root).key
    assert (key.identity, key.slug) == ("group/sub/lib", "lib")


def test_without_git_the_path_is_the_identity(tmp_path: Path, root: Path) -> None:
    plain = tmp_path / "My Project"
    plain.mkdir()
    ws = resolve_workspace(plain, root)
    assert ws.key.kind == "path"
    assert ws.key.identity == str(plain.resolve())
    assert ws.key.slug == "my-project"


def test_a_repo_without_origin_uses_its_path(tmp_path: Path, root: Path) -> None:
    repo = make_clone(tmp_path / "local-only", url=None)
    assert resolve_workspace(repo, root).key.kind == "path"


@pytest.mark.parametrize(
    "dot_git",
    [
        "garbage without a gitdir line\n",
        "gitdir: /definitely/not/there\n",
        "gitdir:\n",
        "\xff\xfe binary",
    ],
)
def test_odd_git_files_mean_no_origin(tmp_path: Path, dot_git: str) -> None:
    make_clone(tmp_path / "outer")  # must not be mistaken for the inner repo's origin
    inner = tmp_path / "outer" / "inner"
    inner.mkdir()
    (inner / ".git").write_text(dot_git)
    assert find_origin(inner) is None


def test_unreadable_config_means_no_origin(tmp_path: Path) -> None:
    clone = make_clone(tmp_path / "w")
    (clone / ".git" / "config").unlink()
    (clone / ".git" / "config").mkdir()  # a directory where the file should be
    assert find_origin(clone) is None


def test_symlinked_spellings_of_one_dir_are_one_workspace(tmp_path: Path, root: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real)
    assert resolve_workspace(tmp_path / "alias", root) == resolve_workspace(real, root)
    assert resolve_workspace(str(real) + "/./", root).path == real.resolve()


@pytest.mark.parametrize("bad", ["", "relative/dir", "./x", "/no/such/dir/anywhere", "/a\x00b"])
def test_resolve_workspace_refuses_bad_paths(bad: str, root: Path) -> None:
    with pytest.raises(WorkspaceNotFound):
        resolve_workspace(bad, root)


def test_resolve_workspace_refuses_a_file(tmp_path: Path, root: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(WorkspaceNotFound, match="not an existing directory"):
        resolve_workspace(tmp_path / "f", root)


# --- git config parsing -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (_git_config(ORIGIN), ORIGIN),
        ('[remote "upstream"]\n\turl = git@x:a/b\n', None),
        ('[Remote "origin"]\n\tURL = git@x:a/b\n', "git@x:a/b"),
        ('[remote "Origin"]\n\turl = git@x:a/b\n', None),  # subsection is case-sensitive
        ("[remote.origin]\n\turl = git@x:a/b\n", "git@x:a/b"),
        ('[remote "origin"]\n\turl = "git@x:a/b" ; a comment\n', "git@x:a/b"),
        ('[remote "origin"]\n\turl = git@x:a/b # comment\n', "git@x:a/b"),
        ('[remote "origin"] url = git@x:a/b\n', "git@x:a/b"),
        ('[remote "origin"]\n\turl = git@x:a/\\\nb\n', "git@x:a/b"),
        ('[remote "origin"]\r\n\turl = git@x:a/b\r\n', "git@x:a/b"),
        ('[remote "origin"]\n\turl = git@x:a/one\n\turl = git@x:a/two\n', "git@x:a/two"),
        ('[remote "origin"]\n\t# url = git@x:a/b\n', None),
        ('[remote "origin"\n\turl = git@x:a/b\n', None),  # malformed header
        ("", None),
    ],
)
def test_remote_url(config: str, expected: str | None) -> None:
    assert remote_url(config, "origin") == expected


# --- directories --------------------------------------------------------------------------


def test_ensure_workspace_dirs_creates_private_dirs(tmp_path: Path) -> None:
    root = tmp_path / "deep" / "memory"
    ws = resolve_workspace(tmp_path, root)
    ensure_workspace_dirs(ws)
    ensure_workspace_dirs(ws)  # idempotent
    for directory in (root, ws.dir, ws.sessions_dir, ws.live_dir, ws.history_dir):
        assert directory.is_dir()
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    assert ws.live_dir == ws.dir / "sessions" / ".live"
    assert ws.memory_file == ws.dir / "MEMORY.md"
    assert (ws.index_path.name, ws.lock_path.name) == ("index.sqlite", ".dream-lock")
    assert global_memory_file(root) == root / "MEMORY.md"


# --- client paths -------------------------------------------------------------------------


@pytest.fixture
def ws(tmp_path: Path, root: Path) -> Workspace:
    workspace = resolve_workspace(make_clone(tmp_path / "widgets"), root)
    ensure_workspace_dirs(workspace)
    workspace.memory_file.write_text("# ws\n")
    (workspace.sessions_dir / "2025-01-02-x-1234abcd.md").write_text("log\n")
    (root / "MEMORY.md").write_text("# global\n")
    return workspace


@pytest.mark.parametrize(
    "rel",
    [
        "MEMORY.md",
        "experience.md",
        "widgets-7d43613e/MEMORY.md",
        "widgets-7d43613e/sessions/2025-01-02-x-1234abcd.md",
        "widgets-7d43613e/sessions/not-yet-written.md",
        "./widgets-7d43613e//MEMORY.md",
    ],
)
def test_client_paths_that_are_allowed(root: Path, ws: Workspace, rel: str) -> None:
    path = resolve_client_path(root, ws, rel)
    assert path.parent.resolve().is_relative_to(root.resolve())
    assert memory_relpath(root, path) == "/".join(p for p in rel.split("/") if p not in ("", "."))


@pytest.mark.parametrize(
    ("rel", "reason"),
    [
        ("", "empty"),
        (".", "names no file"),
        ("x" * 1025, "longer than 1024"),
        ("MEMORY.md\x00.txt", "NUL"),
        ("widgets-7d43613e\\MEMORY.md", "separator"),
        ("/etc/passwd", "absolute"),
        ("//etc/passwd", "absolute"),
        ("../secret.md", r"'\.\.'"),
        ("widgets-7d43613e/../MEMORY.md", r"'\.\.'"),
        ("widgets-7d43613e/sessions/../../other-12345678/MEMORY.md", r"'\.\.'"),
        ("other-12345678/MEMORY.md", "only this workspace"),
        ("workspaces.json", "at the memory root only"),
        ("widgets-7d43613e", "at the memory root only"),
        ("widgets-7d43613e/index.sqlite", r"\.md"),
        ("widgets-7d43613e/sessions/.live/abc.jsonl", r"\.md"),
    ],
)
def test_client_paths_that_are_refused(root: Path, ws: Workspace, rel: str, reason: str) -> None:
    with pytest.raises(PathOutsideMemory, match=reason) as caught:
        resolve_client_path(root, ws, rel)
    assert caught.value.code == "path_outside_memory"
    assert repr(rel)[:50] in caught.value.message  # the message names the path


def test_another_workspaces_files_are_refused_even_when_they_exist(
    tmp_path: Path, root: Path, ws: Workspace
) -> None:
    other = resolve_workspace(make_clone(tmp_path / "gadgets", "git@github.com:acme/gadgets"), root)
    ensure_workspace_dirs(other)
    other.memory_file.write_text("# secret of gadgets\n")
    rel = memory_relpath(root, other.memory_file)
    with pytest.raises(PathOutsideMemory, match="only this workspace"):
        resolve_client_path(root, ws, rel)
    assert resolve_client_path(root, other, rel) == other.memory_file


def test_a_symlink_pointing_outside_is_refused(tmp_path: Path, root: Path, ws: Workspace) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("password\n")
    (ws.dir / "notes.md").symlink_to(secret)
    with pytest.raises(PathOutsideMemory, match="symlink"):
        resolve_client_path(root, ws, "widgets-7d43613e/notes.md")


def test_a_symlinked_directory_pointing_outside_is_refused(
    tmp_path: Path, root: Path, ws: Workspace
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.md").write_text("outside\n")
    (ws.dir / "linked").symlink_to(outside, target_is_directory=True)
    with pytest.raises(PathOutsideMemory, match="symlink"):
        resolve_client_path(root, ws, "widgets-7d43613e/linked/x.md")


def test_a_symlink_into_another_workspace_is_refused(
    tmp_path: Path, root: Path, ws: Workspace
) -> None:
    other_dir = root / "gadgets-12345678"
    other_dir.mkdir()
    (other_dir / "MEMORY.md").write_text("# other\n")
    (ws.sessions_dir / "peek.md").symlink_to(other_dir / "MEMORY.md")
    with pytest.raises(PathOutsideMemory, match="symlink"):
        resolve_client_path(root, ws, "widgets-7d43613e/sessions/peek.md")


def test_a_global_file_symlinked_outside_is_refused(
    tmp_path: Path, root: Path, ws: Workspace
) -> None:
    (tmp_path / "elsewhere.md").write_text("x\n")
    (root / "experience.md").symlink_to(tmp_path / "elsewhere.md")
    with pytest.raises(PathOutsideMemory, match="symlink"):
        resolve_client_path(root, ws, "experience.md")


def test_a_symlink_to_a_non_markdown_file_is_refused(root: Path, ws: Workspace) -> None:
    ws.index_path.write_bytes(b"SQLite format 3\x00")
    (ws.dir / "index.md").symlink_to(ws.index_path)
    with pytest.raises(PathOutsideMemory):
        resolve_client_path(root, ws, "widgets-7d43613e/index.md")


def test_a_symlink_inside_the_workspace_is_fine(root: Path, ws: Workspace) -> None:
    (ws.dir / "alias.md").symlink_to(ws.memory_file)
    assert resolve_client_path(root, ws, "widgets-7d43613e/alias.md") == ws.dir / "alias.md"


def test_a_symlinked_memory_root_is_fine(tmp_path: Path, ws: Workspace, root: Path) -> None:
    """``memory.root`` may itself be a symlink (e.g. to an existing ``~/.grok/memory``)."""
    alias = tmp_path / "root-alias"
    alias.symlink_to(root, target_is_directory=True)
    ws_via_alias = resolve_workspace(ws.path, alias)
    path = resolve_client_path(alias, ws_via_alias, "widgets-7d43613e/MEMORY.md")
    assert path == alias / "widgets-7d43613e" / "MEMORY.md"
    assert os.path.samefile(path, ws.memory_file)


def test_a_git_config_that_is_a_fifo_never_blocks_resolving_a_workspace(tmp_path: Path) -> None:
    """A workspace is any directory an agent runs in (a hook's ``cwd``): a ``.git/config``
    that is a FIFO blocked ``find_origin`` — and the daemon resolving the workspace —
    forever."""
    ws = tmp_path / "unpacked"
    (ws / ".git").mkdir(parents=True)
    os.mkfifo(ws / ".git" / "config")
    found: list[str | None] = []
    worker = threading.Thread(target=lambda: found.append(find_origin(ws)))
    worker.start()
    worker.join(5)
    if worker.is_alive():  # blocked opening the FIFO: let it go, then fail
        with open(ws / ".git" / "config", "wb"):
            pass
        worker.join(5)
        pytest.fail("find_origin blocked on a FIFO .git/config")
    assert found == [None]
