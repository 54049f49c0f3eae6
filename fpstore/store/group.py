"""Group commit: concurrent :meth:`Store.add` calls share one write transaction and one fsync.

Callers queue their add; the caller at the front of the queue leads: it takes every add waiting
behind it (up to :data:`MAX_GROUP`), runs them in arrival order in one transaction (a later add
sees the earlier ones, exact and near duplicates alike), commits once, and hands every caller its
own result. LevelDB's ``DBImpl::Write`` elects its leader the same way. A leader that finds fewer
callers queued than its previous group held first waits for them, at most half that group's commit
time and 2 ms (PostgreSQL's ``commit_delay``): callers that loop on ``add()`` come back together
when their group is done, and the first of them would otherwise commit alone. An add returns only once
its transaction is durable, so a crash loses no acknowledged add and never part of a group.

When the group's transaction fails, the leader commits each add of the group alone, so that one
caller's failure (a full disk that frees up, a damaged record one add reads) is that caller's only.
"""

from __future__ import annotations

import _thread
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["MAX_GROUP", "GroupCommit", "Wake", "run_group"]

log = logging.getLogger(__name__)

#: Adds one transaction takes at most: a bound on the latency the last of them waits for.
MAX_GROUP = 512
#: A leader that finds fewer callers queued than its previous group held waits for them at most
#: this fraction of the previous group's commit (and never more than :data:`GATHER_MAX_S`).
GATHER_FRACTION = 0.5
GATHER_MAX_S = 0.002

Req = TypeVar("Req")
Res = TypeVar("Res")


class Wake:
    """A wake-up given once: a lock taken when it is made and released to wake its waiter, the
    cheapest wake CPython has (a ``threading.Event`` is a condition variable in Python over such
    a lock)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._lock.acquire()

    def wait(self, timeout: float = -1) -> bool:
        """Whether the wake-up came (within ``timeout`` seconds; -1: waits for it)."""
        return self._lock.acquire(timeout=timeout)

    def set(self) -> None:
        self._lock.release()


class _Waiter(Generic[Req, Res]):
    """One queued request. It is woken once, by name, when it is done or when it reaches the front
    of the queue and must lead."""

    __slots__ = ("request", "result", "error", "done", "woken")

    def __init__(self, request: Req) -> None:
        self.request = request
        self.result: Res | None = None
        self.error: BaseException | None = None
        self.done = False
        self.woken = Wake()


class GroupCommit(Generic[Req, Res]):
    """Runs ``commit(requests) -> results`` (one transaction, results in order) for groups of
    concurrent requests (each request alone when a group's transaction fails: :func:`run_group`)."""

    def __init__(self, commit: Callable[[Sequence[Req]], list[Res]], max_group: int = MAX_GROUP) -> None:
        self._commit, self._max = commit, max_group
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._queue: deque[_Waiter[Req, Res]] = deque()
        # The previous group: its size and how long it took. Callers that loop on add() come back
        # together once their group is done; a leader that took the first of them alone would
        # commit it alone and leave the rest for the next group (groups of 1 and C - 1 in turn).
        self._last_size, self._last_seconds = 1, 0.0
        #: Groups committed and the requests in them (for tests and benchmarks).
        self.groups = 0
        self.requests = 0

    def submit(self, request: Req) -> Res:
        """Queue ``request``; return its result once its group is durable (or raise its error)."""
        me: _Waiter[Req, Res] = _Waiter(request)
        with self._lock:
            self._queue.append(me)
            leads = self._queue[0] is me
            if not leads and len(self._queue) >= self._last_size:
                self._arrived.notify()
        if not leads:
            me.woken.wait()  # done, or at the front of the queue
        if not me.done:
            with self._lock:
                self._gather()
                group = [self._queue[i] for i in range(min(len(self._queue), self._max))]
            self._lead(group)
        if me.error is not None:
            raise me.error
        return me.result  # type: ignore[return-value]  # done without an error: the result is set

    def _gather(self) -> None:
        """(Lock held.) Wait, a fraction of the last commit at most, for as many callers as the
        last group held: PostgreSQL's ``commit_delay``, bounded by what a commit costs anyway."""
        want = min(self._last_size, self._max)
        if len(self._queue) >= want:
            return
        budget = min(self._last_seconds * GATHER_FRACTION, GATHER_MAX_S)
        self._arrived.wait_for(lambda: len(self._queue) >= want, timeout=budget)

    def _lead(self, group: list[_Waiter[Req, Res]]) -> None:
        """Commit ``group`` (which starts with this thread's own request), then wake its callers."""
        started = time.perf_counter()
        try:
            self._run(group)
        except BaseException as exc:  # an interrupt in the leader: every caller of the group hears of it
            for w in group:
                if not w.done and w.error is None and w.result is None:
                    w.error = exc
        finally:
            with self._lock:
                for _ in group:
                    self._queue.popleft()
                for w in group:
                    w.done = True
                self.groups += 1
                self.requests += len(group)
                self._last_size, self._last_seconds = len(group), time.perf_counter() - started
                following = self._queue[0] if self._queue else None
            for w in group[1:]:
                w.woken.set()
            if following is not None:
                following.woken.set()  # the next leader

    def _run(self, group: list[_Waiter[Req, Res]]) -> None:
        outcomes: list[tuple[Res | None, Exception | None]] = run_group(self._commit, [w.request for w in group])
        for w, (result, error) in zip(group, outcomes):
            w.result, w.error = result, error


def run_group(commit: Callable[[Sequence[Req]], list[Res]], requests: Sequence[Req]) -> list[tuple[Res | None, Exception | None]]:
    """``(result, error)`` of each request: ``commit(requests)`` in one transaction, or, when that
    fails, ``commit([request])`` of each request alone, so that one request's failure is its own."""
    try:
        return [(result, None) for result in commit(requests)]
    except Exception as exc:
        if len(requests) == 1:
            return [(None, exc)]
        log.warning("a group of %d adds failed (%s: %s); committing each alone", len(requests), type(exc).__name__, exc)
    out: list[tuple[Res | None, Exception | None]] = []
    for request in requests:
        try:
            out.append((commit([request])[0], None))
        except Exception as one_exc:
            out.append((None, one_exc))
    return out
