"""All pairs and clusters of a store, streamed: the join behind :meth:`Store.iter_near_duplicate_pairs`,
:meth:`Store.near_duplicate_pairs` and :meth:`Store.clusters`.

Up to the design's k the join reads the store's own sorted tables
(:func:`fpstore.index.pairs_stream.stream_pairs`) in one read snapshot: per table, each run's
codec table (chunk views into the map) and the incremental tier's entries, a window of about
:data:`~fpstore.index.pairs_stream.WINDOW_ENTRIES` entries at a time. What it holds besides
the windows in flight (``threads + 1`` of them, about 40 bytes an entry):

* the runs' block indexes (about 60 bytes per block of 256 entries per table, cached by the store
  for its queries anyway) and a list of chunk views per table;
* the incremental tier's entries: 16 bytes each, and 8 more per table joined for their permuted
  keys (the B-trees hold fewer than ``flush_entries`` documents, 4,096 by default);
* the tombstoned ids, 8 bytes each;
* up to :data:`~fpstore.index.pairs_stream.RESOLVE_ENTRIES` fingerprint pairs waiting to be mapped
  to ids, and the batch being yielded.

None of this grows with the store's size except the indexes, the views and the tombstones.

Short documents (below the pipeline's ``min_tokens``) are in no table: after the tables, the same
snapshot's content table gives their pairs, exact duplicates by content hash, read a batch of
keys at a time (:mod:`fpstore.store.exact_pairs`).

Above the design's k the store's tables cannot answer, and the join builds its own in memory
(:func:`fpstore.index.search.pairs_within` over every live fingerprint): about
:data:`IN_MEMORY_BYTES_PER_DOC` bytes per document at its peak. It refuses, with
:class:`~fpstore.errors.MemoryBudgetError`, a store whose estimate exceeds the budget
(:data:`IN_MEMORY_BUDGET`, or the caller's ``memory_budget``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import lmdb
import numpy as np

from fpstore import _backend
from fpstore.errors import CorruptionError, InputError, MemoryBudgetError
from fpstore.index import search
from fpstore.index.pairs_stream import ArraySource, RunSource, Source, stream_pairs, tables_needed
from fpstore.index.tables import MAX_K
from fpstore.store import exact_pairs
from fpstore.store.catalog import Catalog
from fpstore.store.results import Cluster
from fpstore.store.sketches import check_threshold
from fpstore.store.storage import Storage

__all__ = ["BATCH_SIZE", "IN_MEMORY_BUDGET", "IN_MEMORY_BYTES_PER_DOC", "clusters", "components", "iter_pairs", "sorted_pairs"]

_search = _backend.load("search")

#: Pairs per batch of :meth:`Store.iter_near_duplicate_pairs` by default.
BATCH_SIZE = 65_536
#: Peak bytes per document of the in-memory join (k above the design's): its permuted tables,
#: their sort orders and the pairs. tools/bench_pairs_stream.py measured 139-154 (peak RssAnon,
#: 10^6 to 3 x 10^7, two threads, 1 % near pairs); issue 21 reports 190-280 at 10^8, where more
#: tables are in flight and more pairs found: the upper end is taken.
IN_MEMORY_BYTES_PER_DOC = 280
#: Default budget of the in-memory join: stores whose estimate exceeds it are refused (8 GiB,
#: about 30 million documents).
IN_MEMORY_BUDGET = 8 << 30

Pairs = tuple[np.ndarray, np.ndarray, np.ndarray]


def _check_k(k: object) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= MAX_K:
        raise InputError(f"k must be an int in 0..{MAX_K}, got {k!r}")
    return k


def _positive(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(f"{name} must be a positive int, got {value!r}")
    return value


def iter_pairs(
    storage: Storage,
    cat: Catalog,
    k: object,
    *,
    batch_size: object = BATCH_SIZE,
    progress: Callable[[int, int | None], None] | None = None,
    memory_budget: object = None,
    window_entries: int | None = None,
    threads: int | None = None,
    threshold: object = None,
) -> Iterator[Pairs]:
    """Every pair of live documents within ``k``, each once, in batches of at most ``batch_size``
    rows: ``(id_a int64, id_b int64, distance uint8)`` with ``id_a < id_b``. The pairs of indexed
    documents come table by table, then those of short documents: exact duplicates by content
    hash (:mod:`fpstore.store.exact_pairs`). With ``threshold`` (a store with sketches), only
    the pairs whose sketches estimate a similarity of at least it (batches may then be shorter).

    Arguments are checked, and the in-memory join's budget too, before this returns; the join
    runs as the batches are taken. The stream reads one snapshot, held until the iterator is
    exhausted or closed; the in-memory join reads its fingerprints in one and lets it go.
    ``window_entries`` and ``threads`` override the stream's defaults (tests use them)."""
    kq = _check_k(k)
    size = _positive(batch_size, "batch_size")
    theta = check_threshold(threshold) or None  # every estimate is >= 0: a threshold of 0 keeps all
    if theta is not None and cat.sketches is None:
        raise InputError("threshold= needs a store whose pipeline has a verification sketch (sketch_bits)")
    streamed = kq <= cat.design.k
    if not streamed:
        budget = IN_MEMORY_BUDGET if memory_budget is None else _positive(memory_budget, "memory_budget")
        with storage.read() as txn:
            entries = cat.incremental.entries(txn) + sum(r.count for r in cat.state(txn).runs)
        need = entries * IN_MEMORY_BYTES_PER_DOC
        if need > budget:
            raise MemoryBudgetError(
                f"k={kq} is above the store's design ({cat.design.name}, exact up to k={cat.design.k}): the join would build its "
                f"own tables in memory, about {need / 2**30:.1f} GiB for {entries:,} documents, above the budget of "
                f"{budget / 2**30:.1f} GiB; join at k <= {cat.design.k} (streamed from the store's tables), or pass a larger "
                "memory_budget"
            )
    elif memory_budget is not None:
        _positive(memory_budget, "memory_budget")
    return _in_this_process(storage, _iterate(storage, cat, kq, size, progress, streamed, window_entries, threads, theta))


def _in_this_process(storage: Storage, batches: Iterator[Pairs]) -> Iterator[Pairs]:
    """``batches``, each taken only in the process that opened the store: the stream reads views
    of its snapshot, which a forked child (whose copy of the store is closed) does not have."""
    for batch in batches:
        yield batch
        storage.check_open()  # ClosedError in a forked child


def _verified(cat: Catalog, txn: lmdb.Transaction, batches: Iterable[Pairs], threshold: float | None) -> Iterator[Pairs]:
    """The pairs of ``batches`` whose sketches reach ``threshold`` (all of them when None)."""
    for a, b, d in batches:
        if threshold is None or cat.sketches is None:
            yield a, b, d
            continue
        keep = cat.sketches.verify_pairs(txn, a, b, threshold)
        if keep.any():
            yield a[keep], b[keep], d[keep]


def _iterate(
    storage: Storage,
    cat: Catalog,
    k: int,
    batch_size: int,
    progress: Callable[[int, int | None], None] | None,
    streamed: bool,
    window_entries: int | None,
    threads: int | None,
    threshold: float | None,
) -> Iterator[Pairs]:
    if not streamed:  # the in-memory join: the snapshot is needed only to read the fingerprints
        with storage.read() as txn:
            fps, ids = cat.live_index(txn)
            short = list(exact_pairs.groups(txn, cat))  # the groups with a short member: few
        i, j, d = search.pairs_within(fps, k, progress)
        a, b = ids[i], ids[j]
        del fps, i, j
        found = _batched(itertools.chain([(np.minimum(a, b), np.maximum(a, b), d)], exact_pairs.pairs_of(short, k)), batch_size)
        if threshold is None:
            yield from found
            return
        with storage.read() as txn:  # sketches never change once written: any later snapshot has them
            yield from _verified(cat, txn, found, threshold)
        return
    with storage.read() as txn:
        tables = _sources(txn, cat, tables_needed(cat.design, k))
        extra: dict[str, Any] = {} if window_entries is None else {"window_entries": window_entries}
        found = stream_pairs(cat.design, k, tables, threads=threads, progress=progress, **extra)
        yield from _verified(
            cat, txn, _batched(itertools.chain(found, exact_pairs.pairs_of(exact_pairs.groups(txn, cat), k)), batch_size), threshold
        )


def _sources(txn: lmdb.Transaction, cat: Catalog, ntables: int) -> list[list[Source]]:
    """Each table's sorted sources in ``txn``: its codec table in every run, and the incremental
    tier; table 0's carry ids and leave out tombstoned documents."""
    design = cat.design
    state = cat.state(txn)
    dead = cat.lsm.dead_ids(txn)
    keep = None if not len(dead) else (lambda ids: _not_in(ids, dead))
    pairs = cat.incremental.table0(txn)
    inc_fps, inc_ids = pairs[:, 0].astype(np.uint64), pairs[:, 1].astype(np.uint64)
    if len(inc_fps) > 1 and bool(np.any(inc_fps[1:] < inc_fps[:-1])):
        raise CorruptionError("table 0 holds keys out of order: the store is damaged")
    runs = cat.runs(txn, state)
    id_maps = [run.id_reader() for run in runs]
    tables: list[list[Source]] = []
    for t in range(ntables):
        sources: list[Source] = []
        for run, ids in zip(runs, id_maps):
            tab = run.table(t)  # its count checked against the run's
            view = tab.views()
            sources.append(RunSource(tab.index, view.__getitem__, ids if t == 0 else None, keep if t == 0 else None))
        if len(inc_fps):
            if t == 0:
                sources.append(ArraySource(inc_fps, inc_ids, keep))
            else:
                sources.append(ArraySource(search.sort_u64(design.permute(inc_fps, t))))
        tables.append(sources)
    return tables


def _not_in(ids: np.ndarray, dead: np.ndarray) -> np.ndarray:
    """True where ``ids`` is not in ``dead`` (sorted)."""
    at = np.minimum(dead.searchsorted(ids), len(dead) - 1)
    return dead[at] != ids


def _batched(chunks: Iterable[Pairs], size: int) -> Iterator[Pairs]:
    """The chunks' rows as batches of exactly ``size`` (the last one shorter), ids as int64."""
    held: list[Pairs] = []
    count = 0
    for a, b, d in chunks:
        if not len(a):
            continue
        held.append((a.astype(np.int64), b.astype(np.int64), d.astype(np.uint8)))
        count += len(a)
        while count >= size:
            a_all, b_all, d_all = (np.concatenate(x) for x in zip(*held)) if len(held) > 1 else held[0]
            yield a_all[:size], b_all[:size], d_all[:size]
            rest = (a_all[size:], b_all[size:], d_all[size:])
            held = [rest] if len(rest[0]) else []
            count -= size
    if count:
        a_all, b_all, d_all = (np.concatenate(x) for x in zip(*held)) if len(held) > 1 else held[0]
        yield a_all, b_all, d_all


def sorted_pairs(batches: Iterable[Pairs]) -> Pairs:
    """Every pair of ``batches`` in one set of arrays, sorted by ``(id_a, id_b)``."""
    held = list(batches)
    if not held:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint8)
    a, b, d = (np.concatenate(x) for x in zip(*held))
    order = np.lexsort((b, a))
    return a[order], b[order], d[order]


#: Edges buffered before the components are contracted, at least (see :func:`components`).
CONTRACT_EDGES = 1 << 20


def components(batches: Iterable[Pairs]) -> list[np.ndarray]:
    """Connected components (size >= 2) of the graph whose edges come in ``batches`` of
    ``(a, b, ...)`` id arrays: each component's ids ascending, largest first, ties by smallest id
    (as :func:`fpstore.index.search.components`).

    A union-find over the ids met so far, kept as two arrays (the ids, sorted, and each one's
    label, the smallest id of its component): edges are buffered and, whenever they are as many
    as the ids held (and at least :data:`CONTRACT_EDGES`), folded in by one union-find pass over
    the ids and the buffered edges. Memory: 16 bytes per id that has a pair, plus the buffer; never
    the whole list of pairs."""
    nodes = np.zeros(0, np.int64)
    labels = np.zeros(0, np.int64)
    buf_a: list[np.ndarray] = []
    buf_b: list[np.ndarray] = []
    buffered = 0

    def contract() -> None:
        nonlocal nodes, labels, buf_a, buf_b, buffered
        a = np.concatenate(buf_a).astype(np.int64)
        b = np.concatenate(buf_b).astype(np.int64)
        every = np.unique(np.concatenate([nodes, a, b]))
        # The edges (id, its label) keep the components found so far; the new edges join them.
        ea = np.concatenate([every.searchsorted(nodes), every.searchsorted(a)])
        eb = np.concatenate([every.searchsorted(labels), every.searchsorted(b)])
        lab = _search.components(len(every), ea.astype(np.int64), eb.astype(np.int64))
        nodes, labels = every, every[lab]  # the smallest index is the smallest id: every is sorted
        buf_a, buf_b, buffered = [], [], 0

    for batch in batches:
        a, b = batch[0], batch[1]
        if not len(a):
            continue
        buf_a.append(a)
        buf_b.append(b)
        buffered += len(a)
        if buffered >= max(len(nodes), CONTRACT_EDGES):
            contract()
    if buffered:
        contract()
    if not len(nodes):
        return []
    order = np.lexsort((nodes, labels))
    labels, members = labels[order], nodes[order]
    groups = np.split(members, np.flatnonzero(np.diff(labels)) + 1)
    groups.sort(key=lambda g: (-len(g), int(g[0])))
    return groups


def clusters(storage: Storage, cat: Catalog, batches: Iterable[Pairs]) -> list[Cluster]:
    """:func:`components` of the pairs in ``batches``, as :class:`Cluster` records with their
    members' keys (read in one snapshot): the canonical (smallest id) first, then by id."""
    groups = components(batches)
    with storage.read() as txn:
        keys = iter(cat.keys_of(txn, [int(i) for g in groups for i in g]))
        out = []
        for g in groups:
            members = [next(keys) for _ in range(len(g))]
            out.append(Cluster(members[0], members, g))
        return out
