"""The pure configuration resolver: validation, precedence, environment parsing and paths."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.core.config import (
    LEAVES,
    Config,
    env_name,
    parse_toml,
    resolve,
)
from memoryd.core.config_render import as_dict, render_toml
from memoryd.core.paths import Paths, default_paths, effective_paths
from memoryd.errors import ConfigError


def config_error(data: Any = None, env: Any = None, flags: Any = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        resolve(data, env or {}, flags or {}, file_origin="/etc/m.toml")
    return info.value


# --- defaults and unknown keys -----------------------------------------------------------------


def test_no_input_gives_the_dataclass_defaults_all_sourced_default() -> None:
    resolved = resolve(None, {}, {})
    assert resolved.config == Config()
    assert set(resolved.sources) == set(LEAVES)
    assert set(resolved.sources.values()) == {"default"}
    assert resolved.config.search.min_score == 0.25
    assert resolved.config.search.mmr.lambda_ == 0.7
    assert dict(resolved.config.search.source_weights) == dict.fromkeys(
        ("global", "workspace", "session"), 1.0
    )


def test_unknown_key_is_named_with_a_close_match() -> None:
    error = config_error({"search": {"min_scor": 0.5}})
    assert "unknown key 'search.min_scor' (did you mean 'search.min_score'?)" in str(error)
    assert "/etc/m.toml" in str(error)
    assert error.key == "search.min_scor"


def test_unknown_section_and_nested_key_are_named() -> None:
    assert "did you mean 'search'?" in str(config_error({"serach": {"min_score": 0.5}}))
    error = config_error({"search": {"mmr": {"lamda": 0.5}}})
    assert "unknown key 'search.mmr.lamda' (did you mean 'search.mmr.lambda'?)" in str(error)


def test_a_key_in_the_wrong_section_suggests_the_right_one() -> None:
    error = config_error({"search": {"max_chunk_chars": 800}})
    assert "did you mean 'index.max_chunk_chars'?" in str(error)
    assert "did you mean 'search.min_score'?" in str(config_error({"min_score": 0.5}))


def test_unknown_key_without_a_close_match_has_no_suggestion() -> None:
    error = config_error({"daemon": {"zzzzqqq": 1}})
    assert "unknown key 'daemon.zzzzqqq'" in str(error)
    assert "did you mean" not in str(error)


def test_unknown_flag_key_is_named() -> None:
    error = config_error(flags={"search.max_resluts": 3})
    assert "unknown key 'search.max_resluts' (did you mean 'search.max_results'?)" in str(error)
    assert "does not name a single value" in str(config_error(flags={"search.mmr": True}))


def test_a_value_where_a_table_belongs_is_an_error() -> None:
    error = config_error({"search": {"mmr": True}})
    assert error.key == "search.mmr"
    assert "must be a table" in str(error)


# --- types and ranges --------------------------------------------------------------------------


def test_wrong_type_names_key_and_expected_value() -> None:
    error = config_error({"search": {"min_score": "high"}})
    assert str(error).startswith("search.min_score must be a number in [0, 1], got 'high'")
    assert error.key == "search.min_score"


@pytest.mark.parametrize(
    ("data", "key", "expected"),
    [
        ({"search": {"min_score": 1.5}}, "search.min_score", "a number in [0, 1]"),
        ({"search": {"text_weight": -0.1}}, "search.text_weight", "a number in [0, 1]"),
        ({"search": {"max_results": 0}}, "search.max_results", "an integer >= 1"),
        ({"search": {"mmr": {"lambda": 2}}}, "search.mmr.lambda", "a number in [0, 1]"),
        (
            {"search": {"source_weights": {"session": -1}}},
            "search.source_weights.session",
            "a number >= 0",
        ),
        ({"search": {"half_life_days": float("nan")}}, "search.half_life_days", "a number >= 0"),
        ({"daemon": {"actor_idle_secs": 0}}, "daemon.actor_idle_secs", "a number > 0"),
        ({"daemon": {"log_level": "loud"}}, "daemon.log_level", "one of 'debug', 'info'"),
        ({"daemon": {"socket": "rel/sock"}}, "daemon.socket", "an absolute path"),
        ({"daemon": {"workspaces": ["/a", ""]}}, "daemon.workspaces", "a list of non-empty"),
        ({"embedding": {"provider": "magic"}}, "embedding.provider", "one of 'auto', 'none'"),
        ({"embedding": {"batch_size": 0}}, "embedding.batch_size", "an integer >= 1"),
        ({"dream": {"max_loss_fraction": 1.01}}, "dream.max_loss_fraction", "a number in [0, 1]"),
        ({"confluence": {"schedule": "weekly"}}, "confluence.schedule", "one of 'off', 'daily'"),
        ({"agents": {"models": {"explore": 3}}}, "agents.models", "a table of name = "),
        ({"agents": {"roles": {"reviewer": "x"}}}, "agents.roles", "a table of tables"),
    ],
)
def test_out_of_range_or_bad_values_are_refused(data: Any, key: str, expected: str) -> None:
    error = config_error(data)
    assert error.key == key
    assert f"{key} must be {expected}" in str(error)


def test_chunk_overlap_must_be_below_chunk_size() -> None:
    error = config_error({"index": {"max_chunk_chars": 400, "chunk_overlap_chars": 400}})
    assert error.key == "index.chunk_overlap_chars"
    assert "less than index.max_chunk_chars (400)" in str(error)
    ok = resolve({"index": {"max_chunk_chars": 400, "chunk_overlap_chars": 399}}, {}, {})
    assert ok.config.index.chunk_overlap_chars == 399


def test_bool_is_never_accepted_as_a_number() -> None:
    assert config_error({"search": {"max_results": True}}).key == "search.max_results"
    assert config_error({"search": {"min_score": False}}).key == "search.min_score"
    assert config_error({"flush": {"enabled": 1}}).key == "flush.enabled"


def test_int_is_accepted_where_a_float_is_expected_but_not_the_reverse() -> None:
    config = resolve({"search": {"min_score": 1, "half_life_days": 7}}, {}, {}).config
    assert config.search.min_score == 1.0 and isinstance(config.search.min_score, float)
    assert isinstance(config.search.half_life_days, float)
    assert config_error({"search": {"max_results": 6.0}}).key == "search.max_results"


def test_roles_and_personas_are_kept_as_read_only_tables() -> None:
    data = {"agents": {"roles": {"reviewer": {"model": "m", "tags": ["a", "b"]}}}}
    roles = resolve(data, {}, {}).config.agents.roles
    assert roles["reviewer"]["model"] == "m"
    assert roles["reviewer"]["tags"] == ("a", "b")
    with pytest.raises(TypeError):
        roles["reviewer"]["model"] = "other"
    data["agents"]["roles"]["reviewer"]["model"] = "changed"  # the input is copied
    assert roles["reviewer"]["model"] == "m"


# --- precedence --------------------------------------------------------------------------------


def test_precedence_flags_over_env_over_file_over_defaults() -> None:
    file_data = {"search": {"max_results": 10, "min_score": 0.5, "text_weight": 0.4}}
    env = {"MEMORYD_SEARCH_MAX_RESULTS": "20", "MEMORYD_SEARCH_MIN_SCORE": "0.6"}
    flags = {"search.max_results": 30}
    resolved = resolve(file_data, env, flags, file_origin="/c.toml")
    search, sources = resolved.config.search, resolved.sources
    assert (search.max_results, sources["search.max_results"]) == (30, "flag")
    assert (search.min_score, sources["search.min_score"]) == (
        0.6,
        "env MEMORYD_SEARCH_MIN_SCORE",
    )
    assert (search.text_weight, sources["search.text_weight"]) == (0.4, "file /c.toml")
    assert (search.vector_weight, sources["search.vector_weight"]) == (1.0, "default")


def test_each_layer_alone_overrides_the_default() -> None:
    key = "dream.min_sessions"
    assert resolve({"dream": {"min_sessions": 2}}, {}, {}, file_origin="f").sources[key] == "file f"
    env = resolve(None, {"MEMORYD_DREAM_MIN_SESSIONS": "3"}, {})
    assert (env.config.dream.min_sessions, env.sources[key]) == (
        3,
        "env MEMORYD_DREAM_MIN_SESSIONS",
    )
    flag = resolve(None, {}, {key: 4})
    assert (flag.config.dream.min_sessions, flag.sources[key]) == (4, "flag")


def test_a_flag_of_none_means_not_given() -> None:
    resolved = resolve({"search": {"max_results": 9}}, {}, {"search.max_results": None})
    assert resolved.config.search.max_results == 9


def test_string_flags_are_parsed_like_environment_values() -> None:
    config = resolve(None, {}, {"search.mmr.enabled": "yes", "search.max_results": "4"}).config
    assert config.search.mmr.enabled is True and config.search.max_results == 4
    assert config_error(flags={"search.max_results": "four"}).key == "search.max_results"


def test_a_bad_value_names_the_layer_it_came_from() -> None:
    error = config_error(env={"MEMORYD_SEARCH_MIN_SCORE": "2"})
    assert "(from env MEMORYD_SEARCH_MIN_SCORE)" in str(error)
    assert "(from flag)" in str(config_error(flags={"search.min_score": 2.0}))


# --- environment -------------------------------------------------------------------------------


def test_env_names_are_section_and_key_upper_case() -> None:
    assert env_name("search.min_score") == "MEMORYD_SEARCH_MIN_SCORE"
    assert env_name("search.mmr.enabled") == "MEMORYD_SEARCH_MMR_ENABLED"
    assert env_name("search.source_weights.global") == "MEMORYD_SEARCH_SOURCE_WEIGHTS_GLOBAL"


def test_env_values_of_every_type_are_parsed() -> None:
    env = {
        "MEMORYD_DAEMON_SOCKET": "/run/m.sock",  # str (path)
        "MEMORYD_DAEMON_LOG_LEVEL": "debug",  # str (choice)
        "MEMORYD_INDEX_MAX_CHUNK_CHARS": " 800 ",  # int
        "MEMORYD_SEARCH_MIN_SCORE": "0.25",  # float
        "MEMORYD_SEARCH_HALF_LIFE_DAYS": "0",  # float from an integer string
        "MEMORYD_SEARCH_SOURCE_WEIGHTS_SESSION": "0.5",  # keyed table entry
        "MEMORYD_SEARCH_MMR_ENABLED": "true",  # bool
        "MEMORYD_FLUSH_ENABLED": "No",  # bool, any case
        "MEMORYD_DAEMON_WORKSPACES": "/w/a, /w/b,,",  # list of strings
        "MEMORYD_AGENTS_MODELS": "explore=fast-1, plan = big-2",  # name = value table
    }
    config = resolve(None, env, {}).config
    assert config.daemon.socket == "/run/m.sock"
    assert config.daemon.log_level == "debug"
    assert config.index.max_chunk_chars == 800
    assert config.search.min_score == 0.25
    assert config.search.half_life_days == 0.0
    assert config.search.source_weights["session"] == 0.5
    assert config.search.mmr.enabled is True
    assert config.flush.enabled is False
    assert config.daemon.workspaces == ("/w/a", "/w/b")
    assert dict(config.agents.models) == {"explore": "fast-1", "plan": "big-2"}


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), ("1", True), ("YES", True), ("false", False), ("0", False), ("no", False)],
)
def test_env_bool_spellings(text: str, value: bool) -> None:
    assert resolve(None, {"MEMORYD_DREAM_ENABLED": text}, {}).config.dream.enabled is value


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("MEMORYD_DREAM_ENABLED", "maybe", "true or false"),
        ("MEMORYD_SEARCH_MAX_RESULTS", "6.5", "an integer >= 1"),
        ("MEMORYD_SEARCH_MIN_SCORE", "", "a number in [0, 1]"),
        ("MEMORYD_AGENTS_MODELS", "explore", "a table of name = non-empty string"),
    ],
)
def test_env_values_that_do_not_parse_name_key_and_variable(
    name: str, text: str, expected: str
) -> None:
    error = config_error(env={name: text})
    assert f"must be {expected}, got {text!r} (from env {name})" in str(error)


def test_unknown_memoryd_env_var_is_an_error_naming_it() -> None:
    error = config_error(env={"MEMORYD_SEARCH_MIN_SCOR": "0.3"})
    assert "MEMORYD_SEARCH_MIN_SCOR" in str(error)
    assert "did you mean MEMORYD_SEARCH_MIN_SCORE?" in str(error)


def test_memoryd_home_config_and_foreign_env_vars_are_not_config_keys() -> None:
    env = {"MEMORYD_HOME": "/h", "MEMORYD_CONFIG": "/c.toml", "PATH": "/bin", "HOME": "/x"}
    assert resolve(None, env, {}).config == Config()


def test_tables_cannot_be_set_from_the_environment() -> None:
    error = config_error(env={"MEMORYD_AGENTS_ROLES": "x"})
    assert error.key == "agents.roles"


# --- TOML --------------------------------------------------------------------------------------


def test_toml_syntax_error_names_origin_and_line() -> None:
    with pytest.raises(ConfigError) as info:
        parse_toml("[search]\nmin_score = 0.3\nmax_results = \n", "/etc/memoryd.toml")
    assert "/etc/memoryd.toml" in str(info.value)
    assert "line 3" in str(info.value)
    assert info.value.data["line"] == 3


def test_render_toml_shows_every_key_with_its_source_and_parses_back() -> None:
    file_data = {
        "search": {"min_score": 0.5, "source_weights": {"session": 0.25}},
        "daemon": {"workspaces": ['/w/a "quoted"']},
        "agents": {
            "models": {"explore": "fast"},
            "roles": {"re viewer": {"model": "m", "tags": ["x"], "nested": {"a": 1}}},
        },
    }
    resolved = resolve(file_data, {"MEMORYD_FLUSH_ENABLED": "0"}, {}, file_origin="/c.toml")
    text = render_toml(resolved)
    assert "min_score = 0.5  # file /c.toml" in text
    assert "enabled = false  # env MEMORYD_FLUSH_ENABLED" in text
    assert "max_results = 6  # default" in text
    assert "[search.mmr]" in text and "lambda = 0.7  # default" in text
    assert resolve(parse_toml(text, "rendered"), {}, {}).config == resolved.config


def test_as_dict_uses_toml_names_and_is_json_serialisable() -> None:
    plain = as_dict(resolve({"agents": {"roles": {"r": {"x": [1]}}}}, {}, {}).config)
    assert plain["search"]["mmr"] == {"enabled": False, "lambda": 0.7}
    assert plain["search"]["source_weights"]["global"] == 1.0
    assert json.loads(json.dumps(plain))["agents"]["roles"] == {"r": {"x": [1]}}


# --- paths -------------------------------------------------------------------------------------


def test_memoryd_home_relocates_everything() -> None:
    paths = default_paths(
        {"MEMORYD_HOME": "/tmp/mh", "XDG_RUNTIME_DIR": "/run/user/1", "XDG_DATA_HOME": "/d"},
        "linux",
        "/home/u",
    )
    assert paths == Paths(
        memory_root="/tmp/mh/memory",
        state_dir="/tmp/mh/state",
        runtime_dir="/tmp/mh/run",
        socket_path="/tmp/mh/run/memoryd.sock",
        config_file="/tmp/mh/config.toml",
        home="/home/u",
    )


def test_xdg_variables_place_each_directory() -> None:
    env = {
        "XDG_DATA_HOME": "/x/data",
        "XDG_STATE_HOME": "/x/state",
        "XDG_RUNTIME_DIR": "/run/user/1000",
        "XDG_CONFIG_HOME": "/x/config",
    }
    paths = default_paths(env, "linux", "/home/u")
    assert paths.memory_root == "/x/data/memoryd/memory"
    assert paths.state_dir == "/x/state/memoryd"
    assert paths.runtime_dir == "/run/user/1000/memoryd"
    assert paths.socket_path == "/run/user/1000/memoryd/memoryd.sock"
    assert paths.config_file == "/x/config/memoryd/config.toml"


def test_linux_defaults_without_xdg_runtime_dir_put_the_socket_in_the_state_dir() -> None:
    paths = default_paths({"XDG_DATA_HOME": "relative/ignored"}, "linux", "/home/u")
    assert paths.memory_root == "/home/u/.local/share/memoryd/memory"
    assert paths.state_dir == "/home/u/.local/state/memoryd"
    assert paths.socket_path == "/home/u/.local/state/memoryd/memoryd.sock"
    assert paths.config_file == "/home/u/.config/memoryd/config.toml"


def test_darwin_defaults_use_application_support() -> None:
    paths = default_paths({}, "darwin", "/Users/u")
    support = "/Users/u/Library/Application Support/memoryd"
    assert paths.memory_root == f"{support}/memory"
    assert paths.state_dir == f"{support}/state"
    assert paths.socket_path == f"{support}/state/memoryd.sock"


def test_memoryd_config_overrides_the_config_file_path() -> None:
    assert default_paths({"MEMORYD_CONFIG": "~/m.toml"}, "linux", "/h").config_file == "/h/m.toml"
    home_env = {"MEMORYD_HOME": "/mh", "MEMORYD_CONFIG": "/etc/m.toml"}
    assert default_paths(home_env, "linux", "/h").config_file == "/etc/m.toml"


def test_effective_paths_apply_memory_root_and_socket() -> None:
    defaults = default_paths({}, "linux", "/home/u")
    assert effective_paths(Config(), defaults) == defaults
    data = {"memory": {"root": "~/.grok/memory"}, "daemon": {"socket": "/tmp/s/m.sock"}}
    paths = effective_paths(resolve(data, {}, {}).config, defaults)
    assert paths.memory_root == "/home/u/.grok/memory"
    assert paths.socket_path == "/tmp/s/m.sock"
    assert paths.runtime_dir == "/tmp/s"
    assert paths.state_dir == defaults.state_dir


# --- properties --------------------------------------------------------------------------------

FLOAT_KEYS = sorted(key for key, rule in LEAVES.items() if rule.kind == "float")


@st.composite
def valid_float(draw: st.DrawFn) -> tuple[str, float]:
    key = draw(st.sampled_from(FLOAT_KEYS))
    rule = LEAVES[key]
    low = rule.low if rule.low is not None else -1e9
    high = rule.high if rule.high is not None else 1e9
    value = draw(
        st.floats(low, high, exclude_min=rule.above, allow_nan=False, allow_infinity=False)
    )
    return key, value


def get(config: Config, key: str) -> Any:
    value: Any = as_dict(config)
    for part in key.split("."):
        value = value[part]
    return value


def nested(key: str, value: Any) -> dict[str, Any]:
    *parents, last = key.split(".")
    data: dict[str, Any] = {last: value}
    for parent in reversed(parents):
        data = {parent: data}
    return data


@given(valid_float())
def test_any_valid_float_round_trips_through_every_layer(item: tuple[str, float]) -> None:
    key, value = item
    from_file = resolve(nested(key, value), {}, {})
    assert get(from_file.config, key) == value
    assert get(resolve(None, {env_name(key): repr(value)}, {}).config, key) == value
    assert get(resolve(None, {}, {key: value}).config, key) == value
    rendered = parse_toml(render_toml(from_file), "rendered")
    assert get(resolve(rendered, {}, {}).config, key) == value


@given(
    st.dictionaries(st.sampled_from(FLOAT_KEYS), st.floats(0, 1)),
    st.dictionaries(st.sampled_from(FLOAT_KEYS), st.floats(0, 1).map(repr)),
)
def test_resolve_is_deterministic(flags: dict[str, float], env_values: dict[str, str]) -> None:
    env = {env_name(key): text for key, text in env_values.items()}
    try:
        first = resolve(None, env, flags)
    except ConfigError as error:
        with pytest.raises(ConfigError) as again:
            resolve(None, env, flags)
        assert str(again.value) == str(error)
    else:
        assert resolve(None, env, flags) == first
