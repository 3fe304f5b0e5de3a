"""The secret scrubber (SPEC §18): what it finds, what it leaves, and its redactions."""

from __future__ import annotations

import random
import string
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.secrets_corpus import clean_notes, planted
from memoryd.core.config import resolve
from memoryd.core.secrets import REDACTION, fingerprint, scrubber
from memoryd.core.workspace import session_log_name
from memoryd.errors import ConfigError

RNG = random.Random(5)


def rnd(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(RNG.choice(alphabet) for _ in range(n))


# Token-shaped strings are assembled here, never written out whole.
SECRETS = {
    "openai-api-key": "sk-proj-" + rnd(60),
    "anthropic-api-key": "sk-ant-api03-" + rnd(93) + "AA",
    "aws-access-key": "AKIA" + rnd(16, string.ascii_uppercase + "234567"),
    "github-token": "ghp_" + rnd(36),
    "gitlab-token": "glpat-" + rnd(20),
    "slack-token": "xoxb-" + rnd(11, string.digits) + "-" + rnd(12, string.digits) + "-" + rnd(24),
    "stripe-key": "sk_live_" + rnd(24),
    "gcp-api-key": "AIza" + rnd(35),
    "npm-token": "npm_" + rnd(36),
    "huggingface-token": "hf_" + rnd(34, string.ascii_letters),
}


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_a_token_is_redacted_with_its_kind_and_fingerprint(kind: str) -> None:
    value = SECRETS[kind]
    out = scrubber().scrub(f"I pasted {value} into the shell.")
    assert value not in out.text
    assert out.text == f"I pasted [REDACTED:{kind}:{fingerprint(value)}] into the shell."
    assert [f.kind for f in out.findings] == [kind]


def test_the_issues_examples_are_all_redacted() -> None:
    pem_body = "\n".join(rnd(64) for _ in range(5))
    text = (
        f"key {SECRETS['openai-api-key']} and {SECRETS['aws-access-key']}\n"
        f"token: {SECRETS['github-token']}\n"
        f"-----BEGIN RSA PRIVATE KEY-----\n{pem_body}\n-----END RSA PRIVATE KEY-----\n"
        "password=hunter2sup3rs3cret is the prod secret\n"
    )
    out = scrubber().scrub(text)
    for secret in (*SECRETS.values(), "hunter2sup3rs3cret", *pem_body.splitlines()):
        assert secret not in out.text
    kinds = {f.kind for f in out.findings}
    assert {"openai-api-key", "aws-access-key", "github-token", "private-key", "password"} <= kinds
    assert [f.line for f in out.findings] == [1, 1, 2, 3, 10]


@pytest.mark.parametrize(
    "text",
    [
        "DATABASE_URL=postgres://app:s3cr3t-Pass@db.internal:5432/app",
        "curl -u admin:Zx9!kPq2 https://ci.internal.test/api",
        "Authorization: Bearer " + rnd(40),
        '{"client_secret": "' + "9f8e7d6c5b4a" * 3 + '"}',
        "export PGPASSWORD='Tr0ub4dor&3'",
        "DefaultEndpointsProtocol=https;AccountName=x;AccountKey=" + "Ab3+" * 22 + "==;",
        "machine api.internal.test login bot password Qw3rty!2",
        "FYI the staging password is Gr33n-Tea#7, rotate it Friday",
    ],
)
def test_context_secrets_are_redacted(text: str) -> None:
    out = scrubber().scrub(text)
    assert out.findings, text
    assert REDACTION.search(out.text)


@pytest.mark.parametrize(
    "text",
    [
        "max_tokens: 4096, token budget = 8000",
        "password = os.environ['DB_PASSWORD']",
        "api_key: ${OPENAI_API_KEY}",
        "NPM_TOKEN: ${{ secrets.NPM_TOKEN }}",
        "secret_key = settings.SECRET_KEY",
        "token = get_token(scope='read')",
        "idempotency_key: 7c9e6679-7425-40de-944b-e07fc1f90ae7",
        "commit 3e263d8a9f7d1c2b4e5f6a7b8c9d0e1f2a3b4c5d",
        "git@github.com:acme/widgets.git and ssh://git@host:2222/x.git",
        "https://user@example.org/path and http://localhost:8080/a?b=c",
        "password: <your password>",
        "api_key: your-api-key-here",
        "key_path: ~/.ssh/id_ed25519",
        "password_min_length = 12",
        'auth_strategy = "device-code"',
        "Authorization: Bearer $TOKEN",
        "the token is refreshed by the auth middleware",
        "The password is stored in Vault; the api key was rotated last week.",
        "password is required, secret was empty",
        "AKIAIOSFODNN7EXAMPLE is the AWS documentation's example key",
    ],
)
def test_lookalikes_are_left_alone(text: str) -> None:
    assert scrubber().scrub(text).text == text


def test_a_fingerprint_tells_secrets_apart_and_repeats_for_the_same_value() -> None:
    a, b = "ghp_" + rnd(36), "ghp_" + rnd(36)
    out = scrubber().scrub(f"{a} {b} {a}").findings
    assert out[0].fingerprint == out[2].fingerprint != out[1].fingerprint
    assert len(out[0].fingerprint) == 4


def test_user_rules_extra_and_allow() -> None:
    allowed = "ghp_" + "0" * 4 + rnd(32)
    s = scrubber((r"ACME-[0-9]{6}", r"pin=(?P<secret>\d{4})"), (r"^ghp_0000",))
    out = s.scrub(f"ticket ACME-123456, pin=1234, {allowed}")
    assert out.text == (
        f"ticket [REDACTED:custom:{fingerprint('ACME-123456')}], "
        f"pin=[REDACTED:custom:{fingerprint('1234')}], {allowed}"
    )


def test_a_bad_user_pattern_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        resolve({"secrets": {"extra_patterns": ["("]}}, {}, {})
    assert info.value.key == "secrets.extra_patterns"


def test_counts_and_description() -> None:
    s = scrubber(("COUNTME-[0-9]+",))
    before = s.describe()["redactions"]
    s.scrub("COUNTME-1 COUNTME-2")
    info = s.describe()
    assert info["redactions"] == before + 2
    assert info["rule_set"] == "gitleaks-derived"
    assert info["extra_patterns"] == 1
    assert isinstance(info["rules"], int) and info["rules"] >= 40


def test_text_whose_lowercase_changes_length_is_still_scanned() -> None:
    value = "Tr0ub4dor&3x"
    out = scrubber().scrub(f"İstanbul office: password={value}")
    assert value not in out.text and out.findings


def test_a_log_name_never_carries_the_secret_nor_the_redaction() -> None:
    import datetime

    text = scrubber().text("password=hunter2sup3rs3cret is the prod secret")
    name = session_log_name(datetime.date(2026, 1, 2), text, "abcdef123456")
    assert "hunter2" not in name and "redacted" not in name
    assert name.startswith("2026-01-02-password-is-the-prod-secret")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.sampled_from(sorted(SECRETS.values())))
def test_scrubbing_removes_the_value_and_is_idempotent(noise: str, secret: str) -> None:
    s = scrubber()
    once = s.text(f"{noise} {secret} {noise}")
    assert secret not in once
    assert s.text(once) == once


def test_redactions_in_urls_and_assignments_are_not_found_again() -> None:
    s = scrubber()
    text = (
        f"https://x.test/items?access_token={SECRETS['aws-access-key']}&page=2\n"
        "postgres://app:Pa55-w0rd!x@db.internal:5432/app\n"
    )
    once = s.text(text)
    assert s.scan(once) == []
    assert s.text(once) == once


PIECES = [p.text for p in planted(per_kind=1, seed=3)] + clean_notes(60, seed=3)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=4), st.sampled_from(["\n", " ", ""]))
def test_scrubbing_real_texts_twice_changes_nothing_more(pieces: list[str], sep: str) -> None:
    s = scrubber()
    once = s.text(sep.join(pieces))
    assert s.scan(once) == []
    assert s.text(once) == once


@pytest.mark.parametrize(
    "unit",
    ["eyJ", "eyJ-", "eyJa.", "ops_eyJ", "ghp_", "glpat-", "xoxb-1-", "sk-ant-", "bearer "],
)
def test_a_long_run_of_token_prefixes_is_scanned_in_linear_time(unit: str) -> None:
    """In one run of token characters every ``eyJ`` started a JWT match that ran to the
    run's end: 200,000 characters took 11.6 s, 400,000 took 66 s (``session.append`` takes
    1,000,000 and scrubs them on the daemon's event loop)."""
    text = (unit * (200_000 // len(unit) + 1))[:200_000]
    started = time.perf_counter()
    scrubber().scrub(text)
    took = time.perf_counter() - started
    assert took < 1.0, f"{took:.1f} s for 200,000 characters of {unit!r}"


def test_long_texts_find_what_short_ones_do() -> None:
    """Planted secrets found one note at a time are found the same in one 1 MB text."""
    notes = [p.text for p in planted(2, seed=11)] + clean_notes(100, seed=12)
    one = scrubber()
    short = [[(f.kind, f.fingerprint) for f in one.scan(n)] for n in notes]
    padding = "\n" + "word " * 4000 + "\n"
    joined = padding.join(notes)
    assert len(joined) > 1_000_000
    long = [(f.kind, f.fingerprint) for f in one.scan(joined)]
    assert long == [f for found in short for f in found]


def test_a_text_dense_with_secrets_is_resolved_in_near_linear_time() -> None:
    """Overlapping findings were resolved by comparing each with every one kept: 6,000
    findings in 350 KB took 1.1 s, 1 MB (17,000) about 9 s — on the daemon's event loop
    for a session message."""
    unit = (
        "export API_TOKEN=abc123def456ghi789 https://user:pw@host/x Bearer abcdefghijklmnop "
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghij password: hunter2hunter2\n"
    )
    text = unit * (1_000_000 // len(unit))
    started = time.perf_counter()
    scrubbed = scrubber().scrub(text)
    took = time.perf_counter() - started
    assert len(scrubbed.findings) > 15_000
    assert "hunter2hunter2" not in scrubbed.text and "abc123def456ghi789" not in scrubbed.text
    assert took < 2.0, f"{took:.1f} s for {len(scrubbed.findings)} findings in 1 MB"
