"""What a packager reads: the license file matches the metadata, classifiers, the script."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_the_license_file_is_the_license_the_metadata_names() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n")
    assert PROJECT["license"] == {"text": "MIT"}
    assert "License :: OSI Approved :: MIT License" in PROJECT["classifiers"]


def test_classifiers_name_the_supported_pythons_and_platforms() -> None:
    classifiers = PROJECT["classifiers"]
    minimum = PROJECT["requires-python"].removeprefix(">=")
    assert f"Programming Language :: Python :: {minimum}" in classifiers
    assert "Operating System :: POSIX :: Linux" in classifiers
    assert "Typing :: Typed" in classifiers and (ROOT / "memoryd" / "py.typed").exists()
    assert classifiers == sorted(classifiers)


def test_the_console_script_is_the_cli() -> None:
    assert PROJECT["scripts"] == {"memoryd": "memoryd.cli:main"}
