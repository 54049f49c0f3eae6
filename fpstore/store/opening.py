"""``fpstore.open``: the factory of :class:`~fpstore.store.store.Store`, with its parameters."""

from __future__ import annotations

import os
from collections.abc import Callable
from inspect import signature
from typing import Any, ParamSpec

from fpstore.store.store import Store

__all__ = ["open"]

_P = ParamSpec("_P")


def _with_signature_of(cls: Callable[_P, Store]) -> Callable[[Callable[..., Store]], Callable[_P, Store]]:
    """Give a factory the parameters of ``cls`` (for help(), inspect and type checkers): they are
    defined once, on :class:`Store`."""

    def wrap(fn: Callable[..., Store]) -> Callable[_P, Store]:
        fn.__signature__ = signature(cls).replace(return_annotation="Store")  # type: ignore[attr-defined]  # inspect reads it
        return fn

    return wrap


@_with_signature_of(Store)
def open(path: str | os.PathLike[str], **options: Any) -> Store:
    """Open the store in directory ``path``, creating it (mode 0700) when missing and ``create``.

    A store is created only in a new or an empty directory: a directory holding anything else
    raises :class:`~fpstore.errors.NotAStoreError` and is left untouched. A create that fails (a
    refused argument, a full disk) leaves nothing behind. ``readonly=True`` also opens a store on
    read-only media (or files this user may not write): LMDB's lock file cannot record such a
    reader, so it holds a shared lock on ``writer.lock`` instead, and no writer can start until it
    closes. A store dropped without :meth:`Store.close` is closed when it is collected, with a
    ``ResourceWarning``.

    A new store verifies by default: ``Pipeline()`` (with its 512-bit verification sketch),
    ``threshold`` 0.8 and the candidate radius ``k`` 7 (see ``threshold`` below). Given ``k`` and no
    ``threshold``, or a pipeline without a sketch, it answers within k bits of the 64-bit
    fingerprint instead; its default pipeline is then ``Pipeline(sketch_bits=0)``, and ``k``
    defaults to :data:`fpstore.fingerprint.pipeline.DEFAULT_K`, 5, that pipeline's calibrated
    radius. An existing store answers as it was made. ``k`` is the default query radius (the
    candidate radius of a verifying store); for a new store it also chooses the design (exact up
    to k). ``pipeline`` must match an existing store's. ``design`` is ``"auto"`` (chosen from ``expected_size`` for the store's
    queries), ``"auto-pairs"`` (chosen for its queries and all pairs after its loads), a design name
    or a :class:`~fpstore.index.design.Design` (docs/designs.md). One process writes; others open with ``readonly=True``.

    ``verify=True`` checks the file's structure before LMDB maps it (verify-then-trust, for
    store files from elsewhere: LMDB itself trusts its pages and can abort on a damaged one).

    ``flush_entries``: once this many documents sit in the incremental tables, the write that
    reached it moves them into a run (see docs/tuning.md). The writes between flushes stay small
    and fast; the flushing write takes longer. 0 leaves everything in the incremental tables until
    :meth:`Store.compact`.

    ``merges``: when runs of one size tier are merged into one (a log-structured merge that keeps
    the run count logarithmic). ``"background"`` (the default): by a thread of the store, in
    steps of a few MiB, each a transaction of its own, so that no write waits for a merge.
    ``"inline"``: the same steps right after the write that made a merge due, in the writer's
    thread (deterministic, for tests and batch jobs). ``"manual"``: only
    :meth:`Store.merge_runs` and :meth:`Store.compact` merge.

    ``threshold``: answer by verified similarity. A store whose pipeline has a verification
    sketch (``Pipeline(sketch_bits=...)``) finds candidates within k bits with its index and keeps
    those whose sketches estimate a Jaccard similarity of at least ``threshold``, in add verdicts,
    queries, pairs and clusters (each call may pass its own; 0 keeps every candidate). Without
    ``k``, the candidate radius is 7 (docs/designs.md, "Verification radius k_c"); the store
    records its threshold, and an open may change it for its own calls.

    ``durability``: ``"full"`` (the default): an acknowledged write survives a process crash, a
    system crash and a power cut. ``"process"``: it survives a process crash; a system crash or a
    power cut may undo the last commit, never more and never damaging the store (LMDB commits
    without flushing its meta page). ``"interval"``: :meth:`Store.add` answers once its add is
    staged, with its verdict, and the staged adds commit with a full sync within
    ``commit_interval`` seconds (0.1 by default); a crash of any kind may undo the adds of that
    last interval, the newest ones and whole, never an older one and never damaging the store.
    Other writes (``add_many``, checkpoints, maintenance) stay durable when they return, and commit
    the staged adds before them; :meth:`Store.sync` commits them on demand; an add from a thread
    that holds a read open (``store.reader()``) is durable too. Reads see a staged add once it has
    committed. The mode belongs to this open, not to the store's files.

    ``keep_mapped``: seconds (None, the default: off). Every that many seconds a thread of the
    store maps into this process the pages of the store's file that the page cache holds (Linux
    5.14 and later; elsewhere it stops, and :meth:`Store.info` says why). LMDB writes pages
    without mapping them, and a kernel that reclaims idle unmapped file pages (DAMON's pageout,
    as some virtual machines run it, or a memory-cgroup limit) evicts a page written a minute ago;
    the next answer that reads it waits for the disk. A writer whose answers read what it wrote
    (a crawler) keeps them in memory with it: docs/tuning.md, "Pages a kernel reclaims". Pages
    already evicted stay evicted (:meth:`Store.warm` reads everything back).
    """
    return Store(path, **options)
