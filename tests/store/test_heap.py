"""Freed memory goes back to the OS after bulk work (glibc's malloc_trim)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

PROBE = """
import psutil
from memoryd.store.heap import release_free_memory
proc = psutil.Process()
blocks = [bytearray(2000) for _ in range(60_000)]  # ~120 MB in malloc'd blocks
keep = blocks[::50]  # a few stay alive all over the heap: nothing to trim from the top
del blocks
before = proc.memory_info().rss
assert release_free_memory()
after = proc.memory_info().rss
print((before - after) // 2**20)
"""


@pytest.mark.skipif(
    sys.platform != "linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_release_free_memory_returns_freed_heap_to_the_os() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    assert int(out.stdout) >= 50  # MiB given back of the ~115 MiB freed
