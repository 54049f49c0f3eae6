"""A merge's new run made from the runs it replaces, table by table, in bounded memory.

Each table of a run is stored sorted, so table ``t`` of the new run is the k-way merge
(:mod:`fpstore.index.kway`) of table ``t`` of every run merged, and of the incremental documents
(sorted here), less the entries of deleted documents. Table 0 (the identity permutation) is read
with its ids, so the deleted entries are found there, by id; their fingerprints, permuted, then
leave every other table, one copy each. The ids column is written as table 0 is, its range
known from a first pass over the ids.

Memory: a decoded chunk of each run being read, a stretch of the merged order, a chunk being
encoded, the store's tombstones and the fingerprints of the deleted entries merged away, and
the new run's block index as it grows; never a whole table. The blobs come out as
they are made (:meth:`MergedRun.blobs`): a tier merge or a compaction writes them in steps, each
a transaction of its own (:mod:`fpstore.store.merging`), since a write transaction keeps every
page it dirties in memory until it commits; a flush writes its small run inside the write that
filled the incremental tables (:meth:`MergedRun.write`). A new design's tables cannot be merged
from the old ones: a redesign reads every fingerprint instead
(:meth:`fpstore.store.lsm.Lsm.merge` with ``rewrite``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import lmdb
import numpy as np

from fpstore.errors import CorruptionError
from fpstore.index import runs, search, tiers
from fpstore.index.design import Design
from fpstore.index.kway import Piece, Removal, merge_sorted
from fpstore.index.tiers import CodecRun, Run, RunMeta, TierCache

__all__ = ["MergedRun"]

#: Gives the transaction to read the merged runs in (a stepped merge gives a new one at each step).
TxnOf = Callable[[], lmdb.Transaction]

#: Keys per piece a decoded chunk is handed to the merge in (tests make it tiny).
PIECE_KEYS = 1 << 20
#: Keys the encoder of each table gathers before it encodes them (tests make it tiny).
ENCODE_BATCH = 1 << 20
#: Ids read at a time by the first pass.
ID_STEP = 1 << 20


def _chunks_of(txn_of: TxnOf, db: object, cache: TierCache, rec: RunMeta, t: int) -> Iterator[np.ndarray]:
    """Table ``t`` of run ``rec``, a decoded chunk at a time, each chunk read in the transaction
    ``txn_of()`` gives at that moment (a stepped merge reads in a new one at each step: nothing
    read from the map is kept between chunks, only decoded copies)."""
    prefix = rec.tables[t]
    nchunks = CodecRun(txn_of(), db, cache, prefix).index.nchunks
    for c in range(nchunks):
        table = CodecRun(txn_of(), db, cache, prefix)
        # Checksummed: tables past 0 are copied as read, not rebuilt, so damage that still decodes
        # would otherwise go on under the new run's fresh checksums.
        keys = runs.decode_chunk(table.get(c), table.index, c, checksum=True)
        for s in range(0, len(keys), PIECE_KEYS):
            yield keys[s : s + PIECE_KEYS]


def _dead(ids: np.ndarray, dead: np.ndarray) -> np.ndarray:
    """Which of ``ids`` are in ``dead`` (sorted, unique): a binary search per id, where
    ``np.isin`` would sort the whole tombstone set again at every call."""
    if not len(dead) or not len(ids):
        return np.zeros(len(ids), dtype=bool)
    at = np.minimum(np.searchsorted(dead, ids), len(dead) - 1)
    return dead[at] == ids


def _table_source(txn_of: TxnOf, db: object, cache: TierCache, rec: RunMeta, t: int) -> Iterator[Piece]:
    return ((keys, None) for keys in _chunks_of(txn_of, db, cache, rec, t))


def _table0_source(txn_of: TxnOf, db: object, cache: TierCache, rec: RunMeta) -> Iterator[Piece]:
    """Table 0 of run ``rec`` with each entry's id."""
    position = 0
    for keys in _chunks_of(txn_of, db, cache, rec, 0):
        yield keys, tiers.run_ids_at(txn_of(), db, rec, np.arange(position, position + len(keys), dtype=np.int64))
        position += len(keys)


class MergedRun:
    """The run that replaces ``merged`` runs (and the incremental documents ``incremental``:
    their fingerprints and ids, any order), as read in ``txn``; tombstoned ids ``dead`` (sorted,
    unique) are left out. :attr:`count` (the entries it will hold) is known at once; :meth:`blobs` makes
    the run, reading the merged runs in whatever transaction it is given at each chunk."""

    def __init__(
        self,
        txn: lmdb.Transaction,
        db: object,
        cache: TierCache,
        design: Design,
        merged: Sequence[RunMeta],
        incremental: tuple[np.ndarray, np.ndarray],
        dead: np.ndarray,
    ) -> None:
        self.design, self.db, self.cache = design, db, cache
        self.merged = list(merged)
        for rec in self.merged:
            run = Run(txn, db, cache, rec)
            for t in range(len(design.tables)):
                run.table(t).check_backed()  # counts agree with the run's, chunks are there
        fps, ids = incremental
        keep = ~_dead(ids, dead)
        fps, ids = fps[keep], ids[keep]
        order = search.argsort_u64(fps)
        self._inc_fps, self._inc_ids = fps[order], ids[order]
        self.dead = dead
        self.count, self._low, self._high = self._live_ids(txn)
        #: The new run's record once :meth:`blobs` has made it (None: it holds no entry).
        self.record: RunMeta | None = None

    def _live_ids(self, txn: lmdb.Transaction) -> tuple[int, int, int]:
        """(live entries, least live id, largest live id): the ids column's shape, read first."""
        count, low, high = len(self._inc_ids), None, None
        if count:
            low, high = int(self._inc_ids.min()), int(self._inc_ids.max())
        for rec in self.merged:
            for s in range(0, rec.count, ID_STEP):
                ids = tiers.run_ids_at(txn, self.db, rec, np.arange(s, min(s + ID_STEP, rec.count), dtype=np.int64))
                ids = ids[~_dead(ids, self.dead)]
                if len(ids):
                    count += len(ids)
                    lo, hi = int(ids.min()), int(ids.max())
                    low = lo if low is None else min(low, lo)
                    high = hi if high is None else max(high, hi)
        return count, low or 0, high or 0

    def write(
        self,
        txn: lmdb.Transaction,
        run_id: int,
        put: Callable[[tiers.Blobs], None],
        progress: Callable[[int, int | None], None] | None = None,
    ) -> RunMeta | None:
        """Make the run as run ``run_id`` reading in ``txn``, its blobs handed to ``put``; its
        record, or None when it holds no entry."""
        for blobs in self.blobs(run_id, lambda: txn, progress):
            put(blobs)
        return self.record

    def blobs(self, run_id: int, txn_of: TxnOf, progress: Callable[[int, int | None], None] | None = None) -> Iterator[tiers.Blobs]:
        """The run's blobs as they are made (its record in :attr:`record` at the end), the merged
        runs read in ``txn_of()``. ``progress(tables written, tables)``."""
        if not self.count:
            return
        ntables = len(self.design.tables)
        prefixes = [tiers.run_prefix(run_id, t) for t in range(ntables)]
        removed: list[np.ndarray] = []
        id_writer = tiers.PackedColumnWriter(tiers.run_prefix(run_id, 0xFFFF), self.count, self._low, self._high)
        yield from self._table0(txn_of, prefixes[0], id_writer, removed)
        gone = np.concatenate(removed) if removed else np.zeros(0, np.uint64)
        if progress is not None:
            progress(1, ntables)
        for t in range(1, ntables):
            yield from self._table(txn_of, t, prefixes[t], gone)
            if progress is not None:
                progress(t + 1, ntables)
        self.record = RunMeta(run_id, self.count, tuple(prefixes), ids=id_writer.column)

    def _table0(
        self, txn_of: TxnOf, prefix: bytes, id_writer: tiers.PackedColumnWriter, removed: list[np.ndarray]
    ) -> Iterator[tiers.Blobs]:
        """Table 0 and the ids column; the fingerprints of the entries left out go to ``removed``."""
        writer = tiers.CodecRunWriter(prefix, ENCODE_BATCH)
        sources: list[Iterator[Piece]] = [iter([(self._inc_fps, self._inc_ids)])]
        sources += [_table0_source(txn_of, self.db, self.cache, rec) for rec in self.merged]
        for keys, ids in merge_sorted(sources, f"merging table 0 of runs {self._names()}"):
            assert ids is not None
            gone = _dead(ids, self.dead)
            if gone.any():
                removed.append(keys[gone])
                keys, ids = keys[~gone], ids[~gone]
            yield writer.add(keys) + id_writer.add(ids)
        blobs, count = writer.finish()
        self._check_count(0, count)
        yield blobs + id_writer.finish()

    def _table(self, txn_of: TxnOf, t: int, prefix: bytes, removed: np.ndarray) -> Iterator[tiers.Blobs]:
        writer = tiers.CodecRunWriter(prefix, ENCODE_BATCH)
        removal = Removal(self.design.permute(removed, t))
        sources: list[Iterator[Piece]] = [iter([(search.sort_u64(self.design.permute(self._inc_fps, t)), None)])]
        sources += [_table_source(txn_of, self.db, self.cache, rec, t) for rec in self.merged]
        for keys, _ in merge_sorted(sources, f"merging table {t} of runs {self._names()}"):
            yield writer.add(removal.apply(keys))
        blobs, count = writer.finish()
        if removal.missing:
            raise CorruptionError(
                f"table {t} of runs {self._names()} lacks {removal.missing} entries of deleted documents that table 0 holds; the runs are damaged"
            )
        self._check_count(t, count)
        yield blobs

    def _check_count(self, t: int, count: int) -> None:
        if count != self.count:
            raise CorruptionError(
                f"table {t} of runs {self._names()} gives {count} live entries, table 0 {self.count}; the runs are damaged"
            )

    def _names(self) -> str:
        return ", ".join(str(rec.id) for rec in self.merged) or "(none: the incremental tables)"
