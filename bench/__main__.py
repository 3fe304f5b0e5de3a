"""``python -m bench [--quick] [--only GROUPS] [--soak SECONDS] [--profile] [--markdown]``:
run the suite (``--only cold`` for cold indexing alone).

Prints the table (memoryd figure, raw figure, ratio, target, pass/fail) and writes the JSON
results to ``bench/results/<timestamp>.json``. Exits 0 when every target passed, 1 when one
failed, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import report
from bench.raw import numpy_available
from bench.suite import FULL, ONLY_CHOICES, QUICK, Suite

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor()
    from memoryd.store.connection import probe

    caps = probe()
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
            check=False,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "memoryd"],
            capture_output=True,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
            check=False,
        ).stdout.strip()
        if dirty:
            commit += " + uncommitted changes in memoryd/"
    except OSError:
        commit = ""
    out: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "sqlite": caps.sqlite_version,
        "sqlite_driver": caps.driver,
        "sqlite_vec": caps.vec_version,
        "numpy": None,
        "commit": commit,
    }
    if numpy_available():
        import numpy

        out["numpy"] = numpy.__version__
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the ~1-minute subset (10k chunks)")
    parser.add_argument(
        "--soak", type=float, metavar="SECONDS", help="only the soak: RSS growth while searching"
    )
    parser.add_argument("--profile", action="store_true", help="py-spy the daemon (if installed)")
    parser.add_argument("--markdown", action="store_true", help="also print a markdown table")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories")
    parser.add_argument(
        "--only",
        metavar="GROUPS",
        help=f"only these scenario groups, comma-separated: {','.join(ONLY_CHOICES)} "
        "(cold indexing runs too when a later group needs its indexes)",
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args(argv)
    only = None
    if args.only:
        only = frozenset(g.strip() for g in args.only.split(",") if g.strip())
        unknown = sorted(only - set(ONLY_CHOICES))
        if unknown:
            parser.error(f"--only: unknown group(s) {', '.join(unknown)}")

    plan = QUICK if args.quick else FULL
    workdir = Path(tempfile.mkdtemp(prefix="memoryd-bench-"))
    started = time.perf_counter()
    stamp = datetime.now(UTC)

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", flush=True)

    profile = args.results / f"{stamp:%Y%m%dT%H%M%SZ}-daemon-profile.txt" if args.profile else None
    suite = Suite(plan, workdir, profile=profile, log=log, only=only)
    info = machine()
    log(
        f"memoryd bench ({'soak' if args.soak else plan.name}) on {info['cpus']} × "
        f"{info['cpu_model']}, Python {info['python']}, SQLite {info['sqlite']}, "
        f"sqlite-vec {info['sqlite_vec']}, numpy {info['numpy'] or 'missing'}; work dir {workdir}"
    )
    try:
        if args.soak:
            suite.memory(args.soak, variants=False)
        else:
            suite.run()
            if suite.wants("memory"):
                suite.memory(plan.soak_secs, variants=plan.rss_variants)
            if suite.wants("local"):
                suite.part("local provider", suite.local_provider)
            if suite.wants("secrets"):
                suite.part("secret scrubbing", suite.secrets)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    elapsed = time.perf_counter() - started
    command = "python -m bench" + (" " + " ".join(argv) if argv else "")
    meta = {
        "command": command,
        "mode": "soak" if args.soak else plan.name,
        "date": stamp.isoformat(timespec="seconds"),
        "elapsed_secs": round(elapsed, 1),
        "machine": info,
        "timings": suite.timings,
        **suite.meta,
    }
    print()
    print(report.format_table(suite.rows))
    if args.markdown:
        print()
        print(report.format_markdown(suite.rows))
    path = report.write_json(args.results / f"{stamp:%Y%m%dT%H%M%SZ}.json", suite.rows, meta)
    failed = report.failures(suite.rows)
    print()
    print(f"{len(failed)} target(s) failed; total {elapsed:.0f} s; results in {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
