"""The concurrent editor: another process that keeps changing memory files while clients search.

``python -m bench.editor MEMORY_DIR SECONDS [--interval S] [--seed N]`` appends flush
sections to session logs (most edits), creates new session logs, and rewrites a line of
the workspace ``MEMORY.md``, each saved atomically like an editor does. It prints
``{"edits": N, "appends": …, "new_files": …, "memory_edits": …}`` as JSON when done.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path

from bench.corpus import BASE_DATE, TextWriter


def _save(path: Path, text: str) -> None:
    tmp = path.parent / f".bench-edit-{os.getpid()}-{path.name}"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def run(memory_dir: Path, seconds: float, interval: float, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    writer = TextWriter(seed)
    sessions = sorted((memory_dir / "sessions").glob("*.md"))
    counts = {"edits": 0, "appends": 0, "new_files": 0, "memory_edits": 0}
    deadline = time.monotonic() + seconds
    n = 0
    while time.monotonic() < deadline:
        n += 1
        roll = rng.random()
        when = BASE_DATE + timedelta(seconds=n)
        section = (
            f"\n<!-- flush {when.isoformat(timespec='seconds')} trigger=idle -->\n\n"
            f"## {writer.heading(False)}\n\n- {writer.sentence()}\n- {writer.sentence()}\n"
        )
        if roll < 0.75 and sessions:
            path = rng.choice(sessions)
            _save(path, path.read_text(encoding="utf-8") + section)
            counts["appends"] += 1
        elif roll < 0.9:
            path = memory_dir / "sessions" / f"{when:%Y-%m-%d}-bench-editor-{seed:04x}{n:04x}.md"
            _save(path, section.lstrip())
            sessions.append(path)
            counts["new_files"] += 1
        else:
            path = memory_dir / "MEMORY.md"
            lines = path.read_text(encoding="utf-8").split("\n")
            bullets = [i for i, line in enumerate(lines) if line.startswith("- ")]
            if bullets:
                lines[rng.choice(bullets)] = f"- {writer.sentence(4, 10)}"
            _save(path, "\n".join(lines))
            counts["memory_edits"] += 1
        counts["edits"] += 1
        time.sleep(interval)
    return counts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.editor")
    parser.add_argument("memory_dir", type=Path)
    parser.add_argument("seconds", type=float)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.memory_dir, args.seconds, args.interval, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
