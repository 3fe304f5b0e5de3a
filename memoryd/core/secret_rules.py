"""The rule table of the secret scrubber (SPEC §18) — pure data.

Derived from gitleaks' default rules (``config/gitleaks.toml``, https://github.com/gitleaks/gitleaks,
MIT licence, Copyright (c) 2019 Zachary Rice): the token formats with a distinctive prefix or
shape are taken over (kind names follow gitleaks' rule ids, merged per provider), written for
Python's ``re``; gitleaks' ~100 "provider keyword near a random string" rules are folded into
one generic *assignment* rule (a secret-like key name, ``=``/``:``, a value that passes the
checks in :mod:`memoryd.core.secrets`), which also covers ``.env`` files, YAML and JSON.

Each rule has **keywords**: its regex runs on a text only when one of them occurs in it (a
lowercase keyword in the lowercased text, one with capitals as written), as gitleaks does with
Aho-Corasick, so a message with no keyword costs a few substring searches. A rule's regex marks
the secret with the group ``secret`` (the whole match when it has none); ``check`` names the
value check applied to it (:mod:`memoryd.core.secrets`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Check = Literal["none", "assignment", "entropy", "url"]


@dataclass(frozen=True)
class SecretRule:
    """One detector: its kind, its keywords (lowercase), its regex and the value check."""

    kind: str
    keywords: tuple[str, ...]
    pattern: str
    check: Check = "none"
    #: A context rule (a keyword and what follows it) runs whenever its keyword occurs; a
    #: token rule only when the text also has a run of 16 token characters.
    context: bool = False
    #: The regex is written in lowercase and runs on the lowercased text (the spans are the
    #: same when lowercasing keeps the length; otherwise it runs case-insensitively).
    lower: bool = False


_END = r"(?![A-Za-z0-9_])"  # the token does not go on
_START = r"(?<![A-Za-z0-9_])"

#: Rules starting with ``START`` have it checked in Python: a leading lookbehind would stop
#: ``re`` from scanning for the literal prefix.
START = _START

#: Secret-like key names for the assignment rule (``password=…``, ``"api_key": "…"``).
ASSIGNMENT_NAMES = (
    r"passw(?:or)?d|passphrase|pwd|secret|token|credentials?|api[_-]?key|apikey"
    r"|access[_-]?key|auth[_-]?key|private[_-]?key|client[_-]?secret|_key|-key"
    r"|accountkey|sharedaccesskey|auth"
)

RULES: tuple[SecretRule, ...] = (
    SecretRule(
        "private-key",
        ("private key",),
        r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[\s\S]{0,20000}?-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"
        r"|[\sA-Za-z0-9+/=:,\\-]{16,})",
        context=True,
    ),
    SecretRule(
        "aws-access-key",
        ("akia", "asia", "abia", "acca", "a3t"),
        _START + r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}" + _END,
    ),
    SecretRule(
        "aws-bedrock-key",
        ("absk",),
        _START + r"ABSK[A-Za-z0-9+/]{100,}={0,2}",
    ),
    SecretRule(
        "github-token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        _START + r"(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{50,})",
    ),
    SecretRule(
        "gitlab-token",
        ("glpat-", "glptt-", "glrt-", "gldt-", "glcbt-", "glsoat-", "glffct-", "glimt-", "glft-"),
        _START + r"gl(?:pat|ptt|rt|dt|cbt|soat|ffct|imt|ft)-[\w-]{20,}",
    ),
    SecretRule(
        "anthropic-api-key",
        ("sk-ant-",),
        _START + r"sk-ant-(?:api|admin|oat|sid)\d{2}-[A-Za-z0-9_-]{20,}",
    ),
    SecretRule(
        "openai-api-key",
        ("sk-",),
        _START + r"sk-(?:(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{20,}|[A-Za-z0-9]{32,})" + _END,
    ),
    SecretRule("groq-api-key", ("gsk_",), _START + r"gsk_[A-Za-z0-9]{40,}"),
    SecretRule("xai-api-key", ("xai-",), _START + r"xai-[A-Za-z0-9]{60,}"),
    SecretRule("perplexity-api-key", ("pplx-",), _START + r"pplx-[A-Za-z0-9]{40,}"),
    SecretRule("huggingface-token", ("hf_",), _START + r"hf_[A-Za-z0-9]{30,}" + _END),
    SecretRule("replicate-api-token", ("r8_",), _START + r"r8_[A-Za-z0-9]{37}" + _END),
    SecretRule(
        "slack-token",
        ("xox", "xapp-"),
        _START + r"(?:xox[abeoprs]-(?:\d+-)+[A-Za-z0-9-]{8,}|xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+)",
    ),
    SecretRule(
        "slack-webhook",
        ("hooks.slack.com",),
        r"hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/_-]{20,}",
    ),
    SecretRule(
        "microsoft-teams-webhook",
        ("webhook.office.com",),
        r"[a-z0-9]+\.webhook\.office\.com/webhookb2/[A-Za-z0-9@/-]{40,}",
    ),
    SecretRule(
        "stripe-key",
        ("sk_live", "sk_test", "sk_prod", "rk_live", "rk_test", "rk_prod", "whsec_"),
        _START + r"(?:(?:sk|rk)_(?:test|live|prod)_[A-Za-z0-9]{10,99}|whsec_[A-Za-z0-9+/=]{24,})",
    ),
    SecretRule("gcp-api-key", ("aiza",), _START + r"AIza[\w-]{35}" + _END),
    SecretRule("google-oauth-secret", ("gocspx-",), _START + r"GOCSPX-[\w-]{24,}"),
    SecretRule("google-oauth-token", ("ya29.",), _START + r"ya29\.[\w-]{30,}"),
    SecretRule("npm-token", ("npm_",), _START + r"npm_[A-Za-z0-9]{36}" + _END),
    SecretRule("pypi-token", ("pypi-ageichlwas5vcmc",), r"pypi-AgEIcHlwaS5vcmc[\w-]{40,}"),
    SecretRule("rubygems-token", ("rubygems_",), _START + r"rubygems_[a-f0-9]{48}"),
    SecretRule("sendgrid-api-key", ("SG.",), _START + r"SG\.[\w-]{16,32}\.[\w-]{30,50}"),
    SecretRule("twilio-api-key", ("SK",), _START + r"SK[0-9a-fA-F]{32}" + _END),
    SecretRule("mailgun-key", ("key-",), _START + r"key-[0-9a-f]{32}" + _END),
    SecretRule("mailchimp-api-key", ("-us",), _START + r"[0-9a-f]{32}-us\d{1,2}" + _END),
    SecretRule(
        "shopify-token",
        ("shpat_", "shpca_", "shppa_", "shpss_"),
        _START + r"shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}",
    ),
    SecretRule("digitalocean-token", ("_v1_",), _START + r"do[opr]_v1_[a-f0-9]{64}"),
    SecretRule("telegram-bot-token", (":aa",), _START + r"\d{8,10}:AA[A-Za-z0-9_-]{32,33}" + _END),
    SecretRule("age-secret-key", ("age-secret-key-1",), r"AGE-SECRET-KEY-1[0-9A-Z]{58}"),
    SecretRule(
        "doppler-token",
        ("dp.",),
        _START + r"dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,44}",
    ),
    SecretRule("linear-api-key", ("lin_api_",), r"lin_api_[A-Za-z0-9]{40}"),
    SecretRule("notion-token", ("ntn_",), _START + r"ntn_[0-9]{11}[A-Za-z0-9]{35}"),
    SecretRule("postman-api-key", ("pmak-",), r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}"),
    SecretRule("pulumi-token", ("pul-",), _START + r"pul-[a-f0-9]{40}"),
    SecretRule(
        "grafana-token",
        ("glsa_", "glc_"),
        _START + r"(?:glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}={0,2})",
    ),
    SecretRule("databricks-token", ("dapi",), _START + r"dapi[a-f0-9]{32}(?:-\d)?" + _END),
    SecretRule("sentry-token", ("sntry",), _START + r"sntry[us]_[A-Za-z0-9+/=_-]{40,}"),
    SecretRule(
        "square-token",
        ("eaaa", "sq0atp-", "sq0csp-"),
        _START + r"(?:EAAA|sq0atp-|sq0csp-)[\w-]{22,60}",
    ),
    SecretRule("atlassian-api-token", ("atatt3",), _START + r"ATATT3[A-Za-z0-9_=-]{100,}"),
    SecretRule(
        "azure-ad-client-secret",
        ("q~",),
        r"(?<![A-Za-z0-9_~.])[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}",
    ),
    SecretRule("heroku-api-key", ("hrku-",), _START + r"HRKU-AA[0-9A-Za-z_-]{58}"),
    SecretRule("terraform-token", ("atlasv1",), r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,70}"),
    SecretRule("dynatrace-token", ("dt0c01",), r"dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}"),
    SecretRule(
        "planetscale-token", ("pscale_",), _START + r"pscale_(?:pw|tkn|oauth)_[\w=.-]{32,64}"
    ),
    SecretRule("1password-token", ("ops_eyj",), r"ops_eyJ[A-Za-z0-9+/]{100,}={0,3}"),
    # Its own lookbehind, kept in the regex (not START, which is checked in Python) and
    # with "-" too: a token character before each "eyJ" of one run ("eyJeyJ…", "eyJ-eyJ-…")
    # made every one of them start a match scanning to the run's end (quadratic: 400,000
    # characters took 66 s).
    SecretRule(
        "jwt",
        ("eyj",),
        r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}={0,2}",
    ),
    SecretRule(
        "url-password",
        ("://",),
        r"[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s:/@'\"]{0,100}:(?P<secret>[^\s@/'\"]{1,200})@"
        r"[A-Za-z0-9.\[\]-]",
        "url",
        context=True,
    ),
    SecretRule(
        "azure-storage-key",
        ("accountkey=", "sharedaccesskey="),
        r"(?:accountkey|sharedaccesskey)=(?P<secret>[a-z0-9+/]{20,}={0,2})",
        context=True,
        lower=True,
    ),
    SecretRule(
        "url-signature",
        ("sig=",),
        r"[?&]sig=(?P<secret>[A-Za-z0-9%+/=]{20,})",
        context=True,
    ),
    SecretRule(
        "auth-header",
        ("bearer", "basic", "authorization"),
        _START + r"(?:bearer|basic|token)\s+(?P<secret>[a-z0-9._~+/-]{12,}=*)",
        "entropy",
        context=True,
        lower=True,
    ),
    SecretRule(
        "curl-user",
        ("-u ", "--user"),
        r"(?:\s-u|--user)\s*[=]?[\"']?[^\s:'\"]{1,100}:(?P<secret>[^\s'\"]{3,200})",
        "url",
        context=True,
    ),
    SecretRule(
        "password",
        ("sshpass", "machine"),
        _START + r"(?:sshpass\s+-p\s*[\"']?|machine\s+\S+\s+login\s+\S+\s+password\s+)"
        r"(?P<secret>[^\s'\"]{3,200})",
        "url",
        context=True,
        lower=True,
    ),
    SecretRule(
        "assignment",
        (
            "passw",
            "pwd",
            "secret",
            "token",
            "credential",
            "key",
            "auth",
            "passphrase",
        ),
        r"(?P<name>(?:" + ASSIGNMENT_NAMES + r")[a-z0-9_.-]{0,20})"
        r"[\"']?(?:[ \t]{0,3}(?::=|=>|\?=|=|:)|[ \t]+(?:is|was)(?: set to)?)[ \t]{0,3}[\"'`]?"
        r"(?P<secret>[^\s\"'`,;]{4,300})",
        "assignment",
        context=True,
        lower=True,
    ),
)
