"""Discovery, precedence, malformed files, roles/personas on disk and path confinement."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from memoryd.core.agents.resolve import Overrides
from memoryd.errors import AgentConfigError, NotFound, WorkspaceNotFound
from memoryd.store.agents_loader import find_project, list_agents, resolve


def agent(
    directory: Path, name: str, description: str = "d", extra: str = "", stem: str = ""
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{stem or name}.md"
    path.write_text(
        f"---\nname: {name}\ndescription: {description}\n{extra}---\nPrompt of {name}.\n"
    )
    return path


@pytest.fixture
def tree(tmp_path: Path) -> dict[str, Path]:
    """repo (git root) / sub / ws, a user dir and a fake bundled dir, all in tmp."""
    outer = tmp_path / "outer"
    repo = outer / "repo"
    ws = repo / "sub" / "ws"
    ws.mkdir(parents=True)
    (repo / ".git").mkdir()
    user = tmp_path / "home" / ".grok"
    user.mkdir(parents=True)
    bundled = tmp_path / "bundled"
    bundled.mkdir()
    return {"outer": outer, "repo": repo, "ws": ws, "user": user, "bundled": bundled}


def listing(t: dict[str, Path], config: dict[str, Any] | None = None) -> Any:
    return list_agents(t["ws"], config, t["user"], bundled_dir=t["bundled"])


def run(
    t: dict[str, Path],
    kind: str,
    overrides: Overrides | None = None,
    config: object = None,
    parent: str | None = None,
) -> Any:
    return resolve(
        t["ws"], kind, overrides or Overrides(), config, t["user"], parent, bundled_dir=t["bundled"]
    )


# -- discovery ---------------------------------------------------------------------------


def test_precedence_project_over_user_over_bundled(tree: dict[str, Path]) -> None:
    for name in ("a", "b", "c"):
        agent(tree["bundled"], name, "bundled")
    for name in ("a", "b"):
        agent(tree["user"] / "agents", name, "user")
    agent(tree["repo"] / ".grok" / "agents", "a", "project")

    found = {e.name: (e.description, e.origin) for e in listing(tree).agents}
    assert found == {
        "a": ("project", "project"),
        "b": ("user", "user"),
        "c": ("bundled", "bundled"),
    }

    result = run(tree, "a")
    assert (result.origin, result.definition.description) == ("project", "project")
    wire = json.loads(json.dumps(result.to_dict()))
    assert wire["definition"]["origin"] == "project"
    assert wire["definition"]["prompt"] == "Prompt of a."
    assert result.path == str(tree["repo"] / ".grok" / "agents" / "a.md")
    assert run(tree, "b").origin == "user"
    assert run(tree, "c").origin == "bundled"


def test_walk_up_stops_at_git_root_and_nearest_wins(tree: dict[str, Path]) -> None:
    agent(tree["repo"] / ".grok" / "agents", "shared", "from repo root")
    agent(tree["ws"] / ".grok" / "agents", "shared", "from workspace")
    agent(tree["repo"] / "sub" / ".grok" / "agents", "middle", "from sub")
    agent(tree["outer"] / ".grok" / "agents", "outside", "above the git root")

    found = {e.name: e.description for e in listing(tree).agents}
    assert found == {"shared": "from workspace", "middle": "from sub"}
    assert find_project(tree["ws"]).root == tree["repo"].resolve()
    with pytest.raises(NotFound):
        run(tree, "outside")


def test_without_git_root_only_the_workspace_is_searched(tmp_path: Path) -> None:
    parent = tmp_path / "plain"
    ws = parent / "ws"
    ws.mkdir(parents=True)
    agent(parent / ".grok" / "agents", "up", "parent")
    agent(ws / ".grok" / "agents", "here", "ws")
    names = {e.name for e in list_agents(ws, None, tmp_path / "u", bundled_dir=tmp_path).agents}
    assert names == {"here"}


def test_real_bundled_definitions_ship_with_the_package(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    found = {e.name: e.origin for e in list_agents(ws, None, tmp_path / "u").agents}
    assert found == {"general-purpose": "bundled", "explore": "bundled"}
    result = resolve(ws, "explore", Overrides(), None, tmp_path / "u", "parent-model")
    assert result.config.reasoning_effort == "low"
    assert result.config.model == "parent-model"


def test_malformed_file_is_listed_with_file_and_field_and_hides_nothing(
    tree: dict[str, Path],
) -> None:
    project = tree["repo"] / ".grok" / "agents"
    agent(project, "good")
    bad = agent(project, "bad", extra="effort: huge\n")
    (project / "nofront.md").write_text("just text\n")
    agent(tree["bundled"], "bad", "bundled bad")
    agent(tree["bundled"], "other")

    result = listing(tree)
    assert {e.name for e in result.agents} == {"good", "bad", "other"}
    problems = {(p.file, p.field) for p in result.errors}
    assert (str(bad), "effort") in problems
    assert (str(project / "nofront.md"), "front matter") in problems
    assert any(str(bad) in p.message and "'effort'" in p.message for p in result.errors)


def test_resolving_a_type_whose_winning_file_is_malformed_raises(tree: dict[str, Path]) -> None:
    bad = agent(tree["repo"] / ".grok" / "agents", "bad", extra="maxTurns: -1\n")
    agent(tree["bundled"], "bad", "bundled fallback")
    with pytest.raises(AgentConfigError) as info:
        run(tree, "bad")
    assert info.value.data["file"] == str(bad)
    assert info.value.data["field"] == "maxTurns"


def test_duplicate_name_in_one_directory_is_an_error_first_wins(tree: dict[str, Path]) -> None:
    project = tree["repo"] / ".grok" / "agents"
    agent(project, "twin", "first", stem="a-twin")
    second = agent(project, "twin", "second", stem="b-twin")
    result = listing(tree)
    assert [(e.name, e.description) for e in result.agents] == [("twin", "first")]
    assert [(p.file, p.field) for p in result.errors] == [(str(second), "name")]


def test_unknown_type_is_not_found(tree: dict[str, Path]) -> None:
    agent(tree["bundled"], "known")
    with pytest.raises(NotFound) as info:
        run(tree, "nope")
    assert info.value.data["available"] == ["known"]


def test_missing_workspace(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceNotFound):
        list_agents(tmp_path / "absent", None, tmp_path)


# -- roles and personas ------------------------------------------------------------------


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_roles_and_personas_from_files_and_config_precedence(tree: dict[str, Path]) -> None:
    agent(tree["bundled"], "worker")
    write(tree["repo"] / ".grok" / "roles" / "worker.toml", 'model = "m-project"\n')
    write(tree["user"] / "roles" / "worker.toml", 'model = "m-user"\n')
    write(tree["user"] / "roles" / "other.toml", 'description = "user role"\n')
    write(tree["user"] / "personas" / "sk.toml", 'instructions = "From user."\n')
    config = {
        "roles": {"worker": {"model": "m-config"}, "cfg-only": {"description": "c"}},
        "personas": {"sk": {"instructions": "From config."}, "calm": {"instructions": "Calm."}},
        "models": {"worker": "m-pin"},
    }
    result = listing(tree, config)
    roles = {e.name: (e.origin, e.description) for e in result.roles}
    assert roles == {
        "worker": ("project", None),
        "other": ("user", "user role"),
        "cfg-only": ("config", "c"),
    }
    assert {e.name: e.origin for e in result.personas} == {"sk": "user", "calm": "config"}
    assert result.errors == ()
    wire = json.loads(json.dumps(result.to_dict()))
    assert {"name": "cfg-only", "description": "c", "origin": "config", "path": None} in wire[
        "roles"
    ]

    answer = run(tree, "worker", Overrides(persona="sk"), config)
    assert answer.config.model == "m-project"
    assert answer.config.role_name == "worker"
    assert answer.config.persona_instructions == "<persona>\nFrom user.\n</persona>"
    calm = run(tree, "worker", Overrides(persona="calm", model="m-o"), config).config
    assert (calm.model, calm.persona_instructions) == ("m-o", "<persona>\nCalm.\n</persona>")


def test_per_agent_pin_from_config(tree: dict[str, Path]) -> None:
    agent(tree["bundled"], "worker", extra="model: m-def\n")
    answer = run(tree, "worker", config={"models": {"worker": "m-pin"}}, parent="m-parent")
    assert answer.config.model == "m-pin"
    assert run(tree, "worker", parent="m-parent").config.model == "m-def"


def test_role_without_definition_resolves(tree: dict[str, Path]) -> None:
    answer = run(
        tree, "tester", config={"roles": {"tester": {"default_capability_mode": "execute"}}}
    )
    assert answer.definition is None
    assert answer.config.capability_mode == "execute"
    assert answer.to_dict()["definition"] is None


@pytest.mark.parametrize(
    ("kind", "text", "field"),
    [
        ("roles", "temperature = 0.1\n", "temperature"),
        ("roles", 'default_capability_mode = "root"\n', "default_capability_mode"),
        ("roles", "model = [\n", "toml"),
        ("personas", 'instructions = "x"\ncapability_mode = "all"\n', "capability_mode"),
        (
            "personas",
            'instructions = "x"\ndefault_capability_mode = "all"\n',
            "default_capability_mode",
        ),
        ("personas", 'instructions = "x"\nreasoning_effort = "huge"\n', "reasoning_effort"),
    ],
)
def test_bad_role_or_persona_file_is_an_error_naming_file_and_field(
    tree: dict[str, Path], kind: str, text: str, field: str
) -> None:
    agent(tree["bundled"], "worker")
    bad = write(tree["repo"] / ".grok" / kind / "worker.toml", text)
    write(
        tree["repo"] / ".grok" / kind / "fine.toml",
        'instructions = "ok"\n' if kind == "personas" else 'description = "ok"\n',
    )
    result = listing(tree)
    assert [(p.file, p.field) for p in result.errors] == [(str(bad), field)]
    assert "fine" in {e.name for e in (result.roles if kind == "roles" else result.personas)}
    overrides = Overrides(persona="worker") if kind == "personas" else Overrides()
    with pytest.raises(AgentConfigError) as info:
        run(tree, "worker", overrides)
    assert (info.value.data["file"], info.value.data["field"]) == (str(bad), field)


def test_bad_config_tables_are_errors_naming_the_key(tree: dict[str, Path]) -> None:
    agent(tree["bundled"], "worker")
    with pytest.raises(AgentConfigError, match=r"agents\.flavours"):
        run(tree, "worker", config={"flavours": {}})
    with pytest.raises(AgentConfigError, match=r"agents\.models\.worker"):
        run(tree, "worker", config={"models": {"worker": 5}})
    config = {"roles": {"worker": {"model": "m", "colour": "red"}}}
    with pytest.raises(AgentConfigError, match="colour"):
        run(tree, "worker", config=config)
    assert [p.field for p in listing(tree, config).errors] == ["colour"]


# -- referenced files: read at resolve time, confined ------------------------------------


def test_role_prompt_and_persona_file_are_read_at_resolve_time(tree: dict[str, Path]) -> None:
    agent(tree["bundled"], "worker")
    roles = tree["repo"] / ".grok" / "roles"
    write(roles / "worker.toml", 'prompt_file = "worker-prompt.md"\n')
    prompt = write(roles / "worker-prompt.md", "Version one.\n")
    personas = tree["user"] / "personas"
    write(personas / "sk.toml", 'instructions = "Inline."\ninstructions_file = "sk.md"\n')
    write(personas / "sk.md", "From file.\n")

    first = run(tree, "worker", Overrides(persona="sk")).config
    assert first.role_prompt == "Version one."
    assert first.persona_instructions == "<persona>\nInline.\n\nFrom file.\n</persona>"
    prompt.write_text("Version two.\n")
    assert run(tree, "worker").config.role_prompt == "Version two."


def test_missing_role_prompt_warns_and_missing_persona_file_fails_closed(
    tree: dict[str, Path],
) -> None:
    agent(tree["bundled"], "worker", extra="effort: high\n")
    write(
        tree["repo"] / ".grok" / "roles" / "worker.toml",
        'prompt_file = "gone.md"\nmodel = "m-role"\n',
    )
    write(tree["repo"] / ".grok" / "personas" / "sk.toml", 'instructions_file = "gone.md"\n')

    warned = run(tree, "worker").config
    assert warned.role_prompt_warning is not None and "gone.md" in warned.role_prompt_warning
    assert (warned.model, warned.reasoning_effort, warned.persona_error) == ("m-role", "high", None)

    failed = run(tree, "worker", Overrides(persona="sk")).config
    assert failed.persona_error is not None and "'sk'" in failed.persona_error
    assert (failed.model, failed.reasoning_effort, failed.role_name) == (None, None, None)

    missing = run(tree, "worker", Overrides(persona="ghost")).config
    assert missing.persona_error == "persona 'ghost' not found"


def test_config_paths_are_relative_to_the_config_dir(tree: dict[str, Path]) -> None:
    agent(tree["bundled"], "worker")
    write(tree["user"] / "prompts" / "w.md", "From user dir.\n")
    config = {"roles": {"worker": {"prompt_file": "prompts/w.md"}}}
    assert run(tree, "worker", config=config).config.role_prompt == "From user dir."


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
@pytest.mark.parametrize("kind", ["role", "persona"])
def test_paths_escaping_project_and_user_dir_are_errors(
    tree: dict[str, Path], tmp_path: Path, how: str, kind: str
) -> None:
    agent(tree["bundled"], "worker")
    secret = write(tmp_path / "secret.txt", "top secret\n")
    base = tree["repo"] / ".grok" / ("roles" if kind == "role" else "personas")
    if how == "dotdot":
        target = "../../../../../../../../etc/passwd"
    elif how == "absolute":
        target = str(secret)
    else:
        base.mkdir(parents=True, exist_ok=True)
        (base / "link.md").symlink_to(secret)
        target = "link.md"
    field = "prompt_file" if kind == "role" else "instructions_file"
    name = "worker" if kind == "role" else "sk"
    toml = write(base / f"{name}.toml", f'{field} = "{target}"\n')

    overrides = Overrides(persona="sk") if kind == "persona" else Overrides()
    with pytest.raises(AgentConfigError) as info:
        run(tree, "worker", overrides)
    assert info.value.data["field"] == field
    assert info.value.data["file"] == str(toml)
    assert "escapes" in str(info.value)


@pytest.mark.parametrize("target", ["../../docs/prompt.md", "link.md"])
def test_paths_inside_the_project_are_allowed(tree: dict[str, Path], target: str) -> None:
    agent(tree["bundled"], "worker")
    prompt = write(tree["repo"] / "docs" / "prompt.md", "Shared prompt.\n")
    roles = tree["repo"] / ".grok" / "roles"
    write(roles / "worker.toml", f'prompt_file = "{target}"\n')
    (roles / "link.md").symlink_to(prompt)
    assert run(tree, "worker").config.role_prompt == "Shared prompt."


def test_config_section_object_or_table_with_user_dir_is_accepted(tree: dict[str, Path]) -> None:
    agent(tree["bundled"], "worker")
    section = SimpleNamespace(
        user_dir="", models={"worker": "m-pin"}, roles={"worker": {"model": "m-r"}}, personas={}
    )
    assert run(tree, "worker", config=section).config.model == "m-r"
    table = {"user_dir": "", "models": {"worker": "m-pin"}}
    assert run(tree, "worker", config=table).config.model == "m-pin"


def test_a_huge_definition_in_a_cloned_repository_is_refused_unread(
    tree: dict[str, Path],
) -> None:
    """A repository's ``.grok/agents/*.md`` is anyone's input: a 1 GB one (sparse here) was
    read and decoded whole by the daemon for every listing. Files over 1 MiB are refused."""
    project = tree["repo"] / ".grok" / "agents"
    agent(project, "good")
    big = agent(project, "big")
    with big.open("ab") as handle:
        handle.truncate(1 << 30)
    started = time.perf_counter()
    result = listing(tree)
    took = time.perf_counter() - started
    assert {e.name for e in result.agents} == {"good"}
    assert any(str(big) in p.message and "larger than" in p.message for p in result.errors)
    assert took < 1.0, f"listing took {took:.1f} s"
