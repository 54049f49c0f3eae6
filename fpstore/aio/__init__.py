"""fpstore for asyncio programs: ``async with fpstore.aio.open(path) as store: await store.add(...)``.

No LMDB call runs on the event loop's thread. One writer thread owns every write transaction (as
aiosqlite gives each connection one thread): the adds awaited while it commits wait in one queue,
and it takes all of them (up to :data:`fpstore.store.group.MAX_GROUP`) into its next transaction,
in the order they were awaited, each seeing the ones before it, exactly as :meth:`Store.add` from
threads. An ``await store.add(...)`` returns once its transaction is durable (as far as the
store's ``durability`` promises). Reads run on a small pool of reader threads, each in its own
read transaction.

With ``open(..., writer="process")`` the writes run in a child process instead
(:mod:`fpstore.aio.process`), whose interpreter lock is not the event loop's; this process keeps a
read-only store for the reads.

Every write runs in the order it was awaited: ``delete``, ``set_checkpoint``, ``add_each`` and
``add_many`` wait in the same queue as the adds and run alone between them.

Cancelling a task that awaits an add withdraws the add when the writer has not taken it yet
(unless its checkpoint was a function, which has already moved the caller's position past it);
once taken, the add is committed with its group (a group is never half-written) and its result
is dropped. With the writer process, an add is taken when its turn of the loop ends (each turn's
writes go to the child together). Cancelling an await of any other write never withdraws it.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from collections import deque
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, TypeVar

import numpy as np

from fpstore.aio.process import READ_OPTIONS, ProcessWriter
from fpstore.errors import ClosedError, InputError
from fpstore.fingerprint.image import ImageInput
from fpstore.fingerprint.kinds import content_of
from fpstore.fingerprint.pipeline import Fingerprints
from fpstore.fingerprint.text import Text
from fpstore.hamming import RawFingerprints
from fpstore.store.group import MAX_GROUP, run_group
from fpstore.store.header import encode_checkpoint
from fpstore.store.inputs import OneAdd, prepare_add
from fpstore.store.keys import Key
from fpstore.store.opening import open as open_store
from fpstore.store.results import AddResult, Document, Match
from fpstore.store.store import Store

__all__ = ["AsyncStore", "open"]

T = TypeVar("T")


class AsyncStore:
    """An open :class:`Store` for asyncio code: the awaitable twins of its everyday methods.

    ``store`` is the underlying :class:`Store`, for anything else through :meth:`run` (which calls
    it on a reader thread); with ``writer="process"`` it is this process's read-only store (the
    writer process holds the writing one). Made by :func:`open`; close it with
    ``await store.close()`` or an ``async with`` block.
    """

    def __init__(
        self, store: Store, loop: asyncio.AbstractEventLoop, readers: int, writer: _ThreadWriter | ProcessWriter | None = None
    ) -> None:
        self.store = store
        self._loop = loop
        self._writer = writer if writer is not None else _ThreadWriter(store, loop)
        self._readers = ThreadPoolExecutor(readers, thread_name_prefix="fpstore-reader")
        self._closed = False
        self._closing: asyncio.Future[None] | None = None

    @property
    def groups(self) -> int:
        """Groups of adds the writer has committed (for tests and benchmarks)."""
        return self._writer.groups

    @property
    def adds(self) -> int:
        """Adds the writer has taken (for tests and benchmarks)."""
        return self._writer.adds

    # -- writing --------------------------------------------------------------------------------

    async def add(
        self,
        key: Key,
        *,
        text: Text | None = None,
        fingerprint: int | np.integer | None = None,
        pipeline_id: str | None = None,
        on_duplicate: str = "insert",
        checkpoint: tuple[str, Any] | Callable[[], tuple[str, Any]] | None = None,
        image: ImageInput | None = None,
    ) -> AddResult:
        """:meth:`Store.add`, queued for the writer's next group commit.

        ``checkpoint`` may also be a function returning ``(name, position)``: it is called on the
        loop when the add joins the writer's queue (after its text is fingerprinted), and adds
        commit in queue order, so positions taken this way are recorded in the order they were
        taken, whatever the order of the awaits' fingerprinting. ``image`` as in :meth:`Store.add`.
        """
        self._check_open()
        pipeline = self.store.pipeline
        fixed = None if callable(checkpoint) else checkpoint
        content = content_of(pipeline, text, image)
        if content is not None:  # fingerprinting a page or decoding an image is real work: not on the loop
            one = await self._loop.run_in_executor(
                self._readers, prepare_add, pipeline, key, content, fingerprint, pipeline_id, on_duplicate, fixed
            )
            self._check_open()
        else:
            one = prepare_add(pipeline, key, content, fingerprint, pipeline_id, on_duplicate, fixed)
        # A checkpoint function has already moved its caller's state on: its add is never withdrawn.
        withdrawable = not callable(checkpoint)
        if callable(checkpoint):
            one = one._replace(checkpoint=encode_checkpoint(checkpoint()))
        future: asyncio.Future[Any] = self._loop.create_future()
        self._writer.add(one, future, withdrawable)
        return await future  # an add's future holds its AddResult

    async def add_each(
        self,
        keys: Sequence[Key],
        *,
        texts: Sequence[Text] | None = None,
        fingerprints: RawFingerprints | Fingerprints | None = None,
        pipeline_id: str | None = None,
        checkpoint: tuple[str, Any] | None = None,
        images: Sequence[ImageInput] | None = None,
    ) -> list[AddResult]:
        """:meth:`Store.add_each` on the writer thread."""
        return await self._write(
            "add_each", keys, texts=texts, fingerprints=fingerprints, pipeline_id=pipeline_id, checkpoint=checkpoint, images=images
        )

    async def add_many(
        self,
        keys: Sequence[Key],
        *,
        texts: Sequence[Text] | None = None,
        fingerprints: RawFingerprints | Fingerprints | None = None,
        pipeline_id: str | None = None,
        checkpoint: tuple[str, Any] | None = None,
        canonicals: Sequence[Key | None] | None = None,
        images: Sequence[ImageInput] | None = None,
    ) -> np.ndarray:
        """:meth:`Store.add_many` on the writer thread."""
        return await self._write(
            "add_many",
            keys,
            texts=texts,
            fingerprints=fingerprints,
            pipeline_id=pipeline_id,
            checkpoint=checkpoint,
            canonicals=canonicals,
            images=images,
        )

    async def delete(self, key: Key) -> bool:
        """:meth:`Store.delete` on the writer thread."""
        return await self._write("delete", key)

    async def set_checkpoint(self, name: str, position: Any) -> None:
        """:meth:`Store.set_checkpoint` on the writer thread."""
        await self._write("set_checkpoint", name, position)

    async def sync(self) -> None:
        """:meth:`Store.sync` on the writer: once it returns, every add acknowledged before it is
        durable (with ``durability="interval"``; in the other modes they already are)."""
        await self._write("sync")

    async def maintain(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """A maintenance write of the store on the writer, in order with the writes awaited
        before it: ``method`` is one of :data:`MAINTENANCE` (``await store.maintain("compact")``),
        with that :class:`Store` method's arguments. With ``writer="process"`` this is the only way
        to them: :attr:`store` is read-only there."""
        if method not in MAINTENANCE:
            raise InputError(f"method must be one of {', '.join(MAINTENANCE)}, got {method!r}")
        return await self._write(method, *args, **kwargs)

    async def _write(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The store's method ``name`` on the writer, in order with the adds awaited before it. A
        cancelled await does not withdraw it (it may already run); its result is dropped."""
        self._check_open()
        future: asyncio.Future[Any] = self._loop.create_future()
        self._writer.job(name, args, kwargs, future)
        return await asyncio.shield(future)  # the method's result

    # -- reading --------------------------------------------------------------------------------

    async def query(
        self,
        *,
        text: Text | None = None,
        fingerprint: int | np.integer | None = None,
        pipeline_id: str | None = None,
        k: int | None = None,
        image: ImageInput | None = None,
    ) -> list[Match]:
        """:meth:`Store.query` on a reader thread."""
        return await self.run(
            functools.partial(self.store.query, text=text, fingerprint=fingerprint, pipeline_id=pipeline_id, k=k, image=image)
        )

    async def query_many(
        self, fingerprints: RawFingerprints | Fingerprints, *, pipeline_id: str | None = None, k: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`Store.query_many` on a reader thread."""
        return await self.run(functools.partial(self.store.query_many, fingerprints, pipeline_id=pipeline_id, k=k))

    async def get(self, key: Key, default: Any = None) -> Document | Any:
        """:meth:`Store.get` on a reader thread."""
        return await self.run(functools.partial(self.store.get, key, default))

    async def checkpoint(self, name: str) -> Any:
        """:meth:`Store.checkpoint` on a reader thread."""
        return await self.run(functools.partial(self.store.checkpoint, name))

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a reader thread (any read of :attr:`store`)."""
        self._check_open()
        return await self._loop.run_in_executor(self._readers, fn, *args)

    # -- closing --------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("this store is closed")

    async def close(self) -> None:
        """Wait for the queued writes, then close the store (its threads and its files). A second
        call waits for the first one's work."""
        if self._closing is None:
            self._closed = True
            self._closing = asyncio.ensure_future(self._shutdown())
        await asyncio.shield(self._closing)

    async def _shutdown(self) -> None:
        try:
            await self._writer.close()
        finally:
            await self._loop.run_in_executor(None, self._close_here)

    def _close_here(self) -> None:
        self._readers.shutdown(wait=True)
        self.store.close()

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


#: Awaiting adds woken per turn of the event loop: a group of hundreds woken at once would run
#: every one of their tasks before the loop looks at its timers and sockets again.
DELIVER_PER_TURN = 16


class _Queued(NamedTuple):
    """A write waiting for the writer thread: an add (``add``) or a job (``job``)."""

    add: OneAdd | None
    job: Callable[[], Any] | None
    future: asyncio.Future[Any]
    withdrawable: bool


class _ThreadWriter:
    """One writer thread of this process: the writes in the order they were queued, each run of
    adds (up to ``MAX_GROUP``) in one group commit, each other write alone."""

    def __init__(self, store: Store, loop: asyncio.AbstractEventLoop) -> None:
        self._store, self._loop = store, loop
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="fpstore-writer")
        self._lock = threading.Lock()
        #: Writes in the order they were awaited: adds (committed in groups) and jobs (another
        #: write, run alone), so a write never overtakes one awaited before it.
        self._queue: deque[_Queued] = deque()
        self._draining = False
        #: Groups committed and the adds in them.
        self.groups = 0
        self.adds = 0

    def add(self, add: OneAdd, future: asyncio.Future[Any], withdrawable: bool) -> None:
        self._enqueue(_Queued(add, None, future, withdrawable))

    def job(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], future: asyncio.Future[Any]) -> None:
        self._enqueue(_Queued(None, functools.partial(getattr(self._store, name), *args, **kwargs), future, False))

    def _enqueue(self, item: _Queued) -> None:
        with self._lock:
            self._queue.append(item)
            start, self._draining = not self._draining, True
        if start:
            self._executor.submit(self._drain)

    def _drain(self) -> None:
        """The writer thread: run the queued writes in order until the queue is empty."""
        while True:
            with self._lock:
                if not self._queue:
                    self._draining = False
                    return
                if self._queue[0].job is not None:
                    taken = [self._queue.popleft()]
                else:
                    taken = []
                    while self._queue and self._queue[0].job is None and len(taken) < MAX_GROUP:
                        taken.append(self._queue.popleft())
            try:
                self._run(taken)
            except BaseException as exc:  # noqa: BLE001 - every waiting caller hears of it
                self._loop.call_soon_threadsafe(_fail, [item.future for item in taken], exc)

    def _run(self, taken: list[_Queued]) -> None:
        first = taken[0]
        if first.job is not None:
            try:
                outcome: tuple[Any, Exception | None] = (first.job(), None)
            except Exception as exc:
                outcome = (None, exc)
            self._loop.call_soon_threadsafe(_deliver, [first.future], [outcome])
            return
        # A cancelled await withdraws its add while the add still waits here (unless its
        # checkpoint was a function: the caller's position has moved past it already).
        group = [item for item in taken if not (item.withdrawable and item.future.cancelled())]
        if not group:
            return
        adds = [item.add for item in group if item.add is not None]
        outcomes = run_group(self._store._commit_adds, adds)
        self.groups += 1
        self.adds += len(adds)
        self._loop.call_soon_threadsafe(_deliver, [item.future for item in group], outcomes)

    async def close(self) -> None:
        """Wait for the queued writes and stop the thread."""
        await self._loop.run_in_executor(None, functools.partial(self._executor.shutdown, wait=True))


def _fail(futures: list[asyncio.Future[Any]], error: BaseException) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(error)


def _deliver(futures: list[asyncio.Future[Any]], outcomes: list[tuple[Any, Exception | None]], start: int = 0) -> None:
    """On the loop: each awaiting add gets its result or its error (a cancelled one, nothing),
    :data:`DELIVER_PER_TURN` of them per turn of the loop."""
    end = min(start + DELIVER_PER_TURN, len(futures))
    for future, (result, error) in zip(futures[start:end], outcomes[start:end]):
        if future.done():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    if end < len(futures):
        asyncio.get_running_loop().call_soon(_deliver, futures, outcomes, end)


class _Opening:
    """What :func:`open` returns: awaitable (``store = await fpstore.aio.open(...)``) and an
    async context manager (``async with fpstore.aio.open(...) as store``)."""

    def __init__(self, path: str | os.PathLike[str], readers: int, writer: str, options: dict[str, Any]) -> None:
        self._path, self._readers, self._writer, self._options = path, readers, writer, options
        self._store: AsyncStore | None = None

    async def _open(self) -> AsyncStore:
        loop = asyncio.get_running_loop()
        if self._writer == "thread":
            store = await loop.run_in_executor(None, functools.partial(open_store, self._path, **self._options))
            return AsyncStore(store, loop, self._readers)
        # The writer process opens (or creates) the store first; this process then reads it.
        writer = await ProcessWriter.start(self._path, self._options)
        reading = {name: self._options[name] for name in READ_OPTIONS if name in self._options}
        try:
            store = await loop.run_in_executor(None, functools.partial(open_store, self._path, readonly=True, **reading))
        except Exception:
            await writer.close()
            raise
        except BaseException:  # cancelled: no await any more, but no process left holding the lock
            writer.kill()
            raise
        return AsyncStore(store, loop, self._readers, writer)

    def __await__(self) -> Generator[Any, None, AsyncStore]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncStore:
        self._store = await self._open()
        return self._store

    async def __aexit__(self, *exc: object) -> None:
        if self._store is not None:
            await self._store.close()


#: The store's maintenance writes that :meth:`AsyncStore.maintain` runs on the writer.
MAINTENANCE = ("bulk_load", "compact", "merge_runs", "compact_file", "redesign")

#: Where the writes run: a thread of this process, or a process of their own.
WRITERS = ("thread", "process")


def open(path: str | os.PathLike[str], *, readers: int = 4, writer: str = "thread", **options: Any) -> _Opening:
    """Open a store for asyncio code; ``options`` as for :func:`fpstore.open` (run on a thread).
    ``readers`` threads serve the reads.

    ``writer="thread"`` (the default): one thread of this process runs the writes. It shares the
    interpreter lock with the event loop, so the loop waits while it computes verdicts (stalls of
    several milliseconds under hundreds of awaiting adds). ``writer="process"``: a child process
    (this Python, ``-c``) opens the store and runs the writes, with an interpreter of its own;
    this process opens the store read-only for the reads, and :attr:`AsyncStore.store` is that
    read-only store (maintenance writes go through :meth:`AsyncStore.maintain`). The options are
    the writer's (``k``, ``threshold``, ``pipeline``, ``verify`` and ``allow_network_fs`` also go
    to the read-only store). Writes travel pickled down a private pipe: a write whose arguments do
    not pickle (a generator, a lambda) is the caller's :class:`~fpstore.errors.InputError`, and a
    custom pipeline class must be importable in the child. The child ends with the store's close,
    or when this process exits; a write that kills it fails with
    :class:`~fpstore.errors.StorageError`, as does every write after it."""
    if isinstance(readers, bool) or not isinstance(readers, int) or readers < 1:
        raise InputError(f"readers must be an int >= 1, got {readers!r}")
    if writer not in WRITERS:
        raise InputError(f"writer must be one of {', '.join(map(repr, WRITERS))}, got {writer!r}")
    return _Opening(path, readers, writer, options)
