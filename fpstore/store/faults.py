"""The storage layer's fault points: where a test injects a crash or a failure.

Every write transaction, map reservation, fsync and file switch of ``storage.py`` passes through
the active :class:`Faults`. The default does what the storage layer would do anyway; a test
installs a subclass (``install``) that counts these events, or kills its own process at one of
them, without patching the store's private functions. LevelDB's ``FaultInjectionTestEnv`` wraps
its ``Env`` the same way.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["Faults", "active", "install", "fsync_path"]


def fsync_path(path: str) -> None:
    """fsync a file or a directory (a rename is durable only once its directory is synced)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Faults:
    """The points, in the order a write meets them. The methods of this class change nothing."""

    def begin_write(self) -> None:
        """``Storage.write`` was called (once per call, whatever its retries after map growth)."""

    def write_txn(self, txn: Any) -> Any:
        """The transaction the write's function receives, on each attempt: wrap it to count or
        fail its mutations."""
        return txn

    def before_commit(self) -> None:
        """The write's function returned; its transaction is about to commit."""

    def after_commit(self) -> None:
        """The write committed; ``Storage.write`` is about to return."""

    def after_reserve(self) -> None:
        """``Storage.reserve`` has grown the map (or found it large enough)."""

    def fsync(self, path: str) -> None:
        """Make ``path`` durable (a copy of the store, or a directory after a rename)."""
        fsync_path(path)

    def replace(self, src: str, dst: str) -> None:
        """File compaction switches to its synced copy."""
        os.replace(src, dst)


_active = Faults()


def active() -> Faults:
    return _active


def install(faults: Faults) -> Faults:
    """Make ``faults`` the active fault points of this process; returns the ones it replaces."""
    global _active
    previous, _active = _active, faults
    return previous
