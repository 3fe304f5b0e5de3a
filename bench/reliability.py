"""``python -m bench.reliability [--quick] [--seed N] [--json FILE]``: the reliability suite.

Runs ``tests/reliability`` with pytest — by default with ``--slow`` (300 SIGKILLs under a
workload, 3000+1500 fuzzed inputs, 16 clients for 300 s, on top of the CI versions); with
``--quick`` only the CI versions (30 SIGKILLs, 450 fuzzed inputs, 60 s of 16 clients).
The tests write their figures (faults injected, crashes survived, inputs tried, data lost)
into a JSON file, printed here as a table and kept under ``bench/results/``. Exits with
pytest's status.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.reliability", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="only the CI versions")
    parser.add_argument("--seed", type=int, help="seed of the crash harness")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments")
    return parser.parse_args(argv)


def table(figures: dict[str, Any]) -> str:
    lines = []
    for name in sorted(figures):
        values = figures[name]
        shown = ", ".join(f"{k} {v}" for k, v in sorted(values.items()))
        lines.append(f"{name:<22} {shown}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    with tempfile.TemporaryDirectory(prefix="mdd-rel-") as tmp:
        report = Path(tmp) / "figures.json"
        env = dict(os.environ, MDD_RELIABILITY_REPORT=str(report))
        if args.seed is not None:
            env["MDD_RELIABILITY_SEED"] = str(args.seed)
        command = [sys.executable, "-m", "pytest", "tests/reliability", "-q", "-p", "no:logging"]
        if not args.quick:
            command.append("--slow")
        command.extend(args.pytest_args)
        started = time.monotonic()
        status = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
        took = round(time.monotonic() - started, 1)
        figures = json.loads(report.read_text(encoding="utf-8")) if report.exists() else {}
    figures["run"] = {"seconds": took, "pytest_status": status, "slow": not args.quick}
    print(table(figures))
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"reliability-{stamp}.json"
    for target in (out, args.json):
        if target is not None:
            target.write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    print(f"figures written to {out}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
