"""A store's LMDB tables read and written together, inside the caller's transaction: documents
by id and by key (records, key segments, tombstones), candidates by fingerprint (incremental
tables and runs), and the verdicts of an add.

``docs``: id (8 bytes, big-endian) → record (:mod:`fpstore.store.keys`). ``keys``: typed key (or
its hash when long) → id. ``content``: content hash (16 bytes) ‖ id → empty: the exact-duplicate
tier. ``dead``: tombstoned ids (documents of immutable runs and segments). The state record
in ``meta`` names the live runs and key segments (:class:`fpstore.index.tiers.State`).
"""

from __future__ import annotations

import bisect
import math
import zlib
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, overload

import lmdb
import numpy as np

from fpstore.errors import CorruptionError, InputError
from fpstore.index import search, tiers
from fpstore.index.design import Design
from fpstore.index.tiers import KeySegment, ReadPlan, Run, RunMeta, State, TierCache
from fpstore.parallel import threads as thread_count
from fpstore.store.header import H_NEXT_ID, U64, table_name
from fpstore.store.incremental import IncrementalTables
from fpstore.store.keys import FLAG_SHORT, MAX_RAW_KEY, Key, lookup_key, record_lead, unpack_record, untyped_key
from fpstore.store.lsm import Lsm
from fpstore.store.results import AddResult, Document, Match, sort_matches
from fpstore.store.sketches import DB_NAME as SKETCH_DB
from fpstore.store.sketches import Sketches, verify_near

#: A batch of queries is probed one query at a time (:func:`search.probe_plan_each`) while it holds
#: fewer than ``SMALL_BATCH_BASE + min(SMALL_BATCH_PER_CHUNK * c, SMALL_BATCH_MAX_EXTRA)``
#: queries, c the chunks of the runs' table 0, when the merge would run on one thread; the merge's
#: cost grows with the chunks it reaches, a single probe's much less. Fitted to the crossovers
#: ``tools/bench_probe_crossover.py --one-thread`` measures ("query_many" in docs/benchmarks.md,
#: "Which path a batch takes": about 2,000 queries at 10^5 (3 chunks), 10,900 at 10^6 (22), and
#: at 10^7 (202) none up to 32,768 (the two within 5 % there); the cap holds 35,000 there).
SMALL_BATCH_BASE, SMALL_BATCH_PER_CHUNK, SMALL_BATCH_MAX_EXTRA = 1_000, 450, 34_000
#: The same limit where the merge would run on threads (:func:`search.threaded_merge_from`), the
#: smaller of the two: measured (chunks, queries) on two cores, interpolated on log c between them
#: and held beyond: about 14,500 queries at 10^6 and 20,000 at 10^7 (crossovers interpolated on
#: log m between the batch sizes measured).
THREADED_BATCH_FIT = ((22, 14_500), (202, 20_000))
#: :meth:`Catalog.ids_of_many` looks up at most this many keys in the key segments one kernel probe
#: each (:func:`tiers.find_each_in_segments`), more by the batch search (sort, merge): a group
#: commit's few new keys pay none of the batch's numpy calls.
FEW_KEYS = 128
#: Fewer result rows than this are ordered by numpy's lexsort, more by :func:`search.order_rows`.
SORT_SMALL = 2048

__all__ = ["ITER_BATCH", "Catalog", "live_canonical", "new_canonical", "read_u64"]


def _threaded_batch_limit(chunks0: int) -> int:
    """:data:`THREADED_BATCH_FIT` at ``chunks0`` chunks."""
    (c0, q0), (c1, q1) = THREADED_BATCH_FIT
    if chunks0 <= c0:
        return q0
    if chunks0 >= c1:
        return q1
    return round(q0 * (q1 / q0) ** (math.log(chunks0 / c0) / math.log(c1 / c0)))


def _small_batch_limit(chunks0: int) -> int:
    """Batches of fewer queries are probed one query at a time (see :data:`SMALL_BATCH_BASE`)."""
    limit = SMALL_BATCH_BASE + min(SMALL_BATCH_PER_CHUNK * chunks0, SMALL_BATCH_MAX_EXTRA)
    if thread_count(None) > 1:
        limit = min(limit, max(_threaded_batch_limit(chunks0), search.threaded_merge_from(chunks0)))
    return limit


#: Documents per snapshot when iterating over a store (no transaction spans a yield).
ITER_BATCH = 1000


def read_u64(raw: bytes | memoryview, what: str) -> int:
    """An 8-byte big-endian integer read from the store; another length is damage."""
    if len(raw) != 8:
        raise CorruptionError(f"{what} is {len(raw)} bytes, expected 8")
    return U64.unpack(raw)[0]


def live_canonical(canonical_field: Callable[[int], int | None], doc_id: int) -> int:
    """The live canonical of a stored document: its recorded canonical, or itself.
    ``canonical_field(id)`` is the canonical id a live document records (0: none), None when it
    is not live (:meth:`Catalog.canonical_field`).

    A canonical document may have been deleted since it was recorded; its variants then fall
    back to themselves (this is not damage, so it raises nothing).
    """
    canonical = canonical_field(doc_id)
    if canonical is None:
        raise CorruptionError(f"document {doc_id} is indexed but has no record")
    if canonical and canonical != doc_id and canonical_field(canonical) is not None:
        return canonical
    return doc_id


def new_canonical(canonical_field: Callable[[int], int | None], exact_ids: list[int], near: dict[int, tuple[int, int]]) -> int:
    """The canonical of a new document: its exact duplicate's, else its nearest neighbour's, else 0 (itself)."""
    if exact_ids:
        return live_canonical(canonical_field, exact_ids[0])
    if near:
        return live_canonical(canonical_field, min(near, key=lambda i: (near[i][0], i)))
    return 0


class _Snapshot:
    """What every single query of one committed snapshot reads first, read once for all of them:
    the state, its :class:`ReadPlan`, and whether the incremental tables and the tombstones hold
    anything. Keyed by the read transaction's id, which names the last commit it sees (in any
    process: LMDB numbers commits in the file), so a read that begins after no commit gets the
    same facts. Read transactions only: a write transaction's id is the one it will commit, and
    its tables change under it."""

    __slots__ = ("txnid", "state", "plan", "incremental", "dead", "chunks", "mapping")

    def __init__(self, txnid: int, state: State, plan: ReadPlan, incremental: bool, dead: bool) -> None:
        self.txnid, self.state, self.plan, self.incremental, self.dead = txnid, state, plan, incremental, dead
        #: Run chunks read by queries of this snapshot, by name, and the map's
        #: :attr:`~fpstore.store.storage.Storage.mapping` they were read under.
        self.chunks: dict[bytes, Any] = {}
        self.mapping = -1


def _bad_id(ids: list[int]) -> NoReturn:
    bad = next(i for i in ids if not 0 < i < 1 << 63)
    raise CorruptionError(f"an index names document id {bad}, outside any id this store assigns")


class Catalog:
    """The tables of one open store (``dbs``: LMDB databases by name) and the design they follow."""

    def __init__(
        self, dbs: dict[str, Any], design: Design, sketch_words: int = 0, threshold: float | None = None, int_key_column: bool = False
    ) -> None:
        self.design = design
        #: The sketch column, when the store's pipeline has a verification sketch, and the
        #: similarity an add's candidates must reach to count as near duplicates (None: any).
        self.sketches = Sketches(dbs[SKETCH_DB], sketch_words) if sketch_words else None
        self.threshold = threshold
        self.meta, self.docs, self.keys, self.content = dbs["meta"], dbs["docs"], dbs["keys"], dbs["content"]
        self.blobs, self.dead = dbs["blobs"], dbs["dead"]
        self.tables = [dbs[table_name(t)] for t in range(len(design.tables))]
        self.cache = TierCache()
        self.incremental = IncrementalTables(design, self.tables)
        self.lsm = Lsm(design, self.meta, self.blobs, self.dead, self.incremental, self.cache, int_key_column)
        self.probe_design = search.probe_design(design)
        self._state_memo: tuple[bytes, State] | None = None
        self._plan_memo: tuple[State, int, ReadPlan] | None = None
        self._snapshot: _Snapshot | None = None
        self._writer_chunks: tuple[ReadPlan, dict[bytes, Any]] | None = None
        #: Whether the writer's open transaction has written a run (:meth:`wrote_run`).
        self._wrote_run = False
        self._segments_end: tuple[State, int] | None = None  # the last id of any segment, per state

    def state(self, txn: lmdb.Transaction) -> State:
        raw = txn.get(tiers.STATE_KEY, db=self.meta)
        # Copied before comparing: bytes compare with memcmp, a view with bytes element by element.
        raw = b"" if raw is None else bytes(raw)
        memo = self._state_memo
        if memo is None or memo[0] != raw:
            # Decoding validates every record; the value is small and rarely changes, so one
            # decode per distinct value serves every later lookup.
            memo = self._state_memo = (raw, State.from_bytes(raw or None, len(self.design.tables)))
        return memo[1]

    def plan(self, txn: lmdb.Transaction, state: State | None = None) -> ReadPlan:
        """The :class:`ReadPlan` of ``state`` (default: the transaction's), built once per state
        while the tier cache is not cleared (an aborted write may have cached runs it made)."""
        state = state or self.state(txn)
        generation = self.cache.generation  # read first: a clear during the build leaves it stale
        memo = self._plan_memo
        if memo is not None and memo[0] is state and memo[1] == generation:
            return memo[2]
        plan = ReadPlan(self.runs(txn, state), state.segs, self.cache)
        self._plan_memo = (state, generation, plan)
        return plan

    def snapshot(self, txn: lmdb.Transaction) -> _Snapshot:
        """The :class:`_Snapshot` of a read transaction (never a write transaction's)."""
        txnid = txn.id()
        snap = self._snapshot
        if snap is not None and snap.txnid == txnid:
            return snap
        state = self.state(txn)
        snap = _Snapshot(txnid, state, self.plan(txn, state), self.incremental.entries(txn) > 0, txn.stat(self.dead)["entries"] > 0)
        self._snapshot = snap
        return snap

    def snapshot_chunks(self, txn: lmdb.Transaction, mapping: int) -> dict[bytes, Any]:
        """The run chunks earlier read transactions of ``txn``'s snapshot read, for a single
        query in ``txn`` to read again without an LMDB lookup each (and to add to).

        Sound because LMDB never writes a page that a committed snapshot reaches while a read of
        that snapshot is open, and ``txn`` is one: a view read by an earlier transaction of the
        same snapshot shows the same bytes at the same address, unless the map moved since (a
        remap, a reopen), which ``mapping`` (:attr:`Storage.mapping`, read with the transaction
        open, so no remap can come between) tells. A new snapshot starts an empty memo."""
        snap = self.snapshot(txn)
        if snap.mapping != mapping:
            snap.chunks = {}
            snap.mapping = mapping
        return snap.chunks

    def query(self, txn: lmdb.Transaction, fp: int, k: int, memo: dict[bytes, Any] | None = None) -> list[Match]:
        """The matches of one fingerprint within ``k`` (checked by the caller), in a read
        transaction: :meth:`probe` then :meth:`matches`, with what the snapshot's earlier queries
        read kept (:meth:`snapshot`) and, given ``memo``, the run chunks earlier calls in this
        transaction read (views into the map: valid while ``txn`` is)."""
        snap = self.snapshot(txn)
        plan = snap.plan
        hits = search.probe_plan(plan, txn, self.blobs, self.probe_design, fp, k, memo) if plan.tables else []
        if not snap.incremental and not snap.dead and len(hits) == 1:
            # A bulk-loaded store's usual answer: one match in the runs, nothing else to look up.
            doc_id, d, f = hits[0]
            return [Match(self._keys_of(txn, plan, [doc_id], False, memo)[0], d, f, doc_id)]
        found = self.incremental.probe(txn, fp, k) if snap.incremental else {}
        dead = snap.dead
        for doc_id, d, f in hits:
            if doc_id not in found and not (dead and self.is_dead(txn, doc_id)):
                found[doc_id] = (d, f)
        if not found:
            return []
        return self._matches(txn, plan, found, memo)

    def runs(self, txn: lmdb.Transaction, state: State | None = None) -> list[Run]:
        state = state or self.state(txn)
        return [Run(txn, self.blobs, self.cache, rec) for rec in state.runs]

    def segments(self, txn: lmdb.Transaction, state: State | None = None) -> list[KeySegment]:
        state = state or self.state(txn)
        return [KeySegment(txn, self.blobs, self.cache, rec) for rec in state.segs]

    def is_dead(self, txn: lmdb.Transaction, doc_id: int) -> bool:
        return txn.get(U64.pack(doc_id), db=self.dead) is not None

    def id_of(self, txn: lmdb.Transaction, typed: bytes) -> int | None:
        """The live id of a key: an incremental document's, else the newest bulk load's."""
        doc_id = self.id_of_incremental(txn, typed)
        if doc_id is not None:
            return doc_id
        found = tiers.find_in_segments(self.segments(txn), typed)
        if found is None:
            return None
        # Loading or adding a key again tombstones its older copies, so the newest copy decides:
        # dead means deleted.
        return None if self.is_dead(txn, found[1]) else found[1]

    def ids_of_many(
        self, txn: lmdb.Transaction, typed: Sequence[bytes], hashes: np.ndarray | None = None, hash_order: np.ndarray | None = None
    ) -> list[int | None]:
        """:meth:`id_of` for many keys, with the key segments searched in batches (``hash_order``:
        the keys' indices in ``hashes`` order, when the caller has it)."""
        out: list[int | None] = [None] * len(typed)
        if not txn.stat(self.keys)["entries"]:
            # No incremental key (a store filled by bulk loads): every key goes to the segments.
            # Looking up each key here first costs seconds per million keys, for nothing.
            everything = hash_order if hash_order is not None else np.arange(len(typed))
            return self._ids_in_segments(txn, typed, hashes, out, everything)
        pending: list[int] = []
        lookup = [lookup_key(t) for t in typed]
        # One C-level pass over the keys table for the whole batch (getmulti wants sorted keys).
        found = {bytes(k): v for k, v in txn.cursor(db=self.keys).getmulti(sorted(set(lookup)))}
        for i, t in enumerate(typed):
            raw = found.get(lookup[i])
            doc_id = None
            if raw is not None:
                doc_id = self._keyed_id(txn, t, read_u64(raw, "key table entry"))
            if doc_id is not None:
                out[i] = doc_id
            else:
                pending.append(i)
        return self._ids_in_segments(txn, typed, hashes, out, pending)

    def _ids_in_segments(
        self,
        txn: lmdb.Transaction,
        typed: Sequence[bytes],
        hashes: np.ndarray | None,
        out: list[int | None],
        pending: list[int] | np.ndarray,
    ) -> list[int | None]:
        """:meth:`ids_of_many`'s search of the key segments for the keys ``pending`` (indices into
        ``typed``), newest segment first; fills ``out`` and returns it. The keys still pending stay
        a numpy index: a bulk load's run of millions of new keys meets every earlier segment, and
        only the few whose hash a segment holds become Python objects."""
        segments = self.segments(txn)
        if not len(pending) or not segments:
            return out
        if hashes is None and len(pending) <= FEW_KEYS:
            for i, hit in zip(pending, tiers.find_each_in_segments(segments, [typed[i] for i in pending])):
                if hit is not None and not self.is_dead(txn, hit[1]):  # the newest copy decides (see id_of)
                    out[int(i)] = hit[1]
            return out
        if hashes is None:
            hashes = tiers.key_hashes(list(typed))
        left = np.asarray(pending, dtype=np.int64)
        # In hash order, once: each segment's search then needs no sort of its own.
        pending_hashes = hashes[left]
        if len(left) > 1 and not bool(np.all(pending_hashes[1:] >= pending_hashes[:-1])):
            left = left[np.argsort(pending_hashes, kind="stable")]
        for seg in reversed(segments):
            if not len(left):
                break
            in_seg = seg.find_many(_Picked(typed, left), hashes[left])
            if not in_seg:
                continue
            found = np.fromiter(in_seg, dtype=np.int64, count=len(in_seg))
            for j, doc_id in in_seg.items():
                if not self.is_dead(txn, doc_id):  # the newest copy decides (see id_of)
                    out[int(left[j])] = doc_id
            left = np.delete(left, found)
        return out

    def id_of_incremental(self, txn: lmdb.Transaction, typed: bytes) -> int | None:
        raw = txn.get(lookup_key(typed), db=self.keys)
        if raw is None:
            return None
        return self._keyed_id(txn, typed, read_u64(raw, "key table entry"))

    def _keyed_id(self, txn: lmdb.Transaction, typed: bytes, doc_id: int) -> int | None:
        """``doc_id``, which the keys table gives for ``typed``, once the document's record holds
        that key. A long key's lookup key is a hash, which another key may share (None: not this
        key); a short key's is the key itself, so a record of another key is damage, which must
        not let a get, a replace or a delete act on that other document."""
        raw = txn.get(U64.pack(doc_id), db=self.docs)
        if raw is not None and bytes(raw[: len(lead := record_lead(typed))]) == lead:
            return doc_id  # the record begins with its key: no decode on this path (every get and re-add)
        rec = unpack_record(raw) if raw is not None else self.record(txn, doc_id)  # (a bulk document's)
        if rec is not None and rec[0] == typed:
            return doc_id
        if len(typed) > MAX_RAW_KEY:
            return None
        found = "no record" if rec is None else "a record of another key"
        raise CorruptionError(f"the keys table names document {doc_id} for key {untyped_key(typed)!r}, which has {found}")

    def record(self, txn: lmdb.Transaction, doc_id: int) -> tuple[bytes, int, bytes | None, int, int] | None:
        """(typed key, fingerprint, content hash, canonical id, flags) of a live document, or None."""
        raw = txn.get(U64.pack(doc_id), db=self.docs)
        if raw is not None:
            return unpack_record(raw)
        seg = self._segment_of(txn, doc_id)
        if seg is None or self.is_dead(txn, doc_id):
            return None
        ordinal = doc_id - seg.base
        fp = int(seg.fps_at(np.array([ordinal], np.int64))[0])
        return seg.key_at(ordinal), fp, None, 0, 0

    def key_of(self, txn: lmdb.Transaction, doc_id: int) -> Key:
        rec = self.record(txn, doc_id)
        if rec is None:
            raise CorruptionError(f"an index entry names document {doc_id}, which has no record")
        return untyped_key(rec[0])

    def content_ids(self, txn: lmdb.Transaction, content_hash: bytes) -> list[int]:
        """Ids of documents with this content hash, oldest first."""
        cur = txn.cursor(db=self.content)
        out: list[int] = []
        if cur.set_range(content_hash):
            for key in cur.iternext(keys=True, values=False):
                if key[:16] != content_hash:
                    break
                if len(key) != 24:
                    raise CorruptionError("content table entry has the wrong length")
                out.append(U64.unpack_from(key, 16)[0])
        return out

    def probe(self, txn: lmdb.Transaction, fp: int, k: int, exclude: int = 0, state: State | None = None) -> dict[int, tuple[int, int]]:
        """Live ids within ``k`` of ``fp`` → (distance, fingerprint), over both tiers."""
        found = self.incremental.probe(txn, fp, k, exclude)
        plan = self.plan(txn, state)
        if plan.tables:
            hits = search.probe_plan(plan, txn, self.blobs, self.probe_design, fp, k)
            any_dead = bool(hits) and txn.stat(self.dead)["entries"] > 0
            for doc_id, d, f in hits:
                if doc_id != exclude and doc_id not in found and not (any_dead and self.is_dead(txn, doc_id)):
                    found[doc_id] = (d, f)
        return found

    def probe_each(self, txn: lmdb.Transaction, fps: list[int], k: int) -> list[dict[int, tuple[int, int]]]:
        """:meth:`probe` of each fingerprint of a small batch (none excluded), in plain ints:
        the state, its plan and the run chunks read once for the batch. Any transaction."""
        out = self.incremental.probe_each(txn, fps, k)
        plan = self.plan(txn)
        q_, id_, d_, f_ = search.probe_plan_rows(plan, txn, self.blobs, self.probe_design, fps, k, self._chunks_written_txn(txn, plan))
        if q_:
            dead = txn.stat(self.dead)["entries"] > 0
            for q, doc_id, d, f in zip(q_, id_, d_, f_):
                found = out[q]
                if doc_id not in found and not (dead and self.is_dead(txn, doc_id)):
                    found[doc_id] = (d, f)
        return out

    def _chunks_written_txn(self, txn: lmdb.Transaction, plan: ReadPlan) -> dict[bytes, Any] | None:
        """The run chunks the writer's open transaction has read for ``plan`` (its staged writes'
        included, with ``durability="interval"``), for a later probe in it to read again without
        an LMDB lookup each; None for any other transaction.

        Sound while the transaction is open and has written no run: a chunk of a run it did not
        write is a view into a page of the map that no write of it changes. A run it wrote (a
        flush) lies in its own dirty pages, which a later write of the same transaction may free
        (LMDB spills dirty pages to the file past 512 MiB of them): from then until the commit
        (:meth:`wrote_run`, :meth:`committed`) each probe reads its chunks afresh. Every commit
        and abort forgets the memo (:meth:`forget_written_chunks`): a committed transaction's
        freed pages are reused."""
        if txn is not self.incremental.write_txn or self._wrote_run:
            return None
        memo = self._writer_chunks
        if memo is None or memo[0] is not plan:
            memo = self._writer_chunks = (plan, {})
        return memo[1]

    def forget_written_chunks(self, *_: Any) -> None:
        self._writer_chunks = None

    def wrote_run(self) -> None:
        """The writer's open transaction has written a run: no memo of chunks until its commit."""
        self._wrote_run = True
        self.forget_written_chunks()

    def committed(self, *_: Any) -> None:
        """A write transaction committed (an abort keeps :meth:`wrote_run`'s mark until the
        next commit: a nested transaction's abort leaves the runs its parent wrote)."""
        self._wrote_run = False
        self.forget_written_chunks()

    def small_batch(self, txn: lmdb.Transaction, m: int) -> bool:
        """Whether a batch of ``m`` fingerprints is probed one fingerprint at a time (see
        :data:`SMALL_BATCH_BASE`) rather than merged with the runs."""
        return m < _small_batch_limit(self.plan(txn).chunks0)

    def live_index(self, txn: lmdb.Transaction) -> tuple[np.ndarray, np.ndarray]:
        """(fingerprints uint64, ids uint64) of every indexed live document, from both tiers."""
        return self.lsm.live_index(txn, self.state(txn))

    def scan_all(self, txn: lmdb.Transaction, fp: int, k: int) -> dict[int, tuple[int, int]]:
        """Exhaustive mode: compare with every indexed fingerprint."""
        fps, ids = self.live_index(txn)
        dist = np.bitwise_count(fps ^ np.uint64(fp))
        sel = np.flatnonzero(dist <= k)
        return {int(ids[i]): (int(dist[i]), int(fps[i])) for i in sel}

    def matches(self, txn: lmdb.Transaction, found: dict[int, tuple[int, int]], state: State | None = None) -> list[Match]:
        """Matches of live ids → (distance, fingerprint), as :meth:`probe` finds them, sorted."""
        if not found:
            return []
        return self._matches(txn, self.plan(txn, state), found)

    def _matches(
        self, txn: lmdb.Transaction, plan: ReadPlan, found: dict[int, tuple[int, int]], memo: dict[bytes, Any] | None = None
    ) -> list[Match]:
        if len(found) == 1:  # a single query's usual answer
            ((doc_id, (d, f)),) = found.items()
            return [Match(self._keys_of(txn, plan, [doc_id], False, memo)[0], d, f, doc_id)]
        ids = list(found)
        keys = self._keys_of(txn, plan, ids, False, memo)  # found holds live ids: no tombstone to look up
        return sort_matches([Match(key, *found[i], i) for key, i in zip(keys, ids)])

    def meta_int(self, txn: lmdb.Transaction, name: bytes) -> int:
        raw = txn.get(name, db=self.meta)
        if raw is None:
            raise CorruptionError(f"the store's meta table lacks {name.decode()}")
        return read_u64(raw, name.decode())

    def next_id(self, txn: lmdb.Transaction) -> int:
        """The id the next new document gets (``meta/next_id``), checked to lie past every id
        given so far, the newest record's and every key segment's: a damaged value would make an
        add overwrite a stored document."""
        next_id = self.meta_int(txn, H_NEXT_ID)
        cur = txn.cursor(db=self.docs)
        given = read_u64(cur.key(), "document id") if cur.last() else 0
        state = self.state(txn)
        memo = self._segments_end
        if memo is None or memo[0] is not state:  # one pass per state, not per add
            memo = self._segments_end = (state, max((seg.base + seg.count - 1 for seg in state.segs), default=0))
        given = max(given, memo[1])
        if next_id <= given:
            raise CorruptionError(
                f"the store's next document id {next_id} is not past id {given}, which it has given: the meta table is damaged"
            )
        return next_id

    def remove(self, txn: lmdb.Transaction, doc_id: int) -> tuple[bytes, int, bytes | None, int, int] | None:
        """Delete live document ``doc_id``: its record and incremental entries, or a tombstone
        where its fingerprint lives in a run (runs are immutable until compaction)."""
        raw = txn.get(U64.pack(doc_id), db=self.docs)
        if raw is None:
            rec = self.record(txn, doc_id)  # a bulk-loaded document
            if rec is not None:
                txn.put(U64.pack(doc_id), b"", db=self.dead)
            return rec
        rec = unpack_record(raw)
        typed, fp, content_hash, _canonical, flags = rec
        txn.delete(U64.pack(doc_id), db=self.docs)
        txn.delete(lookup_key(typed), db=self.keys)
        if content_hash is not None:
            txn.delete(content_hash + U64.pack(doc_id), db=self.content)
        if not flags & FLAG_SHORT and not self.incremental.delete(txn, fp, doc_id):
            txn.put(U64.pack(doc_id), b"", db=self.dead)  # compacted into a run
        return rec

    def canonical_field(self, txn: lmdb.Transaction, doc_id: int) -> int | None:
        """The canonical id a live document's record holds (0: none; bulk-loaded documents have
        none), or None when ``doc_id`` is not live. Reads no key or fingerprint block."""
        raw = txn.get(U64.pack(doc_id), db=self.docs)
        if raw is not None:
            return unpack_record(raw)[3]
        if self._segment_of(txn, doc_id) is not None:
            return None if self.is_dead(txn, doc_id) else 0
        return None

    def _segment_of(self, txn: lmdb.Transaction, doc_id: int) -> KeySegment | None:
        """The key segment numbering ``doc_id`` (bulk loads number theirs in disjoint ranges), or None."""
        plan = self.plan(txn)
        j = bisect.bisect_right(plan.bases, doc_id) - 1
        if j < 0 or doc_id >= plan.ends[j]:
            return None
        return KeySegment(txn, self.blobs, self.cache, plan.segs[j])

    def canonical_of(self, txn: lmdb.Transaction, doc_id: int) -> int:
        """:func:`live_canonical` of a stored document."""
        return live_canonical(lambda i: self.canonical_field(txn, i), doc_id)

    def canonical_id(self, txn: lmdb.Transaction, exact_ids: list[int], near: dict[int, tuple[int, int]]) -> int:
        """:func:`new_canonical` over the stored documents."""
        return new_canonical(lambda i: self.canonical_field(txn, i), exact_ids, near)

    def verdict_from(
        self,
        txn: lmdb.Transaction,
        doc_id: int | None,
        typed: bytes,
        fp: int,
        short: bool,
        exact_ids: list[int],
        near: dict[int, tuple[int, int]],
    ) -> AddResult:
        if short:  # the exact tier only: equal content hashes mean equal fingerprints
            near = {i: (0, fp) for i in exact_ids}
        exact = self.key_of(txn, exact_ids[0]) if exact_ids else None
        canonical_id = self.canonical_id(txn, exact_ids, near)
        canonical = self.key_of(txn, canonical_id) if canonical_id else None
        return AddResult(doc_id, untyped_key(typed), fp, short, exact, self.matches(txn, near), canonical)

    def verdict(
        self,
        txn: lmdb.Transaction,
        doc_id: int,
        typed: bytes,
        fp: int,
        content_hash: bytes | None,
        short: bool,
        k: int,
        sketch: np.ndarray | None = None,
    ) -> AddResult:
        """The verdict for a document re-added unchanged: the same neighbours a new add would see."""
        exact_ids = [i for i in self.content_ids(txn, content_hash) if i != doc_id] if content_hash else []
        near = {} if short else verify_near(self.sketches, txn, self.probe(txn, fp, k, exclude=doc_id), sketch, self.threshold)
        res = self.verdict_from(txn, doc_id, typed, fp, short, exact_ids, near)
        canonical_id = self.canonical_of(txn, doc_id)
        canonical = self.key_of(txn, canonical_id) if canonical_id != doc_id else None
        return AddResult(doc_id, res.key, fp, short, res.exact_duplicate_of, res.near_duplicates, canonical)

    def unchanged(
        self,
        txn: lmdb.Transaction,
        doc_id: int,
        fp: int,
        content_hash: bytes | None,
        flags: int,
        canonical: bytes | None,
        typed: bytes,
        canonical_given: bool,
    ) -> str | None:
        """Whether stored document ``doc_id`` equals what a batch gives for it: "keep" (nothing to
        write), "rewrite" (its record only, for the canonical the batch gives), or None (it changed)."""
        raw = txn.get(U64.pack(doc_id), db=self.docs)
        if raw is None:  # a bulk-loaded document: no record to hold a canonical or a content hash
            rec = self.record(txn, doc_id)
            no_canonical = canonical is None or canonical == typed
            return "keep" if rec is not None and rec[1] == fp and content_hash is None and flags == 0 and no_canonical else None
        _, old_fp, old_hash, _, old_flags = unpack_record(raw)
        if old_fp != fp or old_hash != content_hash or old_flags != flags:
            return None
        return "rewrite" if canonical_given else "keep"

    def resolve_canonicals(
        self, txn: lmdb.Transaction, canonical_keys: list[bytes | None], batch: dict[bytes, int], ids: np.ndarray
    ) -> list[int]:
        """Ids of canonical keys (0 for None): a key of the batch names the id it gets in it, any
        other a stored document; a key that is neither makes the batch an InputError."""
        out = [0] * len(canonical_keys)
        stored: list[int] = []
        stored_keys: list[bytes] = []
        for j, c in enumerate(canonical_keys):
            if c is None:
                continue
            if c in batch:
                out[j] = int(ids[batch[c]])
            else:
                stored.append(j)
                stored_keys.append(c)
        if stored:
            found = self.ids_of_many(txn, stored_keys)
            for j, c, doc_id in zip(stored, stored_keys, found):
                if doc_id is None:
                    raise InputError(f"canonical key {untyped_key(c)!r} is neither stored nor a key of the batch")
                out[j] = doc_id
        return out

    def keys_of(
        self,
        txn: lmdb.Transaction,
        ids: list[int] | np.ndarray,
        state: State | None = None,
        memo: dict[bytes, Any] | None = None,
        *,
        reading: bool = False,
        asked: bool = False,
    ) -> list[Key]:
        """Keys of many ids (a list, or an integer array: a batch's ids need no Python int each
        until their keys are made): incremental records by lookup, bulk ones a key block at a time
        (integer keys read straight from the decoded blocks, no typed key built per id); column
        chunks kept in ``memo`` (see :meth:`query`). ``reading``: as for :meth:`probe_many`.
        ``asked``: the ids are a caller's (:meth:`Store.keys_of`), so an id without a live
        document is an InputError; an index's id without one is damage (CorruptionError)."""
        if not len(ids):
            return []
        if reading:
            snap = self.snapshot(txn)
            return self._keys_of(txn, snap.plan, ids, bool(snap.plan.segs) and snap.dead, memo, asked)
        plan = self.plan(txn, state)
        return self._keys_of(txn, plan, ids, bool(plan.segs) and txn.stat(self.dead)["entries"] > 0, memo, asked)

    def _keys_of(
        self,
        txn: lmdb.Transaction,
        plan: ReadPlan,
        ids: list[int] | np.ndarray,
        dead: bool,
        memo: dict[bytes, Any] | None = None,
        asked: bool = False,
    ) -> list[Key]:
        """:meth:`keys_of` with the plan given, and tombstones looked up only when ``dead``; a
        single id's key column chunk kept in ``memo`` (see :meth:`query`)."""
        if len(ids) == 1 and plan.bases:
            # A single query's usual answer: one bulk-loaded document, read without the batch's sets.
            doc_id = int(ids[0])
            j = bisect.bisect_right(plan.bases, doc_id) - 1
            if j >= 0 and doc_id < plan.ends[j] and doc_id > 0 and not (dead and self.is_dead(txn, doc_id)):
                meta = plan.segs[j]
                if meta.int_keys is not None and memo is not None:
                    return [tiers.column_key(txn, self.blobs, meta, doc_id - meta.base, memo)]
                key = KeySegment(txn, self.blobs, self.cache, meta).int_or_typed_key(doc_id - meta.base, memo)
                return [key if isinstance(key, int) else untyped_key(key)]
        # Integer key columns: a few ids without numpy's sorts (its fixed costs exceed their
        # lookups), many in one numpy pass.
        int_columns = bool(plan.segs) and all(seg.int_keys is not None for seg in plan.segs)
        if isinstance(ids, np.ndarray) and len(ids) >= 64:
            if int(ids.min()) <= 0 or int(ids.max()) >= 1 << 63:
                _bad_id(ids.tolist())
            fast = self._column_keys_of(txn, plan, ids.astype(np.int64), dead, memo) if int_columns else None
        else:
            ids = ids.tolist() if isinstance(ids, np.ndarray) else ids
            if min(ids) <= 0 or max(ids) >= 1 << 63:
                _bad_id(ids)
            if not int_columns:
                fast = None
            elif len(ids) >= 64:
                fast = self._column_keys_of(txn, plan, np.array(ids, dtype=np.int64), dead, memo)
            else:
                fast = self._few_column_keys(txn, plan, ids, dead, memo)
        if fast is not None:
            return fast
        if isinstance(ids, np.ndarray):
            ids = ids.tolist()
        uniq = set(ids)
        keys: dict[int, Key] = {}
        # A bulk load numbers its documents in one range of ids, which no record shares.
        held: dict[int, list[int]] = {}
        rest: list[int] = []
        bases = plan.bases
        if bases:
            ends = plan.ends
            dead_ids = set(self.lsm.dead_ids(txn).tolist()) if dead and len(uniq) >= 64 else None
            for doc_id in sorted(uniq) if len(uniq) > 1 else uniq:
                j = bisect.bisect_right(bases, doc_id) - 1
                if j < 0 or doc_id >= ends[j]:
                    rest.append(doc_id)
                elif not dead or not (doc_id in dead_ids if dead_ids is not None else self.is_dead(txn, doc_id)):
                    held.setdefault(j, []).append(doc_id)  # dead: no key, reported below
        else:
            rest = list(uniq)
        for j, mine in held.items():
            seg = KeySegment(txn, self.blobs, self.cache, plan.segs[j])
            ordinals = [i - seg.base for i in mine]
            ints = seg.int_keys_at(ordinals, memo)
            keys.update(zip(mine, ints if ints is not None else map(untyped_key, seg.keys_at(ordinals))))
        for doc_id in rest:
            raw = txn.get(U64.pack(doc_id), db=self.docs)
            if raw is not None:
                keys[doc_id] = untyped_key(unpack_record(raw)[0])
        try:
            return [keys[i] for i in ids]
        except KeyError as exc:
            if asked:
                raise InputError(
                    f"document id {exc.args[0]} has no live document in this snapshot (deleted since it was found, or "
                    "not an id of this store); read ids and their keys in one reader: with store.reader() as r: ..."
                ) from None
            raise CorruptionError(f"an index entry names document {exc.args[0]}, which has no record") from None

    def _few_column_keys(
        self, txn: lmdb.Transaction, plan: ReadPlan, ids: list[int], dead: bool, memo: dict[bytes, Any] | None
    ) -> list[Key] | None:
        """:meth:`_column_keys_of` without numpy's sorts: each id's segment found by bisection,
        then one kernel call per segment reached for its keys."""
        bases, ends, segs = plan.bases, plan.ends, plan.segs
        reached: dict[int, tuple[list[int], list[int]]] = {}  # segment -> (slots, ordinals)
        for slot, doc_id in enumerate(ids):
            j = bisect.bisect_right(bases, doc_id) - 1
            if j < 0 or doc_id >= ends[j] or (dead and self.is_dead(txn, doc_id)):
                return None
            slots, ordinals = reached.setdefault(j, ([], []))
            slots.append(slot)
            ordinals.append(doc_id - segs[j].base)
        out: list[Key] = [0] * len(ids)
        for j, (slots, ordinals) in reached.items():
            column = segs[j].int_keys
            assert column is not None
            values = tiers.read_packed_at(txn, self.blobs, column.prefix, column, ordinals, memo).tolist()
            for slot, value in zip(slots, values):
                out[slot] = value
        return out

    def _column_keys_of(
        self, txn: lmdb.Transaction, plan: ReadPlan, arr: np.ndarray, dead: bool, memo: dict[bytes, Any] | None
    ) -> list[Key] | None:
        """:meth:`_keys_of` of a batch whose ids (int64, checked in 1..2**63-1) all lie in key
        segments with integer key columns, none tombstoned, in numpy; None when any does not (the
        general path then finds them, or reports them)."""
        order = search.argsort_u64(arr.view(np.uint64))  # in id order, each column chunk is read once
        ordered = arr[order]
        seg = np.searchsorted(np.array(plan.bases, dtype=np.int64), ordered, side="right") - 1
        if seg[0] < 0 or not (ordered < np.array(plan.ends, dtype=np.int64)[seg]).all():
            return None  # an incremental document's id
        if dead and np.isin(ordered, self.lsm.dead_ids(txn).astype(np.int64)).any():
            return None
        values = np.empty(len(arr), np.uint64)
        for j in range(int(seg[0]), int(seg[-1]) + 1):
            meta = plan.segs[j]
            column = meta.int_keys
            assert column is not None
            sel = slice(None) if seg[0] == seg[-1] else seg == j
            values[order[sel]] = tiers.read_packed_at(txn, self.blobs, column.prefix, column, ordered[sel] - meta.base, memo)
        keys: list[Any] = values.tolist()  # integer keys: each a Key
        return keys

    def document(self, txn: lmdb.Transaction, doc_id: int, rec: tuple[Any, ...]) -> Document:
        typed, fp, content_hash, _canonical, flags = rec
        live = self.canonical_of(txn, doc_id) if rec[3] else doc_id
        canonical_key = self.key_of(txn, live) if live != doc_id else None
        return Document(untyped_key(typed), doc_id, fp, content_hash, canonical_key, bool(flags & FLAG_SHORT))

    def batch(self, txn: lmdb.Transaction, after: int, documents: bool) -> tuple[list[Any], int]:
        """The next live documents after id ``after``, in id order, at most :data:`ITER_BATCH`:
        ``(id, record)`` pairs (the record's first field is the typed key), or, when
        ``documents``, :class:`Document` objects; and the id up to which every live document is in
        the batch (``2**64`` when it reaches the end)."""
        batch: list[tuple[int, tuple[Any, ...]]] = []
        covered = 1 << 64  # every live id in (after, covered] is in this batch
        cur = txn.cursor(db=self.docs)
        if cur.set_range(U64.pack(after + 1)):
            for raw_id, raw in cur:
                batch.append((read_u64(raw_id, "document id"), unpack_record(raw)))
                if len(batch) >= ITER_BATCH:
                    covered = batch[-1][0]
                    break
        dead = set(self.lsm.dead_ids(txn).tolist())
        for seg in self.segments(txn):
            lo = max(after + 1, seg.base)
            seg_end = seg.base + seg.count
            hi = min(seg_end, lo + ITER_BATCH)
            if hi < seg_end:
                covered = min(covered, hi - 1)
            alive = [i for i in range(lo, hi) if i not in dead]
            ordinals = [i - seg.base for i in alive]
            keys = seg.keys_at(ordinals)
            if documents and alive:
                fps = seg.fps_at(np.array(ordinals, np.int64)).tolist()
                batch.extend((i, (t, f, None, 0, 0)) for i, t, f in zip(alive, keys, fps))
            else:
                batch.extend((i, (t,)) for i, t in zip(alive, keys))
        batch = [b for b in sorted(batch, key=lambda b: b[0]) if b[0] <= covered][:ITER_BATCH]
        if len(batch) == ITER_BATCH:
            covered = batch[-1][0]
        return ([self.document(txn, doc_id, rec) for doc_id, rec in batch] if documents else batch), covered

    def probe_many(
        self, txn: lmdb.Transaction, fps: np.ndarray, k: int, memo: dict[bytes, Any] | None = None, *, reading: bool = False
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every live (query index int64, id int64, distance uint8, fingerprint uint64) within
        ``k`` of ``fps``, sorted by query index, then distance, then id (see :meth:`Store.query_many`);
        a small batch's run chunks kept in ``memo`` (see :meth:`query`). ``reading``: ``txn`` is
        a read transaction, whose snapshot's facts (:meth:`snapshot`) earlier reads found."""
        if reading:
            snap = self.snapshot(txn)
            plan, dead, incremental = snap.plan, snap.dead, snap.incremental
        else:
            plan, dead, incremental = self.plan(txn), None, True
        if plan.runs and len(fps) < _small_batch_limit(plan.chunks0):
            if memo is None:
                memo = self._chunks_written_txn(txn, plan)
            rq, rid, rd, rfp = search.probe_plan_each(plan, txn, self.blobs, self.probe_design, fps, k, memo)
        else:
            rq, rid, rd, rfp = search.batch_probe_runs(self.runs(txn), self.design, fps, k, memo=memo if reading else None)
        if len(rid) and (dead if dead is not None else txn.stat(self.dead)["entries"]):
            keep = ~np.isin(rid.astype(np.uint64), self.lsm.dead_ids(txn))
            rq, rid, rd, rfp = rq[keep], rid[keep], rd[keep], rfp[keep]
        iq, iid, idist, ifp = self.incremental.probe_batch(txn, fps, k) if incremental else (np.zeros(0, np.int64),) * 4
        if len(iq):
            # The incremental tables report a document once per table that reaches it.
            first = search.unique_rows(iq, iid)
            iq, iid, idist, ifp = iq[first], iid[first], idist[first], ifp[first]
            # Runs report each (query, document) once, and no document is in two tiers.
            rq, rid, rd = np.concatenate([rq, iq]), np.concatenate([rid, iid]), np.concatenate([rd, idist])
            rfp = np.concatenate([rfp, ifp]).astype(np.uint64)
        if len(rq) < SORT_SMALL:
            order = np.lexsort((rid, rd, rq))  # numpy's sort beats the radix passes' fixed costs here
        else:
            order = search.order_rows(rq, rd, rid)
        return rq[order], rid[order], rd[order], rfp[order]

    def get(self, txn: lmdb.Transaction, typed: bytes, key: Key) -> Document | None:
        """The live :class:`Document` of typed key ``typed`` (the user's ``key``), or None."""
        doc_id = self.id_of(txn, typed)
        if doc_id is None:
            return None
        rec = self.record(txn, doc_id)
        if rec is None:
            raise CorruptionError(f"key {key!r} names document {doc_id}, which has no record")
        typed_stored, fp, content_hash, canonical, flags = rec
        live = self.canonical_of(txn, doc_id)
        canonical_key = self.key_of(txn, live) if live != doc_id else None
        return Document(untyped_key(typed_stored), doc_id, fp, content_hash, canonical_key, bool(flags & FLAG_SHORT))

    def build_cells(self, txn: lmdb.Transaction, runs: Sequence[RunMeta]) -> int:
        """Build the occupied cells of the probe tables of ``runs`` that take them (see
        :meth:`TierCache.build_cells`), decoding without the interpreter lock: a merge's thread
        does it for the run it made, :meth:`warm` for every run. Returns how many tables have them."""
        prefix_bits = [t.prefix_bits for t in self.design.tables]
        return sum(self.cache.build_cells(Run(txn, self.blobs, self.cache, meta), prefix_bits) for meta in runs)

    def warm(self, txn: lmdb.Transaction, memo: dict[bytes, Any] | None = None) -> int:
        """Read every byte of the index (runs, key segments, incremental tables), of what an answer
        reads next (the records of documents added one by one or in batches, which hold their
        keys, and the tombstones) and of the sketch column, which verified answers read; returns
        how many. Given ``memo`` (the snapshot's chunk views, :meth:`snapshot_chunks`), every run
        chunk and packed-column chunk is left in it, so that later queries of the snapshot add
        nothing to it."""
        total = 0
        columns: list[bytes] = []
        for db in [self.blobs, *self.tables, *([self.sketches.db] if self.sketches is not None else [])]:
            for key, value in txn.cursor(db=db):
                total += len(key) + len(value)
                zlib.adler32(value)  # reads every byte, so every page is faulted in
                if memo is not None and db is self.blobs and key[-5:-4] == b"P":
                    columns.append(bytes(key))
        if memo is not None:
            # The chunks of packed columns (key segments, ordinals) that answers read, as views the
            # snapshot's queries look up by name (tiers.read_packed_at): read there, not added
            # there. Looked up again by name: a cursor's views do not outlive its next step.
            for name in columns:
                view = txn.get(name, db=self.blobs)
                if view is not None:
                    memo.setdefault(name, view)
        for db in (self.docs, self.dead):
            # Millions of small entries keyed by u64 ids: the cursor reads each leaf page, and a
            # Python step per entry costs the most here (0.15 µs an entry, 0.4 with the pairs).
            total += sum(map(len, txn.cursor(db=db).iternext(keys=False, values=True))) + 8 * txn.stat(db)["entries"]
        # Every block of every run table decoded once, so that single probes restart inside a
        # block instead of decoding it from its start (the kernel's restart points).
        plan = self.plan(txn)
        search.fill_restarts(plan, txn, self.blobs, memo)
        self.build_cells(txn, plan.runs)
        return total


class _Picked(Sequence[bytes]):
    """``typed[picked[j]]`` for j in range(len(picked)), made only when asked for."""

    __slots__ = ("_typed", "_picked")

    def __init__(self, typed: Sequence[bytes], picked: np.ndarray) -> None:
        self._typed, self._picked = typed, picked

    def __len__(self) -> int:
        return len(self._picked)

    @overload
    def __getitem__(self, j: int) -> bytes: ...
    @overload
    def __getitem__(self, j: slice) -> list[bytes]: ...
    def __getitem__(self, j: int | slice) -> bytes | list[bytes]:
        if isinstance(j, slice):
            return [self._typed[int(i)] for i in self._picked[j]]
        return self._typed[int(self._picked[j])]
