"""Adds in arrival order with their verdicts computed together: the group commit's and
:meth:`Store.add_each`'s write path.

Applying adds one after another, each probing the store on its own, costs a probe per add in
Python. Here a run of adds with distinct keys (a *segment*) is answered in a handful of batch
calls made before any of it is written: one key lookup, one batch probe of both tiers, one join
of the segment with itself. A short loop in arrival order then puts the answers together exactly
as successive :func:`fpstore.store.writes.add_one` calls would find them: an add sees the
documents stored before the segment (less those an earlier add of the segment replaced) and the
segment's earlier documents, exact and near, and never one that ``on_duplicate="skip"`` skipped.
The segment's documents are written at its end, in sorted batches; the next segment starts where
a key repeats (its add must see the earlier copy's replacement), so it sees them in the transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

import lmdb
import numpy as np

from fpstore.index import search
from fpstore.store.catalog import Catalog, live_canonical, new_canonical
from fpstore.store.header import H_COUNT, H_NEXT_ID, U64
from fpstore.store.inputs import OneAdd
from fpstore.store.keys import FLAG_SHORT, Key, lookup_key, pack_record, untyped_key
from fpstore.store.results import AddResult, Match, sort_matches
from fpstore.store.sketches import verdict_similarities, verify_near

__all__ = ["MAX_SEGMENT", "add_segment", "segments"]

#: Adds answered together at most: bounds the memory of one batch probe and self-join.
MAX_SEGMENT = 4096

#: Below this many fingerprints the segment's self-join compares every pair directly.
_DIRECT_JOIN = 96

Record = tuple[bytes, int, bytes | None, int, int]


def segments(adds: Sequence[OneAdd], limit: int = MAX_SEGMENT) -> list[tuple[int, int]]:
    """``(start, end)`` of consecutive runs of at most ``limit`` adds with no key twice."""
    out: list[tuple[int, int]] = []
    start, seen = 0, set[bytes]()
    for i, a in enumerate(adds):
        if a.typed in seen or i - start >= limit:
            out.append((start, i))
            start, seen = i, set[bytes]()
        seen.add(a.typed)
    if start < len(adds):
        out.append((start, len(adds)))
    return out


def _self_pairs(fps: np.ndarray, k: int) -> tuple[list[int], list[int], list[int]]:
    """Pairs (i, j), i < j, of ``fps`` within ``k`` bits."""
    n = len(fps)
    if n < 2:
        return [], [], []
    lo, hi, d = search.compare_pairs(fps, k) if n <= _DIRECT_JOIN else search.pairs_within(fps, k)
    return lo.tolist(), hi.tolist(), d.tolist()


def _stored_neighbours(
    cat: Catalog, txn: lmdb.Transaction, fps: np.ndarray, indexed: np.ndarray, k: int
) -> tuple[list[int], list[int], list[int], list[int]]:
    """The stored neighbours of ``fps[indexed]``: ``bounds`` (add i's are rows bounds[i] to
    bounds[i + 1]) and the rows' ids, distances and fingerprints, in any order per add."""
    m = len(fps)
    if cat.small_batch(txn, len(indexed)):
        # A probe per fingerprint, in plain ints: a group's few adds pay none of the batch's
        # numpy calls (each costs more than the probe of one fingerprint).
        bounds, ids_l, d_l, f_l = [0] * (m + 1), [], [], []
        per_add = dict(zip(indexed.tolist(), cat.probe_each(txn, fps[indexed].tolist(), k)))
        for i in range(m):
            for doc_id, (d, f) in per_add.get(i, {}).items():
                ids_l.append(doc_id)
                d_l.append(d)
                f_l.append(f)
            bounds[i + 1] = len(ids_l)
        return bounds, ids_l, d_l, f_l
    # Else the merge: probe_many chooses it by the batch's size.
    q, hit_ids, hit_d, hit_fps = cat.probe_many(txn, fps[indexed], k)
    bounds = np.searchsorted(indexed[q], np.arange(m + 1)).tolist()
    return bounds, hit_ids.tolist(), hit_d.tolist(), hit_fps.tolist()


class _Segment:
    """One segment's view of the store while its adds are answered: what was stored before it
    (read through the transaction, which holds the removals made so far) and what it has added
    (``new``: id → record, not yet written)."""

    def __init__(self, cat: Catalog, txn: lmdb.Transaction) -> None:
        self.cat, self.txn = cat, txn
        self.new: dict[int, Record] = {}
        self.keys: dict[int, Key] = {}

    def canonical_field(self, doc_id: int) -> int | None:
        """:meth:`Catalog.canonical_field` with the segment's own documents."""
        rec = self.new.get(doc_id)
        return rec[3] if rec is not None else self.cat.canonical_field(self.txn, doc_id)

    def key(self, doc_id: int) -> Key:
        key = self.keys.get(doc_id)
        if key is None:
            rec = self.new.get(doc_id)
            key = self.keys[doc_id] = untyped_key(rec[0]) if rec is not None else self.cat.key_of(self.txn, doc_id)
        return key

    def canonical_of(self, doc_id: int) -> int:
        """:meth:`Catalog.canonical_of` with the segment's own documents."""
        return live_canonical(self.canonical_field, doc_id)

    def canonical_id(self, exact_ids: list[int], near: dict[int, tuple[int, int]]) -> int:
        """:meth:`Catalog.canonical_id` with the segment's own documents."""
        return new_canonical(self.canonical_field, exact_ids, near)


def add_segment(cat: Catalog, txn: lmdb.Transaction, adds: Sequence[OneAdd], k: int) -> list[AddResult]:
    """Add documents with distinct keys in order, each with its verdict within ``k``: the results
    of successive :func:`fpstore.store.writes.add_one` calls (checkpoints and flushes are the
    caller's)."""
    m = len(adds)
    fps = np.fromiter((a.fp for a in adds), dtype=np.uint64, count=m)
    old_ids = cat.ids_of_many(txn, [a.typed for a in adds])
    unchanged = [False] * m
    for i, old in enumerate(old_ids):
        if old is not None:
            rec = cat.record(txn, old)
            a = adds[i]
            unchanged[i] = rec is not None and rec[1] == a.fp and rec[2] == a.content_hash and rec[4] == a.flags

    # What the store held before the segment: near neighbours in both tiers, exact duplicates.
    indexed = np.flatnonzero(np.fromiter((not a.short for a in adds), dtype=bool, count=m))
    bounds, hit_ids_l, hit_d_l, hit_fps_l = _stored_neighbours(cat, txn, fps, indexed, k)
    view = _Segment(cat, txn)
    if hit_ids_l:
        uniq = sorted(set(hit_ids_l))
        view.keys.update(zip(uniq, cat.keys_of(txn, uniq)))
    stored_exact = [cat.content_ids(txn, a.content_hash) if a.content_hash is not None else [] for a in adds]

    # Near pairs within the segment, each listed under its later add.
    earlier: dict[int, list[tuple[int, int]]] = {}
    for lo, hi, d in zip(*_self_pairs(fps[indexed], k)):
        earlier.setdefault(int(indexed[hi]), []).append((int(indexed[lo]), d))

    next_id = cat.next_id(txn)
    count = cat.meta_int(txn, H_COUNT)
    removed: set[int] = set()
    created: list[int | None] = [None] * m  # the id each add's new document got
    pending: dict[int, np.ndarray] = {}  # their sketches, written after the segment
    by_hash: dict[bytes, list[int]] = {}  # content hash → the segment's new documents, in order
    results: list[AddResult] = []
    for i, a in enumerate(adds):
        old = old_ids[i]
        exclude = old or 0
        exact_ids: list[int] = []
        if a.content_hash is not None:
            exact_ids = [x for x in stored_exact[i] if x != exclude and x not in removed]
            exact_ids += by_hash.get(a.content_hash, ())
        near: dict[int, tuple[int, int]] = {}
        if a.short:  # the exact tier only: equal content hashes mean equal fingerprints
            near = {x: (0, a.fp) for x in exact_ids}
        else:
            for j in range(bounds[i], bounds[i + 1]):
                x = hit_ids_l[j]
                if x != exclude and x not in removed:
                    near[x] = (hit_d_l[j], hit_fps_l[j])
            for lo, d in earlier.get(i, ()):
                new_id = created[lo]
                if new_id is not None:
                    near[new_id] = (d, adds[lo].fp)
            if near:
                near = verify_near(cat.sketches, txn, near, a.sketch, cat.threshold, pending)
        key = untyped_key(a.typed)
        exact = view.key(exact_ids[0]) if exact_ids else None
        # Most adds of a crawl find nothing: no matches to build or sort.
        matches = sort_matches([Match(view.key(x), d, f, x) for x, (d, f) in near.items()]) if near else []
        if unchanged[i]:
            assert old is not None
            own = view.canonical_of(old)
            results.append(AddResult(old, key, a.fp, a.short, exact, matches, view.key(own) if own != old else None))
            continue
        if a.on_duplicate == "skip" and (exact is not None or matches):
            canonical_id = view.canonical_id(exact_ids, near)
            results.append(AddResult(None, key, a.fp, a.short, exact, matches, view.key(canonical_id) if canonical_id else None))
            continue
        doc_id = next_id
        next_id += 1
        if old is not None:
            cat.remove(txn, old)
            removed.add(old)
        else:
            count += 1
        # After the removal, as add_one: a canonical that was the replaced document is gone.
        canonical_id = view.canonical_id(exact_ids, near)
        canonical = view.key(canonical_id) if canonical_id else None
        view.new[doc_id] = (a.typed, a.fp, a.content_hash, canonical_id, a.flags)
        created[i] = doc_id
        if a.sketch is not None:
            pending[doc_id] = a.sketch
        if a.content_hash is not None:
            by_hash.setdefault(a.content_hash, []).append(doc_id)
        results.append(AddResult(doc_id, key, a.fp, a.short, exact, matches, canonical))

    _write(cat, txn, view.new)
    if cat.sketches is not None:
        new_ids = [i for i in created if i is not None]
        if new_ids:
            cat.sketches.put(txn, np.array(new_ids), np.array([a.sketch for a, i in zip(adds, created) if i is not None], dtype=np.uint64))
        results = verdict_similarities(cat.sketches, txn, results, [a.sketch for a in adds])
    txn.put(H_NEXT_ID, U64.pack(next_id), db=cat.meta)
    txn.put(H_COUNT, U64.pack(count), db=cat.meta)
    return results


def _write(cat: Catalog, txn: lmdb.Transaction, new: dict[int, Record]) -> None:
    """Write the segment's new documents (ids ascending): records, keys, content hashes, index."""
    if not new:
        return
    docs, key_items, content_items = [], [], []
    indexed_fps, indexed_ids = [], []
    for doc_id, (typed, fp, content_hash, canonical_id, flags) in new.items():
        packed_id = U64.pack(doc_id)
        docs.append((packed_id, pack_record(typed, fp, content_hash, canonical_id, flags)))
        key_items.append((lookup_key(typed), packed_id))
        if content_hash is not None:
            content_items.append((content_hash + packed_id, b""))
        if not flags & FLAG_SHORT:
            indexed_fps.append(fp)
            indexed_ids.append(doc_id)
    txn.cursor(db=cat.docs).putmulti(docs)
    txn.cursor(db=cat.keys).putmulti(sorted(key_items))
    if content_items:
        txn.cursor(db=cat.content).putmulti(sorted(content_items))
    if indexed_ids:
        cat.incremental.put_many(txn, np.array(indexed_fps, dtype=np.uint64), np.array(indexed_ids, dtype=np.uint64))
