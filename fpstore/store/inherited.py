"""The LMDB environments a forked child inherits from its parent, and how the child lets go of them.

A child forked from a process with an open store holds a copy of each of its environments: the
parent's transactions (of every thread), and the lock file's reader table, mapped *shared* with
the parent. The child must close that copy: its inherited transactions must stop working (a
reader or a write begun in the parent would go on in the child, unprotected), py-lmdb refuses to
open the same store again while it is open, and it holds the parent's file and map. But closing
it as it is hurts the parent twice:

- py-lmdb aborts every transaction of the environment it closes, the parent's read transactions
  included, and each abort marks its reader slot free *in the shared table*. The parent's open
  reads then protect nothing: its next writes reuse the pages those reads are still reading, and
  they answer from pages that now hold something else (wrong answers, or a crash).
- py-lmdb first waits for every LMDB call in flight on the environment. A call another thread of
  the parent was making at the fork never ends in the child, so the child waits forever.

So the child (:func:`detach`, run by the fork handler of :mod:`fpstore.store.storage`) first gives
its copy of the reader table pages of its own (a private mapping at the same address, holding what
was there): what closing writes there stays in the child. Then it closes the copy from a helper
thread and waits a moment. A close that waits for a call of the parent's has by then marked every
inherited transaction unusable (py-lmdb does that first); it is left waiting, the environment is
kept (never freed, which would close it again and wait in the child's main thread), and the
child's later open of that store is refused (:func:`release`). A reader table that cannot be made
the child's own is not closed at all (freeing the parent's slots would be worse), with the same
refusal.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import sys
import threading
import time

import lmdb

from fpstore.errors import StorageError

__all__ = ["DETACH_WAIT_S", "LOCK_FILE", "detach", "lock_identity", "release"]

LOCK_FILE = "lock.mdb"
#: How long a forked child waits for its copy of an environment to close (a close takes well
#: under a millisecond; one that waits for a call another thread of the parent was making never
#: ends), and then at most for that close to have marked the inherited transactions unusable.
DETACH_WAIT_S = 0.05
MARK_WAIT_S = 1.0

#: Inherited environments whose close did not finish: referenced (and counted once more) to the
#: end of the process, so that they are never freed.
_kept: list[lmdb.Environment] = []
#: Why a store cannot be opened again in this process, by its real path.
_refused: dict[str, str] = {}

_FORKED_WHILE_BUSY = (
    "this process was forked while another thread of its parent was inside a call on the store, "
    "so the copy of the store it inherited cannot be closed, and a second one cannot be opened; "
    "start the process with multiprocessing's 'forkserver' or 'spawn' method, or fork it before "
    "the store is opened"
)
_NOT_OWN = (
    "this process was forked from one that had the store open, and its copy of the store's reader "
    "table could not be made its own, so that copy cannot be closed; start the process with "
    "multiprocessing's 'forkserver' or 'spawn' method"
)


def lock_identity(real_path: str) -> tuple[int, int] | None:
    """(device, inode) of the store's lock file, read when the environment opens: how a forked
    child finds its mapping even if the directory has moved since."""
    try:
        st = os.stat(os.path.join(real_path, LOCK_FILE))
    except OSError:
        return None
    return st.st_dev, st.st_ino


def detach(env: lmdb.Environment, real_path: str, lock: tuple[int, int] | None, locked: bool) -> None:
    """(In a forked child.) Close ``env``, inherited from the parent, without touching the
    parent's reader slots and without waiting for calls the parent was making. ``lock``: the
    lock file's :func:`lock_identity`; ``locked``: whether the environment uses the lock file (a
    read-only store on read-only media does not)."""
    if locked and not _own_reader_table(lock, os.path.join(real_path, LOCK_FILE)):
        _keep(env)
        _refused[real_path] = _NOT_OWN
        return
    closer = threading.Thread(target=_close, args=(env,), name="fpstore-inherited-close", daemon=True)
    closer.start()
    closer.join(DETACH_WAIT_S)
    if closer.is_alive():
        _keep(env)
        _refused[real_path] = _FORKED_WHILE_BUSY
        # py-lmdb marks the environment and its transactions unusable before it waits.
        deadline = time.monotonic() + MARK_WAIT_S
        while _usable(env) and time.monotonic() < deadline:
            time.sleep(0.001)


def release(real_path: str) -> None:
    """Before this process opens the store at ``real_path``: raise :class:`StorageError` when a
    copy inherited from its parent could not be closed."""
    if real_path in _refused:
        raise StorageError(f"cannot open {real_path} again: {_refused[real_path]}")


def _keep(env: lmdb.Environment) -> None:
    _kept.append(env)
    with contextlib.suppress(Exception):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(env))


def _close(env: lmdb.Environment) -> None:
    with contextlib.suppress(Exception):
        env.close()


def _usable(env: lmdb.Environment) -> bool:
    try:
        env.flags()
    except lmdb.Error:
        return False
    return True


def _own_reader_table(lock: tuple[int, int] | None, lock_path: str) -> bool:
    """Replace every shared mapping of the lock file in this process by a private one holding the
    same bytes; whether there was at least one and each was replaced (Linux only: elsewhere the
    mappings cannot be found). A mapping is the lock file's by the (device, inode) read at open,
    or by its path."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="surrogateescape") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return False
    real = os.path.realpath(lock_path)
    device, inode = ("", "") if lock is None else (f"{os.major(lock[0]):02x}:{os.minor(lock[0]):02x}", str(lock[1]))
    regions = []
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[1].endswith("s"):
            continue
        path = fields[5].removesuffix(" (deleted)")
        # The device /proc shows may differ from stat()'s (overlayfs): an inode of a lock file.
        same_file = (fields[4] == inode and (fields[3] == device or path.endswith("/" + LOCK_FILE))) or path == real
        if same_file:
            start, end = (int(x, 16) for x in fields[0].split("-"))
            regions.append((start, end - start, fields[1]))
    if not regions:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    map_fixed = 0x10  # Linux's MAP_FIXED (Python's mmap module does not name it)
    for start, length, perms in regions:
        if "r" not in perms:
            return False
        saved = ctypes.string_at(start, length)
        prot = mmap.PROT_READ | mmap.PROT_WRITE
        got = libc.mmap(start, length, prot, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | map_fixed, -1, 0)
        if got != start:
            return False
        ctypes.memmove(start, saved, length)
    return True
