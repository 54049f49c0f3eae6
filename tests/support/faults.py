"""Named crash points, injected through the storage layer's fault points (``fpstore.store.faults``).

A worker installs ``CrashPoints(point)`` in its own process; at the point it kills itself:

    before_commit@N   the N-th write transaction ran all its puts; SIGKILL before its commit
    after_commit@N    the N-th write transaction committed; SIGKILL before the call returns
    put@N.M           SIGKILL at the M-th mutation (put, putmulti, delete, drop) of write N
    after_reserve@N   the N-th map reservation (bulk load, compaction) grew the map; SIGKILL
    before_fsync@N    file compaction: before the N-th fsync (1: the copy, 2: its directory,
    after_fsync@N       3: the store directory after the rename); or just after it
    before_replace    file compaction: the copy is synced, the environment closed; before the rename
    after_replace     file compaction: data.mdb renamed over, its directory not yet synced

A point prefixed "stop:" sends SIGSTOP instead (the power-loss test copies the disk then).
"census" kills nowhere and counts, per write transaction, how many mutations it made.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, Callable

from fpstore.store import faults


class _CountingTxn:
    """A write transaction that counts (and may die at) mutations, cursors' included."""

    MUTATIONS = ("put", "putmulti", "delete", "drop", "replace", "pop")

    def __init__(self, txn: Any, on_mutation: Callable[[], None]) -> None:
        self._txn = txn
        self._on = on_mutation

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._txn, name)
        if name == "cursor":
            return lambda *a, **kw: _CountingTxn(attr(*a, **kw), self._on)
        if name in self.MUTATIONS:
            def mutate(*a: Any, **kw: Any) -> Any:
                self._on()
                return attr(*a, **kw)
            return mutate
        return attr

    def __iter__(self) -> Any:
        return iter(self._txn)


class CrashPoints(faults.Faults):
    """Counts writes, mutations, reservations and fsyncs (``census``), and dies at ``point``."""

    def __init__(self, point: str) -> None:
        # reserved_after: transactions committed before each map reservation (a bulk load reserves
        # before each of its runs, a merge after the write that made it due).
        self.census: dict[str, Any] = {"writes": [], "reserves": 0, "fsyncs": 0, "commits": 0, "reserved_after": []}
        self.death = signal.SIGKILL
        if point.startswith("stop:"):
            self.death = signal.SIGSTOP
            point = point[len("stop:"):]
        self.kind, _, where = point.partition("@")
        n_at, _, m_at = where.partition(".")
        self.n_at = int(n_at) if n_at else 0
        self.m_at = int(m_at) if m_at else 0

    def reset(self) -> None:
        self.census["writes"].clear()
        self.census["reserved_after"].clear()
        self.census["reserves"] = self.census["fsyncs"] = self.census["commits"] = 0

    def _die(self) -> None:
        sys.stdout.flush()
        os.kill(os.getpid(), self.death)
        os.kill(os.getpid(), signal.SIGKILL)  # after a SIGSTOP and SIGCONT: never carry on past the point

    def _at(self, kind: str, n: int) -> bool:
        return self.kind == kind and self.n_at == n

    def begin_write(self) -> None:
        self.census["writes"].append(0)

    def write_txn(self, txn: Any) -> Any:
        writes = self.census["writes"]
        writes[-1] = 0  # a retry after map growth starts the count again

        def on_mutation() -> None:
            writes[-1] += 1
            if self._at("put", len(writes)) and writes[-1] == self.m_at:
                self._die()

        return _CountingTxn(txn, on_mutation)

    def before_commit(self) -> None:
        if self._at("before_commit", len(self.census["writes"])):
            self._die()

    def after_commit(self) -> None:
        self.census["commits"] += 1
        if self._at("after_commit", len(self.census["writes"])):
            self._die()

    def after_reserve(self) -> None:
        self.census["reserves"] += 1
        self.census["reserved_after"].append(self.census["commits"])
        if self._at("after_reserve", self.census["reserves"]):
            self._die()

    def fsync(self, path: str) -> None:
        self.census["fsyncs"] += 1
        if self._at("before_fsync", self.census["fsyncs"]):
            self._die()
        super().fsync(path)
        if self._at("after_fsync", self.census["fsyncs"]):
            self._die()

    def replace(self, src: str, dst: str) -> None:
        if self.kind == "before_replace":
            self._die()
        super().replace(src, dst)
        if self.kind == "after_replace":
            self._die()


def install_crash_point(point: str) -> CrashPoints:
    """Install ``CrashPoints(point)`` as this process's fault points and return it."""
    crash = CrashPoints(point)
    faults.install(crash)
    return crash
