"""All pairs within k, streamed table by table over sorted tables (Manku's batch mode, section 3.3).

Every table of a design holds every fingerprint under its permuted key, and a store keeps each
table sorted: in its runs (:mod:`fpstore.index.runs`) and in its incremental B-tree. Two
fingerprints within k bits meet in some table: the prefixes of their permuted keys differ in at
most that table's ``flips`` bits (0 in one-level designs). This module finds every such pair by
reading each table's sorted *sources* a *window* at a time, a window being a range of prefixes
read from every source at once, and never holds more of a table than a window:

* a table without flips is cut into windows of about ``window_entries`` entries at prefix
  boundaries, so every group of equal prefixes lies inside one window, and each window is joined
  with itself (the ``self_join`` kernel);
* a table with flips f is cut into the ``2**w`` dyadic windows of its top ``w`` prefix bits. Two
  prefixes within f bits differ in some j <= f of those w bits, so each window is joined with
  itself and then with every window above it whose number differs in 1..f bits (the
  ``prefix_join`` kernel, one window and one partner in memory): the table is read about
  ``1 + sum_{j<=f} C(w, j) / 2`` times.

A pair of distinct keys found in table t is kept only when no earlier table reaches it (the rule
of :func:`fpstore.index.search.pairs_within`), so it comes from exactly one table; pairs of
identical fingerprints come from table 0. Table 0 (the identity) carries document ids: its pairs
are expanded to id pairs on the spot. Other tables give fingerprint pairs, which
:func:`stream_pairs` maps back to ids by looking the fingerprints up in table 0 in batches of
``resolve_entries``. Windows are joined on ``threads`` threads (the kernels release the GIL),
at most ``threads + 1`` at a time, and their results are taken in order.

Sources are read through their own getters (chunk views of a read transaction, arrays): nothing
here touches LMDB, and every decoder of stored bytes checks lengths first
(:mod:`fpstore.index.runs`).
"""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from fpstore import _backend
from fpstore.errors import InputError
from fpstore.index import runs as runs_codec
from fpstore.index.design import Design
from fpstore.index.search import reached_earlier
from fpstore.index.tables import evading_placement
from fpstore.parallel import executor
from fpstore.parallel import threads as thread_count

_search = _backend.load("search")

__all__ = [
    "RESOLVE_ENTRIES",
    "WINDOW_ENTRIES",
    "ArraySource",
    "RunSource",
    "Source",
    "Expansion",
    "Window",
    "dyadic_width",
    "prefix_windows",
    "resolve",
    "stream_pairs",
    "tables_needed",
]

#: Entries (across all sources) a window aims at: its keys, ids and sort order take about
#: 40 bytes each while it is joined, so about 40 MiB per window in flight.
WINDOW_ENTRIES = 1 << 20
#: Fingerprint pairs of tables other than 0 collected before they are mapped to ids in one pass
#: over table 0 (each pass decodes at most the blocks of table 0 that hold one of them).
RESOLVE_ENTRIES = 1 << 21
#: How much further than the size calls for a table with flips may cut its dyadic windows when
#: the fingerprints crowd some of them (each bit more multiplies the partner windows read).
_MAX_EXTRA_WIDTH = 4

IdMap = Callable[[np.ndarray], np.ndarray]
Keep = Callable[[np.ndarray], np.ndarray]
Pairs = tuple[np.ndarray, np.ndarray, np.ndarray]


def _empty_pairs() -> Pairs:
    return np.zeros(0, np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.uint8)


class Source(Protocol):
    """One sorted multiset of a table's permuted keys (a run, or the incremental tier)."""

    count: int

    def samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Sorted keys spread over the source, and how many entries each stands for (int64)."""
        ...

    def read(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The keys in ``[lo, hi]``, sorted, and (table 0 only) their live document ids; dead
        documents are left out. None when the source carries no ids."""
        ...

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For sorted unique ``keys`` (table 0 only): (key index, id) of every live entry holding one."""
        ...


class RunSource:
    """One table of a run: its index, a getter of its chunks (views valid while the caller's
    transaction lasts) and, for table 0, the run's position -> id map and the live filter."""

    def __init__(
        self, index: runs_codec.RunIndex, get_chunk: Callable[[int], object], ids: IdMap | None = None, keep: Keep | None = None
    ) -> None:
        self.index, self._get, self._ids, self._keep = index, get_chunk, ids, keep
        self.count = index.count

    def samples(self) -> tuple[np.ndarray, np.ndarray]:
        return self.index.first_keys, self.index.nentries.astype(np.int64)

    def read(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray | None]:
        first, keys = runs_codec.probe_positions(self._get, self.index, lo, hi)
        if self._ids is None:
            return keys, None
        ids = self._ids(np.arange(first, first + len(keys), dtype=np.int64))
        return _live(keys, ids, self._keep)

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._ids is None:
            raise InputError("lookup needs a source of table 0, which carries ids")
        ki, pos, _ = runs_codec.probe_batch_run(self._get, self.index, keys, 64, 0, positions=True)
        ids = self._ids(pos.astype(np.int64))
        return _live(ki.astype(np.int64), ids, self._keep)


class ArraySource:
    """Sorted keys held in memory (the incremental tier, whose B-trees stay small), with their
    ids for table 0."""

    def __init__(self, keys: np.ndarray, ids: np.ndarray | None = None, keep: Keep | None = None) -> None:
        self.keys, self._ids, self._keep = keys, ids, keep
        self.count = len(keys)

    def samples(self) -> tuple[np.ndarray, np.ndarray]:
        step = runs_codec.DEFAULT_BLOCK_ENTRIES
        at = np.arange(0, self.count, step)
        return self.keys[at], np.diff(np.append(at, self.count)).astype(np.int64)

    def read(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray | None]:
        a = int(self.keys.searchsorted(np.uint64(lo), side="left"))
        z = int(self.keys.searchsorted(np.uint64(hi), side="right"))
        if self._ids is None:
            return self.keys[a:z], None
        return _live(self.keys[a:z], self._ids[a:z], self._keep)

    def lookup(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._ids is None:
            raise InputError("lookup needs a source of table 0, which carries ids")
        lo = self.keys.searchsorted(keys, side="left")
        counts = self.keys.searchsorted(keys, side="right") - lo
        ki = np.repeat(np.arange(len(keys), dtype=np.int64), counts)
        at = np.repeat(lo, counts) + (np.arange(len(ki)) - np.repeat(np.cumsum(counts) - counts, counts))
        return _live(ki, self._ids[at], self._keep)


def _live(values: np.ndarray, ids: np.ndarray, keep: Keep | None) -> tuple[np.ndarray, np.ndarray]:
    """``values`` and ``ids`` where ``keep(ids)`` (every one without a filter)."""
    if keep is None or not len(ids):
        return values, ids
    mask = keep(ids)
    return values[mask], ids[mask]


# -- planning ---------------------------------------------------------------------------------------


def tables_needed(design: Design, k: int) -> int:
    """How many leading tables of ``design`` cover radius ``k`` (``k <= design.k``): table 0
    alone answers k = 0, and a smaller k often needs fewer tables than the design has."""
    for n in range(1, len(design.tables) + 1):
        if evading_placement(design.tables[:n], k) is None:
            return n
    return len(design.tables)  # pragma: no cover - a Design covers its own k


def _samples(sources: Sequence[Source]) -> tuple[np.ndarray, np.ndarray]:
    parts = [s.samples() for s in sources if s.count]
    if not parts:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    keys = np.concatenate([p[0] for p in parts])
    weights = np.concatenate([p[1] for p in parts])
    order = np.argsort(keys, kind="stable")
    return keys[order], weights[order]


def _prefix_of(keys: np.ndarray, bits: int) -> np.ndarray:
    return keys >> np.uint64(64 - bits) if bits else np.zeros(len(keys), np.uint64)


def prefix_windows(sources: Sequence[Source], prefix_bits: int, target: int) -> list[tuple[int, int]]:
    """Ranges ``[lo, hi)`` of ``prefix_bits``-bit prefixes, in order, covering every prefix, each
    holding about ``target`` entries by the sources' samples (one block of a run is the grain)."""
    end = 1 << prefix_bits
    keys, weights = _samples(sources)
    total = int(weights.sum())
    nwin = -(-total // max(1, target))
    if nwin <= 1 or prefix_bits == 0:
        return [(0, end)]
    cum = np.cumsum(weights)
    cut_at = cum.searchsorted(np.arange(1, nwin, dtype=np.float64) * (total / nwin), side="left")
    pre = _prefix_of(keys, prefix_bits)
    # A window ends where the sample after the cut starts its prefix group: equal prefixes stay together.
    cuts = sorted({int(pre[i]) for i in np.minimum(cut_at + 1, len(keys) - 1).tolist()} - {0})
    bounds = [0, *cuts, end]
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1) if bounds[i] < bounds[i + 1]]


def dyadic_width(sources: Sequence[Source], prefix_bits: int, target: int) -> int:
    """Top prefix bits ``w`` whose ``2**w`` windows hold about ``target`` entries each: what the
    total calls for, and up to :data:`_MAX_EXTRA_WIDTH` more while one window holds more than
    twice that (fingerprints crowding one region), as far as the samples (one per block of a
    run, whose entries spread to the block's end) can tell: windows of at least 16 blocks."""
    keys, weights = _samples(sources)
    total = int(weights.sum())
    if total <= target or prefix_bits == 0:
        return 0
    w = min(prefix_bits, math.ceil(math.log2(total / max(1, target))))
    limit = min(prefix_bits, w + _MAX_EXTRA_WIDTH, 24)
    if target < 16 * int(weights.max()):
        return w  # windows of a few samples each: the samples cannot tell a crowded one
    while w < limit and _largest_block(keys, weights, w) > 2 * target:
        w += 1
    return w


def _largest_block(keys: np.ndarray, weights: np.ndarray, w: int) -> int:
    """The most entries of any dyadic window of the top ``w`` bits, by the (sorted) samples."""
    pre = _prefix_of(keys, w)
    ends = np.append(np.flatnonzero(pre[1:] != pre[:-1]) + 1, len(pre))
    cum = np.cumsum(weights)[ends - 1]
    return int(np.diff(cum, prepend=0).max())


@dataclass(frozen=True)
class _Task:
    """One window of table ``table`` (prefix range ``[lo, hi)``), the masks it joins itself with,
    and its partner windows above it with the masks that reach each."""

    table: int
    lo: int
    hi: int
    masks: np.ndarray
    partners: tuple[tuple[int, int, np.ndarray], ...]


def _tasks(design: Design, t: int, sources: Sequence[Source], target: int) -> Iterator[_Task]:
    table = design.tables[t]
    p = table.prefix_bits
    if table.flips == 0:
        for lo, hi in prefix_windows(sources, p, target):
            yield _Task(t, lo, hi, np.zeros(1, np.uint64), ())
        return
    w = dyadic_width(sources, p, target)
    low = p - w
    masks = np.array(design.flip_masks(t), dtype=np.uint64)
    top = masks >> np.uint64(low) if low < 64 else np.zeros(len(masks), np.uint64)
    inner = masks[top == 0]
    by_top = {int(h): masks[top == h] for h in np.unique(top[top != 0]).tolist()}
    for v in range(1 << w):
        partners = tuple(((v ^ h) << low, ((v ^ h) + 1) << low, m) for h, m in by_top.items() if v ^ h > v)
        yield _Task(t, v << low, (v + 1) << low, inner, partners)


# -- joining ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """A window's distinct keys, sorted, and for table 0 the live ids of each key's entries:
    key ``i``'s are ``ids[starts[i] : starts[i] + sizes[i]]``."""

    keys: np.ndarray
    starts: np.ndarray | None = None
    sizes: np.ndarray | None = None
    ids: np.ndarray | None = None


def _load(sources: Sequence[Source], prefix_bits: int, lo: int, hi: int) -> Window:
    """Read prefix range ``[lo, hi)`` from every source and merge it."""
    shift = 64 - prefix_bits
    key_lo, key_hi = lo << shift, (hi << shift) - 1
    parts = [s.read(key_lo, key_hi) for s in sources if s.count]
    parts = [p for p in parts if len(p[0])]
    if not parts:
        return Window(np.zeros(0, np.uint64))
    keys = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
    carried = [p[1] for p in parts if p[1] is not None]
    single = len(parts) == 1
    del parts  # the sources' copies go once merged
    if not carried:
        if not single:
            keys.sort(kind="stable")  # in place: a merge of sorted runs (timsort finds them)
        if len(keys) > 1:
            keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
        return Window(keys)
    ids = np.concatenate(carried) if len(carried) > 1 else carried[0]
    del carried
    if not single:
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        ids = ids[order]
        del order
    first = np.concatenate(([True], keys[1:] != keys[:-1])) if len(keys) else np.zeros(0, bool)
    starts = np.flatnonzero(first)
    sizes = np.diff(np.append(starts, len(keys)))
    return Window(keys[first], starts, sizes, ids)


@dataclass(frozen=True)
class Expansion:
    """The id pairs of key pairs ``(ia[r], ib[r])`` at distance ``d[r]``: each id of key ``ia[r]``
    of window ``a`` with each id of key ``ib[r]`` of window ``b``; with ``upper`` (``a`` is ``b``
    and ``ia`` is ``ib``: keys held by several documents), each pair of ids of one key once.
    :meth:`chunks` produces them :data:`EXPAND_ROWS` at a time: a key held by many documents
    pairs each with each, and those pairs need not be in memory at once."""

    ia: np.ndarray
    ib: np.ndarray
    d: np.ndarray
    a: Window
    b: Window
    upper: bool = False

    def rows(self) -> np.ndarray:
        assert self.a.sizes is not None and self.b.sizes is not None
        return self.a.sizes[self.ia].astype(np.int64) * self.b.sizes[self.ib]

    def chunks(self, limit: int | None = None) -> Iterator[Pairs]:
        """The id pairs as (smaller id, larger id, distance), about ``limit`` (default
        :data:`EXPAND_ROWS`) candidate rows at a time."""
        if not len(self.ia):
            return
        rows = self.rows()
        cum = np.cumsum(rows)
        step = EXPAND_ROWS if limit is None else limit
        for lo in range(0, int(cum[-1]), step):
            found = self._range(rows, cum, lo, min(int(cum[-1]), lo + step))
            if len(found[0]):
                yield found

    def _range(self, rows: np.ndarray, cum: np.ndarray, lo: int, hi: int) -> Pairs:
        """Candidate rows ``lo .. hi - 1`` of the expansion (row r of key pair p: id r // size of
        b's key, with id r % that size)."""
        a, b = self.a, self.b
        assert a.starts is not None and a.ids is not None and b.starts is not None and b.sizes is not None and b.ids is not None
        p0 = int(cum.searchsorted(lo, side="right"))
        p1 = int(cum.searchsorted(hi - 1, side="right")) + 1
        first = cum[p0:p1] - rows[p0:p1]
        counts = np.minimum(cum[p0:p1], hi) - np.maximum(first, lo)
        pair = np.repeat(np.arange(p0, p1), counts)
        r = np.arange(lo, hi) - first[pair - p0]
        sb = b.sizes[self.ib[pair]]
        x, y = r // sb, r % sb
        if self.upper:
            keep = x < y
            pair, x, y = pair[keep], x[keep], y[keep]
        ids_a = a.ids[a.starts[self.ia[pair]] + x]
        ids_b = b.ids[b.starts[self.ib[pair]] + y]
        return np.minimum(ids_a, ids_b), np.maximum(ids_a, ids_b), self.d[pair]


#: Candidate id pairs expanded at a time, and the most a worker thread expands itself (more are
#: expanded as they are taken).
EXPAND_ROWS = 1 << 20


def _join(design: Design, t: int, a: Window, b: Window | None, masks: np.ndarray, k: int) -> list[Pairs | Expansion]:
    """Pairs of window ``a`` with itself (``b`` None) or with partner ``b`` under ``masks``: id
    pairs when the windows carry ids (table 0), else fingerprint pairs."""
    p = design.tables[t].prefix_bits
    other = a if b is None else b
    if not len(a.keys) or not len(other.keys):
        return []
    if b is None and len(masks) == 1 and int(masks[0]) == 0:
        i, j, d = _search.self_join(a.keys, p, k)
    else:
        i, j, d = _search.prefix_join(a.keys, other.keys, p, np.ascontiguousarray(masks), k, b is None)
    fa, fb = design.unpermute(a.keys[i], t), design.unpermute(other.keys[j], t)
    if t and len(i):  # a pair of distinct keys comes from the first table that reaches it
        keep = ~reached_earlier(design, t, fa, fb)
        i, j, d, fa, fb = i[keep], j[keep], d[keep], fa[keep], fb[keep]
    if a.ids is None:
        return [(fa, fb, d)] if len(d) else []
    found = [Expansion(i, j, d, a, other)]
    if b is None:  # keys held by several documents: their pairs at distance 0
        assert a.sizes is not None
        big = np.flatnonzero(a.sizes > 1)
        found.insert(0, Expansion(big, big, np.zeros(len(big), np.uint8), a, a, upper=True))
    # Small expansions are done here, on the worker; large ones as the batches are taken.
    return [e if int(e.rows().sum()) > EXPAND_ROWS else _concat(list(e.chunks())) for e in found]


def _concat(parts: Sequence[Pairs]) -> Pairs:
    parts = [p for p in parts if len(p[0])]
    if not parts:
        return _empty_pairs()
    if len(parts) == 1:
        return parts[0]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts])


def _run_task(design: Design, sources: Sequence[Source], task: _Task, k: int) -> list[Pairs | Expansion]:
    p = design.tables[task.table].prefix_bits
    a = _load(sources, p, task.lo, task.hi)
    found = _join(design, task.table, a, None, task.masks, k)
    if len(a.keys):
        for lo, hi, masks in task.partners:
            found += _join(design, task.table, a, _load(sources, p, lo, hi), masks, k)
    return found


def resolve(sources0: Sequence[Source], fa: np.ndarray, fb: np.ndarray, d: np.ndarray) -> Expansion:
    """Fingerprint pairs as id pairs: each fingerprint looked up in table 0 (``sources0``), every
    live id of one paired with every live id of the other."""
    fps = np.unique(np.concatenate([fa, fb]))
    parts = [s.lookup(fps) for s in sources0 if s.count]
    ki = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    ids = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.uint64)
    order = np.argsort(ki, kind="stable")
    ki, ids = ki[order], ids[order]
    starts = ki.searchsorted(np.arange(len(fps)), side="left")
    sizes = ki.searchsorted(np.arange(len(fps)), side="right") - starts
    members = Window(fps, starts, sizes, ids)
    return Expansion(fps.searchsorted(fa), fps.searchsorted(fb), d, members, members)


def stream_pairs(
    design: Design,
    k: int,
    tables: Sequence[Sequence[Source]],
    *,
    window_entries: int = WINDOW_ENTRIES,
    resolve_entries: int = RESOLVE_ENTRIES,
    threads: int | None = None,
    progress: Callable[[int, int | None], None] | None = None,
) -> Iterator[Pairs]:
    """Every pair of live documents within ``k`` (``k <= design.k``) of the sorted tables
    ``tables[t]`` (the sources of table t; table 0's carry ids), each once, as chunks of
    (smaller id, larger id, distance) uint64, uint64, uint8 arrays. Chunks come table by table,
    window by window; table 0's pairs as found, the others' once ``resolve_entries`` of them are
    mapped to ids (and at the end). ``progress(tables done, tables)`` after each table."""
    used = tables_needed(design, k)
    nthreads = thread_count(threads)
    tasks = ((t, task) for t in range(used) for task in _tasks(design, t, tables[t], window_entries))
    pending: list[Pairs] = []
    npending = 0
    for t, found in _in_order(tasks, lambda tt: _run_task(design, tables[tt[0]], tt[1], k), nthreads, progress, used):
        for part in found:
            if isinstance(part, Expansion):
                yield from part.chunks()
            elif t == 0:  # id pairs, expanded on the worker
                yield part
            else:
                pending.append(part)
                npending += len(part[0])
        if npending >= resolve_entries:
            yield from resolve(tables[0], *_concat(pending)).chunks()
            pending, npending = [], 0
    if pending:
        yield from resolve(tables[0], *_concat(pending)).chunks()


def _in_order(
    tasks: Iterator[tuple[int, _Task]],
    work: Callable[[tuple[int, _Task]], list[Pairs | Expansion]],
    nthreads: int,
    progress: Callable[[int, int | None], None] | None,
    ntables: int,
) -> Iterator[tuple[int, list[Pairs | Expansion]]]:
    """``(table, work(task))`` for every task, in order, computed on ``nthreads`` threads with
    at most ``nthreads + 1`` in flight; ``progress`` after each table's last task."""
    reported = 0  # tables known to be complete

    def report(upto: int) -> None:
        """Every table before ``upto`` is complete."""
        nonlocal reported
        while reported < upto:
            reported += 1
            if progress is not None:
                progress(reported, ntables)

    if nthreads <= 1:
        for item in tasks:
            report(item[0])
            yield item[0], work(item)
        report(ntables)
        return
    pool = executor(nthreads)
    queue: deque[tuple[int, Future[list[Pairs | Expansion]]]] = deque()
    started_in = os.getpid()
    try:
        for item in tasks:
            queue.append((item[0], pool.submit(work, item)))
            if len(queue) > nthreads:
                t, fut = queue.popleft()
                report(t)
                yield t, fut.result()
        while queue:
            t, fut = queue.popleft()
            report(t)
            yield t, fut.result()
        report(ntables)
    finally:
        for _, fut in queue:
            fut.cancel()
        # A forked child finishing a stream its parent began (a generator collected there) has
        # none of the workers: waiting for their futures would wait for ever.
        if os.getpid() == started_in:
            for _, fut in queue:
                if not fut.cancelled():
                    fut.exception()  # wait: a worker must not outlive the views it reads
