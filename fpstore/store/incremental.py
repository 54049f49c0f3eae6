"""The incremental tier: one LMDB B-tree per table of the design, keyed by permuted fingerprint
(8 bytes, big-endian) ‖ document id (8 bytes, big-endian), with empty values.

Big-endian makes byte order numeric order, so a probe prefix is a key range. New documents enter
here, one entry per table, until a flush moves them into a run (see :mod:`fpstore.store.lsm`).
Every method works inside the caller's transaction.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from typing import Any

import lmdb
import numpy as np

from fpstore import _backend
from fpstore.errors import CorruptionError
from fpstore.index import search
from fpstore.index.design import Design

__all__ = ["IncrementalTables", "scan_table", "table_entries", "table_keys"]

_U64 = struct.Struct(">Q")
_PAIR = struct.Struct(">QQ")
_ZERO8 = bytes(8)

#: :meth:`IncrementalTables.probe_each` and :meth:`~IncrementalTables.probe_batch` probe once per
#: fingerprint while that costs less than one scan: about 27 µs a probe against 600 µs plus 0.5 µs an entry a scan (on the 2-core machine of
#: docs/benchmarks.md; ``tools/bench_probe_crossover.py`` measures both).
PROBE_US, SCAN_US, SCAN_US_PER_ENTRY = 27.0, 600.0, 0.5

#: :meth:`IncrementalTables.put_many` permutes batches up to this size one int at a time: below
#: about 32 entries numpy's fixed costs per call exceed the work (a scratch loop, not a benchmark).
PUT_FEW = 24


#: :meth:`IncrementalTables.probe_each` compares every query with every document kept in memory
#: in one kernel call (:func:`fpstore.index.search.compare_all`, about 0.65 ns a pair:
#: ``tools/bench_incremental.py``) while that costs no more than a scan. With the pure-Python kernels it
#: broadcasts in numpy instead, while the copy holds at most this many documents and the pairs stay
#: below ``_COMPARE_ALL_PAIRS``: the broadcast's temporaries cost about 3 ns a pair, one
#: fingerprint's comparison about 3 µs plus 1.4 ns a document (``tools/bench_incremental.py``).
_COMPARE_ALL_DOCS, _COMPARE_ALL_PAIRS = 1536, 1 << 18
COMPARE_NS = 0.65


def _without(fps: np.ndarray, ids: np.ndarray, fp: int, doc_id: int) -> _Docs:
    keep = (ids != np.uint64(doc_id)) | (fps != np.uint64(fp))
    return fps[keep], ids[keep]


def table_keys(txn: lmdb.Transaction, db: Any) -> bytes:
    """Every key of an LMDB table, in key order, concatenated. Each key is appended as it is read:
    ``b"".join`` of the cursor would first hold a list of a memory view per key, which the cyclic
    garbage collector scans again and again as it grows (3.6 s instead of 0.5 s for 10^6 keys,
    ``tools/bench_table_keys.py``)."""
    out = bytearray()
    for key in txn.cursor(db=db).iternext(keys=True, values=False):
        out += key
    return bytes(out)


def scan_table(txn: lmdb.Transaction, db: Any) -> tuple[np.ndarray, bool]:
    """Every entry of one incremental table, in key order: ``(pairs, whole)`` where ``pairs`` is
    ``(n, 2)`` big-endian uint64 (permuted fingerprint, id) and ``whole`` is False when the keys'
    total length is not a multiple of 16 bytes (the ragged tail is cut off: the table is damaged)."""
    raw = table_keys(txn, db)
    whole = len(raw) % 16 == 0
    if not whole:
        raw = raw[: len(raw) // 16 * 16]
    return np.frombuffer(raw, dtype=">u8").reshape(-1, 2), whole


def table_entries(txn: lmdb.Transaction, db: Any, t: int) -> np.ndarray:
    """:func:`scan_table` of table ``t``; damage raises :class:`CorruptionError`."""
    pairs, whole = scan_table(txn, db)
    if not whole:
        raise CorruptionError(f"table {t} holds keys of the wrong length")
    return pairs


#: Tables of more documents than this are not kept in memory (see :class:`IncrementalTables`):
#: a probe compares with every document, and a delete copies them all.
MEMORY_MAX = 1 << 14

_Docs = tuple[np.ndarray, np.ndarray]  # (fingerprints, ids), uint64, in no particular order
#: Documents held: the first ``n`` entries of two buffers (uint64). A transaction appends past
#: ``n`` in place: the entries a commit published are never written again (a delete makes new
#: buffers), so a reader of that commit's first ``n`` never sees them change.
_Held = tuple[np.ndarray, np.ndarray, int]


class IncrementalTables:
    """The incremental tables of a design, bound to their LMDB databases (one per table).

    The writing process also keeps their documents in memory, as of its last commit, while they
    number at most :data:`MEMORY_MAX` (the flush threshold, 4,096 by default, keeps them there):
    a probe then compares with each of them in numpy instead of seeking every table from Python.
    The store's :class:`~fpstore.store.storage.Storage` reports each write transaction as it
    begins, commits or aborts. The copy is used by a write transaction that begins right after
    the commit it reflects (its id is the next one: no other process committed in between) and
    follows that transaction's own changes, and by a read transaction of exactly that commit;
    any other transaction reads the tables."""

    __slots__ = ("design", "dbs", "_committed", "_txn", "_work", "_staging", "_staged")

    def __init__(self, design: Design, dbs: list[Any]) -> None:
        self.design = design
        self.dbs = dbs
        #: (id of the commit, its documents) or None.
        self._committed: tuple[int, _Held] | None = None
        #: The write transaction in progress (as its function sees it), and its documents: None
        #: until read, or when there are too many to keep.
        self._txn: Any = None
        self._work: _Held | None = None
        #: With ``durability="interval"``: a transaction of staged writes is open, and its documents
        #: after the last staged write (None: read them). Its nested transactions start from them.
        self._staging = False
        self._staged: _Held | None = None

    # -- the copy in memory -----------------------------------------------------------------------

    @property
    def write_txn(self) -> Any:
        """The write transaction in progress, as its function sees it (None between writes)."""
        return self._txn

    def begin_write(self, txn: Any) -> None:
        committed = self._committed
        self._txn = txn
        if self._staging:
            self._work = self._staged
        else:
            self._work = committed[1] if committed is not None and txn.id() == committed[0] + 1 else None

    def staged(self) -> None:
        """The write just run (in a nested transaction) is now part of the open transaction."""
        self._staging, self._staged = True, self._work
        self._txn = self._work = None

    def committed(self, txnid: int) -> None:
        work = self._staged if self._staging else self._work
        self._txn = self._work = self._staged = None
        self._staging = False
        self._committed = (txnid, work) if work is not None else None

    def aborted(self) -> None:
        # A staged write's abort leaves the open transaction, whose documents are then read again.
        self._txn = self._work = self._staged = None

    def _held(self, txn: Any) -> _Held | None:
        if txn is self._txn:
            if self._work is None:
                self._work = self._read(txn)
            return self._work
        committed = self._committed
        if committed is not None and txn.id() == committed[0]:
            return committed[1]
        return None

    def _docs(self, txn: Any) -> _Docs | None:
        """The documents in the tables as ``txn`` sees them, when kept in memory for it."""
        held = self._held(txn)
        if held is None:
            return None
        fps, ids, n = held
        return fps[:n], ids[:n]

    def _read(self, txn: Any) -> _Held | None:
        if txn.stat(self.dbs[0])["entries"] > MEMORY_MAX:
            return None
        pairs = table_entries(txn, self.dbs[0], 0)
        return pairs[:, 0].astype(np.uint64), pairs[:, 1].astype(np.uint64), len(pairs)

    def _append(self, txn: Any, fps: np.ndarray, ids: np.ndarray) -> None:
        """Follow the write transaction's new entries (called before its tables change: a copy
        read after would hold them already)."""
        held = self._held(txn) if txn is self._txn else None
        if held is None:
            return
        fbuf, ibuf, n = held
        m = n + len(fps)
        if m > MEMORY_MAX:
            self._work = None
            return
        if m > len(fbuf):
            cap = max(2 * len(fbuf), m, 256)
            fbuf, ibuf = np.resize(fbuf[:n], cap), np.resize(ibuf[:n], cap)
        fbuf[n:m] = fps
        ibuf[n:m] = ids
        self._work = (fbuf, ibuf, m)

    def _rebuild(self, txn: Any, change: Callable[[np.ndarray, np.ndarray], _Docs]) -> None:
        """Follow a removal in the write transaction: new buffers, so that no entry a commit
        published is written again."""
        docs = self._docs(txn) if txn is self._txn else None
        if docs is not None:
            fps, ids = change(*docs)
            self._work = (fps, ids, len(fps))

    def entries(self, txn: lmdb.Transaction) -> int:
        """Documents in the tables (entries of table 0)."""
        return txn.stat(self.dbs[0])["entries"]

    def table0(self, txn: lmdb.Transaction) -> np.ndarray:
        """Table 0's entries (the identity permutation): ``(n, 2)`` big-endian uint64
        (fingerprint, id), in key order (fingerprint, then id)."""
        docs = self._docs(txn)
        if docs is None:
            return table_entries(txn, self.dbs[0], 0)
        fps, ids = docs  # the copy in memory, sorted as the table is (a flush reads it)
        order = np.lexsort((ids, fps))
        pairs = np.empty((len(order), 2), dtype=">u8")
        pairs[:, 0] = fps[order]
        pairs[:, 1] = ids[order]
        return pairs

    # -- writing --------------------------------------------------------------------------------

    def put(self, txn: lmdb.Transaction, fp: int, doc_id: int) -> None:
        """Index one document: its permuted fingerprint in every table."""
        self._append(txn, np.array([fp], np.uint64), np.array([doc_id], np.uint64))
        permute_one = self.design.permute_one
        for t, db in enumerate(self.dbs):
            txn.put(_PAIR.pack(permute_one(fp, t), doc_id), b"", db=db)

    def put_many(self, txn: lmdb.Transaction, fps: np.ndarray, doc_ids: np.ndarray) -> None:
        """Index many documents (fingerprints and ids uint64), each table in one sorted putmulti."""
        self._append(txn, fps, doc_ids)
        if len(fps) <= PUT_FEW:
            # A group commit's few adds: plain ints, as put() does; numpy's fixed costs per call
            # (a permutation is ~20 array operations) exceed the work of a few entries.
            entries = list(zip(fps.tolist(), doc_ids.tolist()))
            permute_one = self.design.permute_one
            for t, db in enumerate(self.dbs):
                keys = sorted([_PAIR.pack(permute_one(fp, t), doc_id) for fp, doc_id in entries])
                txn.cursor(db=db).putmulti(list(zip(keys, itertools.repeat(b""))))
            return
        for t, db in enumerate(self.dbs):
            perm = self.design.permute(fps, t)
            order = np.lexsort((doc_ids, perm))
            pairs = np.empty((len(order), 2), dtype=">u8")
            pairs[:, 0] = perm[order]
            pairs[:, 1] = doc_ids[order]
            # Each row viewed as one 16-byte void: tolist() gives its bytes (kept whole, unlike
            # a bytes dtype, which would drop trailing zero bytes).
            txn.cursor(db=db).putmulti(list(zip(pairs.view("V16").ravel().tolist(), itertools.repeat(b""))))

    def delete(self, txn: lmdb.Transaction, fp: int, doc_id: int) -> bool:
        """Remove a document's entries; False (nothing changed) when it is not in the tables."""
        if txn.get(_PAIR.pack(fp, doc_id), db=self.dbs[0]) is None:
            return False
        self._rebuild(txn, lambda fps, ids: _without(fps, ids, fp, doc_id))
        for t, db in enumerate(self.dbs):
            txn.delete(_PAIR.pack(self.design.permute_one(fp, t), doc_id), db=db)
        return True

    def clear(self, txn: lmdb.Transaction) -> None:
        """Empty every table (their entries have moved into a run)."""
        self._rebuild(txn, lambda fps, ids: (fps[:0].copy(), ids[:0].copy()))
        for db in self.dbs:
            txn.drop(db, delete=False)

    # -- probing --------------------------------------------------------------------------------

    def probe(self, txn: lmdb.Transaction, fp: int, k: int, exclude: int = 0) -> dict[int, tuple[int, int]]:
        """Ids in the tables within ``k`` of ``fp`` → (distance, fingerprint)."""
        design = self.design
        found: dict[int, tuple[int, int]] = {}
        docs = self._docs(txn)
        if docs is not None:
            fps, ids = docs
            _, hits, dist = search.compare_all(np.array([fp], dtype=np.uint64), fps, k)
            for j, d in zip(hits.tolist(), dist.tolist()):
                doc_id = int(ids[j])
                if doc_id != exclude:
                    found[doc_id] = (d, int(fps[j]))
            return found
        if txn.stat(self.dbs[0])["entries"] == 0:  # all compacted into runs: skip T seeks
            return found
        for t, db in enumerate(self.dbs):
            perm = design.permute_one(fp, t)
            cur = txn.cursor(db=db)
            for lo, hi in design.probe_prefixes(perm, t):
                if not cur.set_range(_U64.pack(lo) + _ZERO8):
                    continue
                for key in cur.iternext(keys=True, values=False):
                    if len(key) != 16:
                        raise CorruptionError(f"table {t} holds a key of {len(key)} bytes, expected 16")
                    cand, doc_id = _PAIR.unpack(key)
                    if cand > hi:
                        break
                    d = (cand ^ perm).bit_count()
                    if d <= k and doc_id != exclude and doc_id not in found:
                        found[doc_id] = (d, design.unpermute_one(cand, t))
        return found

    def probe_each(self, txn: lmdb.Transaction, fps: list[int], k: int) -> list[dict[int, tuple[int, int]]]:
        """:meth:`probe` of each fingerprint (none excluded), by one scan when that costs less."""
        entries = txn.stat(self.dbs[0])["entries"]
        if entries == 0:
            return [{} for _ in fps]
        out = self._probe_few(txn, fps, k, entries)
        if out is not None:
            return out
        out = [{} for _ in fps]
        q_, id_, d_, f_ = self.scan_batch(txn, np.array(fps, dtype=np.uint64), k)
        for q, doc_id, d, f in zip(q_.tolist(), id_.tolist(), d_.tolist(), f_.tolist()):
            out[q].setdefault(doc_id, (d, f))  # a document reached by several tables
        return out

    def _probe_few(self, txn: lmdb.Transaction, fps: list[int], k: int, entries: int) -> list[dict[int, tuple[int, int]]] | None:
        """:meth:`probe_each` without a scan of the tables (None when one scan costs less): every
        fingerprint against every document of the copy in one numpy pass while that is cheap,
        else a probe per fingerprint."""
        docs = self._docs(txn)
        if docs is not None and self._compare_pays(len(fps), entries):
            qi, j, dist = search.compare_all(np.array(fps, dtype=np.uint64), docs[0], k)
            out: list[dict[int, tuple[int, int]]] = [{} for _ in fps]
            for q, doc_id, d, f in zip(qi.tolist(), docs[1][j].tolist(), dist.tolist(), docs[0][j].tolist()):
                out[q][doc_id] = (d, f)
            return out
        if not self._scan_pays(len(fps), entries):
            return [self.probe(txn, fp, k) for fp in fps]
        return None

    @staticmethod
    def _compare_pays(m: int, entries: int) -> bool:
        """Whether comparing ``m`` fingerprints with every document of the copy costs no more
        than one scan of the tables (the kernel), or stays small (numpy's broadcast)."""
        if _backend.PURE_PYTHON:
            return entries <= _COMPARE_ALL_DOCS and m * entries <= _COMPARE_ALL_PAIRS
        return m * entries * COMPARE_NS / 1000 <= SCAN_US + SCAN_US_PER_ENTRY * entries

    @staticmethod
    def _scan_pays(m: int, entries: int) -> bool:
        """Whether one scan of the tables costs less than ``m`` probes."""
        return m * PROBE_US >= SCAN_US + SCAN_US_PER_ENTRY * entries

    def probe_batch(self, txn: lmdb.Transaction, fps: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every (query index int64, id int64, distance uint8, fingerprint uint64) within ``k``, a
        document once per table that reaches it: as :meth:`probe_each` when the batch is small,
        else the tables' entries read once and merged with the batch in numpy."""
        entries = txn.stat(self.dbs[0])["entries"]
        empty = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint8), np.zeros(0, np.uint64))
        if entries == 0 or not len(fps):
            return empty
        few = self._probe_few(txn, fps.tolist(), k, entries)
        if few is None:
            return self.scan_batch(txn, fps, k)
        hits = [(qi, doc_id, d, f) for qi, found in enumerate(few) for doc_id, (d, f) in found.items()]
        if not hits:
            return empty
        q, i, d, f = zip(*hits)
        return np.array(q, np.int64), np.array(i, np.int64), np.array(d, np.uint8), np.array(f, np.uint64)

    def scan_batch(self, txn: lmdb.Transaction, fps: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`probe_batch` by reading the tables' entries once and merging in numpy."""
        design = self.design
        # Every table holds the same documents: table 0 (the identity) is read, and each other
        # table's order is a sort of its permuted fingerprints, not another scan of LMDB.
        docs = self._docs(txn)
        if docs is not None:
            order = search.argsort_u64(docs[0])
            stored, stored_ids = docs[0][order], docs[1][order].astype(np.int64)
        else:
            pairs = table_entries(txn, self.dbs[0], 0)
            stored, stored_ids = pairs[:, 0].astype(np.uint64), pairs[:, 1].astype(np.int64)
            if len(stored) > 1 and bool(np.any(stored[1:] < stored[:-1])):
                raise CorruptionError("table 0 holds keys out of order: the store is damaged")
        out_q, out_i, out_d, out_f = [], [], [], []
        for t, table in enumerate(design.tables):
            if t:
                permuted = design.permute(stored, t)
                order = search.argsort_u64(permuted)
                keys, ids, found = permuted[order], stored_ids[order], stored[order]
            else:
                keys, ids, found = stored, stored_ids, stored
            perm = design.permute(fps, t)
            variants, per = search.flip_variants(design, t, perm)
            low = np.uint64(((1 << 64) - 1) >> table.prefix_bits) if table.prefix_bits < 64 else np.uint64(0)
            lo = np.searchsorted(keys, variants & ~low, side="left")
            hi = np.searchsorted(keys, variants | low, side="right")
            counts = hi - lo
            rows = np.repeat(np.arange(len(variants)), counts)
            idx = np.repeat(lo, counts) + (np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts))
            qi = rows // per
            d = np.bitwise_count(keys[idx] ^ perm[qi])
            keep = d <= k
            out_q.append(qi[keep])
            out_i.append(ids[idx[keep]])
            out_d.append(d[keep].astype(np.uint8))
            out_f.append(found[idx[keep]])
        return np.concatenate(out_q), np.concatenate(out_i), np.concatenate(out_d), np.concatenate(out_f)
