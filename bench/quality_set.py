"""memoryd's own small retrieval set: notes with queries whose answers are known (SPEC §5, §6).

Written by hand for this purpose (not taken from a public set): the memory of a fictional web
shop project, "Orchard", as a coding agent and its team would keep it — 50 notes (34 English,
16 Chinese), each one ``##`` section with a short title, spread over the workspace
``MEMORY.md`` and three session logs. 36 queries, each with the one note that answers it:

- **keyword** (18: 12 English, 6 Chinese): the words a person remembers from the note
  itself (``"pnpm lockfile"``), what full-text search is built for;
- **paraphrase** (18: 12 English, 6 Chinese): the same need in other words, sharing few or no
  terms with the note (``"which tool adds JavaScript libraries to the project?"``); six of them
  cross languages (an English question about a Chinese note or the reverse).

:mod:`bench.quality` runs it through :class:`~memoryd.runtime.workspace.memory.WorkspaceMemory` with
and without vectors and reports recall@10 per half.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bench.quality_sets import Fact, QualitySet, SetQuery

Kind = Literal["keyword", "paraphrase"]


@dataclass(frozen=True, slots=True)
class Note:
    """One memory note: a ``##`` section titled ``title`` in the file ``where``."""

    key: str
    title: str
    text: str
    where: str  # "MEMORY.md" or a session log name under sessions/


@dataclass(frozen=True, slots=True)
class Query:
    text: str
    answer: str  # the key of the note that answers it
    kind: Kind
    lang: Literal["en", "zh"]


MEMORY = "MEMORY.md"
S1 = "2026-05-04-deploy-fixes-1a2b3c4d.md"
S2 = "2026-05-18-search-and-cache-5e6f7a8b.md"
S3 = "2026-05-29-team-notes-9c0d1e2f.md"
SESSIONS = (S1, S2, S3)

NOTES: tuple[Note, ...] = (
    # --- English, workspace MEMORY.md --------------------------------------------------------
    Note(
        "pnpm",
        "Package manager",
        "We use pnpm for the JavaScript packages; never run npm install, it rewrites the lockfile.",
        MEMORY,
    ),
    Note(
        "ports",
        "Local dev ports",
        "The dev server listens on port 5173 and the Vite proxy forwards /api to port 8000.",
        MEMORY,
    ),
    Note(
        "migrations",
        "Migrations before deploy",
        "Run `alembic upgrade head` before deploying: the deploy script does not apply "
        "migrations on its own.",
        MEMORY,
    ),
    Note(
        "backups",
        "Backups",
        "Postgres is backed up nightly at 02:00 UTC to the s3://orchard-backups bucket; "
        "snapshots are kept for 14 days.",
        MEMORY,
    ),
    Note(
        "ruff",
        "Formatting",
        "Python code is formatted with ruff format, line length 100; imports are sorted by "
        "ruff's isort rules.",
        MEMORY,
    ),
    Note(
        "secrets",
        "Secrets",
        "API keys live in 1Password in the 'Orchard prod' vault; never commit .env files.",
        MEMORY,
    ),
    Note(
        "release",
        "Releasing",
        "Releases are cut from main by tagging vX.Y.Z; GitHub Actions builds and publishes the "
        "Docker image.",
        MEMORY,
    ),
    Note(
        "oncall",
        "On-call",
        "Pages go to the PagerDuty rotation; the primary must acknowledge within 15 minutes, "
        "day or night.",
        MEMORY,
    ),
    Note(
        "flags",
        "Feature flags",
        "Feature flags are managed in LaunchDarkly; remove a flag two weeks after it reaches a "
        "100% rollout.",
        MEMORY,
    ),
    Note(
        "logging",
        "Logging",
        "Use structlog with JSON output in production; never log request bodies, they may "
        "contain personal data.",
        MEMORY,
    ),
    Note(
        "utc",
        "Time zones",
        "All timestamps are stored in UTC; convert to the user's zone only in the frontend.",
        MEMORY,
    ),
    Note(
        "alice",
        "Review preferences",
        "Alice prefers small pull requests under 300 lines and reviews them in the morning.",
        MEMORY,
    ),
    Note(
        "integration",
        "Integration tests",
        "Integration tests need Docker running; start the stack with `make services` first.",
        MEMORY,
    ),
    Note(
        "ratelimit",
        "Rate limits",
        "The public API allows 100 requests per minute per token; above that it answers HTTP "
        "429 with Retry-After.",
        MEMORY,
    ),
    Note(
        "stripe",
        "Payment webhooks",
        "Stripe webhooks are verified with the signing secret; replayed events are ignored by "
        "their event id.",
        MEMORY,
    ),
    Note(
        "frontend",
        "Frontend stack",
        "The frontend is React with Vite; global state is kept in Zustand, not Redux.",
        MEMORY,
    ),
    Note(
        "a11y",
        "Accessibility",
        "Every form field needs a visible label; CI runs axe checks on the main pages.",
        MEMORY,
    ),
    Note(
        "monorepo",
        "Monorepo",
        "We chose one repository with separate packages for web, api and worker so they share "
        "types.",
        MEMORY,
    ),
    Note(
        "schema-review",
        "Schema review rule",
        "Database schema changes need a second reviewer from the platform team.",
        MEMORY,
    ),
    Note(
        "git",
        "Git workflow",
        "Rebase feature branches on main instead of merging main into them; squash when "
        "merging the pull request.",
        MEMORY,
    ),
    Note(
        "editor",
        "Editor setup",
        "The team uses VS Code with the recommended extensions listed in .vscode/extensions.json.",
        MEMORY,
    ),
    Note(
        "seed",
        "Demo data",
        "Seed the local database with `make seed`: it creates a demo shop with 50 products and "
        "the admin user admin@example.com.",
        MEMORY,
    ),
    # --- English, session logs ---------------------------------------------------------------
    Note(
        "flaky",
        "Flaky checkout test",
        "test_checkout_timeout is flaky on CI because it depends on wall-clock time; rerun it "
        "once before investigating.",
        S1,
    ),
    Note(
        "tls",
        "Certificate outage",
        "The site went down on 2024-03-02 because the TLS certificate expired; certbot now "
        "renews certificates every 60 days.",
        S1,
    ),
    Note(
        "celery",
        "Background jobs",
        "Background jobs run on Celery with Redis as the broker; long jobs must be idempotent "
        "because they can be retried.",
        S1,
    ),
    Note(
        "applesilicon",
        "Apple Silicon setup",
        "On Apple Silicon, install libpq with brew and set LDFLAGS before building psycopg, "
        "otherwise pip fails.",
        S1,
    ),
    Note(
        "pagecache",
        "Page cache",
        "Redis caches product pages for 5 minutes; bump CACHE_VERSION in settings.py to bust "
        "the cache.",
        S2,
    ),
    Note(
        "meili",
        "Product search",
        "Product search uses Meilisearch; run `orchard search rebuild` to reindex after "
        "changing the ranking rules.",
        S2,
    ),
    Note(
        "annual",
        "Slow annual report",
        "/reports/annual takes 4 seconds because it aggregates every order without an index on "
        "created_at.",
        S2,
    ),
    Note(
        "avatars",
        "Avatars",
        "User avatars are resized to 256 pixels and stored in the media bucket; originals are "
        "deleted after resizing.",
        S2,
    ),
    Note(
        "email",
        "Email",
        "Transactional email goes through Postmark; templates live in emails/templates and are "
        "previewed at /dev/emails.",
        S3,
    ),
    Note(
        "i18n",
        "Translations",
        "UI strings are translated with Crowdin; run `pnpm i18n:extract` before opening a pull "
        "request that changes text.",
        S3,
    ),
    Note(
        "grafana",
        "Dashboards",
        "Grafana dashboards for the API are in the 'Orchard / API' folder; error rate alerts "
        "fire above 2%.",
        S3,
    ),
    Note(
        "v1",
        "API v1 deprecation",
        "The v1 REST endpoints are deprecated and will be removed at the end of the year; "
        "clients should move to v2.",
        S3,
    ),
    # --- Chinese, workspace MEMORY.md --------------------------------------------------------
    Note(
        "zh-deploy",
        "部署流程",
        "部署到生产环境之前，必须先在预发布环境验证，并通知运维值班同学。",
        MEMORY,
    ),
    Note(
        "zh-approval",
        "代码评审",
        "每个合并请求至少需要一位同事批准，涉及支付的改动需要两位。",
        MEMORY,
    ),
    Note(
        "zh-pool", "数据库连接池", "数据库连接池的大小设为二十，超过会导致数据库拒绝连接。", MEMORY
    ),
    Note(
        "zh-password",
        "密码规则",
        "用户密码至少十二位，必须包含数字和字母，使用 argon2 哈希存储。",
        MEMORY,
    ),
    Note(
        "zh-servers",
        "服务器机房",
        "主服务器在上海机房，备份服务器在北京，两地之间每小时同步一次。",
        MEMORY,
    ),
    Note(
        "zh-cdn",
        "前端打包",
        "前端打包产物上传到 CDN，缓存时间为一年，文件名带内容哈希。",
        MEMORY,
    ),
    Note(
        "zh-logistics",
        "接口超时",
        "调用第三方物流接口时超时设为五秒，失败后最多重试三次。",
        MEMORY,
    ),
    Note(
        "zh-coverage",
        "测试覆盖率",
        "核心模块的测试覆盖率不能低于百分之八十，持续集成会检查。",
        MEMORY,
    ),
    # --- Chinese, session logs ---------------------------------------------------------------
    Note("zh-lunch", "午饭", "团队每周五中午一起吃饭，通常去公司楼下的川菜馆。", S3),
    Note("zh-logs", "日志保留", "生产日志保存三十天，之后自动删除；需要更久请导出到对象存储。", S2),
    Note("zh-weekly", "周报", "每周一上午十点前在群里发周报，写清楚上周完成的事情和本周计划。", S3),
    Note("zh-leave", "请假", "请假需要提前三天在系统里申请，并告诉项目负责人。", S3),
    Note(
        "zh-onboarding",
        "新人入职",
        "新同事第一天先申请代码仓库权限，再阅读项目文档中的架构说明。",
        S3,
    ),
    Note("zh-talks", "技术分享", "技术分享会每两周一次，周四下午四点，在三楼会议室。", S3),
    Note("zh-sentry", "错误监控", "线上错误通过 Sentry 收集，严重错误会发到钉钉群。", S1),
    Note("zh-cache", "缓存策略", "商品详情页缓存五分钟，价格变化时主动清除缓存。", S2),
)

QUERIES: tuple[Query, ...] = (
    # --- keyword, English --------------------------------------------------------------------
    Query("pnpm lockfile", "pnpm", "keyword", "en"),
    Query("dev server port 5173", "ports", "keyword", "en"),
    Query("alembic migrations deploy", "migrations", "keyword", "en"),
    Query("Postgres backup bucket", "backups", "keyword", "en"),
    Query("flaky checkout test", "flaky", "keyword", "en"),
    Query("LaunchDarkly feature flag", "flags", "keyword", "en"),
    Query("Redis CACHE_VERSION", "pagecache", "keyword", "en"),
    Query("Stripe webhook signing secret", "stripe", "keyword", "en"),
    Query("Meilisearch reindex", "meili", "keyword", "en"),
    Query("Celery broker idempotent jobs", "celery", "keyword", "en"),
    Query("TLS certificate expired", "tls", "keyword", "en"),
    Query("avatar resize 256 pixels", "avatars", "keyword", "en"),
    # --- keyword, Chinese --------------------------------------------------------------------
    Query("数据库连接池大小", "zh-pool", "keyword", "zh"),
    Query("生产日志保存", "zh-logs", "keyword", "zh"),
    Query("周报", "zh-weekly", "keyword", "zh"),
    Query("用户密码 argon2", "zh-password", "keyword", "zh"),
    Query("物流接口超时", "zh-logistics", "keyword", "zh"),
    Query("测试覆盖率", "zh-coverage", "keyword", "zh"),
    # --- paraphrase, English (the last three ask about Chinese notes) --------------------------
    Query("which tool adds JavaScript libraries to the project?", "pnpm", "paraphrase", "en"),
    Query("where are the production passwords kept?", "secrets", "paraphrase", "en"),
    Query("who gets woken up when the site breaks at 3am", "oncall", "paraphrase", "en"),
    Query(
        "what must we avoid writing to application output for privacy",
        "logging",
        "paraphrase",
        "en",
    ),
    Query("how should dates be saved in the database", "utc", "paraphrase", "en"),
    Query("how big should a change be for our teammate to look at it", "alice", "paraphrase", "en"),
    Query(
        "how many calls can a client make before it gets throttled", "ratelimit", "paraphrase", "en"
    ),
    Query("why is the yearly sales summary so sluggish", "annual", "paraphrase", "en"),
    Query("which library holds the app state in the browser", "frontend", "paraphrase", "en"),
    Query("when does the team have lunch together", "zh-lunch", "paraphrase", "en"),
    Query("what are the rules for user password strength", "zh-password", "paraphrase", "en"),
    Query("in which cities are our servers located", "zh-servers", "paraphrase", "en"),
    # --- paraphrase, Chinese (the first three ask about English notes) -------------------------
    Query("怎么安装前端依赖", "pnpm", "paraphrase", "zh"),
    Query("网站证书过期那次事故之后我们改了什么", "tls", "paraphrase", "zh"),
    Query("上传的头像图片会被怎么处理", "avatars", "paraphrase", "zh"),
    Query("上线前需要做哪些准备", "zh-deploy", "paraphrase", "zh"),
    Query("想休息几天需要怎么办", "zh-leave", "paraphrase", "zh"),
    Query("新员工来了第一件事做什么", "zh-onboarding", "paraphrase", "zh"),
)


def files() -> dict[str, str]:
    """The memory files of the set: path relative to the workspace directory → markdown."""
    out: dict[str, list[str]] = {MEMORY: ["# Orchard\n"]}
    for name in SESSIONS:
        out[f"sessions/{name}"] = []
    for note in NOTES:
        rel = note.where if note.where == MEMORY else f"sessions/{note.where}"
        out[rel].append(f"## {note.title}\n\n{note.text}\n")
    return {rel: "\n".join(parts) for rel, parts in out.items()}


NOTHING: tuple[tuple[str, Literal["en", "zh"]], ...] = (
    ("kubernetes cluster autoscaling", "en"),
    ("what is the office wifi password", "en"),
    ("VAT rules for invoices to Switzerland", "en"),
    ("the and of", "en"),
    ("what do we do", "en"),
    ("公司年会在哪里举办", "zh"),
)
"""Queries nothing in the set answers: a search must return nothing."""


def quality_set() -> QualitySet:
    """The set in the shape :mod:`bench.quality` runs (answers located by their sentence)."""
    facts = {}
    for note in NOTES:
        rel = note.where if note.where == MEMORY else f"sessions/{note.where}"
        facts[note.key] = Fact(rel, note.text)
    queries = [SetQuery(q.text, q.answer, q.kind, q.lang) for q in QUERIES]
    queries += [SetQuery(text, None, "nothing", lang) for text, lang in NOTHING]
    return QualitySet("orchard", files(), facts, tuple(queries))
