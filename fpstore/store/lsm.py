"""The store's log-structured merge: when the incremental tables flush into a run, which runs
merge, and the jobs that write runs (flush, merge, compaction, a bulk load's run and key segment).

The policy (:func:`merge_group`, :func:`take`) is pure: it sees run records, counts and arrays,
never LMDB. The jobs (:class:`Lsm`) work inside the caller's write transaction on blobs encoded
beforehand where they can be, so that a transaction rerun after a map resize repeats only puts.
:meth:`Lsm.merge` returns the new state for its caller to store, once per transaction;
:meth:`Lsm.flush` and :meth:`Lsm.add_load` store it themselves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, overload

import lmdb
import numpy as np

from fpstore.errors import CorruptionError, InputError
from fpstore.index import search, tiers
from fpstore.index.design import Design
from fpstore.index.tiers import Run, RunMeta, SegmentMeta, State, TierCache
from fpstore.parallel import executor
from fpstore.parallel import threads as thread_count
from fpstore.store.incremental import IncrementalTables, table_keys
from fpstore.store.keys import KeyBatch, typed_key
from fpstore.store.merge_stream import MergedRun

__all__ = [
    "FLUSH_ENTRIES",
    "MERGE_FANOUT",
    "MERGE_MAX_ENTRIES",
    "Load",
    "Lsm",
    "encode_tables",
    "merge_group",
    "owned_prefixes",
    "prepare_load",
    "runs_of",
    "take",
]

log = logging.getLogger(__name__)

#: Documents in the incremental (B-tree) tables at which a write moves them into a run.
FLUSH_ENTRIES = 4096
#: Runs of one size tier are merged when this many accumulate; tier t holds runs of
#: ``flush_entries * FANOUT**t`` up to ``* FANOUT**(t+1)`` entries.
MERGE_FANOUT = 4
#: Runs this large are left to an explicit compact(), so that a growing store does not rewrite
#: its largest runs again and again in the background (a merge's memory does not grow with its
#: runs: fpstore.store.merge_stream); the largest tier merge makes runs of up to 4 × this.
MERGE_MAX_ENTRIES = 1 << 24


# -- policy --------------------------------------------------------------------------------------


def merge_group(runs: Iterable[RunMeta], unit: int) -> list[RunMeta]:
    """The runs of the smallest size tier holding ``MERGE_FANOUT`` runs or more, or []."""
    by_tier: dict[int, list[RunMeta]] = {}
    for rec in runs:
        if rec.count > MERGE_MAX_ENTRIES:
            continue
        tier, size = 0, unit * MERGE_FANOUT
        while rec.count >= size:
            tier, size = tier + 1, size * MERGE_FANOUT
        by_tier.setdefault(tier, []).append(rec)
    for tier in sorted(by_tier):
        if len(by_tier[tier]) >= MERGE_FANOUT:
            return by_tier[tier]
    return []


def take(keys: list[KeyBatch], fps: list[np.ndarray], n: int) -> tuple[KeyBatch, np.ndarray, list[KeyBatch], list[np.ndarray]]:
    """The first ``n`` documents of pending chunks, and the chunks left over."""
    out_k: list[KeyBatch] = []
    out_f: list[np.ndarray] = []
    got = 0
    while got < n:
        ck, cf = keys[0], fps[0]
        need = n - got
        if len(cf) <= need:
            out_k.append(ck)
            out_f.append(cf)
            got += len(cf)
            keys, fps = keys[1:], fps[1:]
        else:
            out_k.append(ck[:need])
            out_f.append(cf[:need])
            keys = [ck[need:]] + keys[1:]
            fps = [cf[need:]] + fps[1:]
            got = n
    if all(isinstance(k, np.ndarray) and k.dtype.kind in "iu" for k in out_k):
        merged: KeyBatch = np.concatenate(out_k) if len(out_k) > 1 else out_k[0]
    else:
        merged = [k for part in out_k for k in part]
    return merged, np.concatenate(out_f), keys, fps


_Fps = TypeVar("_Fps")


def runs_of(
    chunks: Iterable[tuple[KeyBatch, _Fps]], max_run: int, values: Callable[[KeyBatch, _Fps], np.ndarray]
) -> Iterator[tuple[KeyBatch, np.ndarray]]:
    """A bulk load's ``(keys, fingerprints)`` chunks regrouped into runs of ``max_run`` documents
    (the last one shorter), through bounded memory. ``values(keys, fingerprints)`` checks a chunk
    and returns its fingerprints (uint64)."""
    pending_keys: list[KeyBatch] = []
    pending_fps: list[np.ndarray] = []
    pending = 0
    for chunk in chunks:
        if not isinstance(chunk, tuple) or len(chunk) != 2:
            raise InputError("each bulk_load chunk must be a (keys, fingerprints) pair")
        ck, cf = chunk
        fps = values(ck, cf)
        pending_keys.append(ck)
        pending_fps.append(fps)
        pending += len(fps)
        while pending >= max_run:
            keys_run, fps_run, pending_keys, pending_fps = take(pending_keys, pending_fps, max_run)
            pending -= len(fps_run)
            yield keys_run, fps_run
    if pending:
        keys_run, fps_run, _, _ = take(pending_keys, pending_fps, pending)
        yield keys_run, fps_run


@dataclass
class Load:
    """One bulk-load run's documents, deduplicated (the last copy of a key wins) and in
    fingerprint order: integer keys (uint64) or typed keys, and their key hashes."""

    fps: np.ndarray
    int_keys: np.ndarray | None
    typed: list[bytes] | None
    hashes: np.ndarray
    #: The documents' sketches (uint64[m, W]), in the same order, when the store keeps them.
    sketches: np.ndarray | None = None
    #: The documents in key-hash order, once :meth:`Lsm.load_blobs` has sorted them for the key
    #: segment (the run's key lookup takes them in that order too).
    hash_order: np.ndarray | None = None

    def typed_keys(self) -> Sequence[bytes]:
        """The typed keys; integer keys are made one at a time, when asked for (a run's key
        lookup needs only those whose hash an earlier segment holds)."""
        if self.int_keys is not None:
            return _IntTyped(self.int_keys)
        return self.typed  # type: ignore[return-value]  # prepare_load sets typed when int_keys is None


class _IntTyped(Sequence[bytes]):
    """The typed keys (``typed_key``'s encoding) of an array of integer keys, made on demand."""

    __slots__ = ("_keys",)

    def __init__(self, keys: np.ndarray) -> None:
        self._keys = keys

    def __len__(self) -> int:
        return len(self._keys)

    @overload
    def __getitem__(self, i: int) -> bytes: ...
    @overload
    def __getitem__(self, i: slice) -> list[bytes]: ...
    def __getitem__(self, i: int | slice) -> bytes | list[bytes]:
        if isinstance(i, slice):
            return [typed_key(k) for k in self._keys[i].tolist()]
        return typed_key(int(self._keys[i]))


def prepare_load(keys: KeyBatch, fps: np.ndarray) -> Load | None:
    """A bulk load's keys and fingerprints as a :class:`Load`, or None when there are none.
    ``fps`` is uint64[n], or uint64[n, 1 + W] with the sketches (:func:`load_columns`)."""
    sketches: np.ndarray | None = None
    if fps.ndim == 2:
        fps, sketches = np.ascontiguousarray(fps[:, 0]), fps[:, 1:]
    n = len(fps)
    int_keys: np.ndarray | None = None
    typed: list[bytes] | None = None
    if isinstance(keys, np.ndarray) and keys.dtype.kind in "iu":
        if keys.ndim != 1 or (keys.dtype.kind == "i" and len(keys) and keys.min() < 0):
            raise InputError("integer key arrays must be one-dimensional and non-negative")
        int_keys = keys.astype(np.uint64)
        if n < 2 or bool(np.all(int_keys[1:] > int_keys[:-1])):
            keep = np.arange(n)  # strictly increasing (np.arange ids, say): no repeats
        else:
            # The last copy of a key wins: unique over the reversed array finds last positions.
            _, rev_first = np.unique(int_keys[::-1], return_index=True)
            keep = np.sort(n - 1 - rev_first)
    else:
        typed_all = [typed_key(k) for k in keys]
        last = {t: i for i, t in enumerate(typed_all)}
        keep = np.fromiter(sorted(last.values()), dtype=np.int64, count=len(last))
        typed = [typed_all[i] for i in keep.tolist()]
    if len(keep) != n:
        fps = fps[keep]
        sketches = None if sketches is None else sketches[keep]
        if int_keys is not None:
            int_keys = int_keys[keep]
    if len(fps) == 0:
        return None
    order = search.argsort_u64(fps)
    sorted_fps = fps[order]
    if sketches is not None:
        sketches = sketches[order]
    if int_keys is not None:
        int_keys = int_keys[order]
        hashes = tiers.key_hashes_int(int_keys)
    else:
        assert typed is not None
        typed = [typed[i] for i in order.tolist()]
        hashes = tiers.key_hashes(typed)
    return Load(sorted_fps, int_keys, typed, hashes, sketches)


# -- jobs ----------------------------------------------------------------------------------------


def encode_tables(
    design: Design, sorted_fps: np.ndarray, prefixes: list[bytes], progress: Callable[[int, int | None], None] | None = None
) -> tiers.Blobs:
    """Every table of a run, encoded under its prefix: permute, sort, Rice-code.

    The tables are independent and the permute, the radix sort and the encoder release the
    GIL, so they run on all cores. ``progress(tables encoded, tables)`` is called from this
    thread as they finish.
    """

    def encode(t: int) -> tiers.Blobs:
        keys = sorted_fps if t == 0 else search.sort_u64(design.permute(sorted_fps, t))
        return tiers.codec_run_blobs(prefixes[t], keys)

    threads = thread_count(None)
    if threads > 1 and len(sorted_fps) >= 100_000:
        encoded: Iterable[tiers.Blobs] = executor(threads).map(encode, range(len(prefixes)))
    else:
        encoded = map(encode, range(len(prefixes)))
    parts = []
    for part in encoded:
        parts.append(part)
        if progress is not None:
            progress(len(parts), len(prefixes))
    return [blob for part in parts for blob in part]


def owned_prefixes(rec: RunMeta) -> list[bytes]:
    """The blob prefixes run ``rec`` owns: its tables (a bulk load's table 0 belongs to its key
    segment) and its id column."""
    owned = [prefix for prefix in rec.tables if prefix.startswith(b"r")]
    return owned + ([rec.ids.prefix] if rec.ids is not None else [])


class Lsm:
    """The jobs that write runs, bound to a store's databases: ``blobs`` (runs and segments),
    ``meta`` (the state record), ``dead`` (tombstones) and the incremental tables."""

    def __init__(
        self,
        design: Design,
        meta: Any,
        blobs: Any,
        dead: Any,
        incremental: IncrementalTables,
        cache: TierCache,
        int_key_column: bool = False,
    ) -> None:
        self.design, self.meta, self.blobs, self.dead = design, meta, blobs, dead
        self.incremental, self.cache = incremental, cache
        #: Bulk loads of integer keys write them as a packed column (the store's header lists
        #: ``int_key_column``), else as zstd key blocks, the layout older builds read.
        self.int_key_column = int_key_column
        #: Set by a flush that left a size tier full; cleared by the merger that takes it up.
        self.merge_due = False

    def save_state(self, txn: lmdb.Transaction, state: State) -> None:
        txn.put(tiers.STATE_KEY, state.to_bytes(), db=self.meta)

    def dead_ids(self, txn: lmdb.Transaction) -> np.ndarray:
        """Tombstoned ids (uint64, sorted)."""
        raw = table_keys(txn, self.dead)
        if len(raw) % 8:
            raise CorruptionError("the tombstone table holds keys of the wrong length")
        return np.frombuffer(raw, dtype=">u8").astype(np.uint64)

    def live_index(self, txn: lmdb.Transaction, state: State) -> tuple[np.ndarray, np.ndarray]:
        """(fingerprints uint64, ids uint64) of every indexed live document, from both tiers."""
        return self.read_entries(txn, state.runs, incremental=True)

    def read_entries(self, txn: lmdb.Transaction, runs: Iterable[RunMeta], *, incremental: bool) -> tuple[np.ndarray, np.ndarray]:
        """(fingerprints uint64, ids uint64) of table 0 of ``runs`` (and of the incremental
        tables, when ``incremental``), tombstoned ids left out; in no particular order."""
        fps: list[np.ndarray] = []
        ids: list[np.ndarray] = []
        if incremental:
            pairs = self.incremental.table0(txn)
            fps.append(pairs[:, 0].astype(np.uint64))
            ids.append(pairs[:, 1].astype(np.uint64))
        for rec in runs:
            run = Run(txn, self.blobs, self.cache, rec)
            fps.append(run.table(0).all())
            ids.append(run.all_ids())
        fp_all = np.concatenate(fps) if fps else np.zeros(0, np.uint64)
        id_all = np.concatenate(ids) if ids else np.zeros(0, np.uint64)
        dead = self.dead_ids(txn)
        if len(dead) and len(id_all):
            keep = ~np.isin(id_all, dead)
            fp_all, id_all = fp_all[keep], id_all[keep]
        return fp_all, id_all

    def encode_run(
        self, run_id: int, fps: np.ndarray, ids: np.ndarray, progress: Callable[[int, int | None], None] | None = None
    ) -> tuple[tiers.Blobs, RunMeta | None]:
        """Run ``run_id`` of documents ``(fps, ids)`` (any order): its blobs and record, or
        ``([], None)`` when there are none. ``progress`` as for :func:`encode_tables`."""
        if not len(fps):
            return [], None
        order = search.argsort_u64(fps)
        fps, ids = fps[order], ids[order]
        tables = [tiers.run_prefix(run_id, t) for t in range(len(self.design.tables))]
        blobs = encode_tables(self.design, fps, tables, progress)
        id_blobs, id_rec = tiers.packed_blobs(tiers.run_prefix(run_id, 0xFFFF), ids)
        return blobs + id_blobs, RunMeta(run_id, len(fps), tuple(tables), ids=id_rec)

    def merge(
        self,
        txn: lmdb.Transaction,
        state: State,
        merged: list[RunMeta],
        *,
        incremental: bool,
        rewrite: bool = False,
        progress: Callable[[int, int | None], None] | None = None,
    ) -> tuple[State, dict[str, int]]:
        """Replace runs ``merged`` (and the incremental tables, when ``incremental``) by one new
        run, dropping tombstoned entries, inside write transaction ``txn``; returns the new state
        (``state`` itself when there was nothing to gain, unless ``rewrite``: a new design needs
        even a lone run encoded again) and counts. The caller stores the state, once per
        transaction: rewriting the multi-page state record in the same transaction makes LMDB
        reuse its overflow pages in place, a shape LMDB accepts and its verifier does not.
        ``progress`` as for :func:`encode_tables`. The runs are merged table by table in bounded
        memory (:mod:`fpstore.store.merge_stream`); a ``rewrite`` reads every fingerprint."""
        n_incremental = self.incremental.entries(txn) if incremental else 0
        run_id = state.next_run
        if rewrite:
            # A new design's tables are not the old ones permuted: every fingerprint is read.
            fps, ids = self.read_entries(txn, merged, incremental=incremental)
            blobs, rec = self.encode_run(run_id, fps, ids, progress)
            entries = len(fps)
            self._put(txn, blobs)
        else:
            empty = np.zeros(0, np.uint64)
            pairs = self.incremental.table0(txn) if incremental else None
            documents = (pairs[:, 0].astype(np.uint64), pairs[:, 1].astype(np.uint64)) if pairs is not None else (empty, empty)
            new_run = MergedRun(txn, self.blobs, self.cache, self.design, merged, documents, self.dead_ids(txn))
            entries = new_run.count
            if n_incremental == 0 and len(merged) <= 1 and entries == sum(r.count for r in merged):
                # Nothing to gain: rewriting would give the same run (or none). No write.
                return state, {"runs_merged": 0, "incremental": 0, "entries": int(sum(r.count for r in state.runs))}
            rec = new_run.write(txn, run_id, lambda blobs: self._put(txn, blobs), progress)
        for old in merged:
            for prefix in owned_prefixes(old):
                tiers.delete_prefix(txn, self.blobs, prefix)
        if incremental:
            self.incremental.clear(txn)
        new_runs = tuple(r for r in state.runs if r not in merged) + ((rec,) if rec is not None else ())
        new_state = State(new_runs, state.segs, state.next_run + 1, state.next_seg)
        return new_state, {"runs_merged": len(merged), "incremental": n_incremental, "entries": int(entries)}

    def _put(self, txn: lmdb.Transaction, blobs: tiers.Blobs) -> None:
        for name, value in blobs:
            txn.put(name, value, db=self.blobs)

    def flush(self, txn: lmdb.Transaction, state: State, flush_entries: int) -> None:
        """After a write: once the incremental tables hold ``flush_entries`` documents, move
        them into a run and store the state. Every B-tree insert dirties a leaf page per table,
        so keeping the trees small keeps a commit's writes small. When a size tier then holds
        ``MERGE_FANOUT`` runs, :attr:`merge_due` is set: the merge runs in transactions of its
        own (:mod:`fpstore.store.merging`), so that no write waits for it."""
        t0 = time.perf_counter()
        state, counts = self.merge(txn, state, [], incremental=True)
        self.save_state(txn, state)
        if merge_group(state.runs, flush_entries):
            self.merge_due = True
        log.info(
            "flushed %d documents of the incremental tables into a run in %.1f ms", counts["incremental"], (time.perf_counter() - t0) * 1e3
        )

    def load_blobs(self, load: Load, state: State, base: int) -> tuple[tiers.Blobs, RunMeta, SegmentMeta]:
        """A bulk load's run and key segment, numbered from id ``base`` in fingerprint order:
        (blobs, run record, segment record). Table 0 is the identity permutation: the
        segment's sorted fingerprints serve both."""
        run_id, seg_id = state.next_run, state.next_seg
        m = len(load.fps)
        fps_prefix = tiers.seg_prefix(seg_id, b"f")
        tables = [fps_prefix] + [tiers.run_prefix(run_id, t) for t in range(1, len(self.design.tables))]
        blobs = encode_tables(self.design, load.fps, tables)
        horder = load.hash_order = search.argsort_u64(load.hashes)
        blobs += tiers.codec_run_blobs(tiers.seg_prefix(seg_id, b"h"), load.hashes[horder])
        ord_blobs, ord_rec = tiers.packed_blobs(tiers.seg_prefix(seg_id, b"o"), horder.astype(np.uint64))
        blobs += ord_blobs
        keys_prefix = tiers.seg_prefix(seg_id, b"k")
        int_keys = None
        if self.int_key_column and load.int_keys is not None:
            key_blobs, int_keys = tiers.packed_blobs(keys_prefix, load.int_keys)
            key_blocks = 0
        else:
            key_blobs = tiers.key_block_blobs(keys_prefix, load.typed, load.int_keys)
            key_blocks = len(key_blobs)
        blobs += key_blobs
        run_rec = RunMeta(run_id, m, tuple(tables), ids_base=base)
        seg_rec = SegmentMeta(seg_id, base, m, fps_prefix, tiers.seg_prefix(seg_id, b"h"), ord_rec, keys_prefix, key_blocks, int_keys)
        return blobs, run_rec, seg_rec

    def add_load(self, txn: lmdb.Transaction, state: State, blobs: tiers.Blobs, run_rec: RunMeta, seg_rec: SegmentMeta) -> None:
        """Store a bulk load's blobs and add its run and segment to ``state`` (the transaction's)."""
        for name, value in blobs:
            txn.put(name, value, db=self.blobs)
        self.save_state(txn, State(state.runs + (run_rec,), state.segs + (seg_rec,), state.next_run + 1, state.next_seg + 1))
