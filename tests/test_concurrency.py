"""Concurrency tests: snapshot isolation across processes, map growth under readers, fork, double
open, the writer lock, read-only and closed stores. The workers are tests/workers.py, run through tests/support/processes.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import fpstore
from fpstore.errors import ClosedError, FpstoreError, ReadOnlyError, StorageError
from fpstore.store import inherited
from tests.support.oracle import FEED, CheckFailed, batch, check_snapshot, snapshot, total
from tests.support.processes import Child

READERS = 4


def _feed(store, batches: range) -> None:
    for i in batches:
        keys, fps = batch(i)
        store.add_many(keys, fingerprints=fps, pipeline_id=store.pipeline.id, checkpoint=(FEED, i))


def _run_writer_with_readers(path: str, stop: int, readers: int, writer_args: tuple[str, ...] = ()) -> tuple[list[str], list[dict]]:
    """Start ``readers`` snapshot readers, then a feed writer to batch ``stop - 1``; return the
    writer's lines and each reader's stats. Any reader failure fails the test with its message."""
    children = [Child("snapshot-reader", path, "--stop", str(stop), "--timeout", "120") for _ in range(readers)]
    writer = None
    try:
        for child in children:
            assert child.line(timeout=120) == "ready"
        writer = Child("feed-writer", path, "--stop", str(stop), *writer_args)
        rc = writer.finish(timeout=180)
        assert rc == 0, f"writer failed ({rc}): {writer.stderr()}"
        stats = []
        for child in children:
            rc = child.finish(timeout=120)
            out = child.lines[-1] if child.lines else ""
            if rc != 0 or out.startswith("FAIL"):
                raise CheckFailed(f"reader {child.pid} failed ({rc}): {out} {child.stderr()}")
            stats.append(json.loads(out))
        return writer.lines, stats
    finally:
        for child in children + ([writer] if writer else []):
            child.close()


@pytest.mark.slow
def test_readers_see_every_table_agree_within_one_snapshot(tmp_path):
    """Four reader processes find, in every snapshot taken while a writer commits, all tables agreeing with the count and checkpoint."""
    path = str(tmp_path / "store")
    with fpstore.open(path, k=3) as store:
        _feed(store, range(3))  # the early batches every reader queries
    stop = 60
    t0 = time.perf_counter()
    lines, stats = _run_writer_with_readers(path, stop, READERS)
    print(f"snapshot isolation: {time.perf_counter() - t0:.1f} s, readers {stats}")
    assert lines[-1] == "done" and f"ack {stop - 1}" in lines
    for s in stats:
        # A reader that saw only one or two states did not run alongside the writer: nothing proved.
        assert s["checkpoints"] >= 5, stats
    with fpstore.open(path, readonly=True) as store:
        snap = snapshot(store)
        check_snapshot(snap)
        assert snap["ckpt"] == stop - 1 and len(store) == total(stop - 1)


@pytest.mark.slow
def test_map_grows_several_times_under_readers(tmp_path):
    """A store created with a 1 MiB map grows several times in one writer while two readers keep reading consistent data."""
    path = str(tmp_path / "store")
    with fpstore.open(path, k=3, map_size=1 << 20) as store:
        assert store._storage.env.info()["map_size"] == 1 << 20
        _feed(store, range(1))
    stop = 60
    t0 = time.perf_counter()
    lines, stats = _run_writer_with_readers(path, stop, 2, ("--small-growth", "--report-map"))
    sizes = [int(line.split()[1]) for line in lines if line.startswith("map ")]
    print(f"map growth: {time.perf_counter() - t0:.1f} s, writer map sizes {sizes}, readers {stats}")
    assert len([s for s in sizes if s > 1 << 20]) >= 3, f"the map grew fewer than 3 times: {sizes}"
    for s in stats:
        assert max(s["map_sizes"]) > 1 << 20, f"a reader never followed the growth: {stats}"
        assert s["checkpoints"] >= 3, stats
    assert os.path.getsize(os.path.join(path, "data.mdb")) > 1 << 20
    from tests.test_crash import verify_exact

    verify_exact(path, stop - 1)


def _in_child(fn, timeout: float | None = None) -> int | None:
    """Run ``fn`` in a forked child; its return value (or 99 on an exception) is the exit status.
    With ``timeout``: None when the child has not exited by then (it is killed)."""
    pid = os.fork()
    if pid == 0:  # never return into pytest from the child
        code = 99
        try:
            code = fn()
        except BaseException as exc:  # noqa: BLE001 - reported through the exit status
            os.write(2, f"child: {type(exc).__name__}: {exc}\n".encode())
        finally:
            os._exit(code)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, 0 if deadline is None else os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.002)


def test_store_used_after_fork_raises_closed_error(tmp_path):
    """Every use of a store in a child forked after it was opened raises ClosedError, and the parent's store keeps working."""
    path = str(tmp_path / "store")
    store = fpstore.open(path, k=3)
    try:
        _feed(store, range(1))
        pid_ = store.pipeline.id
        keys, fps = batch(0)

        def child() -> int:
            calls = [
                lambda: len(store),
                lambda: store.get(keys[0]),
                lambda: store.query(fingerprint=int(fps[0]), pipeline_id=pid_),
                lambda: store.query_many(fps[:5], pipeline_id=pid_),
                lambda: store.checkpoint(FEED),
                lambda: store.add_many(["x"], fingerprints=fps[:1], pipeline_id=pid_),
                lambda: store.delete(keys[0]),
            ]
            for n, call in enumerate(calls):
                try:
                    call()
                except ClosedError:
                    continue
                return 10 + n  # this call worked (or raised something else: 99)
            return 0

        assert _in_child(child) == 0
        # The child's use (and exit) left the parent's environment intact.
        assert len(store) == total(0)
        _feed(store, range(1, 2))
        assert store.get(batch(1)[0][0]).fingerprint == int(batch(1)[1][0])
    finally:
        store.close()


def test_child_can_open_the_store_again_after_fork(tmp_path):
    """A forked child can do what the ClosedError tells it, "open it again in the child", and read the store."""
    path = str(tmp_path / "store")
    store = fpstore.open(path, k=3)
    try:
        _feed(store, range(1))

        def child() -> int:
            try:
                len(store)
                return 10
            except ClosedError:
                pass
            try:
                again = fpstore.open(path, readonly=True)
            except FpstoreError as exc:
                os.write(2, f"child: reopen refused: {type(exc).__name__}: {exc}\n".encode())
                return 11
            return 0 if len(again) == total(0) else 12

        assert _in_child(child) == 0, "the child could not open the store again after fork (see stderr)"
    finally:
        store.close()


def _reads(reader, keys, fps, pid_):
    return [reader.get(k).fingerprint for k in keys], [a.tolist() for a in reader.query_many(fps, pipeline_id=pid_)]


def _rewrite(store, keys, rounds: int = 30) -> None:
    """Writes that free pages and use them again: each round's commit may reuse what the round
    before freed, unless a read still holds it."""
    rng = np.random.default_rng(7)
    for r in range(rounds):
        store.add_many(
            [f"new{r}-{i}" for i in range(2000)], fingerprints=rng.integers(0, 2**63, 2000, dtype=np.uint64), pipeline_id=store.pipeline.id
        )
        store.delete(keys[r])


def _read_held_across_a_fork(path: str, child_of) -> None:
    """Fill a store at ``path``, fork while a read of it is open, the child running
    ``child_of(store, keys)`` (its exit status must be 0), then rewrite much of the store: the
    read must answer from its own snapshot throughout."""
    rng = np.random.default_rng(3)
    keys, fps = [f"k{i}" for i in range(5000)], rng.integers(0, 2**63, 5000, dtype=np.uint64)
    with fpstore.open(path, k=3) as store:
        store.add_many(keys, fingerprints=fps, pipeline_id=store.pipeline.id)
        with store.reader() as reader:
            before = _reads(reader, keys, fps, store.pipeline.id)
            assert _in_child(child_of(store, keys), timeout=60) == 0
            _rewrite(store, keys)
            assert _reads(reader, keys, fps, store.pipeline.id) == before, "the parent's read saw another state after the fork"
        assert store.get(keys[0]) is None and len(store) == len(keys) - 30 + 30 * 2000


@pytest.mark.parametrize("child_does", ["exits", "opens the store again"])
def test_a_forked_child_leaves_the_parents_open_reads_protected(tmp_path, child_does):
    """A read open in the parent while it forks answers from its own snapshot afterwards, however
    much the parent writes, whether the child exits at once or opens the store again (closing the
    copy it inherited must not free the parent's reader slot)."""
    path = str(tmp_path / "store")

    def child_of(store, keys):
        def child() -> int:
            if child_does == "exits":
                return 0
            with fpstore.open(path, readonly=True) as again:
                return 0 if len(again) == len(keys) else 12

        return child

    _read_held_across_a_fork(path, child_of)


def test_a_forked_child_that_ends_its_interpreter_leaves_the_parents_open_reads_protected(tmp_path):
    """The same with a child that leaves through the interpreter's own exit (which frees what is
    left, the inherited store with it) after closing the store object it inherited."""
    path = str(tmp_path / "store")
    script = f"""
import os, sys
import numpy as np
sys.path.insert(0, {os.getcwd()!r})
import fpstore
from tests.test_concurrency import _reads, _rewrite
rng = np.random.default_rng(3)
keys, fps = [f"k{{i}}" for i in range(5000)], rng.integers(0, 2**63, 5000, dtype=np.uint64)
store = fpstore.open({path!r}, k=3)
store.add_many(keys, fingerprints=fps, pipeline_id=store.pipeline.id)
with store.reader() as reader:
    before = _reads(reader, keys, fps, store.pipeline.id)
    child = os.fork()
    if child == 0:
        try:
            store.close()
        finally:
            sys.exit(0)  # the interpreter's exit, not os._exit
    os.waitpid(child, 0)
    _rewrite(store, keys)
    print("same" if _reads(reader, keys, fps, store.pipeline.id) == before else "changed")
store.close()
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["same"], out.stdout + out.stderr


def test_a_child_forked_while_other_threads_read_does_not_hang(tmp_path):
    """Children forked while two threads read the store in a loop exit at once; one that opens the
    store again opens it, or, when a read was in flight at the fork (its copy then cannot be
    closed), is refused with StorageError: never a hang."""
    path = str(tmp_path / "store")
    with fpstore.open(path, k=3) as store:
        _feed(store, range(2))
        keys = batch(0)[0][:200]
        stop = threading.Event()

        def read() -> None:
            while not stop.is_set():
                for key in keys:
                    store.get(key)

        readers = [threading.Thread(target=read) for _ in range(2)]
        for t in readers:
            t.start()
        try:
            exits = [_in_child(lambda: 0, timeout=20) for _ in range(10)]

            def reopen() -> int:
                try:
                    with fpstore.open(path, readonly=True) as again:
                        return 0 if len(again) == total(1) else 12
                except StorageError as exc:
                    return 11 if "forked while another thread" in str(exc) else 13

            reopens = [_in_child(reopen, timeout=20) for _ in range(5)]
        finally:
            stop.set()
            for t in readers:
                t.join()
        assert exits == [0] * 10, f"forked children that did nothing hung (None) or failed: {exits}"
        assert set(reopens) <= {0, 11}, f"children opening the store again hung (None) or failed: {reopens}"
        assert len(store) == total(1)


def test_a_grandchild_can_open_the_store_again(tmp_path):
    """A process forked from a forked child (a pool worker that forks in turn) opens the store
    again, as its parent could: the copy it inherited was detached once, by its parent."""
    path = str(tmp_path / "store")
    store = fpstore.open(path, k=3)
    try:
        _feed(store, range(1))

        def grandchild() -> int:
            with fpstore.open(path, readonly=True) as again:
                return 0 if len(again) == total(0) else 12

        assert _in_child(lambda: _in_child(grandchild, timeout=30), timeout=60) == 0
    finally:
        store.close()


def test_a_forked_child_cannot_use_the_reads_it_inherited(tmp_path):
    """A reader block and a pairs iterator open in the parent at the fork raise ClosedError in the
    child (their snapshot is the parent's, which the child does not protect), and the child holds
    none of the store's files or map."""
    path = str(tmp_path / "store")
    rng = np.random.default_rng(4)
    fps = rng.integers(0, 2**63, 4000, dtype=np.uint64)
    fps[1::2] = fps[0::2] ^ np.uint64(1)
    with fpstore.open(path, k=3) as store:
        store.add_many([f"k{i}" for i in range(4000)], fingerprints=fps, pipeline_id=store.pipeline.id)
        pairs = store.iter_near_duplicate_pairs(batch_size=100)
        next(pairs)
        with store.reader() as reader:

            def child() -> int:
                for use in (lambda: reader.get("k0"), lambda: next(pairs)):
                    try:
                        use()
                        return 10
                    except ClosedError:
                        pass
                data = os.path.realpath(os.path.join(path, "data.mdb"))
                with open("/proc/self/maps") as maps:
                    if data in maps.read():
                        return 11
                fds = [os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")]
                return 12 if data in fds else 0

            assert _in_child(child, timeout=60) == 0
            assert reader.get("k0") is not None
        assert sum(len(a) for a, _, _ in pairs) == 2000 - 100


def test_a_child_that_cannot_make_the_reader_table_its_own_keeps_its_copy_and_refuses_to_open(tmp_path, monkeypatch):
    """Where the child's copy of the lock file's reader table cannot be made private (no
    /proc/self/maps, a platform other than Linux, a mapping that cannot be replaced), the child
    does not close the copy it inherited, which would free the parent's reader slots: the
    parent's read held across the fork keeps its snapshot, the inherited store is closed to the
    child, and the child's own open of the store is refused, naming the start methods that work."""
    monkeypatch.setattr(inherited, "_own_reader_table", lambda lock, lock_path: False)
    path = str(tmp_path / "store")

    def child_of(store, keys):
        def child() -> int:
            try:
                store.get(keys[0])
                return 10
            except ClosedError:
                pass
            try:
                fpstore.open(path, readonly=True).close()
                return 11
            except StorageError as exc:
                return 0 if "forkserver" in str(exc) and "spawn" in str(exc) else 12

        return child

    _read_held_across_a_fork(path, child_of)


def test_a_forked_child_leaves_the_parents_reads_protected_after_the_store_moved(tmp_path):
    """The same protection when the store's directory was renamed while open: the child finds the
    lock file's mapping by the file it is, not by its path."""
    path, moved = str(tmp_path / "store"), str(tmp_path / "moved")
    rng = np.random.default_rng(3)
    keys, fps = [f"k{i}" for i in range(5000)], rng.integers(0, 2**63, 5000, dtype=np.uint64)
    with fpstore.open(path, k=3) as store:
        store.add_many(keys, fingerprints=fps, pipeline_id=store.pipeline.id)
        os.rename(path, moved)
        try:
            with store.reader() as reader:
                before = _reads(reader, keys, fps, store.pipeline.id)

                def child() -> int:  # its copy closed: the lock file's mapping was found and made its own
                    with open("/proc/self/maps") as maps:
                        return 11 if os.path.join(moved, "data.mdb") in maps.read() else 0

                assert _in_child(child, timeout=60) == 0
                _rewrite(store, keys)
                assert _reads(reader, keys, fps, store.pipeline.id) == before, "the parent's read saw another state after the fork"
        finally:
            os.rename(moved, path)


@pytest.mark.parametrize("durability", ["full", "process"])
def test_a_child_forked_while_another_thread_adds_can_open_the_store_again(tmp_path, durability):
    """A fork waits for the write transaction in progress (a group of adds), so that the child's
    copy of the store has none open and closes: every child forked while another thread adds in a
    loop opens the store again (each was refused, as forked while busy, before)."""
    path = str(tmp_path / "store")
    with fpstore.open(path, k=3, durability=durability) as store:
        _feed(store, range(1))
        stop = threading.Event()

        def add() -> None:
            n = 0
            while not stop.is_set():
                store.add(f"w{n}", fingerprint=(n * 0x9E3779B97F4A7C15) % 2**64, pipeline_id=store.pipeline.id)
                n += 1

        writer = threading.Thread(target=add)
        writer.start()
        try:

            def reopen() -> int:
                try:
                    with fpstore.open(path, readonly=True) as again:
                        return 0 if len(again) >= total(0) else 12
                except StorageError:
                    return 11

            codes = [_in_child(reopen, timeout=30) for _ in range(10)]
        finally:
            stop.set()
            writer.join()
        assert codes == [0] * 10, f"children refused (11), failed or hung (None): {codes}"


def test_writer_close_releases_the_lock_while_a_forked_child_lives(tmp_path):
    """close() frees the writer lock for other processes even while a child forked from the writer is still running."""
    path = str(tmp_path / "store")
    store = fpstore.open(path, k=3)
    _feed(store, range(1))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # a forked worker that never touches the store: it just lives until told to exit
        try:
            os.close(w)
            os.read(r, 1)
        finally:
            os._exit(0)
    os.close(r)
    try:
        store.close()
        child = Child("try-open", path)
        try:
            rc = child.finish(timeout=120)
        finally:
            child.close()
        assert rc == 0, f"the closed writer's lock is still held (via the forked child): {child.lines}"
    finally:
        os.close(w)  # EOF: the forked child exits
        os.waitpid(pid, 0)


@pytest.mark.slow
def test_double_open_and_writer_lock(tmp_path):
    """The same path opened twice in one process is refused, a second writer process gets WriterLockedError, a reader process opens."""
    path = str(tmp_path / "store")
    store = fpstore.open(path, k=3)
    try:
        _feed(store, range(1))
        for readonly in (False, True):
            with pytest.raises(FpstoreError, match="already open in this process"):
                fpstore.open(path, readonly=readonly)
        assert len(store) == total(0)  # the refused opens left the first one working
        for args, want_rc, want in ((("--readonly",), 0, f"opened {total(0)}"), ((), 3, "locked")):
            child = Child("try-open", path, *args)
            try:
                rc = child.finish(timeout=120)
            finally:
                child.close()
            assert (rc, child.lines[0].split(" ")[0]) == (want_rc, want.split(" ")[0]), (rc, child.lines)
            assert child.lines[0].startswith(want)
    finally:
        store.close()
    # Once the writer closes, the lock is free for another process.
    child = Child("try-open", path)
    try:
        assert child.finish(timeout=120) == 0, child.lines
    finally:
        child.close()
    # And this process can take it again, refusing the other process once more.
    with fpstore.open(path) as again:
        child = Child("try-open", path)
        try:
            assert child.finish(timeout=120) == 3, child.lines
        finally:
            child.close()
        assert len(again) == total(0)


def test_readonly_store_refuses_writes(tmp_path):
    """Writes on a store opened read-only raise ReadOnlyError and change nothing."""
    path = str(tmp_path / "store")
    with fpstore.open(path, k=3) as store:
        _feed(store, range(1))
    keys, fps = batch(0)
    with fpstore.open(path, readonly=True) as ro:
        pid_ = ro.pipeline.id
        writes = [
            lambda: ro.add("new", fingerprint=1, pipeline_id=pid_),
            lambda: ro.add_many(["new"], fingerprints=fps[:1], pipeline_id=pid_),
            lambda: ro.add_many(["new"], fingerprints=fps[:1], pipeline_id=pid_, checkpoint=(FEED, 5)),
            lambda: ro.delete(keys[0]),
        ]
        for write in writes:
            with pytest.raises(ReadOnlyError):
                write()
        assert ro.readonly
    with fpstore.open(path) as store:
        snap = snapshot(store)
        check_snapshot(snap)
        assert snap["ckpt"] == 0 and "new" not in store and keys[0] in store


@pytest.mark.parametrize("readonly", [False, True])
def test_every_call_after_close_raises_closed_error(tmp_path, readonly):
    """After close(), every read and write call raises ClosedError, and close() may be repeated."""
    path = str(tmp_path / "store")
    with fpstore.open(path, k=3) as store:
        _feed(store, range(1))
    keys, fps = batch(0)
    store = fpstore.open(path, readonly=readonly)
    pid_ = store.pipeline.id
    store.close()
    calls = {
        "len": lambda: len(store),
        "get": lambda: store.get(keys[0]),
        "getitem": lambda: store[keys[0]],
        "contains": lambda: keys[0] in store,
        "iter": lambda: list(store),
        "query": lambda: store.query(fingerprint=int(fps[0]), pipeline_id=pid_),
        "query_many": lambda: store.query_many(fps[:3], pipeline_id=pid_),
        "keys_of": lambda: store.keys_of([1]),
        "checkpoint": lambda: store.checkpoint(FEED),
        "info": lambda: store.info(),
        "add": lambda: store.add("new", fingerprint=1, pipeline_id=pid_),
        "add_many": lambda: store.add_many(["new"], fingerprints=fps[:1], pipeline_id=pid_, checkpoint=(FEED, 9)),
        "delete": lambda: store.delete(keys[0]),
    }
    for name, call in calls.items():
        try:
            call()
        except ClosedError:
            continue
        pytest.fail(f"{name}() after close() did not raise ClosedError")
    store.close()
    store.close()
    with fpstore.open(path, readonly=True) as again:  # closing released the path for a new open
        assert len(again) == total(0) and again.checkpoint(FEED) == 0


@pytest.mark.parametrize("switch", ["compact_file", "redesign"])
def test_a_switch_of_the_store_is_refused_while_this_thread_holds_a_reader(tmp_path, switch):
    """compact_file() and redesign() close the environment; a read this thread holds open would be
    left on a closed one (its next call raised lmdb's own error). They refuse, change nothing, and
    the reader goes on."""
    import numpy as np

    from fpstore.errors import StorageError

    with fpstore.open(tmp_path / "s", k=3) as store:
        pid = store.pipeline.id
        store.add_many([f"d{i}" for i in range(50)], fingerprints=np.arange(50, dtype=np.uint64) * 7919, pipeline_id=pid)
        with store.reader() as r:
            before = r.query(fingerprint=7919, pipeline_id=pid)
            with pytest.raises(StorageError, match="this thread still holds a read"):
                store.compact_file() if switch == "compact_file" else store.redesign(k=4)
            assert r.query(fingerprint=7919, pipeline_id=pid) == before
        assert store.k == 3 and store.design.k == 3
        # Once the reader is done, the switch goes ahead.
        store.compact_file() if switch == "compact_file" else store.redesign(k=4)
        fps = np.arange(50, dtype=np.uint64) * 7919
        want = sorted(f"d{i}" for i in np.flatnonzero(np.bitwise_count(fps ^ np.uint64(7919)) <= store.k))
        assert sorted(m.key for m in store.query(fingerprint=7919, pipeline_id=pid)) == want
