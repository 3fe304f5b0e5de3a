"""The experience confluence on real files (SPEC §10, issue 11), with fake models in process.

Each run reads the registry and the registered workspaces' ``MEMORY.md`` files on a temp
memory root; the model is :class:`~memoryd.providers.llm.FakeChatModel` (queued answers,
every prompt recorded), so the tests count model calls and read what each call was shown.
The last tests run it through a real in-process daemon and the CLI.
"""

from __future__ import annotations

import codecs
import dataclasses
import itertools
import json
import os
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from memoryd import cli
from memoryd.core import confluence as cf
from memoryd.core.config import Config, ConfluenceConfig
from memoryd.errors import Busy, ModelError, ModelNotConfigured
from memoryd.providers.llm import FakeChatModel, Prompt
from memoryd.runtime.workspace import confluence as runtime_confluence
from memoryd.runtime.workspace.confluence import Confluence
from memoryd.runtime.workspace.memory import WorkspaceMemory
from memoryd.store import files
from memoryd.store.layout import Workspace, ensure_workspace_dirs, resolve_workspace
from memoryd.store.registry import record_workspace
from tests.runtime.daemon_fixtures import (
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    memoryd_cli,
    project,
    wait_until,
)

pytestmark = pytest.mark.anyio

ON = Config(confluence=ConfluenceConfig(enabled=True))

WIDGETS = """\
# Memory: widgets

## Deploy to staging

Run `fly deploy -a widgets-staging` from /srv/widgets; Ana approves releases.

## Flaky tests

The integration suite flaked because tests shared one SQLite file; giving every test its
own temp database fixed it.
"""

GADGETS = """\
# Memory: gadgets

## Retries

HTTP calls to the billing API retry 429 and 5xx with exponential backoff.
"""

LESSON: dict[str, Any] = {
    "title": "Give every test its own temporary database",
    "body": "Tests that share one database file flake; a fresh temp database per test "
    "isolates them.",
    "sources": ["S2"],
}


def answer(*lessons: dict[str, Any]) -> str:
    return json.dumps(list(lessons))


def verdict(shareable: Any, reason: str = "general engineering advice") -> str:
    return json.dumps({"shareable": shareable, "reason": reason})


@dataclasses.dataclass
class Root:
    root: Path
    tmp: Path

    def workspace(
        self, name: str, memory: str | None = None, *, register: bool = True
    ) -> Workspace:
        path = self.tmp / "src" / name
        path.mkdir(parents=True, exist_ok=True)
        ws = resolve_workspace(path, self.root)
        ensure_workspace_dirs(ws)
        if memory is not None:
            ws.memory_file.write_text(memory, encoding="utf-8")
        if register:
            assert record_workspace(self.root, ws)
        return ws

    @property
    def experience(self) -> Path:
        return self.root / "experience.md"

    def confluence(
        self, model: FakeChatModel | None, config: Config = ON, **options: Any
    ) -> Confluence:
        return Confluence(self.root, lambda: config, lambda: model, **options)


@pytest.fixture
def mem(tmp_path: Path) -> Root:
    root = tmp_path / "memory"
    root.mkdir()
    return Root(root, tmp_path)


def distiller_calls(model: FakeChatModel) -> list[Prompt]:
    return [p for p in model.prompts if p.system == cf.distiller_prompt()]


def screener_calls(model: FakeChatModel) -> list[Prompt]:
    return [p for p in model.prompts if p.system == cf.screener_prompt()]


# --------------------------------------------------------------------------- enumeration


async def test_leftover_directories_not_in_the_registry_are_never_read(
    mem: Root, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = mem.workspace("widgets", WIDGETS)
    sentinel = "SENTINEL-LEFTOVER-7731"
    for leftover in ("tmp-w7-bootstrap-1786986291739-9n2xv", "train", "zz-fake-12345678"):
        (mem.root / leftover).mkdir()
        (mem.root / leftover / "MEMORY.md").write_text(f"## {sentinel}\n\n{sentinel} body\n")
    mem.workspace("unregistered", f"## {sentinel}\n\nnever served\n", register=False)
    reads: list[Path] = []
    real_read = files.read_text

    def spy(path: Path, max_bytes: int | None = None) -> str | None:
        reads.append(path)
        return real_read(path, max_bytes)

    monkeypatch.setattr(runtime_confluence, "read_text", spy)
    model = FakeChatModel([answer()])

    result = await mem.confluence(model).run()

    assert result["counts"]["workspaces"] == 1 and result["counts"]["new_sections"] == 2
    assert set(reads) == {ws.memory_file, mem.experience}
    assert all(sentinel not in p.user and sentinel not in p.system for p in model.prompts)


# --------------------------------------------------------------------------- watermark


async def test_a_second_run_with_nothing_new_makes_no_model_call(mem: Root) -> None:
    ws = mem.workspace("widgets", WIDGETS)
    model = FakeChatModel([answer(LESSON), verdict(True)])
    confluence = mem.confluence(model)
    first = await confluence.run()
    assert first["outcome"] == "done" and model.calls == 2

    second = await confluence.run()
    assert (second["outcome"], second["skipped"]) == ("skipped", "no_new_material")
    assert second["counts"]["model_calls"] == 0 and model.calls == 2

    later = datetime.now(UTC).timestamp() + 7200
    os.utime(ws.memory_file, (later, later))  # touched, not changed
    ws.memory_file.write_text(WIDGETS.replace("\n\n", "\n\n\n"), encoding="utf-8")  # same sections
    third = await confluence.run()
    assert third["skipped"] == "no_new_material" and model.calls == 2


async def test_only_new_sections_go_to_the_distiller(mem: Root) -> None:
    ws = mem.workspace("widgets", WIDGETS)
    model = FakeChatModel([answer()])
    confluence = mem.confluence(model)
    await confluence.run()

    ws.memory_file.write_text(WIDGETS + "\n## Caching\n\nWarm caches first.\n", encoding="utf-8")
    model.queue(answer())
    result = await confluence.run()

    assert result["counts"]["new_sections"] == 1 and model.calls == 2
    last = model.prompts[-1].user
    assert "## Caching" in last and "Flaky tests" not in last


async def test_the_watermark_survives_a_new_confluence_object_and_a_corrupt_state_resets_it(
    mem: Root,
) -> None:
    mem.workspace("widgets", WIDGETS)
    model = FakeChatModel([answer()])
    await mem.confluence(model).run()
    assert (await mem.confluence(model).run())["skipped"] == "no_new_material"

    (mem.root / ".confluence" / "state.json").write_text("{broken")
    model.queue(answer())
    assert (await mem.confluence(model).run())["counts"]["new_sections"] == 2


# --------------------------------------------------------------------------- distiller


async def test_one_distiller_call_per_batch(mem: Root) -> None:
    big = "".join(f"## Topic {i}\n\n{'word ' * 1000}{i}\n\n" for i in range(4))  # ~5000 chars each
    mem.workspace("big", big)
    model = FakeChatModel([answer(), answer()])

    result = await mem.confluence(model).run()

    assert result["counts"]["batches"] == 2
    assert len(distiller_calls(model)) == 2 == model.calls
    assert [p.user.count("\n[S") + p.user.startswith("[S") for p in model.prompts] == [2, 2]


async def test_an_unparsable_distiller_answer_is_an_error_and_the_sections_stay_new(
    mem: Root,
) -> None:
    mem.workspace("widgets", WIDGETS)
    model = FakeChatModel(["Here are the lessons: none really."])
    confluence = mem.confluence(model)

    result = await confluence.run()

    assert result["outcome"] == "failed"
    assert result["counts"]["errors"] == 1 and result["counts"]["candidates"] == 0
    [error] = result["errors"]
    assert error["stage"] == "distiller" and "not JSON" in error["message"]
    assert not mem.experience.exists()

    model.queue(answer())  # the next run retries the same sections
    retry = await confluence.run()
    assert retry["outcome"] == "done" and retry["counts"]["new_sections"] == 2


async def test_a_failing_batch_does_not_stop_the_others(mem: Root) -> None:
    big = "".join(f"## Topic {i}\n\n{'word ' * 1000}{i}\n\n" for i in range(4))
    mem.workspace("big", big)
    lesson = {"title": "Keep topics small", "body": "Small topics are easy.", "sources": ["S1"]}
    model = FakeChatModel([ModelError("HTTP 500"), answer(lesson), verdict(True)])

    result = await mem.confluence(model).run()

    assert result["outcome"] == "partial"
    assert result["counts"]["shared"] == 1 and result["counts"]["errors"] == 1
    assert "Keep topics small" in mem.experience.read_text()


# --------------------------------------------------------------------------- screener


async def test_one_screener_call_per_candidate_seeing_only_title_and_body(mem: Root) -> None:
    widgets = mem.workspace("widgets", WIDGETS)
    gadgets = mem.workspace("gadgets", GADGETS)
    second = {
        "title": "Retry rate limits with backoff",
        "body": "Retry 429 and 5xx answers with exponential backoff.",
        "sources": ["S3"],
    }
    model = FakeChatModel([answer(LESSON, second), verdict(True), verdict(True)])

    result = await mem.confluence(model).run()

    assert result["counts"]["candidates"] == 2 and result["counts"]["shared"] == 2
    screens = screener_calls(model)
    assert len(screens) == 2 and model.calls == 3
    assert screens[0].user == cf.screener_input(LESSON["title"], LESSON["body"])
    forbidden = [
        "MEMORY.md",
        str(mem.root),
        "/srv/widgets",
        "widgets-staging",
        "SQLite file",  # raw MEMORY.md text
        "billing API",
    ]
    for ws in (widgets, gadgets):
        forbidden += [ws.key.dirname, ws.key.slug, ws.key.identity, str(ws.path), ws.key.hash8]
    for prompt in screens:
        text = prompt.system + prompt.user
        assert [word for word in forbidden if word in text] == []


@pytest.mark.parametrize(
    ("screen", "why"),
    [
        (verdict("true"), "not a JSON boolean"),
        (verdict(1), "not a JSON boolean"),
        ("Sure, this is fine to share.", "not JSON"),
        (verdict(False, "mentions a staging app"), "screener: mentions a staging app"),
        (ModelError("HTTP 503 after 3 attempts"), "screener failed: ModelError: HTTP 503"),
        (TimeoutError(), "screener timed out"),
    ],
)
async def test_anything_but_a_clear_yes_is_not_shared_and_the_reason_is_recorded(
    mem: Root, screen: str | Exception, why: str
) -> None:
    mem.workspace("widgets", WIDGETS)
    model = FakeChatModel([answer(LESSON), screen])

    result = await mem.confluence(model).run()

    assert result["counts"]["shared"] == 0 and result["counts"]["rejected"] == 1
    [rejection] = result["rejections"]
    assert rejection["title"] == LESSON["title"] and why in rejection["reason"]
    assert not mem.experience.exists()
    status = await mem.confluence(model).status()
    assert status["last_run"]["rejections"] == result["rejections"]


class HangingScreener(FakeChatModel):
    """Answers the distiller; never answers the screener."""

    async def complete(self, system: str, user: str) -> str:
        if system == cf.screener_prompt():
            self.prompts.append(Prompt(system, user))
            await anyio.sleep_forever()
        return await super().complete(system, user)


async def test_a_screener_that_never_answers_times_out_into_not_shared(mem: Root) -> None:
    mem.workspace("widgets", WIDGETS)
    model = HangingScreener([answer(LESSON)])
    result = await mem.confluence(model, call_timeout=0.2).run()
    assert result["counts"]["rejected"] == 1
    assert result["rejections"][0]["reason"] == "screener timed out after 0.2 s"


async def test_checks_reject_without_a_screener_call(mem: Root) -> None:
    ws = mem.workspace("widgets", WIDGETS)
    leaky = {"title": "Staging", "body": f"See {ws.key.dirname} for details.", "sources": ["S1"]}
    unknown = {"title": "Made up", "body": "No source.", "sources": ["S7"]}
    model = FakeChatModel([answer(leaky, unknown)])

    result = await mem.confluence(model).run()

    assert model.calls == 1 and result["counts"]["rejected"] == 2
    reasons = [r["reason"] for r in result["rejections"]]
    assert reasons[0].startswith("names a workspace") and "'S7'" in reasons[1]
    assert all(r["by"] == "check" for r in result["rejections"])


# --------------------------------------------------------------------------- output


async def test_accepted_lessons_are_appended_with_sources_and_found_from_another_workspace(
    mem: Root,
) -> None:
    widgets = mem.workspace("widgets", WIDGETS)
    mem.experience.write_text("# Experience\n\n## Older lesson\n\nKept as it is.\n")
    model = FakeChatModel([answer(LESSON), verdict(True)])

    result = await mem.confluence(model).run()

    assert result["accepted"] == [
        {"title": LESSON["title"], "sources": [f"{widgets.key.dirname}:MEMORY.md#Flaky tests"]}
    ]
    text = mem.experience.read_text()
    assert text.startswith("# Experience\n\n## Older lesson\n\nKept as it is.\n\n## Give every")
    assert f"Sources:\n- {widgets.key.dirname}:MEMORY.md#Flaky tests\n" in text
    assert not [p for p in mem.root.iterdir() if p.name.startswith(".memoryd-tmp-")]

    other = mem.workspace("other")  # never a source: it searches the global memory
    memory = WorkspaceMemory(other, mem.root, Config())
    await memory.open()
    try:
        found = await memory.search("temporary database flake")
    finally:
        await memory.close()
    [hit] = found.results
    assert (hit.path, hit.source) == ("experience.md", "global")


async def test_lessons_appended_to_a_utf16_experience_md_keep_its_text(mem: Root) -> None:
    mem.workspace("widgets", WIDGETS)
    older = "# Experience\n\n## Older lessön\n\nKept as it is.\n"
    mem.experience.write_bytes(codecs.BOM_UTF16_LE + older.encode("utf-16-le"))
    model = FakeChatModel([answer(LESSON), verdict(True)])

    assert len((await mem.confluence(model).run())["accepted"]) == 1
    text = files.read_text(mem.experience) or ""
    assert text.startswith(older + "\n## Give every"), text[:80]


async def test_a_lesson_already_in_experience_md_is_not_appended_twice(mem: Root) -> None:
    ws = mem.workspace("widgets", WIDGETS)
    model = FakeChatModel([answer(LESSON), verdict(True)])
    confluence = mem.confluence(model)
    await confluence.run()
    ws.memory_file.write_text(WIDGETS.replace("fixed it", "fixed it for good"), encoding="utf-8")
    model.queue(answer(LESSON | {"sources": ["S1"]}))  # the same lesson again: no screener call

    result = await confluence.run()

    assert result["counts"]["duplicates"] == 1 and model.calls == 3
    assert mem.experience.read_text().count(f"## {LESSON['title']}") == 1


# --------------------------------------------------------------------------- git guard


def git(repo: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@x", "-C", str(repo), *args],
        env=env,
        capture_output=True,
        timeout=30,
        check=True,
    )


async def test_a_memory_root_in_git_is_written_only_when_experience_md_is_committed(
    mem: Root,
) -> None:
    mem.workspace("widgets", WIDGETS)
    git(mem.root, "init", "-q")
    model = FakeChatModel()
    confluence = mem.confluence(model)

    refused = await confluence.run()  # experience.md does not exist: git does not track it

    assert refused["outcome"] == "refused" and model.calls == 0
    assert "then run `memoryd confluence run` again" in refused["refused"]["next_step"]
    assert not mem.experience.exists()

    mem.experience.write_text(cf.EXPERIENCE_HEADER)
    git(mem.root, "add", "experience.md")
    git(mem.root, "commit", "-q", "-m", "track experience.md")
    model.queue(answer(LESSON), verdict(True))
    done = await confluence.run()
    assert done["outcome"] == "done" and LESSON["title"] in mem.experience.read_text()

    # experience.md now has uncommitted changes: the next write is refused, nothing lost
    mem.workspace("gadgets", GADGETS)  # new material, but its lessons could not be written
    again = await confluence.run()
    assert again["outcome"] == "refused" and model.calls == 2
    assert "uncommitted changes" in again["refused"]["reason"]
    assert again["refused"]["next_step"].startswith("commit or stash your changes to")


# --------------------------------------------------------------------------- settings


async def test_confluence_is_off_by_default_and_force_runs_it_once(mem: Root) -> None:
    assert Config().confluence.enabled is False and Config().confluence.schedule == "off"
    mem.workspace("widgets", WIDGETS)
    model = FakeChatModel([answer()])
    confluence = mem.confluence(model, Config())

    off = await confluence.run()
    assert (off["outcome"], off["skipped"], model.calls) == ("skipped", "disabled", 0)
    assert "--force" in off["message"]
    assert not (mem.root / ".confluence").exists()

    forced = await confluence.run(force=True)
    assert forced["outcome"] == "done" and model.calls == 1


async def test_no_chat_model_with_new_material_is_an_error_that_is_recorded(mem: Root) -> None:
    mem.workspace("widgets", WIDGETS)
    confluence = mem.confluence(None)
    with pytest.raises(ModelNotConfigured):
        await confluence.run()
    status = await confluence.status()
    assert status["last_run"]["outcome"] == "failed"
    assert status["last_run"]["errors"][0]["stage"] == "model"


async def test_a_second_run_while_one_runs_is_busy(mem: Root) -> None:
    mem.workspace("widgets", WIDGETS)
    model = FakeChatModel([answer()])
    model.gate = anyio.Event()
    confluence = mem.confluence(model)
    async with anyio.create_task_group() as tg:
        tg.start_soon(confluence.run)
        await wait_until(lambda: model.calls == 1)
        assert confluence.summary()["confluence"]["running"] is True
        with pytest.raises(Busy):
            await confluence.run()
        model.gate.set()
    assert confluence.summary()["confluence"]["last_run"]["outcome"] == "done"


class FakeClock:
    def __init__(self, start: datetime, until: datetime) -> None:
        self.now, self.until = start, until
        self.finished = anyio.Event()

    def __call__(self) -> datetime:
        return self.now

    async def sleep(self, secs: float) -> None:
        self.now += timedelta(seconds=secs)
        if self.now >= self.until:
            self.finished.set()
            await anyio.sleep_forever()
        await anyio.lowlevel.checkpoint()


@pytest.mark.parametrize(
    ("schedule", "enabled", "runs"), [("daily", True, 3), ("off", True, 0), ("daily", False, 0)]
)
async def test_the_daily_schedule_runs_once_a_day_on_an_injected_clock(
    mem: Root, schedule: str, enabled: bool, runs: int
) -> None:
    mem.workspace("widgets", WIDGETS)
    start = datetime(2025, 5, 1, 8, 0, tzinfo=UTC)
    clock = FakeClock(start, until=start + timedelta(days=2, hours=12))
    config = Config(confluence=ConfluenceConfig(enabled=enabled, schedule=schedule))
    model = FakeChatModel([answer()])
    confluence = mem.confluence(model, config, clock=clock, sleep=clock.sleep)
    started: list[datetime] = []
    real_run = confluence.run

    async def counting_run(**kwargs: Any) -> dict[str, Any]:
        started.append(clock.now)
        assert kwargs == {"trigger": "schedule"}
        return await real_run(**kwargs)

    confluence.run = counting_run  # type: ignore[method-assign]
    async with anyio.create_task_group() as tg:
        await tg.start(confluence.run_daily)
        await clock.finished.wait()
        tg.cancel_scope.cancel()

    assert len(started) == runs
    if runs:
        assert started[0] == start + cf.STARTUP_DELAY
        assert [b - a for a, b in itertools.pairwise(started)] == [timedelta(days=1)] * 2
        assert model.calls == 1  # the later days found nothing new: no model call
        state = json.loads((mem.root / ".confluence" / "state.json").read_text())
        assert state["last_run"]["trigger"] == "schedule"


# --------------------------------------------------------------------------- daemon and CLI


async def test_through_the_daemon_status_and_the_cli(home: Path) -> None:
    widgets, other = project(home, "widgets"), project(home, "other")
    config = "[confluence]\nenabled = true\n"
    async with in_process_daemon(config=config) as d:
        for ws in (widgets, other):  # served once: recorded in the registry
            await d.search(ws, "anything")
        registry = json.loads((d.root / "workspaces.json").read_text())
        assert {e["path"] for e in registry["workspaces"].values()} == {str(widgets), str(other)}
        resolve_workspace(widgets, d.root).memory_file.write_text(WIDGETS, encoding="utf-8")
        leak = {"title": "Staging app", "body": "Deploy widgets-staging.", "sources": ["S1"]}
        model = FakeChatModel([answer(LESSON, leak), verdict(True), verdict(False, "names an app")])
        d.daemon.supervisor.chat_model = model

        result = await d.call("confluence.run")
        assert result["counts"] == {
            "workspaces": 2,
            "new_sections": 2,
            "batches": 1,
            "candidates": 2,
            "shared": 1,
            "rejected": 1,
            "duplicates": 0,
            "model_calls": 3,
            "errors": 0,
        }

        async def found() -> bool:
            hits = (await d.search(other, "temporary database per test"))["results"]
            return any(h["path"] == "experience.md" for h in hits)

        await wait_until(found)
        status = (await d.status())["confluence"]
        assert status["last_run"]["counts"]["shared"] == 1 and status["enabled"] is True
        assert (status["schedule"], status["next_run"]) == ("off", None)

        shown = await anyio.to_thread.run_sync(memoryd_cli, home, "confluence", "status")
        assert shown.returncode == 0, shown.stderr
        assert "1 shared, 1 rejected, 3 model calls" in shown.stdout
        assert "- Staging app: screener: names an app" in shown.stdout

        again = await anyio.to_thread.run_sync(memoryd_cli, home, "confluence", "run")
        assert again.returncode == 0, again.stderr
        assert "skipped (no_new_material)" in again.stdout and model.calls == 3


async def test_the_supervisor_records_a_workspace_once_per_daemon_life(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memoryd.runtime import supervisor

    recorded: list[str] = []
    real = record_workspace

    def counting(root: Path, ws: Workspace) -> bool:
        recorded.append(ws.key.dirname)
        return real(root, ws)

    monkeypatch.setattr(supervisor, "record_workspace", counting)
    ws = project(home, "app")
    async with in_process_daemon(config="[daemon]\nactor_idle_secs = 0.05\n") as d:
        await d.search(ws, "x")
        await d.call("memory.search", workspace=f"{ws}/./", query="x")  # another spelling
        slots = d.daemon.supervisor.slots  # an idle-stopped workspace leaves them (#17)
        await wait_until(lambda: recorded[0] not in slots)
        await d.search(ws, "x")  # the idle actor starts again: no second record
    assert recorded == [resolve_workspace(ws, home / "memory").key.dirname]


def test_the_cli_says_when_no_daemon_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["confluence", "status"]) == cli.EXIT_NO_DAEMON
    assert cli.main(["confluence", "run", "--force"]) == cli.EXIT_NO_DAEMON


async def test_a_huge_memory_file_is_read_only_as_far_as_the_index_goes(mem: Root) -> None:
    """Confluence read every workspace's ``MEMORY.md`` whole: a 300 MB one (sparse, NUL
    bytes after its notes) was read, decoded and parsed at every run. It reads what the
    index takes (``index.max_file_bytes``)."""
    ws = mem.workspace("widgets", WIDGETS)
    with ws.memory_file.open("ab") as handle:
        handle.truncate(300 * 1024 * 1024)
    model = FakeChatModel([answer(), verdict(True)])
    started = time.perf_counter()
    result = await mem.confluence(model).run()
    took = time.perf_counter() - started
    assert result["outcome"] == "done" and result["counts"]["new_sections"] == 2, result
    assert "Flaky tests" in distiller_calls(model)[0].user
    assert took < 2.0, f"the run took {took:.1f} s"
