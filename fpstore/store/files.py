"""The files of a store directory: their names, what a directory may hold, and LMDB's structural
check of ``data.mdb`` (read as bytes, before LMDB maps a file it would trust)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import stat

import lmdb

from fpstore.errors import CorruptionError, NotAStoreError, StorageError
from fpstore.store import inherited

__all__ = [
    "COMPACT_MARKER",
    "COMPACT_NAME",
    "COMPACT_PREFIX",
    "DATA_FILE",
    "MAX_DBS",
    "NETWORK_FS",
    "OPEN_LOCK",
    "STORE_FILES",
    "WRITER_LOCK",
    "filesystem_type",
    "is_stale_compaction",
    "looks_full",
    "make_compaction_dir",
    "read_only_mount",
    "refuse_foreign_files",
    "remove_stale_compactions",
    "store_file_exists",
    "structure_problems",
    "verify_file",
]

MAX_DBS = 256  # not persisted by LMDB: every process must pass the same value, so it is a constant
DATA_FILE = "data.mdb"
WRITER_LOCK = "writer.lock"
#: Every process with the store open holds a shared flock on this file; replacing data.mdb (file
#: compaction) needs it exclusively, because a process still mapping the old file would go on
#: reading a frozen snapshot without knowing.
OPEN_LOCK = "open.lock"
COMPACT_PREFIX = "compact-"
#: A file compaction makes its copy in ``compact-<pid>-<16 hex digits>`` and puts this marker in
#: it first: the only proof the store accepts that such a directory is its own to remove.
COMPACT_MARKER = ".fpstore-compaction"
COMPACT_NAME = re.compile(r"compact-[0-9]+-[0-9a-f]{16}")
#: What a store directory holds: anything else means the directory is someone else's.
STORE_FILES = frozenset({DATA_FILE, "lock.mdb", WRITER_LOCK, OPEN_LOCK})
NETWORK_FS = {"nfs", "nfs4", "cifs", "smb", "smb2", "smbfs", "ncpfs", "afs", "9p", "fuse.sshfs", "ceph", "glusterfs", "lustre"}


def filesystem_type(path: str) -> str | None:
    """The type of the filesystem holding ``path`` from /proc/mounts (None where unknown)."""
    try:
        with open("/proc/mounts", encoding="utf-8", errors="replace") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return None
    real = os.path.realpath(path)
    best, best_type = "", None
    for fields in mounts:
        if len(fields) < 3:
            continue
        mount_point = fields[1].replace("\\040", " ")
        if (real == mount_point or real.startswith(mount_point.rstrip("/") + "/")) and len(mount_point) > len(best):
            best, best_type = mount_point, fields[2]
    return best_type


def read_only_mount(path: str) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def store_file_exists(directory: str, name: str) -> bool:
    """Whether store file ``name`` exists in ``directory``; anything there that is not a regular
    file (a FIFO would hang LMDB's open, a device or directory makes no sense) is refused."""
    full = os.path.join(directory, name)
    try:
        mode = os.stat(full).st_mode
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return False  # ``directory`` is a file: the caller says so
    except OSError as exc:
        raise StorageError(f"cannot read {full}: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        raise NotAStoreError(f"{full} is not a regular file, so {directory} is not an fpstore store")
    return True


def refuse_foreign_files(directory: str) -> None:
    """A store is only ever created in a new or empty directory (or over what a killed create of
    ours left): a directory holding anything else belongs to someone else."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    foreign = sorted(set(names) - STORE_FILES)
    if foreign:
        shown = ", ".join(repr(n) for n in foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise NotAStoreError(
            f"{directory} is not empty ({shown}) and holds no fpstore store; "
            "a store is created only in a new or empty directory: choose another path"
        )


def is_stale_compaction(full: str) -> bool:
    """True when ``full`` is a compaction copy this store made (its name and marker say so) and
    holds nothing the store did not put there. An empty directory of that exact name is one whose
    compaction died between making it and writing the marker; removing it loses nothing."""
    if not COMPACT_NAME.fullmatch(os.path.basename(full)) or os.path.islink(full) or not os.path.isdir(full):
        return False
    try:
        names = set(os.listdir(full))
    except OSError:
        return False
    if not names <= {COMPACT_MARKER, DATA_FILE, "lock.mdb"}:
        return False
    if names and COMPACT_MARKER not in names:
        return False
    return all(os.path.isfile(os.path.join(full, n)) and not os.path.islink(os.path.join(full, n)) for n in names)


def verify_file(path: str) -> None:
    """Verify-then-trust: walk data.mdb with py-lmdb's pure-Python structural verifier before
    LMDB maps it. LMDB trusts its pages (a zeroed or forged page can abort the process inside the
    engine), so a file from elsewhere is checked first; ~115 MB/s, hence opt-in."""
    from lmdb import verify as lmdb_verify

    try:
        problems = lmdb_verify.verify(path)
    except lmdb_verify.VerifyError as exc:
        raise CorruptionError(f"{path}: the store file cannot be verified: {exc}") from None
    except OSError as exc:
        raise StorageError(f"{path}: cannot read the store file to verify it: {exc}") from None
    if problems:
        shown = "; ".join(problems[:3])
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise CorruptionError(f"{path}: the store file failed LMDB's structural check: {shown}{more}")


def _verify_file_once(data_path: str) -> list[str]:
    from lmdb import verify as lmdb_verify

    try:
        return list(lmdb_verify.verify(data_path, subdir=False))
    except lmdb_verify.VerifyError as exc:
        return [f"the file cannot be verified: {exc}"]
    except OSError as exc:
        raise StorageError(f"{data_path}: cannot read the store file to check it: {exc.strerror or exc}") from None


def _verify_file_pinned(path: str, data_path: str) -> list[str] | None:
    """:func:`_verify_file_once` while holding a read transaction; None when LMDB does not even
    open the environment (its meta pages are bad: the unpinned findings stand).

    A read transaction keeps every page reachable from the newest commit in place (LMDB reuses
    only pages freed before the oldest reader's snapshot), so a writer committing meanwhile cannot
    make the walk see pages it is rewriting. Opening the environment and beginning a read touch
    only the meta pages, never a B-tree.
    """
    lock_fd = None
    try:
        try:
            lock_fd = os.open(os.path.join(path, OPEN_LOCK), os.O_RDONLY | os.O_CLOEXEC)
            # Shared, as every opener holds it: a file compaction cannot swap data.mdb meanwhile.
            fcntl.flock(lock_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except FileNotFoundError:
            pass
        except BlockingIOError:
            raise StorageError(f"{path} is being rewritten by a file compaction; run the command again in a moment") from None
        inherited.release(os.path.realpath(path))
        try:
            env = lmdb.open(path, subdir=True, lib_version=0, readonly=True, max_dbs=MAX_DBS, map_size=0, lock=True, readahead=False)
        except lmdb.Error:
            return None
        try:
            txn = env.begin()
            try:
                return _verify_file_once(data_path)
            finally:
                txn.abort()
        except lmdb.Error:
            return None
        finally:
            env.close()
    finally:
        if lock_fd is not None:
            os.close(lock_fd)


def structure_problems(path: str) -> list[str] | None:
    """LMDB's structural problems of the store file in directory ``path`` ([] when it is sound),
    or None when ``path`` holds no store file (opening it says what it is instead).

    py-lmdb's pure-Python verifier (``lmdb.verify``) reads the file as bytes and never hands it to
    LMDB, which trusts its pages: a zeroed or forged B-tree page aborts the process inside the
    engine (SIGABRT in ``mdb_cursor_next``). Tools that run on damaged stores therefore check
    first and walk the B-trees only when the check passes (docs/reliability.md). The check costs a
    full read of the file (~115 MB/s). A writer committing during the check can make pages look
    wrong, so findings are confirmed by a second check that holds a read transaction.
    """
    data_path = os.path.join(path, DATA_FILE)
    if not os.path.isfile(data_path):
        return None
    problems = _verify_file_once(data_path)
    if problems and not problems[0].startswith("the file cannot be verified"):
        pinned = _verify_file_pinned(path, data_path)
        if pinned is not None:
            problems = pinned
    return problems


def looks_full(path: str) -> bool:
    """True when the store's disk is (nearly) full or its data file reached RLIMIT_FSIZE."""
    import resource

    try:
        st = os.statvfs(path)
        if st.f_bavail * st.f_frsize < (4 << 20):
            return True
        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft != resource.RLIM_INFINITY and os.path.getsize(os.path.join(path, DATA_FILE)) + (64 << 20) >= soft:
            return True
    except OSError:
        return False
    return False


def remove_stale_compactions(path: str) -> None:
    """Remove copies left by a file compaction that died before its switch (the writer's job,
    under the writer lock, so no compaction is running). Only directories that prove they are
    such a copy are touched, file by file: nothing else is ever deleted."""
    for name in os.listdir(path):
        full = os.path.join(path, name)
        if not name.startswith(COMPACT_PREFIX) or not is_stale_compaction(full):
            continue
        with contextlib.suppress(OSError):
            for inner in (DATA_FILE, "lock.mdb", COMPACT_MARKER):  # the marker last
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(full, inner))
            os.rmdir(full)


def make_compaction_dir(path: str) -> str:
    """A new, uniquely named directory for a compaction copy, with the marker that proves it
    is ours written (and synced) before anything else goes into it."""
    while True:
        tmp = os.path.join(path, f"{COMPACT_PREFIX}{os.getpid()}-{os.urandom(8).hex()}")
        try:
            os.mkdir(tmp, 0o700)
            break
        except FileExistsError:
            continue
    marker = os.path.join(tmp, COMPACT_MARKER)
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, f"fpstore file compaction of pid {os.getpid()}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return tmp
