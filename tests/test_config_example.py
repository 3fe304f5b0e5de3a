"""config.example.toml and the Config dataclasses must list the same keys with the same defaults."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from memoryd.core.config import LEAVES, Config, parse_toml, resolve
from memoryd.core.config_render import as_dict

EXAMPLE = Path(__file__).resolve().parents[1] / "config.example.toml"
OPEN_TABLES = sorted(key for key, rule in LEAVES.items() if rule.kind in ("strmap", "tables"))


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, tuple[str, Any]]:
    """Dotted leaf key -> (type name, value); nested tables included, empty tables vanish."""
    out: dict[str, tuple[str, Any]] = {}
    for name, value in data.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{name}."))
        else:
            out[prefix + name] = (type(value).__name__, value)
    return out


def example_text() -> str:
    return EXAMPLE.read_text(encoding="utf-8")


def test_example_and_dataclasses_have_the_same_keys_and_defaults() -> None:
    shown = flatten(parse_toml(example_text(), str(EXAMPLE)))
    defaults = flatten(as_dict(Config()))
    missing = sorted(defaults.keys() - shown.keys())
    extra = sorted(shown.keys() - defaults.keys())
    assert not missing, f"keys missing from config.example.toml: {missing}"
    assert not extra, f"keys in config.example.toml that Config does not have: {extra}"
    differ = {k: (shown[k], defaults[k]) for k in shown if shown[k] != defaults[k]}
    assert not differ, f"defaults differ (example, dataclass): {differ}"


def test_every_fixed_key_is_a_leaf_of_the_example() -> None:
    # The flattening above skips empty mappings; every other schema key must be shown.
    shown = flatten(parse_toml(example_text(), str(EXAMPLE)))
    assert set(LEAVES) - set(OPEN_TABLES) == set(shown)


def test_example_resolves_to_the_defaults() -> None:
    resolved = resolve(parse_toml(example_text(), "example"), {}, {}, file_origin="example")
    assert resolved.config == Config()
    assert set(resolved.sources.values()) == {"file example", "default"}


def test_every_key_has_a_help_line_above_it() -> None:
    lines = example_text().splitlines()
    for number, line in enumerate(lines):
        if re.match(r"[A-Za-z_]+ = ", line):
            assert lines[number - 1].startswith("# "), f"no help comment above {line!r}"


def test_open_tables_are_shown_as_commented_examples_that_resolve() -> None:
    text = example_text()
    for key in OPEN_TABLES:
        assert re.search(rf"^# \[{re.escape(key)}[.\]]", text, re.M), f"no example for {key}"
    agents = text[text.index("[agents]") : text.index("[confluence]")]
    uncommented = "\n".join(
        line[2:] if re.match(r"# (\[[a-z.]+\]$|[a-z_]+ = )", line) else line
        for line in agents.splitlines()
    )
    config = as_dict(resolve(parse_toml(uncommented, "agents"), {}, {}).config)
    for key in OPEN_TABLES:
        section, name = key.split(".")
        assert config[section][name], f"the commented example for {key} sets nothing"
