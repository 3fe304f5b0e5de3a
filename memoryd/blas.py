"""The BLAS/OpenMP thread pools behind numpy, for the two parts of the daemon that use it
(the in-memory vector copy and the ``local`` embedding model).

Both run one small matrix product per request. On a small machine a pool of several threads
makes such products many times slower as soon as anything else runs (measured ~10× for a
single-query encode on 2 cores under load), so the daemon asks for one thread unless the
user configured otherwise. The pools read these variables once, when numpy loads.
"""

from __future__ import annotations

import os
import sys

THREAD_ENV = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


def numpy_loaded() -> bool:
    return "numpy" in sys.modules


def default_threads_before_numpy(threads: int = 1) -> None:
    """Ask for ``threads`` BLAS threads where the environment says nothing, if numpy has not
    loaded yet (afterwards only threadpoolctl can change the pools)."""
    if numpy_loaded():
        return
    for name in THREAD_ENV:
        os.environ.setdefault(name, str(threads))
