"""Workspace identity, source classification and session-log names (SPEC §2, §3, §7)."""

from __future__ import annotations

import datetime
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.core.workspace import (
    is_log_of_session,
    normalize_origin,
    session_date_from_name,
    session_log_name,
    slugify,
    source_of,
    workspace_key,
)
from memoryd.errors import InvalidParams

# --- SPEC §2 test vectors -----------------------------------------------------------------


def test_spec_vector_scp_origin() -> None:
    key = workspace_key("git@github.com:acme/widgets.git", "/home/me/src/widgets")
    assert key.dirname == "widgets-7d43613e"
    assert (key.identity, key.kind, key.slug, key.hash8) == (
        "acme/widgets",
        "git",
        "widgets",
        "7d43613e",
    )


def test_spec_vector_https_origin() -> None:
    assert workspace_key("https://github.com/example/demo", "/x").dirname == "demo-859248a6"


def test_spec_vector_no_repo_uses_path() -> None:
    key = workspace_key(None, "/users/me/work/xai")
    assert key.dirname == "xai-e193d8ce"
    assert (key.kind, key.identity) == ("path", "/users/me/work/xai")


def test_origin_without_identity_falls_back_to_path() -> None:
    """An origin with no org (or a local path) identifies the workspace by its path."""
    assert workspace_key("https://github.com/widgets", "/users/me/work/xai").dirname == (
        "xai-e193d8ce"
    )
    assert workspace_key("/srv/git/widgets.git", "/users/me/work/xai").kind == "path"


def test_clones_anywhere_share_one_key() -> None:
    a = workspace_key("git@github.com:acme/widgets.git", "/home/a/widgets")
    b = workspace_key("https://github.com/acme/widgets", "/tmp/other-name")
    c = workspace_key("ssh://git@github.com:22/acme/widgets.git", "/opt/w")
    assert a == b == c


def test_root_path_gets_default_slug() -> None:
    assert workspace_key(None, "/").slug == "workspace"


# --- normalize_origin ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("git@github.com:acme/widgets.git", "acme/widgets"),
        ("git@github.com:acme/widgets", "acme/widgets"),
        ("git@github.com:/acme/widgets.git", "acme/widgets"),
        ("https://github.com/example/demo", "example/demo"),
        ("https://github.com/example/demo.git", "example/demo"),
        ("https://github.com/example/demo/", "example/demo"),
        ("https://user@github.com/example/demo.git", "example/demo"),
        ("https://user:secret@github.com:8443/example/demo.git", "example/demo"),
        ("http://git.example.org:3000/team/proj.git", "team/proj"),
        ("ssh://git@github.com/acme/widgets.git", "acme/widgets"),
        ("ssh://git@git.corp.example:2222/acme/widgets.git", "acme/widgets"),
        ("git://git.kernel.org/pub/scm/git/git.git", "pub/scm/git/git"),
        ("https://gitlab.com/group/sub/repo.git", "group/sub/repo"),
        ("git@gitlab.com:group/sub/repo.git", "group/sub/repo"),
        ("git@github.com:Acme/Widgets.git", "Acme/Widgets"),  # case is kept
        ("file:///srv/git/team/repo.git", "srv/git/team/repo"),
        # no organisation → no identity
        ("https://github.com/widgets", None),
        ("git@github.com:widgets.git", None),
        ("https://github.com/", None),
        ("https://github.com", None),
        ("git@github.com:", None),
        # no ':' at all → a local path, no identity
        ("/srv/git/widgets.git", None),
        ("../widgets", None),
        ("", None),
        # a ':' but neither scp form nor '//'
        ("github.com:acme/widgets.git", None),
        # literal SPEC order: '.git' is stripped before the trailing '/'
        ("https://github.com/acme/widgets.git/", "acme/widgets.git"),
    ],
)
def test_normalize_origin(url: str, expected: str | None) -> None:
    assert normalize_origin(url) == expected


@given(st.text())
def test_normalize_origin_never_raises_and_always_has_an_org(url: str) -> None:
    result = normalize_origin(url)
    if result is not None:
        assert "/" in result
        assert not result.startswith("/") and not result.endswith("/")


_NAME = st.text(alphabet="abcXYZ019_-.", min_size=1, max_size=12).filter(
    lambda s: s.strip("/.") == s and not s.endswith(".git")
)


@given(st.lists(_NAME, min_size=2, max_size=4), st.sampled_from(["", ".git"]))
def test_every_url_form_of_one_repo_gives_one_identity(parts: list[str], suffix: str) -> None:
    path = "/".join(parts)
    forms = [
        f"git@github.com:{path}{suffix}",
        f"https://github.com/{path}{suffix}",
        f"https://me@git.example.org:8443/{path}{suffix}",
        f"ssh://git@git.example.org:2222/{path}{suffix}",
    ]
    assert {normalize_origin(url) for url in forms} == {path}


# --- slugify ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "max_len", "expected"),
    [
        ("Widgets", 40, "widgets"),
        ("my_project.v2", 40, "my-project-v2"),
        ("  --Hello,   World!--  ", 40, "hello-world"),
        ("数据分析", 40, "workspace"),
        ("", 40, "workspace"),
        ("café au lait", 40, "caf-au-lait"),
        # cut then trim: a cut landing just after a '-' leaves no trailing '-'
        ("abcd efgh", 5, "abcd"),
        ("a" * 50, 40, "a" * 40),
    ],
)
def test_slugify_examples(text: str, max_len: int, expected: str) -> None:
    assert slugify(text, max_len) == expected


def test_slugify_cuts_before_trimming() -> None:
    """'-abc' cut to 3 is '-ab', trimmed to 'ab' (trimming first would give 'abc')."""
    assert slugify("-abc", 3) == "ab"


@given(st.text(), st.integers(min_value=9, max_value=60))
def test_slugify_properties(text: str, max_len: int) -> None:
    slug = slugify(text, max_len)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", slug), slug
    assert len(slug) <= max_len
    assert slugify(text, max_len) == slug


@given(st.text(alphabet="abc-_ XYZ", max_size=30))
def test_slugify_keeps_every_ascii_alnum_in_order(text: str) -> None:
    slug = slugify(text, 100, empty="")
    assert slug.replace("-", "") == "".join(c for c in text.lower() if c.isalnum())


# --- source_of ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("relpath", "expected"),
    [
        ("MEMORY.md", "global"),
        ("experience.md", "global"),
        ("widgets-7d43613e/MEMORY.md", "workspace"),
        ("widgets-7d43613e/sessions/2025-01-02-fix-it-1234abcd.md", "session"),
        ("widgets-7d43613e/sessions/.live/1234.jsonl", None),
        ("widgets-7d43613e/sessions/notes.txt", None),
        ("widgets-7d43613e/.history/MEMORY.md", None),
        ("widgets-7d43613e/index.sqlite", None),
        ("widgets-7d43613e/other.md", None),
        ("widgets-7d43613e/sessions/.memoryd-tmp-x.md", None),
        (".history/MEMORY.md", None),
        ("notes.md", None),
        ("a/b/MEMORY.md", None),
        ("/MEMORY.md", None),
        ("", None),
    ],
)
def test_source_of(relpath: str, expected: str | None) -> None:
    assert source_of(relpath) == expected


# --- session log names --------------------------------------------------------------------


def test_session_log_name() -> None:
    name = session_log_name(
        datetime.date(2025, 3, 7), "Fix the flaky login test, please!", "9f1c2a7e-1111-2222"
    )
    assert name == "2025-03-07-fix-the-flaky-login-test-pleas-9f1c2a7e.md"  # cut at 30


def test_session_log_name_slug_is_cut_at_30() -> None:
    name = session_log_name(datetime.date(2025, 3, 7), "x" * 100, "abcdefgh12")
    assert name == f"2025-03-07-{'x' * 30}-abcdefgh.md"


@pytest.mark.parametrize("message", [None, "", "？？", "!!!"])
def test_session_log_name_without_a_sluggable_message(message: str | None) -> None:
    assert session_log_name(datetime.date(2025, 1, 2), message, "abcdefgh") == (
        "2025-01-02-session-abcdefgh.md"
    )


def test_session_log_name_cannot_be_steered_by_the_session_id() -> None:
    name = session_log_name(datetime.date(2025, 1, 2), "hi", "../../etc/passwd")
    assert "/" not in name and ".." not in name
    assert name == "2025-01-02-hi-------et.md"


def test_session_log_name_refuses_an_empty_session_id() -> None:
    with pytest.raises(InvalidParams):
        session_log_name(datetime.date(2025, 1, 2), "hi", "")


@given(st.dates(), st.one_of(st.none(), st.text()), st.text(min_size=1))
def test_session_log_name_round_trips_its_date(
    date: datetime.date, message: str | None, sid: str
) -> None:
    name = session_log_name(date, message, sid)
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+-[A-Za-z0-9_-]{1,8}\.md", name), name
    assert session_date_from_name(name) == date


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("2025-01-02-fix-1234abcd.md", datetime.date(2025, 1, 2)),
        ("ws-1234abcd/sessions/2024-02-29-x-1.md", datetime.date(2024, 2, 29)),
        ("2025-02-30-bad-date.md", None),
        ("notes.md", None),
        ("2025-1-2-short.md", None),
    ],
)
def test_session_date_from_name(name: str, expected: datetime.date | None) -> None:
    assert session_date_from_name(name) == expected


def test_sessions_sharing_their_first_8_characters_get_their_own_logs() -> None:
    day = datetime.date(2025, 1, 1)
    a = session_log_name(day, "Fix the login bug", "abcdefgh-1")
    b = session_log_name(day, "Fix the login bug", "abcdefgh-2", taken={a})
    c = session_log_name(day, "Fix the login bug", "abcdefgh-3", taken={a, b})
    assert len({a, b, c}) == 3
    assert b.startswith("2025-01-01-fix-the-login-bug-abcdefgh-")
    assert is_log_of_session(a, "abcdefgh-2") and is_log_of_session(b, "abcdefgh-2")
    assert not is_log_of_session(b, "abcdefgh-3")
    again = session_log_name(day, "Fix the login bug", "abcdefgh-2", taken={a, b})
    assert again.endswith("-2.md") and is_log_of_session(again, "abcdefgh-2")
