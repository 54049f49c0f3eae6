"""Mapping a store's pages into this process before its queries read them.

LMDB reads through a memory map. The first read of each page in a process is a page fault, taken
in the middle of a query: microseconds on bare metal, up to ~100 µs under a hypervisor (measured
on this project's VMs). A writer's new pages are written with ``pwrite`` (never ``writemap``), so
every page a merge or an add makes faults again on its first read, and a query that finds a
document reads its record, a page no earlier query touched. Linux (5.14 and newer) can fill the
page tables of a whole range from the page cache in one call, ``madvise(MADV_POPULATE_READ)``;
pages already mapped cost almost nothing, so the range can be the whole used file each time.

Nothing here reads or changes data: the call only maps pages the kernel already caches (or reads
them, which is why a file larger than half the available memory is skipped). Where the call or
``/proc/self/maps`` is missing, :func:`populate` does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import mmap
import os
from typing import Any

__all__ = ["populate", "supported"]

log = logging.getLogger(__name__)

MADV_POPULATE_READ = 22  # <linux/mman.h>, Linux 5.14
_MAPS = "/proc/self/maps"
_MEMINFO = "/proc/meminfo"

_madvise: Any = None
_unsupported = False


def _libc_madvise() -> Any:
    global _madvise, _unsupported
    if _madvise is None and not _unsupported:
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
            fn = libc.madvise
        except (OSError, AttributeError):
            _unsupported = True
            return None
        # ctypes releases the interpreter lock around the call: other threads go on meanwhile.
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        fn.restype = ctypes.c_int
        _madvise = fn
    return _madvise


def supported() -> bool:
    """Whether this system has what :func:`populate` needs (it may still skip a large file)."""
    return not _unsupported and os.path.exists(_MAPS) and _libc_madvise() is not None


def mappings_of(path: str) -> list[tuple[int, int]]:
    """The address ranges at which this process maps the file ``path``."""
    real = os.path.realpath(path)
    ranges = []
    try:
        with open(_MAPS, encoding="utf-8", errors="replace") as maps:
            for line in maps:
                # "start-end perms offset dev inode path": the path may hold spaces.
                fields = line.rstrip("\n").split(maxsplit=5)
                if len(fields) == 6 and fields[5] == real and fields[2] == "00000000":
                    start, end = fields[0].split("-")
                    ranges.append((int(start, 16), int(end, 16)))
    except OSError:
        return []
    return ranges


def available_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo``, or None where it cannot be read."""
    try:
        with open(_MEMINFO, encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def populate(path: str, nbytes: int, start: int = 0) -> int:
    """Map bytes ``start`` to ``nbytes`` of file ``path`` (every mapping this process has of it)
    into the page tables; returns the bytes mapped (``nbytes - start`` once the range is mapped,
    though it may be empty), 0 when skipped. The caller holds the mapping still (a share of the
    store's map lock) for the duration of the call."""
    global _unsupported
    if nbytes <= 0 or _unsupported:
        return 0
    madvise = _libc_madvise()
    if madvise is None:
        return 0
    available = available_bytes()
    if available is None or nbytes > available // 2:
        return 0  # it would read from disk what the page cache cannot hold, evicting the rest
    done = 0
    start = min(start, nbytes) & ~(mmap.PAGESIZE - 1)  # madvise wants a page-aligned address
    for first, end in mappings_of(path):
        length = min(end - first, nbytes) - start
        if length <= 0:
            continue
        if madvise(first + start, length, MADV_POPULATE_READ) != 0:
            err = ctypes.get_errno()
            if err == 22:  # EINVAL: a kernel before 5.14
                _unsupported = True
            else:
                log.debug("populating %s: %s", path, os.strerror(err))
            return done
        done += length
    return done
