"""The thread pools that run kernels on all cores.

Kernels release the GIL, so threads give real parallelism: fingerprinting a batch, encoding the
tables of a run, joining tables for all pairs. One pool per thread count is made on first use and
kept for the life of the process (making a pool per call cost more than small batches' work).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["available_cores", "executor", "threads"]

_executors: dict[int, ThreadPoolExecutor] = {}
_executors_lock = threading.Lock()


def executor(threads: int) -> ThreadPoolExecutor:
    """The shared pool of ``threads`` worker threads."""
    with _executors_lock:
        ex = _executors.get(threads)
        if ex is None:
            ex = _executors[threads] = ThreadPoolExecutor(threads, thread_name_prefix="fpstore")
        return ex


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def threads(requested: int | None) -> int:
    """``requested`` threads (at least one), or every available core when None."""
    return available_cores() if requested is None else max(1, int(requested))
