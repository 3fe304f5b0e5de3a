"""The secret scrubber (SPEC §18) — pure: text in, (text, findings) out.

One :class:`Scrubber` runs wherever text enters memory or leaves for a model. It finds secrets
with the rule table of :mod:`memoryd.core.secret_rules` (derived from gitleaks' rules) plus
the user's ``[secrets] extra_patterns``, drops the values matching ``allow_patterns``, and
replaces each secret by ``[REDACTED:<kind>:<fingerprint>]``. The fingerprint is 4 hex digits
of a BLAKE2b hash of the value under memoryd's own personalisation: enough to tell two secrets
apart in one memory and to find where one came from (the same value gives the same fingerprint
everywhere), far too little (16 bits) to confirm a guessed value. Nothing keeps the value.

Cost: the text is lowercased once and each rule's keywords are looked up with ``in``; only
rules with a keyword present run their regex. A typical message runs none or one or two.

Value checks (``SecretRule.check``) keep the false positives down where a rule matches a
shape rather than a format: placeholders (``${VAR}``, ``<token>``, ``os.environ[…]``,
``changeme``, ``***``), code (``settings.SECRET_KEY``, ``get_token()``), paths, numbers,
versions, UUIDs, slugs, and values without the entropy of a key.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from memoryd.core.replies import RedactionNotice
from memoryd.core.secret_rules import ASSIGNMENT_NAMES, RULES, START, Check, SecretRule
from memoryd.errors import ConfigError

#: Where the built-in rule table comes from (shown by ``status`` and ``doctor``).
RULE_SET = "gitleaks-derived"
REDACTION = re.compile(r"\[REDACTED:[a-z0-9-]{1,40}:[0-9a-f]{4}\]")
_PERSON = b"memoryd.secret"

_PLACEHOLDER_START = (*"${<%([*#&!\\", "REDACTED")
_PLACEHOLDER_WORDS = frozenset(
    """null none nil true false undefined required optional string str int bool env
    changeme change_me placeholder dummy redacted hidden masked secret password passwd token
    your_token your_password your_key your_secret yourpassword mypassword xxx xxxx xxxxx
    xxxxxx xxxxxxxx pass test example todo tbd n/a na""".split()
)
_IDENTIFIER = re.compile(r"[A-Za-z_]+(?:[._-][A-Za-z_]+)*")
_CALL = re.compile(r"[A-Za-z_][\w.]*[(\[]")
_NUMBERISH = re.compile(r"[-+]?v?\d[\d.,_:]*[a-zA-Z%]{0,3}")
_VERSION = re.compile(r"v?\d+(?:\.\d+)+[\w.+-]*")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
_SLUG = re.compile(r"[a-z]+(?:[-_.][a-z0-9]+)+|[a-z0-9]+(?:[-_.][a-z]+)+")
_PATHISH = re.compile(
    r"(?:\.{0,2}/|~/|[A-Za-z]:\\)\S*|[\w.-]+\.(?:pem|key|json|txt|env|ya?ml|toml|p12|pfx|crt|cfg|ini|md|py|sh)"
)
#: Values that name a thing rather than hold a secret: URLs (credentials in one are the
#: url-password rule's), resource names, content digests.
_NOT_SECRET_PREFIXES = (
    "http://",
    "https://",
    "file:",
    "arn:",
    "urn:",
    "projects/",
    "sha1:",
    "sha256:",
    "sha512:",
    "sha256-",
    "sha384-",
    "sha512-",
)
_NAMES = re.compile(r"[A-Za-z0-9_.-]*(?:" + ASSIGNMENT_NAMES + ")", re.IGNORECASE)
_MASK = re.compile(r"(.)\1{3,}")
_PASSWORD_NAME = re.compile(r"(?i)passw|pwd|passphrase")
_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_TRAILING = ".)]}>"


@dataclass(frozen=True)
class Finding:
    """One secret found: its kind, fingerprint, span in the text and 1-based line. Never the
    value."""

    kind: str
    fingerprint: str
    start: int
    end: int
    line: int

    @property
    def redaction(self) -> str:
        return redaction_mark(self.kind, self.fingerprint)


def redaction_mark(kind: str, fingerprint: str) -> str:
    """What replaces a secret: ``[REDACTED:<kind>:<fingerprint>]`` (:data:`REDACTION`)."""
    return f"[REDACTED:{kind}:{fingerprint}]"


@dataclass(frozen=True)
class Scrubbed:
    """A scrubbed text and what was redacted in it."""

    text: str
    findings: tuple[Finding, ...] = ()

    @property
    def kinds(self) -> list[str]:
        """The redacted kinds, each once, in order of first appearance."""
        return list(dict.fromkeys(f.kind for f in self.findings))

    def notice(self) -> RedactionNotice:
        """What a reply says of the secrets redacted (kind and fingerprint, never the
        value), or nothing when there were none."""
        if not self.findings:
            return {}
        return {
            "redacted": [{"kind": f.kind, "fingerprint": f.fingerprint} for f in self.findings],
            "warning": "secrets redacted from the note: "
            + ", ".join(f.redaction for f in self.findings)
            + " (use --allow-secrets to keep them)",
        }


def fingerprint(value: str) -> str:
    """4 hex digits of a personalised BLAKE2b hash of ``value``."""
    return hashlib.blake2b(
        value.encode("utf-8", "surrogatepass"), digest_size=2, person=_PERSON
    ).hexdigest()


def entropy(value: str) -> float:
    """Shannon entropy of ``value`` in bits per character."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def _placeholder(value: str) -> bool:
    low = value.lower()
    return (
        value.startswith(_PLACEHOLDER_START)
        or low in _PLACEHOLDER_WORDS
        or "example" in low
        or "redacted" in low
        or low.startswith(("your", "my-", "my_", "<", "process.env", "os.environ", "env."))
        or (_MASK.search(value) is not None and len(set(value)) <= 3)
    )


def _shape_not_secret(value: str) -> bool:
    """Values that are code, paths, numbers, versions, dates, UUIDs, slugs, URLs, resource
    names or digests."""
    return (
        _IDENTIFIER.fullmatch(value) is not None
        or _CALL.match(value) is not None
        or _NUMBERISH.fullmatch(value) is not None
        or _VERSION.fullmatch(value) is not None
        or _DATE.match(value) is not None
        or _UUID.fullmatch(value) is not None
        or _SLUG.fullmatch(value) is not None
        or _PATHISH.fullmatch(value) is not None
        or value.lower().startswith(_NOT_SECRET_PREFIXES)
    )


def _random_enough(value: str) -> bool:
    """A key-like value: ≥ 12 characters with a digit and ≥ 3 bits of entropy per character."""
    return (
        len(value) >= 12
        and any(c.isdigit() for c in value)
        and any(c.isalpha() for c in value)
        and entropy(value) >= 3.0
    )


def _check_value(check: Check, value: str, name: str) -> bool:
    match check:
        case "none":
            return True
        case "url":
            return not _placeholder(value) and not value.isdigit() and len(value) >= 3
        case "entropy":
            return (
                not _placeholder(value) and not _shape_not_secret(value) and _random_enough(value)
            )
        case "assignment":
            if _placeholder(value) or _shape_not_secret(value):
                return False
            if _PASSWORD_NAME.search(name):
                return len(value) >= 6
            return _random_enough(value)


def _compile(pattern: str, where: str, key: str | None = None) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        message = f"{where}: {pattern!r} is not a valid regular expression: {exc}"
        raise ConfigError(message, key=key or where) from exc


#: A text without a run of 16 token characters holds no token: the token rules are skipped.
_TOKENISH = re.compile(r"(?:[A-Za-z0-9_+/-]){16}")


@dataclass(frozen=True)
class _Compiled:
    kind: str
    regex: re.Pattern[str]
    check: Check
    generic: bool = False  # yields to a specific rule's finding where they overlap
    bounded: bool = False  # no token character right before the match
    lower: re.Pattern[str] | None = None  # the case-insensitive form, for non-ASCII text


def _compiled(rule: SecretRule) -> _Compiled:
    pattern = rule.pattern
    bounded = pattern.startswith(START)
    if bounded:
        pattern = pattern[len(START) :]
    return _Compiled(
        rule.kind,
        re.compile(pattern),
        rule.check,
        generic=rule.check == "assignment",
        bounded=bounded,
        lower=re.compile(pattern, re.IGNORECASE) if rule.lower else None,
    )


@dataclass
class Scrubber:
    """The rules compiled once, and the redactions counted per kind since it was built."""

    rules: tuple[_Compiled, ...]
    # (keyword, matched as written rather than lowercased, the rules it runs)
    context_keywords: tuple[tuple[str, bool, tuple[int, ...]], ...]
    token_keywords: tuple[tuple[str, bool, tuple[int, ...]], ...]
    always: tuple[int, ...]  # rules without keywords (the user's extra patterns)
    allow: tuple[re.Pattern[str], ...]
    counts: Counter[str] = field(default_factory=Counter)

    def scan(self, text: str) -> list[Finding]:
        """The secrets in ``text``, in order, not overlapping."""
        if not text:
            return []
        low = text.lower()
        chosen = set(self.always)
        for keyword, as_written, indexes in self.context_keywords:
            if keyword in (text if as_written else low):
                chosen.update(indexes)
        if _TOKENISH.search(text) is not None:
            for keyword, as_written, indexes in self.token_keywords:
                if keyword in (text if as_written else low):
                    chosen.update(indexes)
        if not chosen:
            return []
        same = len(low) == len(text)
        # A redaction already in the text names a kind ("url-password:…"): nothing in it is
        # a secret, whatever a rule makes of it.
        marks = [m.span() for m in REDACTION.finditer(text)] if "[REDACTED:" in text else []
        spans: list[tuple[int, int, str, bool]] = []
        for i in sorted(chosen):
            rule = self.rules[i]
            regex, hay = rule.regex, text
            if rule.lower is not None:
                regex, hay = (rule.regex, low) if same else (rule.lower, text)
            pos = 0
            while (m := regex.search(hay, pos)) is not None:
                found = self._secret_span(rule, m, text)
                if (
                    found is not None
                    and marks
                    and any(a < found[1] and found[0] < b for a, b in marks)
                ):
                    found = None
                if found is not None:
                    spans.append((*found, rule.generic))
                    pos = max(m.end(), pos + 1)
                elif "secret" not in regex.groupindex:
                    pos = max(m.start() + 1, pos + 1)
                elif _NAMES.match(m.group("secret")):
                    # it starts with a secret-like name: the next assignment (``"x": "token = …"``)
                    pos = max(m.start("secret"), pos + 1)
                else:
                    pos = max(m.end(), pos + 1)
        return self._resolve(spans, text)

    def _secret_span(
        self, rule: _Compiled, m: re.Match[str], text: str
    ) -> tuple[int, int, str] | None:
        if rule.bounded and m.start() > 0 and text[m.start() - 1] in _WORD_CHARS:
            return None
        group = "secret" if "secret" in rule.regex.groupindex else 0
        start, end = m.span(group)
        value = text[start:end]
        while value and value[-1] in _TRAILING and rule.check != "none":
            value, end = value[:-1], end - 1
        if not value or REDACTION.search(value) or "EXAMPLE" in value.upper():
            return None  # gitleaks' global allowlist too: documentation's example keys
        name, kind = "", rule.kind
        if rule.check == "assignment":
            first = m.start("name")
            while first > 0 and text[first - 1] in _NAME_CHARS:
                first -= 1
            name = text[first : m.end("name")]
            kind = "password" if _PASSWORD_NAME.search(name) else "generic-secret"
        if not _check_value(rule.check, value, name):
            return None
        if any(a.search(value) for a in self.allow):
            return None
        return start, end, kind

    @staticmethod
    def _resolve(spans: list[tuple[int, int, str, bool]], text: str) -> list[Finding]:
        """Specific findings first, then generic ones that overlap none; in text order."""
        # ``kept`` stays sorted and disjoint: a span overlaps one of them only if it
        # overlaps a neighbour of its place (one compare each, not one per finding kept).
        kept: list[tuple[int, int, str]] = []
        starts: list[int] = []
        for start, end, kind, _generic in sorted(spans, key=lambda s: (s[3], s[0], s[0] - s[1])):
            i = bisect.bisect_left(starts, start)
            if (i > 0 and kept[i - 1][1] > start) or (i < len(kept) and kept[i][0] < end):
                continue
            starts.insert(i, start)
            kept.insert(i, (start, end, kind))
        out: list[Finding] = []
        line, pos = 1, 0
        for start, end, kind in kept:
            line += text.count("\n", pos, start)
            pos = start
            out.append(Finding(kind, fingerprint(text[start:end]), start, end, line))
        return out

    def scrub(self, text: str, *, count: bool = True) -> Scrubbed:
        """``text`` with every secret replaced by its redaction, and the findings; each
        counted in :attr:`counts` unless ``count`` is false (a comparison, not a redaction
        made: the text is not kept)."""
        findings = self.scan(text)
        if not findings:
            return Scrubbed(text)
        parts: list[str] = []
        pos = 0
        for f in findings:
            parts += (text[pos : f.start], f.redaction)
            pos = f.end
            if count:
                self.counts[f.kind] += 1
        parts.append(text[pos:])
        return Scrubbed("".join(parts), tuple(findings))

    def text(self, text: str) -> str:
        """Just the scrubbed text."""
        return self.scrub(text).text

    def describe(self) -> dict[str, object]:
        """The rule set and the redactions so far, as ``status`` and ``doctor`` show them."""
        return {
            "rule_set": RULE_SET,
            "rules": len(RULES),
            "kinds": len({r.kind for r in RULES}),
            "extra_patterns": len(self.always),
            "allow_patterns": len(self.allow),
            "redactions": sum(self.counts.values()),
            "by_kind": dict(self.counts.most_common()),
        }


def _keyword_table(
    keywords: Mapping[str, list[int]],
) -> tuple[tuple[str, bool, tuple[int, ...]], ...]:
    return tuple((k, k != k.lower(), tuple(v)) for k, v in keywords.items())


def _build(rules: Iterable[SecretRule], extra: tuple[str, ...], allow: tuple[str, ...]) -> Scrubber:
    compiled: list[_Compiled] = []
    keywords: tuple[dict[str, list[int]], dict[str, list[int]]] = ({}, {})
    for rule in rules:
        for keyword in rule.keywords:
            keywords[rule.context].setdefault(keyword, []).append(len(compiled))
        compiled.append(_compiled(rule))
    always = []
    for pattern in extra:
        always.append(len(compiled))
        compiled.append(_Compiled("custom", _compile(pattern, "secrets.extra_patterns"), "none"))
    token_keywords, context_keywords = keywords
    return Scrubber(
        tuple(compiled),
        _keyword_table(context_keywords),
        _keyword_table(token_keywords),
        tuple(always),
        tuple(_compile(p, "secrets.allow_patterns") for p in allow),
    )


@functools.lru_cache(maxsize=8)
def scrubber(
    extra_patterns: tuple[str, ...] = (), allow_patterns: tuple[str, ...] = ()
) -> Scrubber:
    """The scrubber for these user rules, built once per distinct set (so its counts carry
    over a config reload that leaves ``[secrets]`` alone)."""
    return _build(RULES, tuple(extra_patterns), tuple(allow_patterns))


def check_patterns(patterns: Iterable[str], where: str, key: str) -> None:
    """Raise ConfigError naming ``key`` (``where`` also says where it came from) when a
    pattern does not compile."""
    for pattern in patterns:
        _compile(pattern, where, key)
