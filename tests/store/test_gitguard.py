"""The git guard (SPEC §10): a file of a git repository is written only when git tracks it
and it has no uncommitted changes; otherwise nothing is written and the next step is said."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from memoryd.store import gitguard
from memoryd.store.gitguard import check_git_write, write_guarded


def git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    result = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=True,
    )
    return result.stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "agent-repo"
    path.mkdir()
    git(path, "init", "-q")
    skill = path / "skills" / "deploy" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text("# Deploy skill\n")
    git(path, "add", "skills/deploy/SKILL.md")
    git(path, "commit", "-q", "-m", "skill")
    return path


def skill_of(repo: Path) -> Path:
    return repo / "skills" / "deploy" / "SKILL.md"


def run_next_step(step: str) -> None:
    """Run the shell command a refusal names (the part before '; then run')."""
    command = step.split(": ", 1)[1].split("; then run", 1)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t")
    env.update(GIT_COMMITTER_EMAIL="t@x")
    subprocess.run(["sh", "-c", command], check=True, env=env, timeout=30, capture_output=True)


def test_a_tracked_clean_file_is_written(repo: Path) -> None:
    check = write_guarded(skill_of(repo), "# Deploy skill\n\nNew lesson.\n")
    assert check.allowed, check.reason
    assert check.repository == str(repo.resolve())
    assert skill_of(repo).read_text() == "# Deploy skill\n\nNew lesson.\n"


def test_a_file_with_unstaged_changes_is_refused_with_the_next_step(repo: Path) -> None:
    skill_of(repo).write_text("# Deploy skill\n\nA person's edit in progress.\n")

    check = write_guarded(skill_of(repo), "overwritten")

    assert not check.allowed
    assert "uncommitted changes" in check.reason and str(skill_of(repo)) in check.reason
    assert check.next_step is not None
    assert check.next_step.startswith(f"commit or stash your changes to {skill_of(repo)}")
    assert check.next_step.endswith("then run `memoryd confluence run` again")
    assert skill_of(repo).read_text() == "# Deploy skill\n\nA person's edit in progress.\n"


def test_a_file_with_staged_changes_is_refused(repo: Path) -> None:
    skill_of(repo).write_text("# staged\n")
    git(repo, "add", "skills/deploy/SKILL.md")
    check = write_guarded(skill_of(repo), "overwritten")
    assert not check.allowed and "uncommitted changes" in check.reason
    assert skill_of(repo).read_text() == "# staged\n"


def test_an_untracked_file_is_refused_and_the_next_step_makes_it_writable(repo: Path) -> None:
    agent = repo / "AGENT.md"
    agent.write_text("# Agent\n")

    check = write_guarded(agent, "overwritten", retry="memoryd confluence run")

    assert not check.allowed
    assert check.reason == f"{agent} is not tracked by git (repository {repo.resolve()})"
    assert check.next_step is not None
    assert f"git -C {shlex.quote(str(repo.resolve()))} add -- AGENT.md" in check.next_step
    assert agent.read_text() == "# Agent\n"

    run_next_step(check.next_step)  # the step as printed really works
    assert write_guarded(agent, "# Agent\n\nmore\n").allowed
    assert agent.read_text() == "# Agent\n\nmore\n"


def test_a_missing_file_in_a_repository_is_refused_with_a_touch_first(repo: Path) -> None:
    new = repo / "skills" / "new" / "SKILL.md"
    new.parent.mkdir()
    check = write_guarded(new, "text")
    assert not check.allowed and "does not exist yet" in check.reason
    assert check.next_step is not None and "touch " in check.next_step
    assert not new.exists()


def test_an_ignored_file_is_untracked_and_refused(repo: Path) -> None:
    (repo / ".gitignore").write_text("*.local.md\n")
    ignored = repo / "notes.local.md"
    ignored.write_text("x")
    assert not check_git_write(ignored).allowed


def test_a_file_outside_any_repository_is_written_without_running_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_git(*args: object, **kwargs: object) -> None:
        raise AssertionError("git must not run outside a repository")

    monkeypatch.setattr(gitguard, "_git", no_git)
    target = tmp_path / "plain" / "experience.md"
    target.parent.mkdir()
    check = write_guarded(target, "hello\n")
    assert check.allowed and check.reason == "not inside a git repository"
    assert target.read_text() == "hello\n"


def test_when_git_cannot_answer_the_write_is_refused(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(repo / "no-bin-here"))  # git is not found
    check = write_guarded(skill_of(repo), "overwritten")
    assert not check.allowed
    assert "git is not installed" in check.reason
    assert check.next_step is not None and "status` work" in check.next_step
    assert skill_of(repo).read_text() == "# Deploy skill\n"


def test_git_environment_variables_cannot_point_the_guard_elsewhere(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    assert check_git_write(skill_of(repo)).allowed
    skill_of(repo).write_text("dirty\n")
    assert not check_git_write(skill_of(repo)).allowed
