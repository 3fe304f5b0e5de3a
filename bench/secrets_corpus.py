"""Deterministic corpora for the secret scrubber (SPEC §18): planted secrets and clean notes.

:func:`planted` builds ≥ 200 fake secrets of 30 kinds, each placed in prose, a code block,
JSON, an env file, a URL or tool output. Every token is assembled at run time from its
prefix and a seeded random body, so no real secret is in the repository and no secret
scanner flags these files. Each :class:`Planted` lists the ``values`` that must not survive
scrubbing (a PEM block: each of its body lines).

:func:`clean_notes` builds ≥ 2,000 realistic memory notes with nothing secret in them but
with what looks close: commit hashes, UUIDs, base64 images, package versions and lock-file
hashes, paths, URLs without credentials, and code that *names* secrets (``os.environ[…]``,
``${{ secrets.X }}``, ``settings.SECRET_KEY``, ``max_tokens``).

Both are used by ``tests/core/test_secrets_corpus.py`` (recall, false positives) and by the
bench suite (cost per 1 KB message).
"""

from __future__ import annotations

import base64
import json
import random
import string
import uuid
from collections.abc import Callable
from dataclasses import dataclass

ALNUM = string.ascii_letters + string.digits
UPPER32 = string.ascii_uppercase + "234567"
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"


@dataclass(frozen=True)
class Planted:
    """One planted secret: its kind, the text it sits in, its context and the values."""

    kind: str
    context: str
    text: str
    values: tuple[str, ...]


def _r(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _password(rng: random.Random) -> str:
    return (
        _r(rng, rng.randint(6, 10), string.ascii_letters)
        + _r(rng, 2, "!#%^*+")
        + _r(rng, rng.randint(2, 4), string.digits)
    )


def _pem(rng: random.Random) -> tuple[str, tuple[str, ...]]:
    label = rng.choice(["RSA PRIVATE KEY", "EC PRIVATE KEY", "PRIVATE KEY", "OPENSSH PRIVATE KEY"])
    lines = tuple(_r(rng, 64, B64) for _ in range(rng.randint(4, 8)))
    block = f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----"
    return block, lines


# kind -> (env name, a function making (snippet, values)); the snippet is the minimal text
# that carries the secret (a token alone, or ``password=…``, or a URL with a password).
Maker = Callable[[random.Random], tuple[str, tuple[str, ...]]]


def _token(fn: Callable[[random.Random], str]) -> Maker:
    def make(rng: random.Random) -> tuple[str, tuple[str, ...]]:
        value = fn(rng)
        return value, (value,)

    return make


def _with(template: str, fn: Callable[[random.Random], str]) -> Maker:
    def make(rng: random.Random) -> tuple[str, tuple[str, ...]]:
        value = fn(rng)
        return template.format(v=value), (value,)

    return make


def _jwt(rng: random.Random) -> str:
    def part(obj: dict[str, object]) -> str:
        raw = json.dumps(obj, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    head = part({"alg": "HS256", "typ": "JWT"})
    body = part({"sub": _r(rng, 12), "iat": rng.randint(1_600_000_000, 1_800_000_000)})
    return f"{head}.{body}.{_r(rng, 43, URLSAFE)}"


KINDS: dict[str, tuple[str, Maker]] = {
    "openai-api-key": ("OPENAI_API_KEY", _token(lambda r: "sk-proj-" + _r(r, 64, URLSAFE))),
    "anthropic-api-key": (
        "ANTHROPIC_API_KEY",
        _token(lambda r: "sk-ant-api03-" + _r(r, 93, URLSAFE) + "AA"),
    ),
    "aws-access-key": ("AWS_ACCESS_KEY_ID", _token(lambda r: "AKIA" + _r(r, 16, UPPER32))),
    "aws-secret-key": (
        "AWS_SECRET_ACCESS_KEY",
        _with("aws_secret_access_key = {v}", lambda r: _r(r, 40, B64)),
    ),
    "github-token": ("GITHUB_TOKEN", _token(lambda r: "ghp_" + _r(r, 36))),
    "github-fine-grained": (
        "GH_TOKEN",
        _token(lambda r: "github_pat_" + _r(r, 22) + "_" + _r(r, 59)),
    ),
    "gitlab-token": ("GITLAB_TOKEN", _token(lambda r: "glpat-" + _r(r, 20, URLSAFE))),
    "slack-token": (
        "SLACK_BOT_TOKEN",
        _token(lambda r: f"xoxb-{_r(r, 11, string.digits)}-{_r(r, 12, string.digits)}-{_r(r, 24)}"),
    ),
    "slack-webhook": (
        "SLACK_WEBHOOK_URL",
        _token(lambda r: f"https://hooks.slack.com/services/T{_r(r, 8)}/B{_r(r, 8)}/{_r(r, 24)}"),
    ),
    "stripe-key": ("STRIPE_SECRET_KEY", _token(lambda r: "sk_live_" + _r(r, 24))),
    "gcp-api-key": ("GOOGLE_API_KEY", _token(lambda r: "AIza" + _r(r, 35, URLSAFE))),
    "npm-token": ("NPM_TOKEN", _token(lambda r: "npm_" + _r(r, 36))),
    "pypi-token": ("PYPI_TOKEN", _token(lambda r: "pypi-AgEIcHlwaS5vcmc" + _r(r, 60, URLSAFE))),
    "huggingface-token": ("HF_TOKEN", _token(lambda r: "hf_" + _r(r, 34, string.ascii_letters))),
    "sendgrid-api-key": (
        "SENDGRID_API_KEY",
        _token(lambda r: f"SG.{_r(r, 22, URLSAFE)}.{_r(r, 43, URLSAFE)}"),
    ),
    "twilio-api-key": ("TWILIO_API_KEY", _token(lambda r: "SK" + _r(r, 32, HEX))),
    "jwt": ("SESSION_JWT", _token(_jwt)),
    "private-key": ("TLS_KEY", _pem),
    "url-password": (
        "DATABASE_URL",
        _with("postgres://app_user:{v}@db.internal:5432/app", _password),
    ),
    "password": ("DB_PASSWORD", _with("password={v}", _password)),
    "password-prose": ("NOTE", _with("the staging password is {v}", _password)),
    "auth-header": (
        "AUTH_HEADER",
        _with("Authorization: Bearer {v}", lambda r: _r(r, 40, URLSAFE)),
    ),
    "generic-secret": ("API_KEY", _with("api_key: {v}", lambda r: _r(r, 32, HEX))),
    "digitalocean-token": ("DO_TOKEN", _token(lambda r: "dop_v1_" + _r(r, 64, HEX))),
    "telegram-bot-token": (
        "TELEGRAM_TOKEN",
        _token(lambda r: f"{_r(r, 9, string.digits)}:AA{_r(r, 33, URLSAFE)}"),
    ),
    "databricks-token": ("DATABRICKS_TOKEN", _token(lambda r: "dapi" + _r(r, 32, HEX))),
    "groq-api-key": ("GROQ_API_KEY", _token(lambda r: "gsk_" + _r(r, 52))),
    "azure-storage-key": (
        "AZURE_STORAGE",
        _with(
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={v};",
            lambda r: _r(r, 86, B64) + "==",
        ),
    ),
    "mailgun-key": ("MAILGUN_KEY", _token(lambda r: "key-" + _r(r, 32, HEX))),
    "shopify-token": ("SHOPIFY_TOKEN", _token(lambda r: "shpat_" + _r(r, 32, HEX))),
    "linear-api-key": ("LINEAR_API_KEY", _token(lambda r: "lin_api_" + _r(r, 40))),
}

CONTEXTS = ("prose", "code", "json", "env", "url", "tool")


def _place(context: str, env: str, snippet: str, rng: random.Random) -> str:
    host = rng.choice(["billing", "search", "auth", "ingest", "reports"])
    multiline = "\n" in snippet
    match context:
        case "prose":
            return (
                f"While debugging the {host} service I used {snippet} to call the API; "
                "it worked after the retry fix, so the flaky test was the cache."
            )
        case "code":
            inner = snippet.replace("\n", "\\n") if multiline else snippet
            return (
                "```python\n"
                f"client = Client(endpoint='https://{host}.internal.test', "
                f'credential="{inner}")\nclient.sync()\n```'
            )
        case "json":
            return json.dumps({"service": host, env.lower(): snippet, "retries": 3}, indent=2)
        case "env":
            inner = snippet.replace("\n", "\\n") if multiline else snippet
            return f"# .env for {host}\nDEBUG=1\n{env}={inner}\nPORT=8080\n"
        case "url":
            if multiline or "://" in snippet or " " in snippet:
                return f"Fetched with `curl -H 'X-Debug: 1' {snippet!r}` from the {host} box."
            return f"Open https://{host}.internal.test/v1/items?access_token={snippet}&page=2"
        case "tool":
            return (
                f"$ ./deploy.sh {host}\n[info] loading environment\n"
                f"[debug] {env}={snippet}\n[info] deploy finished in 12.4s\n"
            )
    raise ValueError(context)


def planted(per_kind: int = 8, seed: int = 18) -> list[Planted]:
    """``per_kind`` secrets of each kind, cycling through the contexts."""
    rng = random.Random(seed)
    out: list[Planted] = []
    for kind, (env, make) in KINDS.items():
        for _ in range(per_kind):
            snippet, values = make(rng)
            context = CONTEXTS[len(out) % len(CONTEXTS)]
            out.append(Planted(kind, context, _place(context, env, snippet, rng), values))
    return out


# --- the clean corpus ---------------------------------------------------------------------

_WORDS = (
    "cache index retry budget queue worker schema migration lock session flush dream search "
    "vector chunk embedding deploy build release config parser watcher socket daemon actor "
    "timeout backoff ranking fixture pipeline ingest snapshot replica shard"
).split()
_PACKAGES = ("numpy", "httpx", "anyio", "pydantic", "structlog", "ruff", "mypy", "pytest")


def _sentence(rng: random.Random) -> str:
    words = rng.sample(_WORDS, 6)
    return f"The {words[0]} {words[1]} now waits for the {words[2]} before the {words[3]} runs."


def _sha(rng: random.Random, n: int = 40) -> str:
    return _r(rng, n, HEX)


def _b64(rng: random.Random, n: int) -> str:
    return base64.b64encode(rng.randbytes(n)).decode()


def _clean_templates() -> list[Callable[[random.Random], str]]:
    def commits(r: random.Random) -> str:
        lines = [f"- {_sha(r)[:7]} {_sentence(r)}" for _ in range(4)]
        return f"## Recent commits\n\nMerged at {_sha(r)}:\n" + "\n".join(lines)

    def uuids(r: random.Random) -> str:
        u = uuid.UUID(int=r.getrandbits(128), version=4)
        return (
            f"## Idempotent retries\n\nEach request carries `idempotency_key: {u}`; the "
            f"request_id {uuid.UUID(int=r.getrandbits(128), version=4)} showed the duplicate."
        )

    def image(r: random.Random) -> str:
        return (
            f"## Architecture sketch\n\n{_sentence(r)}\n\n"
            f"![diagram](data:image/png;base64,{_b64(r, r.randint(120, 600))})"
        )

    def versions(r: random.Random) -> str:
        pins = [f"{p}=={r.randint(0, 3)}.{r.randint(0, 40)}.{r.randint(0, 9)}" for p in _PACKAGES]
        return "## Pinned versions\n\n```\n" + "\n".join(pins) + "\n```\n" + _sentence(r)

    def lockfile(r: random.Random) -> str:
        return (
            "## Lock file\n\n```json\n"
            + json.dumps(
                {
                    "name": "left-pad",
                    "version": f"1.{r.randint(0, 9)}.{r.randint(0, 9)}",
                    "resolved": "https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz",
                    "integrity": "sha512-" + _b64(r, 64),
                },
                indent=2,
            )
            + "\n```"
        )

    def paths(r: random.Random) -> str:
        return (
            f"## Where things live\n\n- config: `~/.config/memoryd/config.toml`\n"
            f"- key_path: ~/.ssh/id_ed25519\n- logs: /var/log/memoryd/{_sha(r, 8)}.log\n"
            f"- PWD=/home/dev/src/{r.choice(_WORDS)}\n{_sentence(r)}"
        )

    def urls(r: random.Random) -> str:
        n = r.randint(1, 9999)
        return (
            f"## Links\n\n- https://github.com/acme/{r.choice(_WORDS)}/pull/{n}\n"
            f"- git@github.com:acme/{r.choice(_WORDS)}.git\n"
            f"- ssh://git@git.internal.test:2222/platform/{r.choice(_WORDS)}.git\n"
            f"- http://localhost:{r.randint(3000, 9000)}/api/v1/search?q=cache&limit=10\n"
            f"- https://docs.python.org/3/library/re.html#re.{r.choice(['sub', 'match'])}"
        )

    def env_code(r: random.Random) -> str:
        return (
            "## Reading credentials\n\n```python\n"
            'api_key = os.environ["OPENAI_API_KEY"]\n'
            "password = settings.DB_PASSWORD\n"
            "token = get_token(scope='read')\n"
            "secret_key = config.secret_key\n"
            f"max_tokens = {r.choice([1024, 2048, 4096])}\n"
            "```\nNever hard-code them; " + _sentence(r)
        )

    def ci(r: random.Random) -> str:
        return (
            "## CI secrets\n\n```yaml\nenv:\n"
            "  NPM_TOKEN: ${{ secrets.NPM_TOKEN }}\n"
            "  DB_PASSWORD: ${DB_PASSWORD}\n"
            "  api_key: <your api key>\n"
            f"  token_budget: {r.randint(1000, 9000)}\n"
            "```\n" + _sentence(r)
        )

    def http(r: random.Random) -> str:
        return (
            '## Calling the API\n\n`curl -H "Authorization: Bearer $TOKEN" '
            f"https://api.internal.test/v{r.randint(1, 3)}/items` — the token comes from "
            "`memoryd auth login`; the auth: oauth2 flow refreshes it. " + _sentence(r)
        )

    def docker(r: random.Random) -> str:
        return (
            f"## Images\n\nPinned `python:3.12-slim@sha256:{_sha(r, 64)}`; "
            f"build cache key `deps-{_sha(r, 12)}`. {_sentence(r)}"
        )

    def prose(r: random.Random) -> str:
        return "## " + r.choice(_WORDS).title() + "\n\n" + " ".join(_sentence(r) for _ in range(5))

    def config(r: random.Random) -> str:
        return (
            "## Settings that matter\n\n```toml\n[flush]\n"
            f"soft_threshold_tokens = {r.randint(1000, 8000)}\n"
            f"password_min_length = {r.randint(8, 16)}\n"
            'auth_strategy = "device-code"\n'
            f'cache_key_prefix = "v{r.randint(1, 9)}"\n'
            "```\n" + _sentence(r)
        )

    def sql(r: random.Random) -> str:
        return (
            "## Schema\n\n```sql\nCREATE TABLE users (id INTEGER PRIMARY KEY, "
            "password_hash TEXT NOT NULL, api_key_id INTEGER REFERENCES keys(id));\n```\n"
            f"Migration {_sha(r, 12)} adds the foreign key. " + _sentence(r)
        )

    def cloud(r: random.Random) -> str:
        account = _r(r, 12, string.digits)
        return (
            "## Where the database password lives\n\n```yaml\n"
            f"secret_arn: arn:aws:secretsmanager:us-east-1:{account}:secret:prod/db-{_r(r, 6)}\n"
            "env:\n  - name: DB_PASSWORD\n    valueFrom:\n      secretKeyRef:\n"
            "        name: db-secret\n        key: password\n"
            'auth_token: "{{ vault_token }}"\n'
            f"password_hash: $2b$12${_r(r, 53, ALNUM + './')}\n"
            "```\n" + _sentence(r)
        )

    def oauth(r: random.Random) -> str:
        return (
            "## OAuth client settings\n\n```toml\n"
            'token_endpoint_auth_method = "client_secret_post"\n'
            f'token_url = "https://auth.internal.test/oauth2/v{r.randint(1, 2)}/token"\n'
            'tokenizer = "cl100k_base"\n'
            f'api_version = "2024-{r.randint(1, 12):02d}-01"\n'
            'signing_key = "~/.ssh/id_ed25519.pub"\n'
            "```\nThe token is refreshed by the middleware; " + _sentence(r)
        )

    return [
        cloud,
        oauth,
        commits,
        uuids,
        image,
        versions,
        lockfile,
        paths,
        urls,
        env_code,
        ci,
        http,
        docker,
        prose,
        config,
        sql,
    ]


def clean_notes(count: int = 2100, seed: int = 180) -> list[str]:
    """``count`` realistic memory notes without secrets, cycling through the templates."""
    rng = random.Random(seed)
    templates = _clean_templates()
    return [templates[i % len(templates)](rng) for i in range(count)]


def messages_1kb(count: int = 500, seed: int = 7) -> list[str]:
    """About-1 KB session messages for the cost figure: clean notes and planted secrets
    mixed as a session has them (one in ten carries a secret)."""
    rng = random.Random(seed)
    notes = clean_notes(200, seed)
    secrets = planted(2, seed)
    out = []
    for i in range(count):
        text = ""
        while len(text) < 1024:
            text += rng.choice(notes) + "\n\n"
        if i % 10 == 0:
            text = rng.choice(secrets).text + "\n\n" + text
        out.append(text[:1024])
    return out
