"""``MapLock``: the threads of one process share an LMDB environment's map; growing it takes it alone."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

__all__ = ["MapLock"]


class MapLock:
    """Transactions of this process share the map; growing it takes the map alone.

    LMDB's ``mdb_env_set_mapsize`` may run only while no transaction of the process is active:
    every read and write transaction holds a share for its lifetime, and growth (a full map, a
    reservation, adopting another process's growth) waits until the other threads' shares are
    gone. A thread's own shares do not block it, so a thread that reads and then writes never
    waits for itself. While a growth waits or runs, threads holding no share wait before taking
    one: readers in a tight loop would otherwise keep a share out for ever. The thread that holds
    the map alone may take it alone again (a store switch grows the map as it writes).

    Every query takes a share, so the common case takes no lock: each thread counts its shares in
    its own slot of a dict (one slot per thread, so no two threads write the same entry; under
    the GIL a dict store is atomic), registers before it looks at the growth flag, and a grower
    raises the flag before it looks at the slots. Either the reader sees the flag and steps back,
    or the grower sees the reader's share and waits for it.
    """

    __slots__ = ("_cond", "_shares", "_pending", "_grower")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._shares: dict[int, int] = {}
        self._pending = 0  # growths waiting or running
        self._grower = 0  # the thread that grows, while it does

    def share(self) -> None:
        me = threading.get_ident()
        mine = self._shares.get(me, 0)
        self._shares[me] = mine + 1
        if self._pending and not mine and self._grower != me:
            del self._shares[me]  # step back: a growth waits or runs
            with self._cond:
                self._cond.notify_all()
                while self._pending and self._grower != me:
                    self._cond.wait()
                self._shares[me] = 1

    def unshare(self, owner: int | None = None) -> None:
        """Give back a share taken by this thread, or by thread ``owner`` (a read that thread
        began, ended here: an iterator collected by another thread's garbage collection)."""
        me = threading.get_ident() if owner is None else owner
        left = self._shares[me] - 1
        if left:
            self._shares[me] = left
        else:
            del self._shares[me]  # no slot left behind by threads that end
        if self._pending:
            with self._cond:
                self._cond.notify_all()

    def growth_waits(self) -> bool:
        """Whether a growth waits (or runs)."""
        return bool(self._pending)

    def held(self) -> bool:
        """Whether the calling thread holds a share: a transaction of its own is open."""
        return bool(self._shares.get(threading.get_ident()))

    def _others(self, me: int) -> bool:
        return any(n for t, n in list(self._shares.items()) if t != me)

    @contextlib.contextmanager
    def alone(self, timeout: float | None = None) -> Iterator[None]:
        """The map to this thread alone; ``TimeoutError`` when other threads' shares are still
        held after ``timeout`` seconds (None: wait as long as they are)."""
        me = threading.get_ident()
        if self._grower == me:  # nested: a store switch that grows the map as it writes
            yield
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._pending += 1
            try:
                while self._grower or self._others(me):
                    if deadline is not None and time.monotonic() >= deadline:
                        raise TimeoutError
                    self._cond.wait(0.05)  # a share given back wakes it; the timeout covers a race with a step back
                self._grower = me
            except BaseException:
                self._pending -= 1
                self._cond.notify_all()
                raise
        try:
            yield
        finally:
            with self._cond:
                self._grower = 0
                self._pending -= 1
                self._cond.notify_all()
