"""Tier merges that no write waits for: runs of one size tier merged into one in bounded steps,
each step a write transaction of its own.

A flush (:meth:`fpstore.store.lsm.Lsm.flush`) moves the incremental tables into a run inside the
write that fills them; when a size tier then holds ``MERGE_FANOUT`` runs, the merge is left to a
:class:`Merger`: in a thread of its own (``merges="background"``, the default), right after the
write that made it due (``"inline"``), or when asked (``"manual"``: :meth:`Store.merge_runs`).

One merge, in the order of its transactions, each committed before the next begins:

1. **reserve**: the merged runs must still be live; the next run id is taken (``state.next_run``
   moves on) and written under the merge's marker (``meta/merging``). Nothing else changes.
2. **write** (several): the new run's blobs, at most ``MERGE_STEP_BYTES`` (or what
   ``MERGE_STEP_SECONDS`` of reading made) per transaction, under
   the reserved id. No state names them: readers never see them.
3. **switch**: if every merged run is still live, the state replaces them by the new run, and
   their blobs go on ``meta/garbage``; else (should another job have replaced them meanwhile:
   a redesign and a compaction pause merges first) the new run's blobs go there instead.
   The marker is deleted.
4. **collect** (several): the blobs listed on ``meta/garbage`` are deleted, at most
   ``GARBAGE_STEP`` per transaction, and the list shortened with them.

The new run is made table by table from the merged runs (:mod:`fpstore.store.merge_stream`),
outside any write transaction: each write step's blobs from a read snapshot of its own (runs are
immutable until the switch), the deleted documents as the first snapshot had them (tombstones are
never removed, so a document deleted later is still hidden by its tombstone). Memory is a decoded
chunk of each merged run and a step's blobs, with the store's tombstones, whatever the runs' size.
:func:`merge_runs` merges any runs this way: :meth:`Store.compact` merges every run with it. A
crash at any point leaves a store that answers as before the merge or after it; what a dead
merge wrote is named by its marker or ``meta/garbage``, and the writer's next open deletes it
(:func:`clean_up`).

A long merge does not hold the smaller tiers back: between its write steps, any smaller tier that
the flushes meanwhile filled (up to ``NESTED_MAX_ENTRIES``) is merged to the end
(:func:`merge_once`), under a marker of its own (``meta/merging.small``). Otherwise the runs of
every flush made during a merge of millions of entries wait for it: dozens of runs, each probed
by every query, then merged all at once.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, cast

import lmdb
import msgpack
import numpy as np

from fpstore.errors import ClosedError, CorruptionError, FpstoreError
from fpstore.index import tiers
from fpstore.index.tiers import RunMeta, State
from fpstore.store.catalog import Catalog
from fpstore.store.header import U64
from fpstore.store.lsm import FLUSH_ENTRIES, MERGE_FANOUT, merge_group, owned_prefixes
from fpstore.store.merge_stream import MergedRun
from fpstore.store.storage import Storage

__all__ = [
    "GARBAGE_KEY",
    "GARBAGE_STEP",
    "MERGE_MODES",
    "MERGE_STEP_BYTES",
    "MERGE_STEP_COMMIT_SECONDS",
    "MERGE_STEP_MIN_BYTES",
    "MERGE_STEP_SECONDS",
    "MERGING_KEY",
    "MERGING_KEYS",
    "NESTED_MAX_ENTRIES",
    "NESTED_PER_STEP",
    "SMALL_MERGING_KEY",
    "Merger",
    "clean_up",
    "merge_once",
    "merge_runs",
]

log = logging.getLogger(__name__)

#: How merges run (see the module's documentation).
MERGE_MODES = ("background", "inline", "manual")
#: Bytes of a new run's blobs written per transaction at most. A commit's time is mostly its
#: flush, and grows faster than its bytes: on one disk here 1 MiB took 3-5 ms and 4 MiB 30-90 ms.
MERGE_STEP_BYTES = 1 << 20
#: Seconds a write step's transaction should take, commit included: a write that arrives meanwhile
#: (an ``add_many``) waits for it. On a disk slower than that, steps shrink (:class:`_Pace`).
MERGE_STEP_COMMIT_SECONDS = 0.02
#: Bytes of a write step at least, however slow the disk: each commit also has a fixed cost.
MERGE_STEP_MIN_BYTES = 256 << 10
#: Seconds a step reads its runs for at most, however few bytes it has made (a merge whose
#: entries are mostly deleted writes little): its read snapshot holds back the map's growth.
MERGE_STEP_SECONDS = 0.25
#: Entries a merge between a long merge's steps may hold at most (see :func:`merge_once`).
NESTED_MAX_ENTRIES = 1 << 21
#: Merges made between two steps of a long merge at most.
NESTED_PER_STEP = 8
#: Blobs deleted per transaction while collecting garbage.
GARBAGE_STEP = 256
#: ``meta`` key: the run id a merge is writing (8 bytes), until its switch.
MERGING_KEY = b"merging"
#: ``meta`` key: the same for a merge of a smaller tier made between the steps of another.
SMALL_MERGING_KEY = b"merging.small"
#: Every merge marker, in the order merges nest.
MERGING_KEYS = (MERGING_KEY, SMALL_MERGING_KEY)
#: ``meta`` key: msgpack list of blob prefixes to delete (runs merged away, or a merge abandoned).
GARBAGE_KEY = b"garbage"


def _garbage(txn: lmdb.Transaction, meta: Any) -> list[bytes]:
    raw = txn.get(GARBAGE_KEY, db=meta)
    if raw is None:
        return []
    try:
        listed = msgpack.unpackb(bytes(raw), raw=False, max_array_len=1 << 20, max_bin_len=64)
    except Exception as exc:
        raise CorruptionError(f"the garbage list does not decode: {exc}") from None
    # A prefix deletes every blob under it: only a run's own (``r`` + u32 id, optionally + u16 table).
    if not isinstance(listed, list) or not all(isinstance(p, bytes) and len(p) in (5, 7) and p[:1] == b"r" for p in listed):
        raise CorruptionError("the garbage list names something other than run blobs")
    return listed


def _put_garbage(txn: lmdb.Transaction, meta: Any, prefixes: list[bytes]) -> None:
    if prefixes:
        txn.put(GARBAGE_KEY, msgpack.packb(prefixes, use_bin_type=True), db=meta)
    else:
        txn.delete(GARBAGE_KEY, db=meta)


def _reserved(txn: lmdb.Transaction, meta: Any, marker: bytes = MERGING_KEY) -> int | None:
    raw = txn.get(marker, db=meta)
    if raw is None:
        return None
    if len(raw) != 8:
        raise CorruptionError(f"the {marker.decode()} marker is {len(raw)} bytes, expected 8")
    return int(U64.unpack(raw)[0])


def _run_blobs(run_id: int) -> bytes:
    """The prefix of every blob a merge writes for run ``run_id`` (its tables and id column)."""
    return tiers.run_prefix(run_id, 0)[:-2]


def _live(state: State, runs: list[RunMeta]) -> bool:
    return all(rec in state.runs for rec in runs)


class _Pace:
    """The bytes a store's next write step holds: what its full steps so far wrote in
    ``MERGE_STEP_COMMIT_SECONDS``, between ``MERGE_STEP_MIN_BYTES`` and ``MERGE_STEP_BYTES``."""

    def __init__(self) -> None:
        self._bytes = float(MERGE_STEP_BYTES)

    def step_bytes(self) -> int:
        return int(min(MERGE_STEP_BYTES, max(MERGE_STEP_MIN_BYTES, self._bytes)))

    def observe(self, nbytes: int, seconds: float) -> None:
        """A step of ``nbytes`` took ``seconds`` from its transaction's start to its commit's end."""
        if nbytes < self.step_bytes() // 2 or seconds <= 0:
            # A merge's last step, or a small merge's: a commit's fixed cost dominates it, and a
            # disk takes a small write faster per byte than a large one.
            return
        fit = nbytes * MERGE_STEP_COMMIT_SECONDS / seconds
        # The geometric mean with the last estimate: a commit slowed by other work on the disk
        # moves the next steps by the square root of its ratio, not all the way to it.
        self._bytes = min(float(MERGE_STEP_BYTES), max(float(MERGE_STEP_MIN_BYTES), (self._bytes * fit) ** 0.5))


#: Each open store's pace (its merges come from its merge thread, compaction or merge_runs()).
_paces: weakref.WeakKeyDictionary[Storage, _Pace] = weakref.WeakKeyDictionary()


def _pace(storage: Storage) -> _Pace:
    pace = _paces.get(storage)
    if pace is None:
        pace = _paces[storage] = _Pace()
    return pace


def collect(storage: Storage, cat: Catalog, stopping: Callable[[], bool] = lambda: False) -> int:
    """Delete the blobs listed on ``meta/garbage``, ``GARBAGE_STEP`` per transaction; returns
    how many were deleted (stops early when ``stopping()``)."""

    def step(txn: lmdb.Transaction) -> int:
        listed = _garbage(txn, cat.meta)
        live = {rec.id for rec in cat.state(txn).runs}
        if any(int.from_bytes(p[1:5], "big") in live for p in listed):
            raise CorruptionError("the garbage list names blobs of a live run")
        deleted = 0
        cur = txn.cursor(db=cat.blobs)
        while listed and deleted < GARBAGE_STEP:
            prefix = listed[0]
            if cur.set_range(prefix) and bytes(cur.key()).startswith(prefix):
                cur.delete()
                deleted += 1
            else:
                listed.pop(0)
        _put_garbage(txn, cat.meta, listed)
        return deleted if listed or deleted else -1

    total = 0
    while not stopping():
        with storage.read() as txn:
            if txn.get(GARBAGE_KEY, db=cat.meta) is None:
                break
        done = storage.write(step, action="deleting the blobs of merged runs")
        if done < 0:
            break
        total += done
    return total


def clean_up(storage: Storage, cat: Catalog) -> None:
    """At the writer's open: what a merge that died left behind goes on the garbage list, and the
    list is collected."""

    def forget(txn: lmdb.Transaction) -> None:
        for marker in MERGING_KEYS:
            run_id = _reserved(txn, cat.meta, marker)
            if run_id is None:
                continue
            txn.delete(marker, db=cat.meta)
            if all(rec.id != run_id for rec in cat.state(txn).runs):
                _put_garbage(txn, cat.meta, _garbage(txn, cat.meta) + [_run_blobs(run_id)])

    with storage.read() as txn:
        pending = any(txn.get(marker, db=cat.meta) is not None for marker in MERGING_KEYS)
    if pending:
        storage.write(forget, action="clearing an interrupted merge")
    collect(storage, cat)


def merge_once(storage: Storage, cat: Catalog, unit: int, stopping: Callable[[], bool] = lambda: False) -> dict[str, int] | None:
    """Merge the runs of the smallest full size tier (see the module's documentation), and,
    between its write steps, every smaller tier that fills meanwhile; returns counts of the merges
    committed (``merges``, ``runs_merged``, ``entries`` written), or None when none was: no tier
    is full, or the merge was given up (another job replaced its runs, or ``stopping()`` turned
    true) before any smaller tier was merged."""
    with storage.read() as txn:
        group = merge_group(cat.state(txn).runs, unit)
    if not group:
        return None
    entries = sum(rec.count for rec in group)
    nested: list[dict[str, int]] = []

    def smaller_tiers() -> None:
        # Only tiers below this merge's (its runs excluded), of a quarter of its entries and
        # NESTED_MAX_ENTRIES at most, and no deeper nesting: the tiers that fill during a long
        # merge are the smallest, whose merges take a step or a few; a bigger one would hold the
        # smallest back in turn. A few per step, so the long merge goes on.
        for _ in range(NESTED_PER_STEP):
            if stopping():
                return
            with storage.read() as txn:
                small = merge_group([rec for rec in cat.state(txn).runs if rec not in group], unit)
            size = sum(rec.count for rec in small)
            if not small or size * MERGE_FANOUT > entries or size > NESTED_MAX_ENTRIES:
                return
            done = merge_runs(storage, cat, small, stopping, marker=SMALL_MERGING_KEY)
            if done is None:
                return
            nested.append(done)

    done = merge_runs(storage, cat, group, stopping, between_steps=smaller_tiers)
    every = nested if done is None else [done, *nested]  # the nested merges committed either way
    if not every:
        return None
    return {"merges": len(every), **{name: sum(d[name] for d in every) for name in ("runs_merged", "entries")}}


def merge_runs(
    storage: Storage,
    cat: Catalog,
    group: list[RunMeta],
    stopping: Callable[[], bool] = lambda: False,
    progress: Callable[[int, int | None], None] | None = None,
    marker: bytes = MERGING_KEY,
    between_steps: Callable[[], None] | None = None,
) -> dict[str, int] | None:
    """Merge runs ``group`` into one in the steps of the module's documentation, dropping the
    entries of deleted documents; returns counts, or None when there was nothing to gain (one run
    with no deleted entry), the runs are gone, or the merge was given up. ``progress(tables
    written, tables)``; ``marker``: the ``meta`` key naming the run being written (one of
    ``MERGING_KEYS``, each used by one merge at a time); ``between_steps()`` runs after each write
    step, outside any transaction."""
    t0 = time.perf_counter()
    # Room for the new run first: growing the map waits for every transaction of the process,
    # so a write of this merge that had to grow it would wait for the merge's own reads.
    storage.reserve(sum(rec.count for rec in group) * 8 * (len(cat.design.tables) + 1))
    with storage.read() as txn:
        if not _live(cat.state(txn), group):
            return None
        empty = np.zeros(0, np.uint64)
        new_run = MergedRun(txn, cat.blobs, cat.cache, cat.design, group, (empty, empty), cat.lsm.dead_ids(txn))
    if len(group) <= 1 and new_run.count == sum(rec.count for rec in group):
        return None

    def reserve(txn: lmdb.Transaction) -> int | None:
        state = cat.state(txn)
        if not _live(state, group) or _reserved(txn, cat.meta, marker) is not None:
            return None
        cat.lsm.save_state(txn, State(state.runs, state.segs, state.next_run + 1, state.next_seg))
        txn.put(marker, U64.pack(state.next_run), db=cat.meta)
        return state.next_run

    run_id = storage.write(reserve, action="starting a merge of runs")
    if run_id is None:
        return None
    steps = _Steps(group, run_id, marker, stopping, between_steps, progress)
    try:
        return _write_and_switch(storage, cat, new_run, steps, t0)
    except BaseException:
        with contextlib.suppress(FpstoreError):  # a full disk, say: the marker must not block later merges
            _give_up(storage, cat, run_id, marker)
        raise


class _Steps(NamedTuple):
    """What the steps of one merge share: its runs, reserved run id and marker, and the callers'
    hooks."""

    group: list[RunMeta]
    run_id: int
    marker: bytes
    stopping: Callable[[], bool]
    between: Callable[[], None] | None
    progress: Callable[[int, int | None], None] | None


def _write_and_switch(storage: Storage, cat: Catalog, new_run: MergedRun, merge: _Steps, t0: float) -> dict[str, int] | None:
    """Steps 2 to 4 of a merge whose run id is reserved. Each write step's blobs are made from
    the merged runs read in a snapshot of their own, released before the step's write."""
    group, run_id, marker, stopping = merge.group, merge.run_id, merge.marker, merge.stopping
    reading: list[lmdb.Transaction] = []
    made = new_run.blobs(run_id, lambda: reading[0], merge.progress)
    pace = _pace(storage)
    # Blobs made and not yet written: one table's blobs can come at once, more than a step holds.
    ready: deque[tuple[bytes, bytes]] = deque()
    ready_bytes = 0
    exhausted = finished = False
    steps = 0
    while not finished:
        if stopping():
            _give_up(storage, cat, run_id, marker)
            return None
        limit = pace.step_bytes()
        with storage.read() as txn:
            replaced = not _live(cat.state(txn), group)
            reading.append(txn)
            try:
                started = time.perf_counter()
                while not replaced and not exhausted and ready_bytes < limit:
                    blobs = next(made, None)
                    if blobs is None:
                        exhausted = True
                        break
                    ready.extend(blobs)
                    ready_bytes += sum(len(value) for _, value in blobs)
                    if time.perf_counter() - started >= MERGE_STEP_SECONDS:
                        break
            finally:
                reading.clear()
        step: tiers.Blobs = []
        size = 0
        while ready and (not step or size + len(ready[0][1]) <= limit):
            blob = ready.popleft()
            step.append(blob)
            size += len(blob[1])
        ready_bytes -= size
        finished = exhausted and not ready
        if replaced:  # the runs were replaced meanwhile (see step 3): their blobs may be gone
            _give_up(storage, cat, run_id, marker)
            collect(storage, cat, stopping)
            return None
        if step:
            began: list[float] = []
            storage.write(functools.partial(_put_blobs, cat.blobs, step, began), action="writing a merged run")
            pace.observe(size, time.perf_counter() - began[-1])
            steps += 1
        if merge.between is not None and not finished:
            merge.between()
    rec = new_run.record
    owned = [p for old in group for p in owned_prefixes(old)]  # what the merged runs leave behind

    def switch(txn: lmdb.Transaction) -> bool:
        state = cat.state(txn)
        if _reserved(txn, cat.meta, marker) != run_id:
            raise CorruptionError(f"the {marker.decode()} marker no longer names run {run_id}")
        txn.delete(marker, db=cat.meta)
        garbage = _garbage(txn, cat.meta)
        if not _live(state, group):
            _put_garbage(txn, cat.meta, garbage + [_run_blobs(run_id)])
            return False
        runs = tuple(r for r in state.runs if r not in group) + ((rec,) if rec is not None else ())
        cat.lsm.save_state(txn, State(runs, state.segs, state.next_run, state.next_seg))
        _put_garbage(txn, cat.meta, garbage + owned)
        return True

    switched = storage.write(switch, action="switching to a merged run")
    if switched:
        cat.cache.forget_runs([old.id for old in group], owned)
        if rec is not None:
            _build_cells(storage, cat, rec)
    collect(storage, cat, stopping)
    if not switched:
        return None
    seconds = time.perf_counter() - t0
    log.info("merged %d runs into one of %d entries in %.2f s (%d steps of writes)", len(group), new_run.count, seconds, steps)
    return {"runs_merged": len(group), "entries": new_run.count}


def _build_cells(storage: Storage, cat: Catalog, rec: RunMeta) -> None:
    """The occupied cells of the new run's tables, built here (without the interpreter lock)
    rather than by the probe that would otherwise find them missing; a run too large for cells at
    its 16th probe would never have them. Only a speed-up: a failure is logged, not raised. (It
    takes ~10 ms a table of 2^23 keys, which a store closing meanwhile waits for.)"""
    try:
        with storage.read() as txn:
            cat.build_cells(txn, [rec])
    except Exception as exc:  # the probes read the run as they would without cells
        log.warning("no cells for merged run %d: %s: %s", rec.id, type(exc).__name__, exc)


def _put_blobs(db: Any, blobs: tiers.Blobs, began: list[float], txn: lmdb.Transaction) -> None:
    began.append(time.perf_counter())  # after the wait for the write lock, which is not the step's
    for name, value in blobs:
        txn.put(name, value, db=db)


def _give_up(storage: Storage, cat: Catalog, run_id: int, marker: bytes) -> None:
    def give_up(txn: lmdb.Transaction) -> None:
        if _reserved(txn, cat.meta, marker) == run_id:
            txn.delete(marker, db=cat.meta)
            _put_garbage(txn, cat.meta, _garbage(txn, cat.meta) + [_run_blobs(run_id)])

    storage.write(give_up, action="giving up a merge")


_mergers: weakref.WeakSet[Merger] = weakref.WeakSet()


def _before_fork() -> None:
    # A child forked while a merge is inside LMDB inherits its locks held by a thread the child
    # does not have, and hangs when it closes the inherited environment: fork between merges.
    # Then between write transactions too (here, after the merges: a merge step may need the
    # write lock): a write transaction open at the fork keeps the child from closing its copy of
    # the store, and so from opening the store again (inherited.py).
    for merger in list(_mergers):
        merger._hold()
    for merger in list(_mergers):
        merger._hold_writes()


def _after_fork() -> None:
    for merger in list(_mergers):
        merger._release_writes()
        merger._release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork)


class Merger:
    """Runs a store's due merges, one at a time, as its mode says (``MERGE_MODES``).

    It reads the store's current catalog and flush size at each merge (a redesign replaces the
    catalog) through a weak reference: a store dropped without ``close()`` is still collected,
    and its merge thread then ends. :meth:`after_commit` is the storage's commit hook.
    """

    def __init__(self, storage: Storage, store: Any, mode: str) -> None:
        self._storage, self._store, self.mode = storage, weakref.ref(store), mode
        self._job = threading.Lock()  # one merge at a time, whoever runs it
        self._wake = threading.Event()
        self._stop = False
        self._pausing = False  # a switch of the whole store waits: the merge in progress gives up
        self._paused_by = 0  # the thread that paused merges (its own commits run none)
        self._merging_in = 0  # the thread running merges (its own commits start none: it holds _job)
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()
        #: The last error of a background merge (the merge is tried again at the next flush).
        self.error: FpstoreError | None = None
        self.merged = 0
        self._held = False
        self._writes_held = False
        _mergers.add(self)
        weakref.finalize(self, self._wake.set)  # collected: the thread wakes and ends

    def _catalog(self) -> Catalog:
        store = self._store()
        if store is None:
            raise ClosedError("the store was dropped")
        return cast(Catalog, store._cat)

    def after_commit(self) -> None:
        """After each commit: a flush that made a merge due wakes the merger."""
        store = self._store()
        me = threading.get_ident()
        if (
            self._stop
            or store is None
            or not store._cat.lsm.merge_due
            or self.mode == "manual"
            or me in (self._paused_by, self._merging_in)
        ):
            return  # (a merge this thread runs goes on to what is due when it is done)
        if self.mode == "inline":
            if self._paused_by or self._pausing:
                # Another thread holds merges for a switch of the whole store, and this commit is
                # one it waits for (the stager's, for its sync): the merge stays due.
                return
            try:
                self.run()
            except FpstoreError as exc:  # the write itself committed: its caller must not see an error
                self.error = exc
                log.warning("a merge after a write failed (tried again after the next flush): %s", exc)
            return
        self._wake.set()
        # Started once: a commit of the merge thread itself must never start a second one (after
        # close() it would take the wake-up that lets the first one end).
        with self._starting:
            if self._thread is None and not self._stop:
                self._thread = threading.Thread(
                    target=_merge_thread, args=(weakref.ref(self), self._wake), name=f"fpstore-merge {self._storage.path}", daemon=True
                )
                self._thread.start()

    def run(self) -> dict[str, int]:
        """Run every due merge now, in this thread; returns counts."""
        counts = {"merges": 0, "runs_merged": 0, "entries": 0}
        with self._job:
            self._merging_in = threading.get_ident()
            try:
                self._run_due(counts)
            finally:
                self._merging_in = 0
        return counts

    def _run_due(self, counts: dict[str, int]) -> None:
        """:meth:`run`'s loop, with the merge lock held."""
        while not self._stop:
            store = self._store()
            if store is None:
                break
            cat, unit = store._cat, store.flush_entries or FLUSH_ENTRIES
            del store  # a store dropped meanwhile is collected (its storage once the merge ends)
            cat.lsm.merge_due = False
            done = merge_once(self._storage, cat, unit, lambda: self._stop or self._pausing)
            if done is None:
                break
            for name in counts:
                counts[name] += done[name]
            self.merged += done["merges"]

    def run_logged(self) -> None:
        """:meth:`run` for the background thread: errors are logged and kept in :attr:`error`."""
        try:
            self.run()
            self.error = None
        except FpstoreError as exc:  # a full disk, say: writes go on, runs wait for the next try
            self.error = exc
            log.warning("a background merge failed (tried again after the next flush): %s", exc)
        except Exception:  # a bug: log it rather than end the thread silently
            log.exception("a background merge failed")

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No merge runs in the block (one in progress gives up after its current step): for
        work that replaces the catalog or the environment (redesign, file compaction)."""
        self._pausing = True
        try:
            with self._job:
                self._pausing = False
                self._paused_by = threading.get_ident()
                try:
                    yield
                finally:
                    self._paused_by = 0
        finally:
            self._pausing = False
        self._catalog().lsm.merge_due = True  # what gave up is still due
        if self.mode == "background":
            self.after_commit()

    def _hold(self) -> None:
        """Wait for the merge in progress to give up, and start no other (until :meth:`_release`).
        From a thread that holds a read, not while a growth of the map waits for that read (a merge
        step may be the one growing it): see :meth:`Storage.hold_for_fork`."""
        if self._thread is None or self._paused_by == threading.get_ident():
            return
        self._pausing = True
        self._held = self._storage.hold_for_fork(self._job)
        if not self._held:
            self._pausing = False

    def _hold_writes(self) -> None:
        """Hold the store's write lock across a fork, outside ``durability="interval"`` (whose
        stager commits and holds it itself): see :meth:`Storage.hold_for_fork`."""
        storage = self._storage
        if storage.is_open() and storage.stager is None:
            self._writes_held = storage.hold_for_fork(storage.write_lock)

    def _release_writes(self) -> None:
        if self._writes_held:
            self._writes_held = False
            self._storage.write_lock.release()

    def _release(self) -> None:
        if self._held:
            self._held = False
            self._pausing = False
            self._job.release()
            store = self._store()
            if store is not None:
                store._cat.lsm.merge_due = True  # a merge that gave up runs after the next write

    def close(self, timeout: float | None = None) -> bool:
        """Stop the thread (a merge in progress gives up after its current step); False, with
        the merger running on as before, when it has not stopped within ``timeout`` seconds (a
        growth of the map it waits for waits for reads other threads hold)."""
        with self._starting:
            self._stop = True
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                with self._starting:
                    self._stop = False
                return False
        return True

    def resume(self) -> None:
        """Undo :meth:`close` for a store whose close did not go through: merges run again."""
        with self._starting:
            self._stop = False
            if self._thread is not None and not self._thread.is_alive():
                self._thread = None
        store = self._store()
        if store is not None:
            store._cat.lsm.merge_due = True


def _merge_thread(ref: weakref.ref[Merger], wake: threading.Event) -> None:
    """The background merger's thread: it holds its merger only while it merges, and looks at
    its stop flag at least once a second whatever wakes it."""
    while True:
        woken = wake.wait(timeout=1.0)
        merger = ref()
        if merger is None or merger._stop:
            return
        if woken:
            wake.clear()
            merger.run_logged()
        del merger
