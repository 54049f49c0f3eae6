"""``durability="interval"``: writes acknowledged before their fsync, committed within an interval.

In this mode one thread, the stager, begins and commits every write transaction of the store (LMDB
binds a write transaction to the thread that began it). It keeps one transaction open for up to
``interval`` seconds and runs each staged write (a group of adds, :meth:`Storage.stage`) in a
nested transaction of it: a staged write is applied entirely or not at all, is answered as soon as
it has run, and sees every write staged before it, so verdicts are exactly those of durable adds
in the same order. The open transaction commits, with LMDB's full sync, once its first write is
``interval`` seconds old, before every durable write (:meth:`Storage.write`: ``add_many``, a
checkpoint, a merge step, which the stager then runs as it always runs), on :meth:`Stager.sync`,
when a map growth waits, and on close.

What a crash loses is therefore the newest staged writes, whole, from at most the last
``interval`` (plus the commit in flight); never an older one, never part of one, never the store.
Readers (other threads' queries, other processes) see a staged write once it is committed.

A commit that fails (a full disk) loses the writes acknowledged since the previous commit: the
stager then refuses every later write, sync and close with the error, until the store is opened
again, so that no caller goes on as if they were stored.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import lmdb

from fpstore.errors import ClosedError, FpstoreError, StorageError
from fpstore.store import faults
from fpstore.store.group import GATHER_FRACTION, GATHER_MAX_S, MAX_GROUP, Wake, run_group

if TYPE_CHECKING:
    from fpstore.store.storage import Storage

__all__ = ["DEFAULT_INTERVAL", "MAX_INTERVAL", "StagedRequests", "Stager"]

log = logging.getLogger(__name__)

#: Seconds a staged write waits at most for its commit (MongoDB's journal commits every 100 ms).
DEFAULT_INTERVAL = 0.1
MAX_INTERVAL = 60.0
#: Map room made before each long transaction begins, so that a staged write rarely meets a full
#: map (which aborts the open transaction, grows the map and stages its writes again).
STAGE_ROOM = 32 << 20
#: How often an idle stager with a transaction open looks for a growth of the map waiting for it.
GROWTH_POLL_S = 0.005

_STAGE, _REQUEST, _WRITE, _SYNC = "stage", "request", "write", "sync"
#: What :meth:`Stager._submit` returns for a wait its caller gave up, and how often it asks.
_GAVE_UP = object()
GIVE_UP_POLL_S = 0.01

Req = TypeVar("Req")
Res = TypeVar("Res")

#: A write kept for a rebuild (:attr:`Stager._pending`): ``(fn, None, None, result)``, or, for a
#: group of requests, ``(None, owner, its packed requests, the digest of its results)``.
_Kept = tuple[Callable[[Any], Any] | None, "StagedRequests[Any, Any] | None", tuple[Any, ...] | None, Any]

_live: weakref.WeakSet[Stager] = weakref.WeakSet()


@atexit.register
def _commit_at_exit() -> None:
    """A program that ends without closing its store still commits the writes it was told were
    staged (the stager is a daemon thread, alive until after the exit handlers)."""
    for stager in list(_live):
        if stager._closing or stager._pid != os.getpid():
            continue
        try:
            stager.sync()
        except FpstoreError as exc:
            log.error("%s", exc)


def _before_fork() -> None:
    # A child forked while the stager holds its transaction open inherits LMDB's write lock held
    # by a thread the child does not have, and hangs when it closes the inherited environment:
    # commit what is staged and hold the write lock (no transaction can begin) across the fork.
    # A forking thread that holds a read cannot wait while a growth of the map waits for that
    # read: it forks without the lock once no write transaction is open (Storage.hold_for_fork).
    for stager in list(_live):
        if stager._pid == os.getpid() and not stager._closing and not stager.owns_current_thread():
            with contextlib.suppress(FpstoreError):  # a failed stager or a dropped store: nothing staged
                storage = stager._storage
                stager.sync(give_up=storage.map_growth_waits if storage.holds_read() else None)
                stager._held_for_fork = storage.hold_for_fork(storage.write_lock)


def _after_fork_in_parent() -> None:
    for stager in list(_live):
        if stager._held_for_fork:
            stager._held_for_fork = False
            stager._storage.write_lock.release()


def _after_fork_in_child() -> None:
    # The child has no stager thread: its stores are closed to it (Storage detaches them).
    for stager in list(_live):
        if stager._held_for_fork:
            stager._held_for_fork = False
            stager._storage.write_lock.release()
        stager._closing = True
    _live.clear()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


class _Job:
    """One queued job; its caller waits on :attr:`done`, which the stager sets once."""

    __slots__ = ("kind", "fn", "action", "owner", "request", "result", "error", "done")

    def __init__(
        self, kind: str, fn: Callable[[Any], Any] | None, action: str, owner: StagedRequests[Any, Any] | None = None, request: Any = None
    ) -> None:
        self.kind, self.fn, self.action, self.owner, self.request = kind, fn, action, owner, request
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = Wake()


class StagedRequests(Generic[Req, Res]):
    """What :class:`~fpstore.store.group.GroupCommit` is in the other modes: concurrent requests
    (adds) answered in groups, in arrival order. Here each goes straight to the stager's queue, and
    the stager stages what has queued as one group, once the callers its last group answered are
    back or a bounded wait is over (:meth:`Stager._gather`): no leader."""

    def __init__(
        self,
        stager: Stager,
        commit_in: Callable[[Any, Sequence[Req]], list[Res]],
        commit_here: Callable[[Req], Res],
        max_group: int = MAX_GROUP,
        *,
        pack: Callable[[Sequence[Req]], tuple[Any, ...]] = tuple,
        unpack: Callable[[tuple[Any, ...]], list[Req]] = list,
        digest: Callable[[list[Res]], tuple[Any, ...]] = tuple,
    ) -> None:
        self._stager, self.commit_in, self.max_group = stager, commit_in, max_group
        #: How the stager keeps a staged group until its commit (:meth:`Stager._stage_group`): its
        #: requests as ``pack`` makes them (``unpack`` makes them again) and its results as
        #: ``digest`` makes them; the store's are flat tuples of plain values (ints, strings, bytes,
        #: None, a checkpoint's pair of bytes, a sketch array), which the cycle collector stops
        #: tracking once it has looked at them.
        self.pack, self.unpack, self.digest = pack, unpack, digest
        #: A request committed in the calling thread, when its writes do not go to the stager
        #: (:meth:`Storage.stager_for_this_thread`).
        self._commit_here = commit_here
        #: Groups staged and the requests in them (for tests and benchmarks).
        self.groups = 0
        self.requests = 0

    def submit(self, request: Req) -> Res:
        """Queue ``request``; its result once it is staged (or raise its error)."""
        if self._stager._storage.stager_for_this_thread() is None:
            return self._commit_here(request)
        return self._stager._submit(_Job(_REQUEST, None, "", self, request))


class Stager:
    """The thread that owns a store's write transactions in ``durability="interval"``."""

    def __init__(self, storage: Storage, interval: float) -> None:
        # Weakly: the stager's thread must not keep a store its program dropped without close()
        # alive (the store's finalizer closes it, committing what is staged through close()).
        self._storage_ref = weakref.ref(storage)
        self._closing_storage: Storage | None = None
        self._pid = os.getpid()
        self._held_for_fork = False
        self.interval = interval
        self._cond = threading.Condition(threading.Lock())
        self._jobs: deque[_Job] = deque()
        self._thread: threading.Thread | None = None
        self._closing = False
        #: A commit that failed: the writes it lost are named, to every later caller.
        self._failure: FpstoreError | None = None
        # The stager thread's own state: the open transaction and when it must commit.
        self._txn: lmdb.Transaction | None = None
        self._deadline = 0.0
        #: The writes staged since the last commit, to run again after a growth of the map, with
        #: their results (:meth:`_stage`): thousands an interval, so a group of requests is kept
        #: as its owner's ``pack`` and ``digest`` make it, not as the requests, results and
        #: closure themselves. Container objects kept by the thousand would reach the cycle
        #: collector's oldest generation and set off its full passes (10-18 ms with numpy
        #: imported), every thread of the process stopped.
        self._pending: list[_Kept] = []
        #: Commits of staged writes, the writes staged, and the times a full map made the writes
        #: since the last commit run again (for tests and benchmarks).
        self.commits = 0
        self.staged = 0
        self.rebuilds = 0
        # The stager thread's (:meth:`_gather`): the requests it expects next (those its last
        # group answered and those queued at that moment), and how long its last jobs took.
        self._expected = 0
        self._last_stage_s = 0.0
        #: Whether the stager is growing the map (or making room in it) for its transaction: such
        #: a growth waits for every read of this process, so a thread that holds one and waits
        #: for the stager would wait for itself (:meth:`Storage.stager_for_this_thread`).
        self.growing = False

    # -- any thread --------------------------------------------------------------------------------

    def is_nested(self, txn: lmdb.Transaction) -> bool:
        """Whether ``txn`` is a staged write's nested transaction (the open one is its parent)."""
        return self._txn is not None and txn is not self._txn

    def settled(self) -> bool:
        """Whether every write the stager has acknowledged is committed; raises the failure that
        lost acknowledged writes. Asked by another thread that holds the store's write lock and
        is about to commit a write of its own (:meth:`Storage.write_now`): the stager lets go of
        the lock between its transactions while the writes it kept wait to be staged again (a
        map growth), and a write committed then would be kept where older acknowledged ones may
        not be."""
        if self._failure is not None:
            raise self._failure
        return not self._pending

    def owns_current_thread(self) -> bool:
        return self._thread is not None and threading.current_thread() is self._thread

    def stage(self, fn: Callable[[Any], Any], action: str) -> Any:
        """Run ``fn(txn)`` in a nested transaction of the open one; its result once it has run."""
        return self._submit(_Job(_STAGE, fn, action))

    def stage_group(self, owner: StagedRequests[Req, Res], requests: Sequence[Req], action: str) -> list[Res]:
        """:meth:`stage` of ``owner.commit_in`` of ``requests``, kept as ``owner`` packs them
        (a group of adds made elsewhere: ``fpstore.aio``'s writers)."""
        return self._submit(_Job(_STAGE, None, action, request=(owner, requests)))

    def write(self, fn: Callable[[Any], Any], action: str) -> Any:
        """Commit what is staged, then run ``fn`` as a durable write of its own."""
        return self._submit(_Job(_WRITE, fn, action))

    def sync(self, give_up: Callable[[], bool] | None = None) -> bool:
        """Return once every write staged before the call is durable (True); with ``give_up``,
        return False as soon as it says so while waiting (the sync stays queued)."""
        if self._thread is not None or self._failure is not None:  # else nothing was staged
            return self._submit(_Job(_SYNC, None, "committing staged writes"), give_up) is not _GAVE_UP
        return True

    @property
    def _storage(self) -> Storage:
        storage = self._storage_ref() or self._closing_storage
        if storage is None:
            raise ClosedError("the store was dropped")
        return storage

    def close(self, storage: Storage) -> None:
        """Commit what is staged and end the thread; raises a failed commit's error (once the
        thread has ended). ``storage`` is the closing store's (a finalizer's weak references
        are gone)."""
        with self._cond:
            self._closing = True
            self._closing_storage = storage
            self._cond.notify()
            thread = self._thread
        if thread is threading.current_thread():
            # Closed from the stager's own thread (a store dropped there, between two jobs): the
            # open transaction is this thread's to commit, now.
            if self._txn is not None:
                with contextlib.suppress(FpstoreError):
                    self._commit()
        elif thread is not None:
            thread.join()
        self._closing_storage = None
        if self._failure is not None:
            failure, self._failure = self._failure, None  # said once, by close
            raise failure

    def resume(self) -> None:
        """Undo :meth:`close` for a store whose close did not go through (its thread has ended:
        the next write starts another)."""
        with self._cond:
            if self._thread is not None and not self._thread.is_alive():
                self._thread = None
            self._closing = False

    def _submit(self, job: _Job, give_up: Callable[[], bool] | None = None) -> Any:
        with self._cond:
            if self._failure is not None:
                raise self._failure
            if self._closing:
                raise ClosedError(f"the store at {self._storage.path} is closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=f"fpstore-stager {self._storage.path}", daemon=True)
                self._thread.start()
                _live.add(self)
            self._jobs.append(job)
            self._cond.notify()
        if give_up is None:
            job.done.wait()
        else:
            while not job.done.wait(GIVE_UP_POLL_S):
                if give_up():
                    return _GAVE_UP
        if job.error is not None:
            raise job.error
        return job.result

    # -- the stager thread -------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closing:
                    if self._txn is None:
                        self._cond.wait()
                        continue
                    if self._commit_due():
                        break
                    left = self._deadline - time.monotonic()
                    # A growth of the map (another thread's bulk load or merge) waits for the
                    # open transaction: looked at every few milliseconds, not only at the deadline.
                    self._cond.wait(min(left, GROWTH_POLL_S))
                self._gather()
                jobs = list(self._jobs)
                self._jobs.clear()
                closing = self._closing and not jobs
            self._expected = 0
            started = time.perf_counter()
            self._run_all(jobs)
            self._last_stage_s = time.perf_counter() - started
            del jobs  # nothing of the callers' (their store, its storage) stays alive in this frame
            if self._txn is not None and (closing or self._commit_due()):
                try:
                    self._commit()
                except Exception:
                    pass  # kept in self._failure, raised to every later caller
            if closing:
                return

    def _gather(self) -> None:
        """(Lock held.) Wait, briefly, for the callers the last group answered: they come back
        together, and staging the requests queued meanwhile without them would split the callers
        into two groups that alternate, each paying a group's fixed costs. Expected: those callers
        and the requests queued when they were answered (a lone caller expects only itself)."""
        want = self._expected
        if not self._jobs or self._jobs[0].kind != _REQUEST or want <= len(self._jobs):
            return
        budget = min(self._last_stage_s * GATHER_FRACTION, GATHER_MAX_S)
        self._cond.wait_for(lambda: len(self._jobs) >= want or self._closing, timeout=budget)

    def _commit_due(self) -> bool:
        """The open transaction's interval is over, or a growth of the map waits for it."""
        return time.monotonic() >= self._deadline or self._storage.map_growth_waits()

    def _run_all(self, jobs: list[_Job]) -> None:
        """Run the jobs in order; the requests of one owner queued in a row are one group."""
        i = 0
        while i < len(jobs):
            owner = jobs[i].owner
            if owner is None:
                self._run(jobs[i])
                i += 1
                continue
            j = i + 1
            while j < len(jobs) and jobs[j].owner is owner and j - i < owner.max_group:
                j += 1
            self._run_group(owner, jobs[i:j])
            i = j

    def _run(self, job: _Job) -> None:
        try:
            if self._failure is not None:
                raise self._failure
            if job.kind == _STAGE and job.fn is None:
                owner, requests = job.request
                job.result = self._stage_group(owner, requests, job.action)
            elif job.kind == _STAGE:
                assert job.fn is not None
                job.result = self._stage(job.fn, job.action)
            else:
                if self._txn is not None:
                    self._commit()
                if job.kind == _WRITE:
                    assert job.fn is not None
                    job.result = self._storage.write_now(job.fn, job.action)
        except BaseException as exc:
            job.error = exc
        finally:
            job.done.set()

    def _run_group(self, owner: StagedRequests[Any, Any], jobs: list[_Job]) -> None:
        """Stage a group of requests in one nested transaction (each alone when that fails: one
        request's failure is its own), then answer each."""
        requests = [job.request for job in jobs]
        action = f"adding a group of {len(jobs)} documents"
        outcomes: list[tuple[Any, BaseException | None]]
        try:
            if self._failure is not None:
                raise self._failure
            outcomes = list(run_group(lambda group: self._stage_group(owner, group, action), requests))
        except BaseException as exc:
            outcomes = [(None, exc)] * len(jobs)
        owner.groups += 1
        owner.requests += len(jobs)
        # Before any of them is woken, so none of them is queued again yet (a deque's length is
        # read whole without the lock; :meth:`_gather` reads these under it).
        self._expected = len(jobs) + len(self._jobs)
        for job, (result, error) in zip(jobs, outcomes):
            job.result, job.error = result, error
            job.done.set()

    def _begin(self) -> None:
        """Begin the long transaction (holding the store's write lock and a share of the map)."""
        storage = self._storage
        storage.write_lock.acquire()
        try:
            if STAGE_ROOM:
                self.growing = True
                try:
                    storage.reserve(STAGE_ROOM)
                finally:
                    self.growing = False
            self._txn = storage.begin_write("beginning a transaction of staged writes")
        except BaseException:
            storage.write_lock.release()
            raise
        self._deadline = time.monotonic() + self.interval

    def _abort_open(self) -> None:
        txn, self._txn = self._txn, None
        assert txn is not None
        try:
            self._storage.aborted(txn)
        finally:
            self._storage.write_lock.release()

    def _stage_group(self, owner: StagedRequests[Any, Any], group: Sequence[Any], action: str) -> list[Any]:
        """Stage ``owner.commit_in`` of ``group``; kept for a rebuild as ``owner`` packs it."""
        return self._stage(lambda txn: owner.commit_in(txn, group), action, (owner, owner.pack(group)))

    def _stage(self, fn: Callable[[Any], Any], action: str, group: tuple[StagedRequests[Any, Any], tuple[Any, ...]] | None = None) -> Any:
        """Run ``fn`` in a nested transaction of the open one (:meth:`_stage_once`) and keep it
        for a rebuild: ``fn`` and its result, or, for a group of requests (``(owner, packed)``),
        the packed requests and the digest of their results."""
        if self._failure is not None:
            # A failed rebuild lost the writes staged before this one (a group's requests then
            # come here one at a time): staging it in a new transaction would keep a newer write
            # where older acknowledged ones were lost.
            raise self._failure
        while True:
            if self._txn is None:
                self._begin()
            try:
                result = self._stage_once(fn, action)
            except lmdb.TxnFullError as exc:
                # The open transaction holds too much for one more write (the nested one was
                # aborted): commit it and run the write in a new one; a write too large for an
                # empty transaction is its caller's error.
                if not self._pending:
                    raise self._storage.translate(exc, action) from exc
                self._commit()
                continue
            except lmdb.MapFullError:
                # The map is full. Committing the open transaction could itself fail for want of
                # a page, so it is aborted: the map grows with no transaction open, and the
                # writes staged since the last commit run again before this one.
                self._abort_open()
                self._rebuild()
                continue
            if group is None:
                self._pending.append((fn, None, None, result))
            else:
                owner, packed = group
                self._pending.append((None, owner, packed, owner.digest(result)))
            self.staged += 1
            return result

    def _stage_once(self, fn: Callable[[Any], Any], action: str) -> Any:
        """``fn`` in a nested transaction of the open one; a full map is raised as LMDB's."""
        storage = self._storage
        try:
            child = storage.env.begin(write=True, parent=self._txn, buffers=True)
        except lmdb.Error as exc:
            raise storage.translate(exc, action) from exc
        try:
            seen = faults.active().write_txn(child)
            for begin in storage.on_begin_write:
                begin(seen)
            result = fn(seen)
            child.commit()
        except BaseException as exc:
            storage.aborted(child)
            if isinstance(exc, lmdb.Error) and not isinstance(exc, (lmdb.MapFullError, lmdb.TxnFullError)):
                raise storage.translate(exc, action) from exc
            raise
        for staged in storage.on_staged:
            staged()
        return result

    def _rebuild(self) -> None:
        """Grow the map and stage again, in order, the writes acknowledged since the last commit
        (no transaction is open). They run on the same committed state, so each gives the result
        it gave: one that does not is a failure, as a lost write is."""
        self.rebuilds += 1
        while True:
            try:
                self.growing = True
                try:
                    self._storage.grow()
                finally:
                    self.growing = False
                self._begin()
                for fn, owner, packed, result in self._pending:
                    again = self._stage_kept_again(fn, owner, packed)
                    if again != result:
                        raise StorageError("a staged write gave another result when it ran again after the map grew")
                return
            except lmdb.MapFullError:
                self._abort_open()
            except Exception as exc:
                failure = self._fail(exc)  # before the lock goes (settled)
                if self._txn is not None:
                    self._abort_open()
                raise failure from exc

    def _stage_kept_again(
        self, fn: Callable[[Any], Any] | None, owner: StagedRequests[Any, Any] | None, packed: tuple[Any, ...] | None
    ) -> Any:
        """Stage a kept write (:attr:`_pending`) again; its result as it was kept."""
        action = "staging writes again after the map grew"
        if owner is None:
            assert fn is not None
            return self._stage_once(fn, action)
        assert packed is not None
        group = owner.unpack(packed)
        return owner.digest(self._stage_once(lambda txn: owner.commit_in(txn, group), action))

    def _commit(self) -> None:
        """Commit the long transaction with a full sync; on failure, remember what was lost."""
        storage = self._storage
        while True:
            txn, self._txn = self._txn, None
            assert txn is not None
            try:
                storage.commit_write(txn, "committing staged writes")
            except lmdb.MapFullError:
                # The transaction is aborted: its writes run again, in a grown map (the kept
                # writes hold off other threads' writes meanwhile: :meth:`settled`).
                storage.write_lock.release()
                self._rebuild()
                continue
            except BaseException as exc:
                failure = self._fail(exc) if isinstance(exc, Exception) else None
                storage.write_lock.release()
                if failure is not None:
                    raise failure from exc
                raise
            # Nothing kept before the lock goes: a thread waiting for it finds the stager settled.
            self._pending = []
            storage.write_lock.release()
            break
        self.commits += 1
        try:
            storage.after_write()
        except Exception:  # the commit is done: a hook's failure is not the staged writes'
            log.exception("%s: a hook after a commit of staged writes failed", storage.path)

    def _fail(self, exc: BaseException) -> StorageError:
        """The writes acknowledged since the last commit are lost: every later caller hears it."""
        self._failure = StorageError(
            f"{self._storage.path}: a commit of staged writes failed ({exc}); the {len(self._pending)} writes "
            "acknowledged since the previous commit are lost; close the store and open it again"
        )
        self._pending = []
        log.error("%s", self._failure)
        return self._failure
