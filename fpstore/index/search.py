"""Searches over the immutable tier: probes, Manku's batch mode, and the all-pairs self-join.

The incremental tier (LMDB tables) is probed by the store itself; this module works on runs
(:class:`fpstore.index.tiers.Run`) and plain arrays. Every candidate is verified with a popcount, and
permutations preserve Hamming distance, so a distance computed on permuted keys is the real one.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from fpstore import _backend
from fpstore.errors import CorruptionError
from fpstore.index import runs as runs_codec
from fpstore.index.costs import join_cost
from fpstore.index.design import Design, flip_free_designs
from fpstore.index.tiers import ReadPlan, Run, memoized, run_ids, run_ids_at
from fpstore.parallel import executor
from fpstore.parallel import threads as thread_count

_search = _backend.load("search")

__all__ = [
    "argsort_u64",
    "batch_probe_runs",
    "threaded_merge_from",
    "compare_all",
    "compare_pairs",
    "components",
    "fill_restarts",
    "join_design",
    "order_rows",
    "pairs_within",
    "probe_plan",
    "probe_plan_each",
    "probe_plan_rows",
    "probe_runs",
    "reached_earlier",
    "sort_u64",
    "unique_rows",
]

_M64 = 0xFFFFFFFFFFFFFFFF


def probe_design(design: Design) -> object:
    """The kernel's form of ``design`` for :func:`probe_runs` (build once per store)."""
    return runs_codec.probe_design(
        [design.moves(t) for t in range(len(design.tables))],
        [t.prefix_bits for t in design.tables],
        [design.flip_masks(t) for t in range(len(design.tables))],
    )


def probe_runs(runs: Iterable[Run], design: object, fp: int, k: int) -> list[tuple[int, int, int]]:
    """(id, distance, fingerprint) of every run entry within ``k`` of ``fp``, each entry once
    (the caller drops tombstoned ids). ``design`` is the store's :func:`probe_design`.

    One kernel call: every table of every run is probed (a flipped prefix is verified against
    the real query), keys found outside table 0 are unpermuted and looked up in table 0, whose
    positions name the entries.
    """
    runs = [r for r in runs if r.count]
    if not runs:
        return []
    return _probe_one(runs, [pt for run in runs for pt in run.probe_tables()], runs[0].chunk_reader(), design, fp, k)


def fill_restarts(plan: ReadPlan, txn: Any, db: Any, memo: dict[bytes, Any] | None = None) -> None:
    """Decode every block of every run table of ``plan`` once (``Store.warm``), so that single
    probes restart inside blocks (:func:`fpstore.index.runs.fill_restarts`). Every chunk read is
    kept in ``memo`` (a snapshot's chunk views, :func:`probe_plan`'s), so that the snapshot's
    queries find it there instead of adding it: a memo filled during timed queries grows a dict
    and allocates fresh pages, each first touch a page fault (the tail of single queries)."""
    read = plan.cache.fetcher(txn, db)
    fetch = read if memo is None else memoized(read, memo)
    for i, table in enumerate(plan.tables):
        runs_codec.fill_restarts(table, fetch, i)


def probe_plan(
    plan: ReadPlan, txn: Any, db: Any, design: object, fp: int, k: int, memo: dict[bytes, Any] | None = None
) -> list[tuple[int, int, int]]:
    """:func:`probe_runs` over the runs of a :class:`~fpstore.index.tiers.ReadPlan`, their
    chunks read from ``db`` in ``txn``: the single query's path, with no object made per run.
    ``memo`` keeps the chunks read for later calls (a reader's burst, a snapshot's queries)."""
    if not plan.tables:
        return []
    hits = runs_codec.probe_fingerprint(design, plan.tables, plan.cache.fetcher(txn, db), fp, k, memo)
    if not hits:
        return []
    metas = plan.runs
    if len(metas) == 1:
        if len(hits) == 1:  # a single query's usual answer
            ((_, f, pos),) = hits
            meta = metas[0]
            base = meta.ids_base
            # A bulk load's run numbers its entries from a base: run_ids's checks, inline.
            doc_id = base + pos if base is not None and 0 <= pos < meta.count else run_ids(txn, db, meta, [pos], memo)[0]
            if not 0 < doc_id < 1 << 63:
                raise CorruptionError(f"run {meta.id} names a document id outside any this store assigns")
            return [(doc_id, (f ^ fp).bit_count(), f)]
        ids = run_ids(txn, db, metas[0], [pos for _, _, pos in hits], memo)
        return [(doc_id, (f ^ fp).bit_count(), f) for doc_id, (_, f, _) in zip(ids, hits)]
    by_run: dict[int, list[tuple[int, int]]] = {}
    for r, f, pos in hits:
        by_run.setdefault(r, []).append((pos, f))
    out: list[tuple[int, int, int]] = []
    for r, entries in by_run.items():
        ids = run_ids(txn, db, metas[r], [pos for pos, _ in entries], memo)
        out += [(doc_id, (f ^ fp).bit_count(), f) for doc_id, (_, f) in zip(ids, entries)]
    return out


def _probe_one(
    runs: list[Run], tables: list[Any], fetch: Callable[[bytes], Any], design: object, fp: int, k: int
) -> list[tuple[int, int, int]]:
    """:func:`probe_runs` with the runs' probe tables and a chunk getter given."""
    by_run: dict[int, list[tuple[int, int]]] = {}
    for r, f, pos in runs_codec.probe_fingerprint(design, tables, fetch, fp, k):
        by_run.setdefault(r, []).append((pos, f))
    out: list[tuple[int, int, int]] = []
    for r, entries in by_run.items():
        ids = runs[r].id_list([pos for pos, _ in entries])
        out += [(doc_id, (f ^ fp).bit_count(), f) for doc_id, (_, f) in zip(ids, entries)]
    return out


def probe_runs_each(runs: Iterable[Run], design: object, fps: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`batch_probe_runs`'s answer from one :func:`probe_runs` per query, each chunk read
    once for the batch: a small batch reads a few blocks per query where the merge reaches every
    chunk of every table."""
    runs = [r for r in runs if r.count]
    rows: list[tuple[int, int, int, int]] = []
    if runs:
        tables = [pt for run in runs for pt in run.probe_tables()]
        fetch = runs[0].chunk_reader()  # every run's chunks live in one table of one transaction
        for q, fp in enumerate(fps.tolist()):
            rows += [(q, doc_id, d, f) for doc_id, d, f in _probe_one(runs, tables, fetch, design, fp, k)]
    if not rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0, np.uint64)
    q_, id_, d_, f_ = zip(*rows)
    return np.array(q_, np.int64), np.array(id_, np.int64), np.array(d_, np.uint8), np.array(f_, np.uint64)


def probe_plan_each(
    plan: ReadPlan, txn: Any, db: Any, design: object, fps: np.ndarray, k: int, memo: dict[bytes, Any] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`probe_runs_each` over the runs of a :class:`~fpstore.index.tiers.ReadPlan`: one
    kernel call probing each query in turn (every chunk read once for the batch), then each
    run's ids read once for all its hits. Rows (query index int64, id int64, distance uint8,
    fingerprint uint64) in no particular order. ``memo`` keeps the chunks read for later calls
    (see :func:`probe_plan`)."""
    if not plan.tables or not len(fps):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0, np.uint64)
    fps = np.ascontiguousarray(fps, dtype=np.uint64)
    qi, ri, found, pos = runs_codec.probe_fingerprints(design, plan.tables, plan.cache.fetcher(txn, db), fps, k, memo)
    if len(plan.runs) == 1:
        ids = run_ids_at(txn, db, plan.runs[0], pos).astype(np.int64)
    else:
        ids = np.empty(len(qi), np.int64)
        for r, meta in enumerate(plan.runs):
            sel = ri == r
            if sel.any():
                ids[sel] = run_ids_at(txn, db, meta, pos[sel]).astype(np.int64)
    dist = np.bitwise_count(found ^ fps[qi]).astype(np.uint8)
    return qi, ids, dist, found


def probe_plan_rows(
    plan: ReadPlan, txn: Any, db: Any, design: object, queries: list[int], k: int, memo: dict[bytes, Any] | None = None
) -> tuple[list[int], list[int], list[int], list[int]]:
    """:func:`probe_plan_each` in plain lists (query index, id, distance, fingerprint)."""
    if not plan.tables or not queries:
        return [], [], [], []
    q_, id_, d_, f_ = probe_plan_each(plan, txn, db, design, np.array(queries, dtype=np.uint64), k, memo)
    return q_.tolist(), id_.tolist(), d_.tolist(), f_.tolist()


def flip_variants(design: Design, t: int, perm: np.ndarray) -> tuple[np.ndarray, int]:
    """Probe keys for table ``t``: each query's key XOR every flip mask of the table's prefix.

    Returns (variant keys, variants per query): variant ``i`` comes from query ``i // per``
    (arithmetic where an index array per variant cost a gather of millions after the sort).
    """
    masks = [0]
    table = design.tables[t]
    if table.flips:
        # probe_prefixes(0) gives the flipped prefixes of a zero key: exactly the masks.
        masks = [lo for lo, _ in design.probe_prefixes(0, t)]
    if masks == [0]:
        return perm, 1
    m = np.array(masks, dtype=np.uint64)
    return (perm[:, None] ^ m[None, :]).ravel(), len(masks)


#: The merge shares each table's chunks among threads from THREADED_MERGE_QUERIES queries when the
#: runs' table 0 has at least THREADED_MERGE_CHUNKS chunks (about 7 * 10^5 fingerprints), else
#: from THREADED_MERGE_QUERIES_SMALL. Threads pay where the kernel's decoding dominates: at 10^6
#: and 10^7 a merge of 8,192 queries on two threads took 8-10 and 28-34 ms against 15 and 52 on
#: one (tools/bench_probe_crossover.py, when each table went to one thread), while at 10^5 (3
#: chunks) the workers' numpy steps, which take turns on the interpreter lock, cost more than the
#: decoding they share (2.8 ms against 1.8 at 2,048 queries).
THREADED_MERGE_QUERIES, THREADED_MERGE_CHUNKS, THREADED_MERGE_QUERIES_SMALL = 2_048, 16, 20_000


def threaded_merge_from(chunks0: int) -> int:
    """The batch size from which :func:`batch_probe_runs` shares each table's chunks among
    threads, for runs whose table 0 has ``chunks0`` chunks in all."""
    return THREADED_MERGE_QUERIES if chunks0 >= THREADED_MERGE_CHUNKS else THREADED_MERGE_QUERIES_SMALL


def batch_probe_runs(
    runs: Iterable[Run], design: Design, queries: np.ndarray, k: int, threads: int | None = None, memo: dict[bytes, Any] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Batch mode: every (query index, id, distance, fingerprint) with the entry within ``k``.

    Per table, the permuted queries (and their flip variants) are sorted once and merged with each
    run's sorted table in the compiled kernel; each (query, document) pair is reported once, from
    the first table that reaches it. Table 0 holds the run's fingerprints in the order of its ids,
    so it is merged last: the fingerprints that only later tables reached are looked up in the
    same pass, and every block of table 0 is decoded once. Large batches split each table's
    chunks among ``threads`` threads (None: all cores): the kernel and numpy release the GIL.
    Chunks are read on the calling thread (an LMDB transaction belongs to one thread), from
    ``memo`` (a read snapshot's chunk views) where it holds them; the workers only compute on
    the mapped memory.
    """
    runs = [r for r in runs if r.count]
    empty = np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0, np.uint64)
    if not runs or not len(queries):
        return empty
    ntab = len(design.tables)
    nthreads = thread_count(threads)
    chunks0 = sum(run.table(0).index.nchunks for run in runs)
    threaded = nthreads > 1 and len(queries) >= threaded_merge_from(chunks0)
    # (index, chunk getter) per run and table. Worker threads cannot read the transaction: for
    # them every chunk is fetched here first; this thread reads only the chunks the merge reaches
    # (a batch of a few hundred queries reaches a fraction of a large run's chunks).
    fetched = [
        [(tab.index, tab.views(memo).__getitem__ if threaded else tab.get) for tab in (run.table(t) for t in range(ntab))] for run in runs
    ]
    run_map: Callable[..., Iterable[Any]] = executor(nthreads).map if threaded else map
    parts = nthreads if threaded else 1
    sorted_keys = list(run_map(functools.partial(_sorted_probe_keys, design, queries), range(ntab)))

    def merge(r: int, t: int, span: tuple[int, int], lookups: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        perm, variants, origin = sorted_keys[t]
        table = design.tables[t]
        index, get_chunk = fetched[r][t]
        # With flips a variant's distance is not the query's: the kernel keeps candidates within
        # k + flips of the variant (the query is at most `flips` bits from it, so nothing within k
        # of the query is lost), and numpy checks the real distance.
        qpos, stored, pos, _, li, lpos = runs_codec.probe_run_chunks(
            get_chunk, index, variants, table.prefix_bits, min(64, k + table.flips), lookups, span
        )
        qi = origin[qpos]
        if table.flips:
            keep = np.bitwise_count(stored ^ perm[qi]) <= k
            qi, stored, pos = qi[keep], stored[keep], pos[keep]
        found = design.unpermute(stored, t)
        if t and len(qi):
            # Report a (query, fingerprint) pair from the first table that reaches it only,
            # so no global deduplication is needed (the rule of the all-pairs join).
            fresh = ~reached_earlier(design, t, queries[qi], found)
            qi, found = qi[fresh], found[fresh]
        return qi, found, pos, li, lpos

    def spans(r: int, t: int) -> list[tuple[int, int]]:
        bounds = np.linspace(0, fetched[r][t][0].nchunks, parts + 1).astype(int).tolist()
        return [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]

    later = [(r, t, span) for r in range(len(runs)) for t in range(1, ntab) for span in spans(r, t)]
    later_rows = list(run_map(lambda item: merge(*item), later))
    # Per run, the rows only later tables reached, and their distinct fingerprints (sorted, with
    # each row's index among them): table 0's merge looks those up.
    fresh = []
    for r in range(len(runs)):
        mine = [rows for (rr, _, _), rows in zip(later, later_rows) if rr == r]
        fq = np.concatenate([m[0] for m in mine]) if mine else np.zeros(0, np.int64)
        ffp = np.concatenate([m[1] for m in mine]) if mine else np.zeros(0, np.uint64)
        fresh.append((fq, ffp, *np.unique(ffp, return_inverse=True)))
    lookups = [f[2] for f in fresh]
    first = [(r, 0, span) for r in range(len(runs)) for span in spans(r, 0)]
    first_rows = list(run_map(lambda item: merge(item[0], item[1], item[2], lookups[item[0]]), first))

    out: list[tuple[np.ndarray, ...]] = []
    for r, run in enumerate(runs):
        mine = [rows for (rr, _, _), rows in zip(first, first_rows) if rr == r]
        q0 = np.concatenate([m[0] for m in mine])
        fp0 = np.concatenate([m[1] for m in mine])
        pos0 = np.concatenate([m[2] for m in mine])
        li = np.concatenate([m[3] for m in mine])
        lpos = np.concatenate([m[4] for m in mine])
        ids = run.ids_at(np.concatenate([pos0, lpos])).astype(np.int64)
        out.append((q0, ids[: len(q0)], fp0))
        if len(fresh[r][0]):
            out.append(_expand_lookups(*fresh[r], li, ids[len(q0) :], run.id))
    qi = np.concatenate([o[0] for o in out])
    if not len(qi):
        return empty
    ids = np.concatenate([o[1] for o in out])
    fps = np.concatenate([o[2] for o in out])
    return qi, ids, np.bitwise_count(fps ^ queries[qi]).astype(np.uint8), fps


def _sorted_probe_keys(design: Design, queries: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Table ``t``'s probe keys: (the permuted queries, every variant sorted by prefix, each
    sorted variant's query index)."""
    perm = design.permute(queries, t)
    variants, per = flip_variants(design, t, perm)
    # Grouped by prefix is all the merge needs: a radix sort of the prefix bits only.
    sorted_variants, order = _search.radix_sort(np.ascontiguousarray(variants), True, design.tables[t].prefix_bits)
    return perm, sorted_variants, order // per if per > 1 else order


def _expand_lookups(
    qi: np.ndarray, fps: np.ndarray, lookups: np.ndarray, inverse: np.ndarray, li: np.ndarray, ids: np.ndarray, run_id: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows (query, fingerprint) found by later tables, each given every id that holds its
    fingerprint: ``lookups`` are the rows' distinct fingerprints, sorted, ``inverse`` each row's
    index among them, and ``(li, ids)`` a row per stored copy of each (its index in
    ``lookups``, its id). A fingerprint with no copy in table 0 is damage to run ``run_id``
    (CorruptionError): every table of a run holds the same fingerprints."""
    order = np.argsort(li, kind="stable")
    li, ids = li[order], ids[order]
    every = np.arange(len(lookups))
    starts = np.searchsorted(li, every, side="left")
    copies = np.searchsorted(li, every, side="right") - starts
    if not copies.all():
        raise CorruptionError(f"run {run_id}: a fingerprint the run's other tables hold is missing from its table 0; the run is damaged")
    if len(li) > len(lookups):
        # Some fingerprint is stored more than once in this run, and the merge reported one
        # row per stored copy: keep one row per (query, fingerprint) before expanding to ids.
        first = unique_rows(qi, fps)
        qi, fps, inverse = qi[first], fps[first], inverse[first]
    counts = copies[inverse]
    if np.all(counts == 1):
        return qi, ids[starts[inverse]], fps
    rows = np.repeat(np.arange(len(qi)), counts)
    take = np.repeat(starts[inverse], counts) + np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    return qi[rows], ids[take], fps[rows]


def _vectorised_numpy_sort() -> bool:
    """Whether numpy sorts 64-bit integers with its vectorised sort (x86-simd-sort, AVX2 or
    AVX-512): ~1.2x faster than the kernel's radix sort there, slower elsewhere."""
    try:
        features = importlib.import_module("numpy._core._multiarray_umath").__cpu_features__
    except (ImportError, AttributeError):  # another numpy layout: the kernel's sort
        return False
    return bool(features.get("AVX2") or features.get("AVX512_SKX"))


_NUMPY_SORT = _vectorised_numpy_sort()


def sort_u64(keys: np.ndarray) -> np.ndarray:
    """Sorted copy of a uint64 array: numpy's vectorised sort where the CPU has it, else the
    kernel's radix sort (tools/bench_sort.py measures both; either releases the GIL)."""
    keys = np.ascontiguousarray(keys, dtype=np.uint64)
    return np.sort(keys) if _NUMPY_SORT else _search.radix_sort(keys)


def order_rows(queries: np.ndarray, dist: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """The order (int64 indices) of rows by query index, then distance, then id, as
    ``np.lexsort((ids, dist, queries))`` gives (all three non-negative; distances at most 64).

    One radix argsort of the three packed into the top bits of one key where they fit in 64 bits
    (10^6 queries and ids below 2^30 take 57 bits); two stable passes otherwise, which took 57 ms
    for 800,000 rows against 43 (docs/benchmarks.md, "Batch queries by chunk size")."""
    if not len(queries):
        return np.zeros(0, np.int64)
    qbits, ibits = int(queries.max()).bit_length(), int(ids.max()).bit_length()
    used = qbits + 7 + ibits
    if used <= 64:
        key = (queries.astype(np.uint64) << np.uint64(7 + ibits)) | (dist.astype(np.uint64) << np.uint64(ibits)) | ids.astype(np.uint64)
        return np.asarray(_search.radix_sort(key << np.uint64(64 - used), True, used)[1], dtype=np.int64)
    by_id = argsort_u64(ids.astype(np.uint64))
    key = (queries[by_id].astype(np.uint64) << np.uint64(8)) | dist[by_id].astype(np.uint64)
    return by_id[argsort_u64(key)]


def argsort_u64(keys: np.ndarray) -> np.ndarray:
    """Stable argsort (int64) of a uint64 array (~4x numpy's stable argsort, measured)."""
    return _search.radix_sort(np.ascontiguousarray(keys, dtype=np.uint64), True)[1]


def reached_earlier(design: Design, t: int, queries: np.ndarray, found: np.ndarray) -> np.ndarray:
    """True where a table before ``t`` probes ``found`` for the query: the bits where they differ
    hit that table's prefix in at most its flips (one AND and popcount per table, no permutes)."""
    diff = queries ^ found
    out = np.zeros(len(queries), dtype=bool)
    for earlier, mask in enumerate(design.prefix_masks()[:t]):
        out |= np.bitwise_count(diff & np.uint64(mask)) <= design.tables[earlier].flips
    return out


def unique_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct (a[i], b[i]) pair, in (a, b) order."""
    if not len(a):
        return np.zeros(0, np.int64)
    order = np.lexsort((b, a))
    sa, sb = a[order], b[order]
    first = np.concatenate([[True], (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])])
    return order[first]


def join_design(k: int, n: int) -> Design:
    """A design for the in-memory self-join at radius ``k`` over ``n`` distinct fingerprints.

    The join sorts each table itself, so it may use any design without flips (flipped prefixes
    do not form groups). Its cost is not a probe's (:func:`fpstore.index.costs.join_cost`): per
    table, a permute and radix sort of all n (~30 ns each) plus the comparisons inside prefix
    groups, about n^2 / 2^(p+1) popcounts at ~1 ns.
    Measured at 1e7: r5 8.7 s of CPU against r4's 10.6-11.7 s, which this model picks.
    """
    m = max(n, 1)
    return min(flip_free_designs(k), key=lambda d: join_cost(d, m))


#: One prefix group holding everything: :func:`compare_all` is the kernel's join at 0 prefix bits.
_ONE_GROUP = np.zeros(1, np.uint64)


def compare_all(queries: np.ndarray, fps: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (query index int64, index into ``fps`` int64, distance uint8) within ``k`` bits, by
    query then index: each query compared with every fingerprint (uint64 arrays), for a small
    batch against the few thousand documents a writer keeps in memory. The compiled kernel's join
    at 0 prefix bits (one nogil loop, no temporaries); the pure-Python twin's loop would cost
    seconds there, so that backend broadcasts in numpy instead."""
    if _backend.PURE_PYTHON:
        dist = np.bitwise_count(queries[:, None] ^ fps[None, :])
        qi, j = np.nonzero(dist <= k)
        return qi.astype(np.int64), j.astype(np.int64), dist[qi, j].astype(np.uint8)
    return _search.prefix_join(queries, fps, 0, _ONE_GROUP, k, False)


def compare_pairs(fps: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair (i, j), i < j, of ``fps`` within ``k`` bits, by i then j, comparing every pair
    (a small batch; :func:`pairs_within` joins large ones)."""
    if _backend.PURE_PYTHON:
        dist = np.bitwise_count(fps[:, None] ^ fps[None, :])
        lo, hi = np.nonzero(np.triu(dist <= k, 1))
        return lo.astype(np.int64), hi.astype(np.int64), dist[lo, hi].astype(np.uint8)
    return _search.prefix_join(fps, fps, 0, _ONE_GROUP, k, True)


def pairs_within(
    fps: np.ndarray, k: int, progress: Callable[[int, int | None], None] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All pairs (i, j), i < j, of ``fps`` (uint64, any order, repeats allowed) within ``k`` bits.

    Identical fingerprints are collapsed first (their pairs are all at distance 0); distinct ones
    are joined table by table, and a pair found in table t is kept only when no earlier table's
    prefix also holds it, so each pair is reported exactly once without a global deduplication.
    Returns (i int64, j int64, distance uint8) indexing ``fps``.
    """
    n = len(fps)
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint8))
    if n < 2:
        return empty
    order = argsort_u64(fps)
    sorted_fps = fps[order]
    first = np.concatenate([[True], sorted_fps[1:] != sorted_fps[:-1]])
    uniq = sorted_fps[first]
    group_start = np.flatnonzero(first)
    group_size = np.diff(np.append(group_start, n))

    parts_i: list[np.ndarray] = []
    parts_j: list[np.ndarray] = []
    parts_d: list[np.ndarray] = []

    def members(groups: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Original index of member ``offsets`` of each group in ``groups``."""
        return order[group_start[groups] + offsets]

    def expand(ga: np.ndarray, gb: np.ndarray, dist: np.ndarray) -> None:
        """Every document pair of groups ga[i] x gb[i] (identical prints within a group)."""
        sa, sb = group_size[ga], group_size[gb]
        if np.all(sa == 1) and np.all(sb == 1):
            parts_i.append(members(ga, np.zeros(len(ga), np.int64)))
            parts_j.append(members(gb, np.zeros(len(gb), np.int64)))
            parts_d.append(dist)
            return
        rows = sa * sb
        pair = np.repeat(np.arange(len(ga)), rows)
        r = np.arange(int(rows.sum())) - np.repeat(np.cumsum(rows) - rows, rows)
        parts_i.append(members(ga[pair], r // sb[pair]))
        parts_j.append(members(gb[pair], r % sb[pair]))
        parts_d.append(dist[pair])

    # Pairs inside groups of identical fingerprints: all m * m combinations, keeping x < y.
    big = np.flatnonzero(group_size > 1)
    if len(big):
        m = group_size[big]
        g = np.repeat(big, m * m)
        r = np.arange(int((m * m).sum())) - np.repeat(np.cumsum(m * m) - m * m, m * m)
        x, y = r // group_size[g], r % group_size[g]
        keep = x < y
        parts_i.append(members(g[keep], x[keep]))
        parts_j.append(members(g[keep], y[keep]))
        parts_d.append(np.zeros(int(keep.sum()), np.uint8))

    design = join_design(k, len(uniq))
    nt = len(design.tables)

    def table_pairs(t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        table = design.tables[t]
        if t:
            # The join needs each prefix's keys together, not a full order: a radix sort of the
            # prefix bits only (three passes instead of six for a 25-bit prefix).
            perm = design.permute(uniq, t)
            grouped, porder = _search.radix_sort(np.ascontiguousarray(perm), True, table.prefix_bits)
        else:
            grouped, porder = uniq, np.arange(len(uniq))  # the identity; uniq is sorted
        a, b, d = _search.self_join(grouped, table.prefix_bits, k)
        ua, ub = porder[a], porder[b]
        if t and len(ua):
            # Keep a pair only in the first table whose prefix it shares.
            keep = ~reached_earlier(design, t, uniq[ua], uniq[ub])
            ua, ub, d = ua[keep], ub[keep], d[keep]
        return ua, ub, d

    # Tables are independent and their sorts and joins release the GIL: all cores, for large n
    # (each table in flight holds about five arrays of n words).
    nthreads = thread_count(None)
    if nthreads > 1 and nt > 1 and len(uniq) >= 200_000:
        results: Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]] = executor(nthreads).map(table_pairs, range(nt))
    else:
        results = (table_pairs(t) for t in range(nt))
    for t, (ua, ub, d) in enumerate(results):
        if progress is not None:
            progress(t + 1, nt)
        if len(ua):
            expand(ua, ub, d)
    if not parts_i:
        return empty
    i = np.concatenate(parts_i)
    j = np.concatenate(parts_j)
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    return lo.astype(np.int64), hi.astype(np.int64), np.concatenate(parts_d)


def components(a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
    """The connected components of the graph with edges ``(a[i], b[i])`` (int64 node ids): each
    component's nodes ascending, components largest first, ties by smallest node."""
    if not len(a):
        return []
    nodes, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)
    labels = _search.components(len(nodes), inverse[: len(a)].astype(np.int64), inverse[len(a) :].astype(np.int64))
    order = np.lexsort((nodes, labels))
    labels, members = labels[order], nodes[order]
    groups = np.split(members, np.flatnonzero(np.diff(labels)) + 1)
    groups.sort(key=lambda g: (-len(g), int(g[0])))
    return groups
