"""``agents.list`` and ``agents.resolve`` over a real socket to a real in-process daemon (SPEC §9).

One project tree (a git repository whose ``.grok/`` is found by walking up from a
sub-directory workspace), a user directory named by ``agents.user_dir`` and config tables:
where each definition, role and persona came from, malformed files listed without hiding the
others, the cascade's answer for every override, the fail-closed persona errors, parameter
errors naming the key, and edits that apply to the next call without a restart.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from memoryd.errors import AgentConfigError, InvalidParams, NotFound, WorkspaceNotFound
from tests.runtime.daemon_fixtures import (
    RunningDaemon,
    exchange,
    home_fixture,  # noqa: F401 - the `home` fixture
    in_process_daemon,
    rpc,
)

pytestmark = pytest.mark.anyio

INVALID_PARAMS = -32602
SPEC_FIELDS = {
    "model",
    "reasoning_effort",
    "capability_mode",
    "persona",
    "persona_instructions",
    "role_prompt",
    "role_prompt_warning",
    "role_name",
    "persona_error",
    "isolation",
}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def definition(directory: Path, name: str, description: str, fields: str = "") -> Path:
    return write(
        directory / "agents" / f"{name}.md",
        f"---\nname: {name}\ndescription: {description}\n{fields}---\nPrompt of {name}.\n",
    )


class Tree:
    """repo/ (git root, holding .grok) / pkg (the workspace), and a user dir."""

    def __init__(self, home: Path) -> None:
        self.repo = home.resolve() / "src" / "repo"
        self.workspace = self.repo / "pkg"
        self.workspace.mkdir(parents=True)
        (self.repo / ".git").mkdir()
        self.grok = self.repo / ".grok"
        self.user = home / "user-grok"
        self.user.mkdir()

        definition(
            self.grok,
            "reviewer",
            "Reviews a change for bugs.",
            "capabilityMode: read-only\neffort: high\nisolation: worktree\nmodel: inherit\n",
        )
        definition(self.grok, "broken", "Has a bad effort.", "effort: extreme\n")
        definition(self.user, "reviewer", "The user's reviewer, shadowed by the project's.")
        definition(self.user, "helper", "The user's helper.", "model: helper-def-model\n")
        write(
            self.grok / "roles" / "reviewer.toml",
            """
            description = "Code review"
            default_capability_mode = "read-only"
            reasoning_effort = "xhigh"
            prompt_file = "reviewer-prompt.md"
            """,
        )
        write(self.grok / "roles" / "reviewer-prompt.md", "Focus on correctness before style.\n")
        write(self.grok / "roles" / "bad.toml", "temperature = 0.2\n")
        write(self.user / "roles" / "helper.toml", 'description = "Helps"\nmodel = "user-model"\n')
        write(
            self.grok / "personas" / "skeptic.toml",
            """
            instructions = "Question every assumption."
            instructions_file = "skeptic.md"
            model = "grok-4"
            default_isolation = "none"
            """,
        )
        write(self.grok / "personas" / "skeptic.md", "Never accept 'it works on my machine'.\n")
        write(self.grok / "personas" / "operator.toml", 'capability_mode = "all"\n')
        write(self.user / "personas" / "quiet.toml", 'instructions = "Say little."\n')

    def config(self) -> str:
        return textwrap.dedent(
            f"""
            [agents]
            user_dir = "{self.user}"
            [agents.models]
            explore = "pinned-explore"
            [agents.roles.planner]
            description = "Plans work"
            default_capability_mode = "read-only"
            [agents.personas.terse]
            instructions = "Answer in one line."
            default_isolation = "worktree"
            """
        )


@pytest.fixture
def tree(home: Path) -> Tree:
    return Tree(home)


async def resolve(
    d: RunningDaemon, tree: Tree, kind: str, parent_model: str | None = None, **overrides: Any
) -> dict[str, Any]:
    params: dict[str, Any] = {"workspace": str(tree.workspace), "subagent_type": kind}
    if overrides:
        params["overrides"] = overrides
    if parent_model is not None:
        params["parent_model"] = parent_model
    result: dict[str, Any] = await d.request("agents.resolve", params)
    assert set(result) == SPEC_FIELDS | {"definition"}  # never temperature, max_tokens, tools
    return result


def fields(result: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in result.items() if key != "definition"}


# --------------------------------------------------------------------------- agents.list


async def test_list_says_where_each_came_from_and_lists_broken_files_beside_the_rest(
    tree: Tree,
) -> None:
    async with in_process_daemon(config=tree.config()) as d:
        listing = await d.call("agents.list", workspace=str(tree.workspace))

    agents = {a["name"]: (a["origin"], a["path"]) for a in listing["agents"]}
    assert agents["reviewer"] == ("project", str(tree.grok / "agents" / "reviewer.md"))
    assert agents["helper"] == ("user", str(tree.user / "agents" / "helper.md"))
    assert agents["explore"][0] == agents["general-purpose"][0] == "bundled"
    assert agents["explore"][1].endswith("bundled/agents/explore.md")
    assert set(agents) == {"reviewer", "helper", "explore", "general-purpose"}  # not "broken"
    [reviewer] = [a for a in listing["agents"] if a["name"] == "reviewer"]
    assert reviewer["description"] == "Reviews a change for bugs."  # the project's wins

    roles = {r["name"]: (r["origin"], r["path"]) for r in listing["roles"]}
    assert roles == {
        "reviewer": ("project", str(tree.grok / "roles" / "reviewer.toml")),
        "helper": ("user", str(tree.user / "roles" / "helper.toml")),
        "planner": ("config", None),
    }
    personas = {p["name"]: (p["origin"], p["path"]) for p in listing["personas"]}
    assert personas == {
        "skeptic": ("project", str(tree.grok / "personas" / "skeptic.toml")),
        "quiet": ("user", str(tree.user / "personas" / "quiet.toml")),
        "terse": ("config", None),
    }

    problems = {(Path(e["file"]).name, e["field"]) for e in listing["errors"]}
    assert problems == {
        ("broken.md", "effort"),
        ("bad.toml", "temperature"),
        ("operator.toml", "capability_mode"),
    }
    for error in listing["errors"]:
        assert error["file"] in error["message"] and repr(error["field"]) in error["message"]


# --------------------------------------------------------------------------- agents.resolve


async def test_resolve_folds_override_role_persona_and_definition(tree: Tree) -> None:
    async with in_process_daemon(config=tree.config()) as d:
        readme = await resolve(d, tree, "reviewer", "grok-code-fast-1", persona="skeptic")
        assert fields(readme) == {
            "model": "grok-4",  # persona (the role has none) beats the parent
            "reasoning_effort": "xhigh",  # role beats the definition's effort
            "capability_mode": "read-only",
            "persona": "skeptic",
            "persona_instructions": (
                "<persona>\nQuestion every assumption.\n\n"
                "Never accept 'it works on my machine'.\n</persona>"
            ),
            "role_prompt": "Focus on correctness before style.",
            "role_prompt_warning": None,
            "role_name": "reviewer",
            "persona_error": None,
            "isolation": "worktree",  # persona says none; the definition upgrades it
        }
        used = readme["definition"]
        assert (used["name"], used["origin"]) == ("reviewer", "project")
        assert used["path"] == str(tree.grok / "agents" / "reviewer.md")
        assert used["prompt"] == "Prompt of reviewer." and used["effort"] == "high"

        every = await resolve(
            d,
            tree,
            "reviewer",
            "parent-model",
            persona="skeptic",
            model="override-model",
            reasoning_effort="low",
            capability_mode="execute",
            isolation="worktree",
        )
        assert (
            every["model"],
            every["reasoning_effort"],
            every["capability_mode"],
            every["isolation"],
        ) == ("override-model", "low", "execute", "worktree")

        plain = await resolve(d, tree, "reviewer", "parent-model")
        assert (plain["model"], plain["persona"], plain["persona_instructions"]) == (
            "parent-model",  # no override, role, persona, pin or definition model
            None,
            None,
        )

        helper = await resolve(d, tree, "helper", "parent-model")
        assert (helper["model"], helper["role_name"], helper["definition"]["origin"]) == (
            "user-model",  # the user's role beats the user's definition model
            "helper",
            "user",
        )

        pinned = await resolve(d, tree, "explore", "parent-model")
        assert (pinned["model"], pinned["reasoning_effort"], pinned["role_name"]) == (
            "pinned-explore",  # [agents.models] pin beats the definition and the parent
            "low",  # the bundled definition's effort fills the gap
            None,
        )
        assert pinned["definition"]["origin"] == "bundled"
        assert (await resolve(d, tree, "explore", model="mine"))["model"] == "mine"

        role_only = await resolve(d, tree, "planner", persona="terse")
        assert role_only["definition"] is None
        assert (role_only["role_name"], role_only["capability_mode"]) == ("planner", "read-only")
        assert role_only["persona_instructions"] == "<persona>\nAnswer in one line.\n</persona>"
        assert role_only["isolation"] == "worktree"  # from the config persona


async def test_persona_errors_fail_closed_and_a_missing_role_prompt_only_warns(
    tree: Tree,
) -> None:
    write(tree.grok / "personas" / "empty.toml", 'model = "m"\n')
    write(
        tree.grok / "personas" / "lost.toml",
        'instructions = "x"\ninstructions_file = "gone.md"\nmodel = "m"\n',
    )
    async with in_process_daemon(config=tree.config()) as d:
        missing = await resolve(d, tree, "reviewer", persona="ghost")
        assert missing["persona_error"] == "persona 'ghost' not found"
        assert missing["reasoning_effort"] == "xhigh"  # the rest still resolves

        empty = await resolve(d, tree, "reviewer", persona="empty")
        assert "'empty'" in empty["persona_error"] and "empty" in empty["persona_error"]

        unreadable = await resolve(d, tree, "reviewer", "parent", persona="lost")
        assert "'lost'" in unreadable["persona_error"] and "gone.md" in unreadable["persona_error"]
        assert fields(unreadable) == {
            **dict.fromkeys(SPEC_FIELDS),
            "persona": "lost",
            "persona_error": unreadable["persona_error"],
            "isolation": "none",  # every other field is left at its default
        }

        (tree.grok / "roles" / "reviewer-prompt.md").unlink()
        warned = await resolve(d, tree, "reviewer", "parent")
        assert warned["persona_error"] is None and warned["role_prompt"] is None
        assert "reviewer-prompt.md" in warned["role_prompt_warning"]
        assert (warned["reasoning_effort"], warned["model"]) == ("xhigh", "parent")


async def test_an_edited_definition_role_or_persona_applies_to_the_next_resolve(
    tree: Tree,
) -> None:
    async with in_process_daemon(config=tree.config()) as d:
        before = await resolve(d, tree, "reviewer", persona="skeptic")
        assert before["definition"]["effort"] == "high" and before["reasoning_effort"] == "xhigh"

        definition(tree.grok, "reviewer", "Edited.", "effort: max\nisolation: none\n")
        write(tree.grok / "roles" / "reviewer.toml", 'model = "role-model"\n')
        write(tree.grok / "personas" / "skeptic.md", "Ask for a failing test first.\n")
        after = await resolve(d, tree, "reviewer", persona="skeptic")
        assert after["definition"]["description"] == "Edited."
        assert (after["reasoning_effort"], after["model"], after["isolation"]) == (
            "max",  # the role no longer sets it: the edited definition's effort
            "role-model",
            "none",
        )
        assert "Ask for a failing test first." in after["persona_instructions"]

        definition(tree.workspace / ".grok", "reviewer", "Nearer.")  # nearest directory wins
        assert (await resolve(d, tree, "reviewer"))["definition"]["description"] == "Nearer."
        (tree.workspace / ".grok" / "agents" / "reviewer.md").unlink()
        (tree.grok / "agents" / "reviewer.md").unlink()
        fallback = await resolve(d, tree, "reviewer")
        assert fallback["definition"]["origin"] == "user"


# --------------------------------------------------------------------------- errors


BAD_OVERRIDES = [
    ({"temperature": 0.2}, "overrides.temperature"),
    ({"max_tokens": 100}, "overrides.max_tokens"),
    ({"reasoning_effort": "extreme"}, "overrides.reasoning_effort"),
    ({"capability_mode": "root"}, "overrides.capability_mode"),
    ({"isolation": "container"}, "overrides.isolation"),
    ({"model": ""}, "overrides.model"),
    ({"persona": "two words"}, "overrides.persona"),
    ({"persona": 7}, "overrides.persona"),
    ("fast", "overrides"),
]


@pytest.mark.parametrize(("overrides", "key"), BAD_OVERRIDES)
async def test_bad_overrides_are_invalid_params_naming_the_key(
    tree: Tree, overrides: Any, key: str
) -> None:
    params = {"workspace": str(tree.workspace), "subagent_type": "reviewer", "overrides": overrides}
    async with in_process_daemon(config=tree.config()) as d:
        [reply] = await exchange(d.socket, rpc(5, "agents.resolve", params), 1)
        assert reply["id"] == 5
        error = reply["error"]
        assert error["code"] == INVALID_PARAMS
        assert error["data"]["code"] == "invalid_params"
        assert error["data"]["param"] == key
        assert key.rsplit(".", 1)[-1] in error["message"]
        assert await d.call("daemon.ping") == {"ok": True}


async def test_bad_requests_name_what_is_wrong(tree: Tree, home: Path) -> None:
    ws = str(tree.workspace)
    async with in_process_daemon(config=tree.config()) as d:
        for params, name in (
            ({"workspace": ws}, "subagent_type"),
            ({"workspace": ws, "subagent_type": "../etc"}, "subagent_type"),
            ({"workspace": ws, "subagent_type": 3}, "subagent_type"),
            ({"workspace": ws, "subagent_type": "reviewer", "temperature": 1}, "temperature"),
            ({"workspace": ws, "subagent_type": "reviewer", "parent_model": 4}, "parent_model"),
            ({"workspace": "src/repo", "subagent_type": "reviewer"}, "workspace"),
        ):
            with pytest.raises(InvalidParams) as bad:
                await d.request("agents.resolve", params)
            assert bad.value.data["param"] == name, params
        with pytest.raises(InvalidParams) as bad:
            await d.request("agents.list", {"workspace": ws, "verbose": True})
        assert bad.value.data["param"] == "verbose"

        for method, extra in (("agents.resolve", {"subagent_type": "x"}), ("agents.list", {})):
            with pytest.raises(WorkspaceNotFound):
                await d.request(method, {"workspace": str(home / "nowhere"), **extra})

        with pytest.raises(NotFound) as unknown:
            await d.call("agents.resolve", workspace=ws, subagent_type="nobody")
        assert "'nobody'" in str(unknown.value)
        assert "reviewer" in unknown.value.data["available"]

        with pytest.raises(AgentConfigError) as broken:
            await d.call("agents.resolve", workspace=ws, subagent_type="broken")
        assert "broken.md" in str(broken.value) and broken.value.data["field"] == "effort"

        write(tree.grok / "roles" / "reviewer.toml", 'prompt_file = "/etc/hostname"\n')
        with pytest.raises(AgentConfigError) as escaping:
            await d.call("agents.resolve", workspace=ws, subagent_type="reviewer")
        assert escaping.value.data["field"] == "prompt_file"
        assert "escapes" in str(escaping.value)
        assert await d.call("daemon.ping") == {"ok": True}
