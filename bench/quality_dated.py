"""The ``dated`` quality set: a year of session logs whose answers are old (issue #19).

The memory of a web shop team ("Lumen") as a coding agent's session logs: one log a day on
100 days from June 2025 to May 2026, two ``##`` notes each (200 notes). The 20 notes that
answer the queries were all written 6–12 months before the fixed benchmark date (2026-06-01);
the other 180 are routine work notes, built deterministically from templates, many of them
recent and sharing the answers' everyday words (cache, checkout, database, images, tests…).
A search that lets recency outweigh relevance pushes the old answers out of the top 10.

Queries: 20 keyword-style (words from the note), 20 paraphrases (the same need in other
words), 12 identifiers (one code string as a developer pastes it: ``noeviction``,
``products_v2``, an error message — the lookups where an exact keyword match must come first
however the vectors see it) and 10 that must return nothing (topics the team never wrote
about, or only words every note uses).
"""

from __future__ import annotations

import random
from datetime import date, timedelta

from bench.quality_sets import Fact, QualitySet, SetQuery

START = date(2025, 6, 2)
DAYS = 100
STEP_DAYS = 3  # one log every third day: 2025-06-02 .. 2026-05-28

# (key, title, text, log number 0..99 (old ones: < 60), keyword query, paraphrase query)
ANSWERS: tuple[tuple[str, str, str, int, str, str], ...] = (
    (
        "redis",
        "Redis eviction",
        "The cache Redis must run with maxmemory-policy allkeys-lru: under noeviction the "
        "checkout froze as soon as memory filled up.",
        3,
        "redis maxmemory-policy allkeys-lru",
        "why did buying things stop working when the cache got full",
    ),
    (
        "cors",
        "CORS on uploads",
        "Uploads from the mobile web app failed until the S3 bucket's CORS rules allowed the "
        "PUT method and the x-amz-acl header.",
        6,
        "S3 CORS PUT x-amz-acl",
        "phone browser could not send files to storage, what fixed it",
    ),
    (
        "cron",
        "Nightly report cron",
        "The nightly sales report cron runs at 03:30 Europe/Berlin, not UTC; after the DST "
        "switch it fired twice, so it now takes an advisory lock in Postgres first.",
        9,
        "nightly sales report cron DST",
        "why was the daily revenue summary emailed two times",
    ),
    (
        "pgbouncer",
        "Connection pooler",
        "PgBouncer runs in transaction mode with a pool of 40; prepared statements must be "
        "disabled in SQLAlchemy or queries fail with 'prepared statement does not exist'.",
        12,
        "pgbouncer prepared statement does not exist",
        "errors about missing precompiled queries behind the database proxy",
    ),
    (
        "stripe",
        "Stripe webhooks",
        "Stripe webhook signatures are verified against the raw request body; parsing the JSON "
        "before verification broke every signature check.",
        15,
        "stripe webhook signature raw body",
        "payment provider callbacks were rejected as forged",
    ),
    (
        "thumbs",
        "Thumbnail sizes",
        "Thumbnails are generated at 320, 640 and 1280 pixels wide in WebP, with a JPEG "
        "fallback for old Safari versions.",
        18,
        "thumbnails webp jpeg fallback",
        "which picture widths do we produce for previews",
    ),
    (
        "playwright",
        "Flaky end-to-end test",
        "The Playwright checkout test was flaky because the promo banner animation covered the "
        "pay button; the tests now run with reducedMotion.",
        21,
        "playwright reducedMotion promo banner",
        "a browser test failed randomly because something moved over a button",
    ),
    (
        "crowdin",
        "Translations",
        "Translation strings live in locales/*.json and are synced with Crowdin every Monday; "
        "never edit the German file by hand.",
        24,
        "crowdin locales json",
        "where do the texts for other languages come from and when are they updated",
    ),
    (
        "dns",
        "DNS before a move",
        "Lower the DNS TTL to 60 seconds a day before moving the load balancer; the last move "
        "took four hours to propagate.",
        27,
        "DNS TTL load balancer",
        "what to do the day before switching traffic to new infrastructure",
    ),
    (
        "alias",
        "Search reindex",
        "Reindexing the products index in Elasticsearch uses an alias swap: build products_v2, "
        "then move the alias, so product search never comes back empty.",
        30,
        "elasticsearch alias swap products_v2",
        "how to rebuild the catalogue lookup without downtime",
    ),
    (
        "postmark",
        "Password reset mail",
        "Password-reset mails go through Postmark, not SES: SES put them in the spam folder "
        "of Outlook users.",
        33,
        "postmark SES outlook spam",
        "why do account recovery messages use a different mail provider",
    ),
    (
        "celery",
        "Worker memory leak",
        "The Celery image worker leaked memory through Pillow; workers now restart after 200 "
        "tasks (max_tasks_per_child).",
        36,
        "celery max_tasks_per_child pillow",
        "background jobs kept growing in RAM until they were killed",
    ),
    (
        "dark",
        "Dark mode",
        "Dark mode follows prefers-color-scheme and keeps a manual override in localStorage "
        "under the key 'theme'.",
        39,
        "dark mode prefers-color-scheme localStorage",
        "how does the app remember whether someone wants the night colours",
    ),
    (
        "lockout",
        "Login lockout",
        "After five failed logins an account is locked for 15 minutes; the counter lives in "
        "Redis with a TTL.",
        42,
        "failed logins locked 15 minutes",
        "what happens when somebody keeps typing a wrong password",
    ),
    (
        "maps",
        "Maps provider",
        "We switched from Google Maps to MapLibre with OpenStreetMap tiles because the Maps "
        "bill reached 900 euros a month.",
        45,
        "maplibre openstreetmap tiles",
        "why did we stop paying for the store locator's geography service",
    ),
    (
        "a11y",
        "Accessibility audit",
        "The accessibility audit found missing alt text on product photos and a focus trap in "
        "the size picker modal.",
        48,
        "accessibility audit alt text focus trap",
        "problems found for blind and keyboard-only shoppers",
    ),
    (
        "cents",
        "Money amounts",
        "Money is stored as integer cents with an ISO 4217 currency code; floats caused "
        "one-cent rounding errors on invoices.",
        51,
        "integer cents ISO 4217",
        "how do we keep amounts exact on bills",
    ),
    (
        "drill",
        "Restore drill",
        "The quarterly restore drill loads last night's Postgres dump into a scratch instance; "
        "the last drill took 47 minutes end to end.",
        54,
        "restore drill scratch instance",
        "how long does it take to recover the database from a copy",
    ),
    (
        "nvmrc",
        "Node version",
        "The frontend is pinned to Node 20 in .nvmrc; Node 22 broke the build of the sharp "
        "image package.",
        57,
        "nvmrc node 20 sharp",
        "which JavaScript runtime release do we stay on and why",
    ),
    (
        "consent",
        "Analytics consent",
        "Plausible analytics loads only after the cookie banner is accepted; without consent "
        "no tracking script is requested.",
        59,
        "plausible analytics cookie banner consent",
        "do we track visitors who declined the privacy popup",
    ),
)

# (key of the answer, the identifier as it appears in the note)
IDENTIFIERS: tuple[tuple[str, str], ...] = (
    ("redis", "noeviction"),
    ("cron", "Europe/Berlin"),
    ("pgbouncer", "prepared statement does not exist"),
    ("thumbs", "WebP"),
    ("playwright", "reducedMotion"),
    ("crowdin", "locales/*.json"),
    ("alias", "products_v2"),
    ("celery", "max_tasks_per_child"),
    ("dark", "prefers-color-scheme"),
    ("maps", "MapLibre"),
    ("cents", "ISO 4217"),
    ("nvmrc", ".nvmrc"),
)

NOTHING: tuple[str, ...] = (
    "kubernetes helm chart upgrade",
    "GraphQL federation gateway schema stitching",
    "what is the office wifi password",
    "quarterly tax filing deadline for the accountant",
    "bluetooth pairing firmware for the scanner",
    "sourdough bread recipe",
    "vacation policy for interns",
    "what did we do",
    "the team worked on it",
    "notes about the work",
)

# Routine notes: "<who> <did> <area>. <detail>" — everyday words shared with the answers.
PEOPLE = ("Sam", "Noor", "Jonas", "Ines", "Kofi", "Mei")
AREAS = (
    "the checkout page",
    "the cache layer",
    "the product search",
    "the image pipeline",
    "the admin dashboard",
    "the mobile web app",
    "the CI pipeline",
    "the database schema",
    "the login flow",
    "the email templates",
    "the background workers",
    "the store locator",
    "the invoice export",
    "the frontend build",
    "the analytics dashboard",
    "the upload form",
    "the sales report",
    "the translation files",
)
DID = (
    "refactored",
    "added tests for",
    "fixed a small bug in",
    "reviewed a pull request on",
    "profiled",
    "updated dependencies of",
    "wrote documentation for",
    "paired on",
    "cleaned up logging in",
    "renamed a few modules of",
)
DETAILS = (
    "Nothing changed for users.",
    "The change is behind a feature flag until Friday.",
    "Tests pass locally and in CI.",
    "Follow-up ticket opened for the remaining edge cases.",
    "Deployed to staging; production tomorrow.",
    "The diff was mostly renames.",
    "Performance is about the same as before.",
    "Two review comments still open.",
    "Discussed it in the standup.",
    "The old code path is kept for one more release.",
    "Memory use stayed flat during the run.",
    "Page load time went down a little.",
)


def _log_name(number: int) -> str:
    day = START + timedelta(days=STEP_DAYS * number)
    return f"sessions/{day.isoformat()}-work-{number:04d}beef.md"


def quality_set() -> QualitySet:
    rng = random.Random(19)
    notes: dict[int, list[str]] = {n: [] for n in range(DAYS)}
    facts: dict[str, Fact] = {}
    for key, title, text, number, _, _ in ANSWERS:
        notes[number].append(f"## {title}\n\n{text}\n")
        facts[key] = Fact(_log_name(number), text)
    for number in range(DAYS):
        while len(notes[number]) < 2:
            who, did, area = rng.choice(PEOPLE), rng.choice(DID), rng.choice(AREAS)
            detail = rng.choice(DETAILS)
            title = f"{did.split()[0].capitalize()} {area.removeprefix('the ')}"
            notes[number].append(f"## {title}\n\n{who} {did} {area}. {detail}\n")
        rng.shuffle(notes[number])
    files = {
        _log_name(number): f"# Session {number + 1}\n\n" + "\n".join(notes[number])
        for number in range(DAYS)
    }
    queries = [SetQuery(kw, key, "keyword") for key, _, _, _, kw, _ in ANSWERS]
    queries += [SetQuery(para, key, "paraphrase") for key, _, _, _, _, para in ANSWERS]
    queries += [SetQuery(ident, key, "identifier") for key, ident in IDENTIFIERS]
    queries += [SetQuery(text, None, "nothing") for text in NOTHING]
    return QualitySet("dated", files, facts, tuple(queries))
