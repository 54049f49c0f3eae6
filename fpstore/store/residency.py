"""Keeping the store's file mapped: the pages the page cache holds, mapped into this process.

LMDB writes with ``pwrite``: a page a write committed sits in the page cache, but no process maps
it until a read touches it through the map. A kernel that reclaims cold page cache proactively
(DAMON's ``pageout`` scheme, which some virtual machines run on unmapped file pages idle for a
minute; memory-cgroup limits) takes such pages first, and the next read of one is a disk read:
after a pause of 90 s, 593 and 934 of 2,000 queries of a crawler's store read the disk, the
near-duplicate half's p99 1.4 and 3.3 ms (docs/benchmarks.md, "An idle pause"). :class:`PageKeeper` maps, every ``interval``
seconds, every page of the file that the page cache still holds (``mincore``, then
``madvise(MADV_POPULATE_READ)`` over each run of resident pages; Linux 5.14 and later): mapped,
they are no longer unmapped file pages, and reads find them in memory. Pages already evicted are
left alone: reading them back is what :meth:`Store.warm` is for.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from fpstore.errors import ClosedError, FpstoreError, InputError
from fpstore.store.header import H_HEADER

if TYPE_CHECKING:
    from fpstore.store.storage import Storage

__all__ = ["PageKeeper", "check_interval", "mapping_of", "populate", "resident_runs"]

MADV_POPULATE_READ = 22  # linux/mman.h, since Linux 5.14
SLICE_PAGES = 16384  # 64 MiB of 4 KiB pages a call: a pass stops soon after close() or a map move
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def check_interval(interval: object) -> float | None:
    """``keep_mapped`` as given to :func:`fpstore.open`: None (off) or seconds > 0."""
    if interval is None:
        return None
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 < interval < float("inf"):
        raise InputError(f"keep_mapped must be None or a number of seconds > 0, got {interval!r}")
    return float(interval)


def _libc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return libc


def mapping_of(address: int) -> tuple[int, int] | None:
    """The (start, end) of the mapping of this process that holds ``address``, from
    ``/proc/self/maps``; None when none does or the file cannot be read."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                lo, _, hi = line.partition(" ")[0].partition("-")
                start, end = int(lo, 16), int(hi, 16)
                if start <= address < end:
                    return start, end
    except (OSError, ValueError):
        return None
    return None


def resident_runs(libc: Any, start: int, length: int) -> tuple[np.ndarray, np.ndarray, int]:
    """The runs of pages of ``[start, start + length)`` (a file mapping, page aligned) that the
    page cache holds: (first pages, end pages, resident pages). Raises OSError when ``mincore``
    fails (the range no longer mapped: ENOMEM)."""
    pages = length // PAGE
    vec = np.zeros(max(pages, 1), np.uint8)
    if pages and libc.mincore(start, pages * PAGE, vec.ctypes.data) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mincore: {os.strerror(err)}")
    resident = (vec[:pages] & 1).astype(np.int8)
    edges = np.flatnonzero(np.diff(resident, prepend=0, append=0))
    return edges[::2], edges[1::2], int(resident.sum())


def populate(libc: Any, address: int, length: int) -> int:
    """``madvise(MADV_POPULATE_READ)``: map ``[address, address + length)`` for reading, as reads
    would, changing no byte. 0, or the errno."""
    if libc.madvise(address, length, MADV_POPULATE_READ) != 0:
        return ctypes.get_errno() or errno.EINVAL
    return 0


class PageKeeper:
    """A daemon thread that maps the store's resident pages every ``interval`` seconds (see the
    module's text and :meth:`run_once`); a pass over 0.32 GB of file took 18 ms, over 3.2 GB
    already mapped 90 ms (docs/benchmarks.md). It stops for good, its reason in :attr:`error`, where the
    platform or the kernel cannot do it (where the platform cannot, no thread starts; a kernel
    that refuses stops it at its first pass); a pass that fails otherwise (every reader slot
    taken, say) is tried again at the next interval, its reason in :attr:`last_failure`."""

    def __init__(self, storage: Storage, interval: float) -> None:
        self.interval = interval
        self.passes = 0
        self.resident_pages = 0
        self.pages = 0
        self.seconds = 0.0
        self.error: str | None = None
        self.last_failure: str | None = None
        self._storage = weakref.ref(storage)
        self._libc = _libc()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self._libc is None:
            self.error = f"not supported on {sys.platform}: it needs Linux's mincore and MADV_POPULATE_READ"
        else:
            self.start()

    def start(self) -> None:
        # Each thread has its own stop event: a thread that close() stopped ends even when a
        # resume() starts the next before it has.
        self._stop = stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(stop,), name="fpstore-keep-mapped", daemon=True)
        self._thread.start()

    def info(self) -> dict[str, Any]:
        return {
            "interval": self.interval,
            "passes": self.passes,
            "resident_pages": self.resident_pages,
            "pages": self.pages,
            "last_pass_s": round(self.seconds, 4),
            "last_failure": self.last_failure,
            "error": self.error,
        }

    def _run(self, stop: threading.Event) -> None:
        # Event.wait refuses timeouts beyond threading.TIMEOUT_MAX (about 292 years).
        while not stop.wait(min(self.interval, threading.TIMEOUT_MAX)):
            storage = self._storage()
            if storage is None or not storage.is_open():
                return
            try:
                self.run_once(storage, stop)
            except ClosedError:
                return
            except FpstoreError as exc:
                self.last_failure = str(exc)  # every reader slot taken, say: the next pass tries again
            except OSError as exc:
                self.error = f"stopped: {exc}"
                return
            finally:
                del storage

    def run_once(self, storage: Storage, stop: threading.Event | None = None) -> None:
        """One pass, on the calling thread. The map and the file's used length are found inside a
        read (so the map cannot move meanwhile); the pages are mapped outside it, a slice at a
        time, so that the pass holds back no growth of the map and pins no snapshot. A growth
        that moves the map between slices ends the pass (``Storage.mapping`` changes, or the
        kernel finds the range unmapped); a slice that lands on whatever took the old range only
        maps its pages for reading, changing nothing."""
        t0 = time.perf_counter()
        with storage.read() as txn:
            view = txn.get(H_HEADER, db=storage.dbs["meta"])
            if view is None:
                return
            # An address inside LMDB's map (a value read in place), and so the map itself.
            span = mapping_of(np.frombuffer(view, np.uint8).ctypes.data)
            if span is None:
                raise OSError(errno.ENOENT, "the store's map is not in /proc/self/maps")
            mapping = storage.mapping
            env = storage.env
            used = (env.info()["last_pgno"] + 1) * env.stat()["psize"]  # the pages LMDB has written
            start, end = span
            length = min(end - start, used) // PAGE * PAGE
            firsts, ends, resident = resident_runs(self._libc, start, length)
        for first, past in zip(firsts.tolist(), ends.tolist()):
            for lo in range(first, past, SLICE_PAGES):
                if storage.mapping != mapping or (stop is not None and stop.is_set()):
                    return
                err = populate(self._libc, start + lo * PAGE, (min(past, lo + SLICE_PAGES) - lo) * PAGE)
                if err in (errno.ENOMEM, errno.EFAULT):
                    return  # the map moved (or a page past the end of a file cut short): next pass
                if err:
                    raise OSError(err, f"madvise(MADV_POPULATE_READ): {os.strerror(err)}")
        self.resident_pages, self.pages = resident, length // PAGE
        self.last_failure = None
        self.passes += 1
        self.seconds = time.perf_counter() - t0

    def close(self) -> None:
        """Stop the thread: at once between passes; a pass in progress stops at its next slice,
        or when the store's close ends the read it may be waiting for (the store's close waits
        for that read, not for this thread)."""
        self._stop.set()

    def resume(self) -> None:
        """Undo :meth:`close` for a store whose close did not go through: a new thread."""
        if self._libc is not None and self.error is None:
            self.start()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end (after :meth:`close`); whether it has."""
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            return not thread.is_alive()
        return True
