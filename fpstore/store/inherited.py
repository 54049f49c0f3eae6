"""The LMDB environments a forked child inherits from its parent, and how the child lets go of them.

A child forked from a process with an open store holds a copy of each of its environments: the
parent's read transactions (of every thread), and the lock file's reader table, mapped *shared*
with the parent. Closing that copy in the child, as a child that wants to open the store again
must (py-lmdb refuses a second environment of one path in a process), hurts the parent twice:

- py-lmdb aborts every transaction of the environment it closes, the parent's read transactions
  included, and each abort marks its reader slot free *in the shared table*. The parent's open
  reads then protect nothing: its next writes reuse the pages those reads are still reading, and
  they answer from pages that now hold something else (wrong answers, or a crash).
- py-lmdb first waits for every LMDB call in flight on the environment. A call another thread of
  the parent was making at the fork never ends in the child, so the child waits forever: a child
  forked while any thread reads the store hangs as soon as it closes its copy.

So the child (:func:`detach`, run by the fork handler of :mod:`fpstore.store.storage`) gives its
copy of the reader table pages of its own (a private mapping at the same address, holding what
was there), keeps the environment alive to the end of the process (it is never freed, which would
close it), and closes it only if it opens the same store again (:func:`release`), from a helper
thread it waits for a moment: a close that would wait forever is given up, and that open refused.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import sys
import threading

import lmdb

from fpstore.errors import StorageError

__all__ = ["RELEASE_WAIT_S", "detach", "release"]

LOCK_FILE = "lock.mdb"
#: How long a child that opens a store again waits for its inherited copy to close (a close takes
#: microseconds; one that waits for a call another thread of the parent was making never ends).
RELEASE_WAIT_S = 1.0

#: Every environment this process inherited: referenced (and counted once more) to the end of the
#: process, so that it is never freed; freeing closes it, as in :func:`release`.
_kept: list[lmdb.Environment] = []
#: Inherited environments whose reader table is this process's own, by the store's real path:
#: closed before the store is opened again.
_closable: dict[str, list[lmdb.Environment]] = {}
#: Why a store cannot be opened again in this process, by its real path.
_refused: dict[str, str] = {}

_FORKED_WHILE_BUSY = (
    "this process was forked while another thread of its parent was inside a call on the store, "
    "so the copy of the store it inherited cannot be closed, and a second one cannot be opened; "
    "start the process with multiprocessing's 'spawn' or 'forkserver' method, or fork it before "
    "the store is opened"
)


def detach(env: lmdb.Environment, real_path: str, locked: bool) -> None:
    """(In a forked child.) Make ``env``, inherited from the parent, harmless to the parent and
    keep it; ``locked``: whether it uses the store's lock file (a read-only store on read-only
    media does not)."""
    _kept.append(env)
    with contextlib.suppress(Exception):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(env))
    if not locked or _own_reader_table(os.path.join(real_path, LOCK_FILE)):
        _closable.setdefault(real_path, []).append(env)
    else:
        _refused[real_path] = (
            "this process was forked from one that had the store open, and its copy of the store's "
            "reader table could not be made its own, so that copy cannot be closed; start the process "
            "with multiprocessing's 'spawn' or 'forkserver' method"
        )


def release(real_path: str) -> None:
    """Before this process opens the store at ``real_path``: close the copies of it inherited from
    a parent (raises :class:`StorageError` when they cannot be closed)."""
    if real_path in _refused:
        raise StorageError(f"cannot open {real_path} again: {_refused[real_path]}")
    for env in _closable.pop(real_path, []):
        closer = threading.Thread(target=_close, args=(env,), name="fpstore-inherited-close", daemon=True)
        closer.start()
        closer.join(RELEASE_WAIT_S)
        if closer.is_alive():
            _refused[real_path] = _FORKED_WHILE_BUSY
            raise StorageError(f"cannot open {real_path} again: {_FORKED_WHILE_BUSY}")


def _close(env: lmdb.Environment) -> None:
    with contextlib.suppress(Exception):
        env.close()


def _own_reader_table(lock_path: str) -> bool:
    """Replace every shared mapping of ``lock_path`` in this process by a private one holding the
    same bytes; whether there was at least one and each was replaced (Linux only: elsewhere the
    mappings cannot be found)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        st = os.stat(lock_path)
        with open("/proc/self/maps", encoding="utf-8", errors="surrogateescape") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return False
    real = os.path.realpath(lock_path)
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    regions = []
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[1].endswith("s"):
            continue
        same_file = (fields[3] == device and fields[4] == str(st.st_ino)) or fields[5].removesuffix(" (deleted)") == real
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
