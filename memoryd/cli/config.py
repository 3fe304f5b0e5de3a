"""``memoryd config show|check``: the effective configuration and where each value came from."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from memoryd.cli.common import EXIT_ERROR, EXIT_OK, Subcommands, add_common, command, print_json
from memoryd.core.config_render import as_dict, render_toml
from memoryd.errors import ConfigError, MemorydError
from memoryd.store import configfile


@command
def _config_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser("config", help="show or check the configuration")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = actions.add_parser(
        "show", help="print the effective configuration and where each value came from"
    )
    add_common(show, workspace=False)
    show.add_argument("--json", action="store_true", help="print JSON instead of TOML")
    show.set_defaults(handler=_config_show)
    check = actions.add_parser(
        "check", help="validate a config file and report every error, each naming its key"
    )
    check.add_argument("file", metavar="FILE", help="the TOML file to check")
    check.add_argument("--json", action="store_true", help="print {file, ok, errors} as JSON")
    check.set_defaults(handler=_config_check)


def _config_show(args: argparse.Namespace) -> int:
    loaded = configfile.load(args.config)
    paths = {k: v for k, v in dataclasses.asdict(loaded.paths).items() if k != "home"}
    if args.json:
        report = {
            "config_file": loaded.config_file,
            "config_file_found": loaded.file_found,
            "paths": paths,
            "config": as_dict(loaded.config),
            "sources": dict(loaded.sources),
        }
        print(json.dumps(report, indent=2, ensure_ascii=False, default=str))
        return EXIT_OK
    found = "" if loaded.file_found else " (not found: defaults apply)"
    print(f"# config file: {loaded.config_file}{found}")
    for name, path in paths.items():
        if name != "config_file":
            print(f"# {name.replace('_', ' ')}: {path}")
    print("# each value is followed by its source: default, file, env or flag\n")
    print(render_toml(loaded.resolved), end="")
    return EXIT_OK


def _config_check(args: argparse.Namespace) -> int:
    errors = configfile.check_all(args.file)
    if args.json:
        listed = [{"key": _key_of(error), "message": str(error)} for error in errors]
        print_json({"file": args.file, "ok": not errors, "errors": listed})
    elif not errors:
        print(f"{args.file}: ok")
    else:
        for error in errors:
            print(f"memoryd: {args.file}: {error}", file=sys.stderr)
        print(f"{args.file}: {len(errors)} error(s)", file=sys.stderr)
    return EXIT_ERROR if errors else EXIT_OK


def _key_of(error: MemorydError) -> str | None:
    """The dotted key an error is about (``agents.roles.<name>.<field>`` for a role's)."""
    if isinstance(error, ConfigError):
        return error.key
    origin, field = error.data.get("file"), error.data.get("field")
    return f"{origin}.{field}" if origin and field else None
