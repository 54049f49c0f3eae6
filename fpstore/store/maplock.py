"""``MapLock``: the threads of one process share an LMDB environment's map; growing it takes it alone."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["MapLock"]


class MapLock:
    """Transactions of this process share the map; growing it takes the map alone.

    LMDB's ``mdb_env_set_mapsize`` may run only while no transaction of the process is active:
    every read and write transaction holds a share for its lifetime, and growth (a full map, a
    reservation, adopting another process's growth) waits until the other threads' shares are
    gone. A thread's own shares do not block it, so a thread that reads and then writes never
    waits for itself. While a growth waits or runs, threads holding no share wait before taking
    one: readers in a tight loop would otherwise keep the count above zero for ever.
    """

    __slots__ = ("_cond", "_active", "_growing", "_grower", "_waiting", "_mine")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._active = 0
        self._growing = False
        self._grower = 0
        self._waiting = 0
        self._mine = threading.local()

    def share(self) -> None:
        mine = getattr(self._mine, "n", 0)
        with self._cond:
            while (self._growing or self._waiting) and not mine and self._grower != threading.get_ident():
                self._cond.wait()
            self._active += 1
        self._mine.n = mine + 1

    def unshare(self) -> None:
        self._mine.n -= 1
        with self._cond:
            self._active -= 1
            if not self._active or self._growing:
                self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self) -> Iterator[None]:
        mine = getattr(self._mine, "n", 0)
        with self._cond:
            self._waiting += 1
            try:
                while self._growing or self._active > mine:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._growing, self._grower = True, threading.get_ident()
        try:
            yield
        finally:
            with self._cond:
                self._growing, self._grower = False, 0
                self._cond.notify_all()
