"""The LMDB environment under a store: opening, transactions, map growth, errors.

Everything that knows LMDB's hazards lives here (docs/reliability.md gives the tests behind each):

* ``lib_version=0`` always: py-lmdb 3 bundles two mutually unreadable LMDB formats.
* never ``writemap`` (a full disk kills the process with SIGBUS); durable commits by default.
* one writer per store, elected with ``flock`` on ``writer.lock``; readers open with
  ``map_size=0`` to adopt the writer's map size and follow its growth on ``MapResizedError``.
* ``MapFullError`` aborts the batch; the writer grows the map with no transaction open and runs the
  whole batch again, so a batch is applied entirely or not at all.
* stale reader slots (a reader killed inside a transaction pins old pages) are cleared with
  ``reader_check()`` at open, periodically, and on ``ReadersFullError``.
* an environment must not cross ``fork()``: the pid is recorded at open and checked on every use,
  and a forked child never closes the copy it inherits before it opens the store again
  (:mod:`fpstore.store.inherited`).
* nothing that leaves a transaction points into the map: reads return views (``buffers=True``),
  which callers decode or copy inside the transaction.
* threads share one environment: every transaction holds a share of the map and growing it waits
  for the other threads' shares (``MapLock``); one write transaction at a time, begun and
  committed by one thread.
* raw ``lmdb`` errors are translated to :mod:`fpstore.errors`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import lmdb

from fpstore.errors import (
    ClosedError,
    CorruptionError,
    FpstoreError,
    InputError,
    NotAStoreError,
    ReadOnlyError,
    StorageError,
    StoreFullError,
    WriterLockedError,
)
from fpstore.index.arrays import int_in
from fpstore.store import faults, inherited
from fpstore.store.files import (
    DATA_FILE,
    MAX_DBS,
    NETWORK_FS,
    OPEN_LOCK,
    STORE_FILES,
    WRITER_LOCK,
    filesystem_type,
    looks_full,
    make_compaction_dir,
    read_only_mount,
    refuse_foreign_files,
    remove_stale_compactions,
    store_file_exists,
    structure_problems,
    verify_file,
)
from fpstore.store.maplock import MapLock
from fpstore.store.staging import DEFAULT_INTERVAL, MAX_INTERVAL, Stager

__all__ = ["DURABILITY", "Storage", "structure_problems"]

log = logging.getLogger(__name__)

#: What an acknowledged write survives. "full": a process crash, a system crash and a power cut.
#: "process": a process crash (kill -9); a system crash or power cut may undo the last commit.
#: "interval": adds are acknowledged before their commit, which follows within ``commit_interval``
#: seconds (:mod:`fpstore.store.staging`); a crash may undo the adds of that last interval.
DURABILITY = ("full", "process", "interval")

T = TypeVar("T")

INITIAL_MAP_SIZE = 64 << 20
MAX_GROWTH_STEP = 8 << 30
READER_CHECK_INTERVAL = 30.0  # seconds between periodic reader_check() calls
#: How often a thread that holds a read, waiting for the write lock (or, before a fork, the merges),
#: looks for a growth of the map that waits for that read (:meth:`Storage.take_write_lock`,
#: :meth:`Storage.hold_for_fork`).
WRITE_LOCK_POLL_S = 0.005
#: How long :meth:`Storage.close` waits for the reads other threads hold open (a read in flight
#: ends in microseconds; a ``store.reader()`` block or a pairs iterator when its thread ends it).
CLOSE_WAIT_S = 10.0

_open_paths: set[str] = set()
_open_paths_lock = threading.Lock()
_live: weakref.WeakSet[Storage] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """Detach a forked child from its parent's environments.

    The child inherits the writer lock's file descriptor (flock locks belong to the open file, so
    the parent's close would not release the lock while the child lives): closed here. It also
    inherits each environment, which it must not close now (:mod:`fpstore.store.inherited`): it is
    closed when the child opens the store again. The parent's objects raise ClosedError in the child.
    """
    global _open_paths_lock
    _open_paths_lock = threading.Lock()
    _open_paths.clear()
    for storage in list(_live):
        storage._detach_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _open_error(exc: OSError, path: str) -> FpstoreError:
    """An fpstore error for an OS error met while opening (or making) ``path`` for writing."""
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return ReadOnlyError(
            f"cannot write {path} ({exc.strerror}): the store is on read-only media or not writable "
            "by this user; open it with readonly=True to read it"
        )
    return StorageError(f"cannot open {path}: {exc.strerror or exc}")


def translate(exc: BaseException, action: str, path: str | None = None) -> FpstoreError:
    """An fpstore error for an lmdb (or OS) error raised during ``action`` on the store at ``path``."""
    if isinstance(exc, FpstoreError):
        return exc
    if isinstance(exc, lmdb.ReadonlyError):
        return ReadOnlyError(f"{action}: the store is read-only")
    if isinstance(exc, lmdb.MapFullError):
        return StoreFullError(f"{action}: the store's map is full; the batch was not applied")
    if isinstance(exc, lmdb.PanicError):
        return StorageError(f"{action}: LMDB panicked after a failed write; close and reopen the store ({exc})")
    if isinstance(exc, lmdb.CorruptedError):
        from fpstore.errors import CorruptionError

        return CorruptionError(f"{action}: LMDB reports a corrupted page ({exc}); run fpstore-admin verify")
    code = getattr(exc, "errno", None)
    text = str(exc)
    if code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) or "No space left" in text or "File too large" in text:
        return StoreFullError(f"{action}: the disk is full ({exc}); the batch was not applied")
    if path is not None and (code == errno.EIO or "Input/output error" in text) and looks_full(path):
        # LMDB reports a short write as EIO; at a full disk or the process's file size limit
        # that short write is the limit, not a broken device.
        return StoreFullError(f"{action}: the disk or the file size limit is full ({exc}); the batch was not applied")
    if isinstance(exc, (lmdb.Error, OSError)):
        return StorageError(f"{action}: {type(exc).__name__}: {exc}; the batch was not applied")
    return StorageError(f"{action}: {exc!r}")


#: The largest map a store asks for (2**48 bytes: the address space x86-64 gives a process).
MAX_MAP_SIZE = 1 << 48


def store_path(path: object) -> str:
    """A store's directory as LMDB takes it: a str (or bytes, or path object) that is valid UTF-8."""
    try:
        p = os.fspath(path)  # type: ignore[call-overload]  # anything else is refused below
    except TypeError:
        raise InputError(f"a store path must be a str, bytes or path object, not {type(path).__name__}") from None
    try:
        text = p.decode("utf-8") if isinstance(p, bytes) else p
        text.encode("utf-8")
    except UnicodeError:
        raise InputError(f"a store path must be valid UTF-8 (LMDB takes it as UTF-8): {p!r}") from None
    return text


def check_commit_interval(interval: object, durability: str) -> float:
    """The seconds a staged write waits at most for its commit (``durability="interval"`` only)."""
    if interval is None:
        return DEFAULT_INTERVAL
    if durability != "interval":
        raise InputError(f"commit_interval applies to durability='interval' only, not {durability!r}")
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 < interval <= MAX_INTERVAL:
        raise InputError(f"commit_interval must be a number of seconds in (0, {MAX_INTERVAL:g}], got {interval!r}")
    return float(interval)


def _lock_or_close(fd: int, operation: int, refusal: FpstoreError) -> None:
    """flock ``fd`` without waiting; when another process holds the lock, close ``fd`` and raise
    ``refusal``."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise refusal from None


class Storage:
    """One LMDB environment in a store directory, with its named sub-databases.

    ``names`` lists every sub-database the store uses; all are opened (created by the writer) right
    after the environment, once. Readers must find them all, or the directory is not a store.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        names: list[str],
        *,
        readonly: bool,
        create: bool,
        map_size: int | None = None,
        allow_network_fs: bool = False,
        verify: bool = False,
        durability: str = "full",
        commit_interval: float | None = None,
    ) -> None:
        if durability not in DURABILITY:
            raise InputError(f"durability must be one of {', '.join(map(repr, DURABILITY))}, got {durability!r}")
        interval = check_commit_interval(commit_interval, durability)
        self.path = store_path(path)
        if map_size is not None:
            map_size = int_in(map_size, "map_size", 0, MAX_MAP_SIZE)
        self.readonly = readonly
        self.durability = durability
        self._pid = os.getpid()
        self._env: lmdb.Environment | None = None
        self._lock_fd: int | None = None
        self._last_reader_check = 0.0
        self._forked = False
        self._open_fd: int | None = None
        self._lockless = False
        #: The lock file of the open environment, (device, inode): found again after a fork.
        self._lock_identity: tuple[int, int] | None = None
        self._map = MapLock()
        #: One write transaction at a time in this process, begun and committed by one thread
        #: (LMDB binds a write transaction to the thread that began it). Reentrant: a switch of
        #: the whole store (:meth:`alone`) writes while holding it.
        self._write_lock = threading.RLock()
        #: Whether a write transaction of :meth:`begin_write` is open (one at a time: the write
        #: lock): a process forked meanwhile would inherit it (see the fork handlers).
        self.write_txn_open = False
        #: Called after a write transaction is aborted: caches of what it wrote must forget it
        #: (the ids it used are given out again by the next transaction).
        self.on_abort: list[Callable[[], None]] = []
        #: Called after each write commits, once its locks are released (a merge it made due).
        self.on_commit: list[Callable[[], None]] = []
        #: Called after a staged write's nested transaction is merged into the stager's open one.
        self.on_staged: list[Callable[[], None]] = []
        #: The thread inside :meth:`alone`, whose writes run in that thread.
        self._alone_thread = 0
        #: The thread that owns write transactions with ``durability="interval"``.
        self._stager = Stager(self, interval) if durability == "interval" and not readonly else None
        #: Called with each write transaction (as the write's function receives it) before the
        #: function runs, and with its id once it has committed, before the next one can begin:
        #: what a cache of the committed state needs to follow this process's writes.
        self.on_begin_write: list[Callable[[Any], None]] = []
        self.on_committed: list[Callable[[int], None]] = []
        #: Directories and files this open created, removed by :meth:`discard` when creating fails.
        self._made_dirs: list[str] = []
        self._found: set[str] | None = None
        exists = store_file_exists(self.path, DATA_FILE)
        if not exists:
            if os.path.exists(self.path) and not os.path.isdir(self.path):
                raise NotAStoreError(f"{self.path} is not a directory, so it is not an fpstore store")
            if readonly:
                raise NotAStoreError(f"{self.path} holds no fpstore store (no {DATA_FILE}); a read-only open cannot make one")
            if not create:
                raise NotAStoreError(f"{self.path} holds no fpstore store (no {DATA_FILE}); pass create=True to make one")
            refuse_foreign_files(self.path)
        for name in STORE_FILES - {DATA_FILE}:
            store_file_exists(self.path, name)  # refuses a FIFO or device before anything opens it
        ours = store_file_exists(self.path, WRITER_LOCK)  # a writer of ours has been here
        if exists and os.path.getsize(os.path.join(self.path, DATA_FILE)) == 0 and (readonly or not ours):
            # LMDB would write a new environment into it: not a file of ours to rewrite.
            raise NotAStoreError(f"{self.path}: {DATA_FILE} is empty, and not left by a store of ours being created")
        if os.path.isdir(self.path) and not allow_network_fs:
            fs = filesystem_type(self.path)
            if fs in NETWORK_FS:
                raise StorageError(
                    f"{self.path} is on a network filesystem ({fs}), where LMDB's locking is unsafe; "
                    "move the store to a local disk, or pass allow_network_fs=True if you know better"
                )
        if verify and exists:
            verify_file(self.path)
        real = os.path.realpath(self.path)
        with _open_paths_lock:
            if real in _open_paths:
                raise StorageError(f"{self.path} is already open in this process; share that Store object instead of opening it twice")
            _open_paths.add(real)
        self._real = real
        _live.add(self)
        try:
            if not readonly:
                self._make_dirs()
                self._found = set(os.listdir(self.path))
                self._take_writer_lock()
                remove_stale_compactions(self.path)
            elif self._lock_file_unwritable():
                self._go_lockless()
            self._take_open_lock()
            #: Changes whenever the map may move (a remap, a reopen): a view into the map read
            #: under another value must not be used (see ``Catalog.snapshot_chunks``).
            self.mapping = 0
            self._env = self._open_env(map_size if map_size is not None else (0 if exists else INITIAL_MAP_SIZE))
            self.dbs: dict[str, Any] = {}
            #: True when this open created the environment: the caller creates its sub-databases
            #: and header in one transaction (:meth:`create`), so a crash never leaves half a store.
            self.is_new = not exists
            if exists:
                self._check_file_length()
                if not readonly and ours and self._env.stat()["entries"] == 0:
                    # An environment without a single sub-database, in a directory where a writer
                    # of ours has been: a create killed before its one commit. Nothing is in it to
                    # lose, so this open creates the store over it.
                    refuse_foreign_files(self.path)
                    self.is_new = True
                else:
                    self.open_dbs(names)
            self.reader_check()
        except BaseException:
            if self._lock_fd is not None and not readonly:
                self.discard()  # holding the writer lock: remove the lock files this open made
            else:
                self.close()
            raise

    # -- opening ------------------------------------------------------------------------------

    def _make_dirs(self) -> None:
        """Make the store directory (0700) and any missing parents, remembering which were made."""
        missing: list[str] = []
        d = os.path.abspath(self.path)
        while not os.path.exists(d):
            missing.append(d)
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent
        try:
            os.makedirs(self.path, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise _open_error(exc, self.path) from exc
        self._made_dirs = missing  # deepest first

    def _lock_file(self, name: str, flags: int) -> int | None:
        """Open lock file ``name`` (None when opening read-only and it is missing). Non-blocking, so
        a FIFO in its place cannot hang the open; anything but a regular file is refused."""
        full = os.path.join(self.path, name)
        try:
            fd = os.open(full, flags | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            if flags & os.O_CREAT:
                raise
            return None
        except OSError as exc:
            raise _open_error(exc, full) from exc
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotAStoreError(f"{full} is not a regular file, so {self.path} is not an fpstore store")
        return fd

    def _take_writer_lock(self) -> None:
        fd = self._lock_file(WRITER_LOCK, os.O_RDWR | os.O_CREAT)
        assert fd is not None
        _lock_or_close(
            fd,
            fcntl.LOCK_EX,
            WriterLockedError(
                f"another process has {self.path} open for writing, or reads it without a lock file "
                f"(it holds {WRITER_LOCK}); a store has one writer at a time: open with readonly=True to read"
            ),
        )
        self._lock_fd = fd

    def _lock_file_unwritable(self) -> bool:
        """True when this read-only open cannot register in LMDB's lock file (read-only media)."""
        lock = os.path.join(self.path, "lock.mdb")
        if os.path.exists(lock):
            return not os.access(lock, os.W_OK) or read_only_mount(self.path)
        return not os.access(self.path, os.W_OK) or read_only_mount(self.path)

    def _go_lockless(self) -> None:
        """Read without LMDB's lock file, safely: LMDB then keeps no record of this reader, so a
        writer could reuse pages it is reading. A shared flock on ``writer.lock`` keeps writers
        out for as long as this reader is open (a writer takes it exclusively), and a writer
        already at work makes this open refuse."""
        fd = self._lock_file(WRITER_LOCK, os.O_RDONLY)
        if fd is not None:
            _lock_or_close(
                fd,
                fcntl.LOCK_SH,
                StorageError(
                    f"{self.path}: this read-only open cannot use LMDB's lock file (read-only media or "
                    "permissions), and a writer has the store open; open it again once the writer is done"
                ),
            )
            self._lock_fd = fd
        self._lockless = True

    def _check_file_length(self) -> None:
        """Refuse a data file shorter than the pages its meta page says are in use.

        LMDB maps the file and would touch those pages past its end, which kills the process with
        SIGBUS; an interrupted copy or a truncated disk image looks exactly like that.
        """
        env = self._env
        assert env is not None
        used = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
        size = os.path.getsize(os.path.join(self.path, DATA_FILE))
        if size < used:
            raise CorruptionError(
                f"{self.path}: {DATA_FILE} is {size} bytes but its pages in use end at {used}: "
                "the file is truncated (an interrupted copy?); restore it from a good copy"
            )

    def _take_open_lock(self) -> None:
        flags = os.O_RDONLY if self.readonly else os.O_RDWR | os.O_CREAT
        fd = self._lock_file(OPEN_LOCK, flags)
        if fd is None:
            return  # a read-only open of a store whose writer never made the file: nothing to share
        _lock_or_close(fd, fcntl.LOCK_SH, StorageError(f"{self.path} is being rewritten by a file compaction; open it again in a moment"))
        self._open_fd = fd

    def copy(self, dest: str, *, compact: bool = True) -> int:
        """A consistent copy of the environment in directory ``dest`` (made 0700 if missing; it
        must be empty), synced to disk (LMDB's copy does not sync it); returns its size in bytes.

        It reads one snapshot, so a writer may go on meanwhile. ``compact`` leaves free pages out.
        """
        env = self.env
        try:
            os.makedirs(dest, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot make {dest} for a copy of the store: {exc.strerror}") from None
        refuse_foreign_files(dest)
        if os.path.exists(os.path.join(dest, DATA_FILE)):
            raise StorageError(f"{dest} already holds a store file; copy into a new or empty directory")
        try:
            env.copy(dest, compact=compact)
        except lmdb.Error as exc:
            raise translate(exc, f"copying the store to {dest}", self.path) from exc
        copy = os.path.join(dest, DATA_FILE)
        faults.active().fsync(copy)
        faults.active().fsync(dest)
        return os.path.getsize(copy)

    def check_no_own_read(self, what: str) -> None:
        """StorageError when the calling thread holds a read of the store open: ``what`` (a remap,
        or work that closes the environment, :meth:`alone`) would leave it reading an unmapped or
        closed map. Other threads' reads are waited for instead."""
        if self._map.held():
            raise StorageError(
                f"{self.path}: {what} moves or closes the map, but this thread still holds a read of the store open "
                "(a store.reader() block, or an iter_near_duplicate_pairs iterator not exhausted or closed); "
                "finish or close it first"
            )

    @contextlib.contextmanager
    def alone(self, what: str) -> Iterator[None]:
        """The store to this thread alone, for work that changes what other openers hold
        (the file, the table handles, the design): no other process may have the store open,
        and no other thread of this one is in a transaction until the block ends. Writes inside
        the block are allowed. Raises :class:`StorageError` naming ``what`` when another process
        has the store open."""
        self.check_writable()
        self.check_no_own_read(what)
        if self._open_fd is None:
            raise StorageError(f"{self.path}: no open lock to check that the store is unshared")
        try:
            fcntl.flock(self._open_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StorageError(f"{self.path} is open in another process; {what} needs it alone (close the readers first)") from None
        try:
            if self._stager is not None:
                self._stager.sync()  # staged writes commit first; then the stager waits for the block
            with self._write_lock:
                self._after_staged_writes()
                with self._map.alone():
                    outer, self._alone_thread = self._alone_thread, threading.get_ident()
                    try:
                        yield
                    finally:
                        self._alone_thread = outer
        finally:
            fcntl.flock(self._open_fd, fcntl.LOCK_SH)

    def compact_file(self, reopen: Callable[[], None]) -> tuple[int, int]:
        """Rewrite data.mdb without free pages and switch to it atomically; returns sizes (before, after).

        Only the writer may do it, and only while no other process has the store open. The copy is
        fsynced (LMDB's compacting copy does not) and renamed over data.mdb, then the directory is
        fsynced: a crash before the rename leaves the old file, after it the new one.
        ``reopen`` re-opens sub-databases on the new environment.
        """
        # The environment is closed and reopened: no other thread of this process may be in it.
        with self.alone("file compaction"):
            data = os.path.join(self.path, DATA_FILE)
            before = os.path.getsize(data)
            tmp = make_compaction_dir(self.path)
            try:
                try:
                    self.env.copy(tmp, compact=True)
                except lmdb.Error as exc:
                    raise translate(exc, "copying the store for file compaction") from exc
                copy = os.path.join(tmp, DATA_FILE)
                fault_points = faults.active()
                fault_points.fsync(copy)
                fault_points.fsync(tmp)
                old = self.env
                map_size = old.info()["map_size"]
                # ``_env`` keeps naming the closed environment until the new one is open: another
                # thread's check that the store is open passes, and its transaction, which waits
                # for this switch, begins in the new one.
                old.close()
                try:
                    fault_points.replace(copy, data)
                    fault_points.fsync(self.path)
                    after = os.path.getsize(data)
                    self._env = self._open_env(map_size)
                except BaseException:
                    self._env = None
                    raise
                self.mapping += 1
                self.dbs = {}
                reopen()
            finally:
                remove_stale_compactions(self.path)  # this copy: it carries the marker
        return before, after

    def _open_env(self, map_size: int) -> lmdb.Environment:
        inherited.release(self._real)
        try:
            env = lmdb.open(
                self.path,
                subdir=True,
                lib_version=0,
                map_size=map_size,
                readonly=self.readonly,
                create=not self.readonly,
                max_dbs=MAX_DBS,
                max_readers=512,
                # No spare read transaction (py-lmdb keeps none by default): a slot that stays
                # taken between reads, for a saving of ~0.3 µs a read (zeroing 12.5 KiB).
                writemap=False,
                sync=True,
                # "process": the data pages are synced at each commit, the page naming the new
                # root is written but not synced (LMDB's MDB_NOMETASYNC): atomic and consistent,
                # and a system crash can undo the last transaction (the next commit syncs it).
                metasync=self.durability != "process",
                map_async=False,
                readahead=False,  # a probe touches a few pages; readahead would evict the page cache
                meminit=False,
                lock=not self._lockless,
                mode=0o600,
            )
        except lmdb.InvalidError as exc:
            raise NotAStoreError(f"{self.path} is not an LMDB environment of this format ({exc})") from exc
        except lmdb.VersionMismatchError as exc:
            raise NotAStoreError(f"{self.path} was written by an incompatible LMDB version ({exc})") from exc
        except lmdb.Error as exc:
            raise translate(exc, f"opening {self.path}") from exc
        self._lock_identity = None if self._lockless else inherited.lock_identity(self._real)
        return env

    def open_dbs(self, names: list[str]) -> None:
        """Open existing sub-databases ``names`` (never creates: a missing one means "not a store")."""
        env = self._env
        assert env is not None
        try:
            for name in names:
                # No explicit transaction: py-lmdb 3 invalidates a handle opened inside a read
                # transaction once that transaction ends (measured), so let it manage its own.
                try:
                    self.dbs[name] = env.open_db(name.encode(), create=False)
                except lmdb.NotFoundError:
                    raise NotAStoreError(f"{self.path} holds an LMDB environment but not an fpstore store (no {name!r} table)") from None
        except lmdb.IncompatibleError as exc:
            raise NotAStoreError(f"{self.path} holds an LMDB environment that is not an fpstore store ({exc})") from exc
        except lmdb.Error as exc:
            raise translate(exc, f"opening {self.path}") from exc

    def add_dbs(self, names: list[str]) -> None:
        """Create sub-databases ``names`` that do not exist yet (empty, in one transaction) and
        open them. An empty sub-database no table design names is harmless."""
        with self._write_lock:
            self._map.share()
            try:
                self.create(names, lambda txn, dbs: None, action=f"creating tables in {self.path}")
            finally:
                self._map.unshare()

    def create(self, names: list[str], fill: Callable[[lmdb.Transaction, dict[str, Any]], None], *, action: str = "") -> None:
        """Create sub-databases ``names`` and run ``fill(txn, dbs)`` in the same write transaction."""
        self.check_writable()
        env = self.env
        txn = env.begin(write=True)
        try:
            dbs = {name: env.open_db(name.encode(), txn=txn, create=True) for name in names}
            fill(txn, dbs)
            txn.commit()
        except lmdb.Error as exc:
            txn.abort()
            raise translate(exc, action or f"creating a store in {self.path}") from exc
        except BaseException:
            txn.abort()
            raise
        self.dbs.update(dbs)

    # -- state --------------------------------------------------------------------------------

    @property
    def env(self) -> lmdb.Environment:
        if os.getpid() != self._pid:
            raise ClosedError(
                f"the store at {self.path} was opened in process {self._pid} and cannot be used after fork(); open it again in the child"
            )
        if self._env is None:
            raise ClosedError(f"the store at {self.path} is closed")
        return self._env

    def check_open(self) -> None:
        """:class:`ClosedError` once the store is closed, or in a forked child."""
        _ = self.env

    def check_writable(self) -> None:
        self.check_open()  # closed or forked first: those are the more useful messages
        if self.readonly:
            raise ReadOnlyError(f"the store at {self.path} is open read-only")

    def _detach_after_fork(self) -> None:
        # In a forked child only: close the inherited descriptors of ours without touching the
        # parent's state. A store its parent detached already (this is a grandchild) is closed,
        # or was kept by inherited.py with its reader table private, inherited as such.
        if self._forked:
            return
        for name in ("_lock_fd", "_open_fd"):
            fd = getattr(self, name, None)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, name, None)
        if self._env is not None:
            # Closed without freeing the parent's reader slots under its reads, and without
            # waiting for a call another thread was making at the fork (inherited.py).
            inherited.detach(self._env, self._real, self._lock_identity, locked=not self._lockless)
        self._forked = True

    def discard(self) -> None:
        """Close, then remove what this open created: a store that could not be created leaves
        nothing behind for a later open to trip over. Only the store's own files are removed, and
        the directories this open made if they are then empty."""
        found = self._found
        if self.is_open():
            assert self._env is not None
            self._env.close()
        self._env = None
        if found is not None and os.getpid() == self._pid:
            # Unlinked while the writer lock is still held: no other opener can be inside.
            for name in sorted(STORE_FILES - found):
                with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                    os.remove(os.path.join(self.path, name))
        self.close()
        for d in self._made_dirs:
            try:
                os.rmdir(d)
            except OSError:
                break

    def __del__(self) -> None:
        # A store dropped without close(): release its locks and its registration now rather than
        # at exit (later opens in this process and writers elsewhere would be refused), and say so,
        # as an unclosed file does.
        if getattr(self, "_env", None) is not None and not getattr(self, "_forked", True) and os.getpid() == self._pid:
            warnings.warn(f"fpstore store {self.path} was not closed; closing it now", ResourceWarning, stacklevel=2)
            with contextlib.suppress(Exception):
                self.close()

    def close(self) -> None:
        """Close the environment and release the writer lock. Idempotent. With
        ``durability="interval"`` what is staged commits first; a commit that failed is raised
        once the store is closed."""
        failure: FpstoreError | None = None
        mine = self.is_open()
        if mine:
            # Closing unmaps what every read of the store reads through: not under this thread's own.
            self.check_no_own_read("closing the store")
        stager = getattr(self, "_stager", None)
        if stager is not None and mine:
            try:
                stager.close(self)
            except FpstoreError as exc:
                failure = exc
        if mine:
            assert self._env is not None
            try:
                # Other threads' transactions end first (their next ones find the store closed):
                # a read decoding a view of the map when it is unmapped would crash the process.
                with self._map.alone(timeout=CLOSE_WAIT_S):
                    self._env.close()
                    self._env = None
            except TimeoutError:
                if stager is not None:
                    stager.resume()
                raise close_refused(self.path, "reads") from None
        self._env = None
        for name in ("_lock_fd", "_open_fd"):
            fd = getattr(self, name, None)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)  # releases the flock
                setattr(self, name, None)
        with _open_paths_lock:
            _open_paths.discard(getattr(self, "_real", ""))
        if failure is not None:
            raise failure

    def is_open(self) -> bool:
        """Whether the environment is open (in this process)."""
        return self._env is not None and os.getpid() == self._pid and not self._forked

    def reader_check(self) -> int:
        """Clear reader slots of dead processes; returns how many were cleared."""
        self._last_reader_check = time.monotonic()
        try:
            cleared = self.env.reader_check()
        except lmdb.Error as exc:
            raise translate(exc, "checking readers") from exc
        if cleared:
            log.warning("%s: cleared %d reader slots of processes that died in a transaction", self.path, cleared)
        return int(cleared)

    def _maybe_reader_check(self) -> None:
        if time.monotonic() - self._last_reader_check > READER_CHECK_INTERVAL:
            self.reader_check()

    # -- transactions -------------------------------------------------------------------------

    def read(self, *, buffers: bool = True) -> _Reading:
        """A read-only snapshot, as a context manager yielding the transaction. Values are views
        into the map, valid inside it only (copying a run chunk of up to 256 KiB per probe would cost
        more than the probe): copy what must outlive it."""
        return _Reading(self, buffers)

    def _begin_read(self, buffers: bool) -> lmdb.Transaction:
        """Begin a read holding a share of the map (released by :class:`_Reading` on exit)."""
        env = self.env
        for attempt in range(3):
            self._map.share()
            try:
                # The environment as it is once the share is held: a switch of the whole store
                # (file compaction) that this share waited for has replaced it.
                env = self.env
                self._maybe_reader_check()
                # Two calls, not begin(buffers=buffers): lmdb's stubs type begin() by the literal value.
                return env.begin(buffers=True) if buffers else env.begin(buffers=False)
            except lmdb.MapResizedError:
                self._map.unshare()
                # Another process grew the map: adopt its size, with no transaction of ours active.
                self._set_mapsize(0, "adopting the map size")
            except lmdb.ReadersFullError:
                self._map.unshare()
                if attempt == 2 or env.reader_check() == 0:
                    raise StorageError(f"all reader slots of {self.path} are in use; close idle readers") from None
            except BaseException as exc:
                self._map.unshare()
                if isinstance(exc, lmdb.Error):
                    raise translate(exc, "starting a read") from exc
                raise
        raise StorageError(f"could not start a read on {self.path} after map resizes")

    def _set_mapsize(self, size: int, action: str) -> None:
        """Set the map size (0: adopt the file's) once no other thread of this process is in a transaction.

        A read this thread still holds open (a ``Store.reader()`` block, an all-pairs iterator
        between batches) would be left reading an unmapped map: that is refused, not done."""
        self.check_no_own_read(action)
        with self._map.alone():
            self.mapping += 1  # before: a failed remap may have moved the map too
            try:
                self.env.set_mapsize(size)
            except lmdb.Error as exc:
                raise translate(exc, action) from exc
        if log.isEnabledFor(logging.INFO):  # reading the size back costs a call: only when logged
            log.info("%s: map size %d MiB (%s)", self.path, self._figures()["map_size"] >> 20, action)

    def write(self, fn: Callable[[lmdb.Transaction], T], *, action: str = "writing") -> T:
        """Run ``fn(txn)`` in one write transaction and commit durably; all of it or nothing.

        On a full map the transaction is aborted, the map grown, and ``fn`` run again from the start,
        so ``fn`` must compute everything from what it reads in ``txn`` (no side effects outside it).
        With ``durability="interval"`` the stager thread runs it, once what is staged has committed.
        """
        self.check_writable()
        stager = self.stager_for_this_thread()
        if stager is not None:
            return stager.write(fn, action)
        return self.write_now(fn, action)

    def stage(self, fn: Callable[[lmdb.Transaction], T], *, action: str = "writing", group: tuple[Any, Sequence[Any]] | None = None) -> T:
        """Run ``fn(txn)`` as :meth:`write` does; with ``durability="interval"``, return once it has
        run in the stager's open transaction, before that commits (:mod:`fpstore.store.staging`).
        ``group``: ``(owner, requests)`` when ``fn`` is ``owner.commit_in`` of ``requests`` (a
        :class:`~fpstore.store.staging.StagedRequests`), which the stager then keeps as
        ``owner`` packs them until their commit, not as ``fn``."""
        self.check_writable()
        stager = self.stager_for_this_thread()
        if stager is not None:
            return stager.stage_group(*group, action) if group is not None else stager.stage(fn, action)  # type: ignore[return-value]
        return self.write_now(fn, action)

    def stager_for_this_thread(self) -> Stager | None:
        """The stager, when this thread's writes go to it (``durability="interval"``); None when
        they run in this thread: the stager's own, the thread inside :meth:`alone`, and a thread
        that holds a read open. The last one's write waits for what is staged to commit, then
        commits durably itself: the stager, growing the map for it, would wait for that very
        read, which waits for the write."""
        stager = self._stager
        if stager is None or stager.owns_current_thread() or self._alone_thread == threading.get_ident():
            return None
        if self._map.held():
            self._sync_stager(stager)
            return None
        return stager

    def _sync_stager(self, stager: Stager) -> None:
        """``stager.sync()``; in a thread that holds a read, refused (StorageError) while the
        stager grows the map, which waits for that read: the thread would wait for itself."""
        if not self._map.held():
            stager.sync()
        elif not stager.sync(give_up=lambda: stager.growing and self._map.growth_waits()):
            raise StorageError(
                f"{self.path}: the map is growing for the adds staged so far, which waits for the read this thread "
                "holds; write or sync once the read has ended"
            )

    def sync(self) -> None:
        """Return once every write acknowledged so far is durable (with ``durability="interval"``,
        commit what is staged now; the other modes acknowledge only durable writes)."""
        self.check_writable()
        stager = self._stager
        if stager is not None and not stager.owns_current_thread() and self._alone_thread != threading.get_ident():
            self._sync_stager(stager)

    def holds_read(self) -> bool:
        """Whether the calling thread has a transaction of the store open (a ``store.reader()``
        block, a pairs iterator between batches): a growth of the map waits for it."""
        return self._map.held()

    def take_write_lock(self, action: str) -> None:
        """Take the write lock. A thread that holds a read cannot wait for it while a growth of the
        map waits (the growth waits for that read, and whoever holds the lock may be the one
        growing, or waiting to grow): its write is refused instead, with nothing written."""
        if self._write_lock.acquire(blocking=False):
            return
        if not self._map.held():
            self._write_lock.acquire()
            return
        while not self._write_lock.acquire(timeout=WRITE_LOCK_POLL_S):
            if self._map.growth_waits():
                raise StorageError(
                    f"{self.path}: {action} waits for the map to grow, which waits for the read this thread holds; "
                    "write once the read has ended"
                )

    def hold_for_fork(self, lock: Any) -> bool:
        """Acquire ``lock`` before a fork (True). A thread that holds a read cannot wait for it
        while a growth of the map waits (whoever holds it may be waiting for that growth, which
        waits for the read): once no write transaction is open for the child to inherit (the one
        open commits or aborts without waiting for the read, and none begins while the growth
        waits), it forks without it (False)."""
        if not self._map.held():
            lock.acquire()
            return True
        while not lock.acquire(timeout=WRITE_LOCK_POLL_S):
            if self._map.growth_waits() and not self.write_txn_open:
                return False
        return True

    def write_now(self, fn: Callable[[lmdb.Transaction], T], action: str) -> T:
        """:meth:`write` in the calling thread."""
        self.check_writable()
        self.take_write_lock(action)
        try:
            self._after_staged_writes()
            fault_points = faults.active()
            fault_points.begin_write()
            while True:
                txn = self.begin_write(action)
                try:
                    seen = fault_points.write_txn(txn)
                    for begin in self.on_begin_write:
                        begin(seen)
                    result = fn(seen)
                except BaseException as exc:
                    self.aborted(txn)
                    if isinstance(exc, lmdb.MapFullError):
                        self.grow()
                        continue
                    if isinstance(exc, lmdb.Error):
                        raise translate(exc, action, self.path) from exc
                    raise
                try:
                    self.commit_write(txn, action)
                except lmdb.MapFullError:
                    self.grow()
                    continue
                break
        finally:
            self._write_lock.release()
        self.after_write()
        return result

    def _after_staged_writes(self) -> None:
        """(Write lock held.) A write of a thread other than the stager's commits only once every
        write the stager acknowledged is committed: raises the stager's failure (they were lost),
        and waits while the stager grows the map to stage its kept writes again. A thread that
        holds a read cannot wait (the growth waits for its read): its write is refused."""
        stager = self._stager
        if stager is None or stager.owns_current_thread() or self._alone_thread == threading.get_ident():
            return
        while not stager.settled():
            if self._map.held():
                raise StorageError(
                    f"{self.path}: the adds staged since the last commit are being staged again in a grown map, "
                    "which waits for the read this thread holds; write once the read has ended"
                )
            self._write_lock.release()
            try:
                stager.sync()
            finally:
                self._write_lock.acquire()

    @property
    def stager(self) -> Stager | None:
        """The thread that owns write transactions with ``durability="interval"`` (else None)."""
        return self._stager

    @property
    def write_lock(self) -> threading.RLock:
        """Held by the thread that has a write transaction open (and by :meth:`alone`)."""
        return self._write_lock

    def begin_write(self, action: str) -> lmdb.Transaction:
        """Begin a write transaction holding a share of the map (write lock held by the caller):
        :meth:`commit_write` or :meth:`aborted` ends it."""
        self._maybe_reader_check()
        while True:
            self._map.share()
            try:
                env = self.env  # once the share is held: a close this share waited for has closed it
                # Views, as for reads; valid until the next write in the transaction, so callers
                # decode what they read before writing.
                txn = env.begin(write=True, buffers=True)
                self.write_txn_open = True
                return txn
            except lmdb.MapResizedError:
                self._map.unshare()
                self._set_mapsize(0, "adopting the map size")
            except BaseException as exc:
                self._map.unshare()
                if isinstance(exc, lmdb.Error):
                    raise translate(exc, action, self.path) from exc
                raise

    def commit_write(self, txn: lmdb.Transaction, action: str) -> None:
        """Commit a transaction of :meth:`begin_write`. A failure aborts it: ``MapFullError`` is
        raised as LMDB's (the caller grows the map and writes again), others as fpstore's."""
        fault_points = faults.active()
        try:
            fault_points.before_commit()
            txnid = txn.id()
            txn.commit()
        except BaseException as exc:
            self.aborted(txn)
            if isinstance(exc, lmdb.Error) and not isinstance(exc, lmdb.MapFullError):
                raise translate(exc, action, self.path) from exc
            raise
        self.write_txn_open = False
        self._map.unshare()
        for committed in self.on_committed:
            committed(txnid)
        fault_points.after_commit()

    def after_write(self) -> None:
        """Once a write has committed and its locks are released: the hooks that follow writes."""
        for hook in self.on_commit:
            hook()

    def aborted(self, txn: lmdb.Transaction) -> None:
        """Abort a write transaction (or a nested one of the stager's): what it made is gone, so
        are the caches of it. A top-level transaction gives back its share of the map."""
        nested = self._stager is not None and self._stager.is_nested(txn)
        txn.abort()
        if not nested:
            self.write_txn_open = False
            self._map.unshare()
        for forget in self.on_abort:
            forget()

    def map_growth_waits(self) -> bool:
        """Whether a growth of the map waits for this process's transactions to end."""
        return self._map.growth_waits()

    def translate(self, exc: BaseException, action: str) -> FpstoreError:
        return translate(exc, action, self.path)

    def reserve(self, nbytes: int) -> None:
        """Grow the map now (no transaction open) so that ``nbytes`` more fit without a retry.

        Large transactions (bulk loads, compaction) call this first: a ``MapFullError`` would
        otherwise abort them after all their work and run them again.
        """
        info = self._figures(stat=True)
        used = (info["last_pgno"] + 1) * info["psize"]
        need = used + int(nbytes * 1.25) + (16 << 20)
        if need > info["map_size"]:
            self._set_mapsize(need, f"growing the map to {need} bytes")
        faults.active().after_reserve()

    def grow(self) -> None:
        """Grow the map by a step (no transaction of this thread open)."""
        current = self._figures()["map_size"]
        new = current + min(max(current, INITIAL_MAP_SIZE), MAX_GROWTH_STEP)
        self._set_mapsize(new, f"growing the map to {new} bytes")

    # -- maintenance --------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        info = self._figures(stat=True, readers=True)
        info["file_size"] = os.path.getsize(os.path.join(self.path, DATA_FILE))
        return info

    def _figures(self, *, stat: bool = False, readers: bool = False) -> dict[str, Any]:
        """The environment's info (and stat, and reader table), read while holding a share of the
        map: LMDB reads them through the map, which another thread's growth may be moving (the
        calls then fail with EINVAL, or read an unmapped page)."""
        self._map.share()
        try:
            env = self.env  # once the share is held: a file compaction may have replaced it
            info = dict(env.info())
            if stat:
                info.update(env.stat())
            if readers:
                info["readers"] = env.readers()
        finally:
            self._map.unshare()
        return info


def close_refused(path: str, waited_for: str) -> StorageError:
    """The error of a close that waited :data:`CLOSE_WAIT_S` for ``waited_for`` in vain."""
    return StorageError(
        f"{path}: close() waited {CLOSE_WAIT_S:g} s for {waited_for} that other threads hold open "
        "(store.reader() blocks, near_duplicate_pairs iterators not exhausted or closed); "
        "the store stays open: end them, then close it"
    )


class _Reading:
    """What :meth:`Storage.read` returns: begins the read on entry, always aborts it on exit
    (a read has nothing to commit; abort releases the reader slot), and translates LMDB errors.
    A class rather than a generator context manager: single queries enter one per call, and the
    generator machinery cost more than the rest of the bookkeeping."""

    __slots__ = ("_storage", "_buffers", "_txn", "_owner")

    def __init__(self, storage: Storage, buffers: bool) -> None:
        self._storage, self._buffers = storage, buffers

    def __enter__(self) -> lmdb.Transaction:
        self._txn = self._storage._begin_read(self._buffers)
        self._owner = threading.get_ident()
        return self._txn

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            self._txn.abort()
        finally:
            # The share of the thread that began the read: a pairs iterator may end in another
            # thread (collected there), and its share would otherwise stay taken for ever.
            self._storage._map.unshare(self._owner)
        if exc is not None and isinstance(exc, lmdb.Error):
            raise translate(exc, "reading") from exc
