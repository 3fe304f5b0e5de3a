"""``memoryd config show|check``: the effective configuration and where each value came from."""

from __future__ import annotations

import argparse
import dataclasses
import json

from memoryd.cli.common import EXIT_OK, Subcommands, command
from memoryd.core.config import as_dict, render_toml
from memoryd.store import configfile


@command
def _config_command(subcommands: Subcommands) -> None:
    parser = subcommands.add_parser("config", help="show or check the configuration")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = actions.add_parser(
        "show", help="print the effective configuration and where each value came from"
    )
    show.add_argument("--config", metavar="F", help="config file (default: the usual location)")
    show.add_argument("--json", action="store_true", help="print JSON instead of TOML")
    show.set_defaults(handler=_config_show)
    check = actions.add_parser("check", help="validate a config file")
    check.add_argument("file", metavar="FILE", help="the TOML file to check")
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
    configfile.check(args.file)
    print(f"{args.file}: ok")
    return EXIT_OK
