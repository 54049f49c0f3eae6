"""The store: documents, their fingerprints in permuted tables, and exact near-duplicate answers.

Layout (one LMDB environment; see docs/format.md for every byte):

* ``meta``     header (msgpack), idf table, id counter, document count, checkpoints.
* ``docs``     id (8 bytes, big-endian) → record (msgpack: typed key, fingerprint, content hash,
               canonical id, flags).
* ``keys``     typed key (or its hash when long) → id.
* ``content``  content hash (16 bytes) ‖ id → empty: the exact-duplicate tier.
* ``tNN``      one per table of the design: permuted fingerprint (8 bytes, big-endian) ‖ id →
               empty. Big-endian makes byte order numeric order, so a prefix is a key range.

A query permutes its fingerprint for every table, scans the key range of each probe prefix,
verifies every candidate with a popcount (permutations preserve Hamming distance) and reports
each document once: exactly what comparing with every stored fingerprint would report.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Iterator, Sequence

import lmdb
import msgpack
import numpy as np

from fpstore.index.design import Design, design_for
from fpstore.errors import (
    CorruptionError,
    DesignError,
    InputError,
    NotAStoreError,
    PipelineMismatchError,
)
from fpstore.hamming import as_fingerprint_array
from fpstore.fingerprint.pipeline import Fingerprints, Pipeline
from fpstore import _backend
from fpstore.index import search, tiers
from fpstore.store.keys import (
    FLAG_SHORT,
    FLAG_TEXT,
    LOOKUP_KEY_BYTES,
    lookup_key,
    pack_record,
    typed_key,
    unpack_record,
    untyped_key,
)
from fpstore.store.results import AddResult, Cluster, Document, Match, sort_matches
from fpstore.store import inspect
from fpstore.store.header import (
    BASE_DBS,
    CHECKPOINT_PREFIX,
    FORMAT_VERSION,  # noqa: F401 (tools/make_golden_stores.py reads it here)
    H_COUNT,
    H_HEADER,
    H_IDF,
    H_NEXT_ID,
    U64,
    checkpoint_key,
    decode_checkpoint,
    decode_header,
    encode_checkpoint,
    new_header,
    stored_design_and_pipeline,
    table_name,
)
from fpstore.store.catalog import Catalog, read_u64
from fpstore.store.lsm import FLUSH_ENTRIES, prepare_load, take
from fpstore.store.storage import DATA_FILE, Storage

__all__ = ["AddResult", "Cluster", "Document", "Match", "Store", "open"]

_search_kernels = _backend.load("search")


ITER_BATCH = 1000


def _fingerprint_int(value: object) -> int:
    """One fingerprint as a Python int, checked (no numpy on the single-query path)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and 0 <= int(value) < 1 << 64:
        return int(value)
    raise InputError(f"fingerprint must be an int in 0..2**64-1, got {value!r}")


class Store:
    """A near-duplicate store in a directory. Create or open one with :func:`fpstore.open`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        k: int | None = None,
        pipeline: Pipeline | None = None,
        design: str | Design = "auto",
        expected_size: int | None = None,
        readonly: bool = False,
        create: bool = True,
        map_size: int | None = None,
        allow_network_fs: bool = False,
        verify: bool = False,
        flush_entries: int = FLUSH_ENTRIES,
    ) -> None:
        if pipeline is not None and not isinstance(pipeline, Pipeline):
            raise InputError(f"pipeline must be a fpstore.Pipeline, not {type(pipeline).__name__}")
        if isinstance(flush_entries, bool) or not isinstance(flush_entries, int) or flush_entries < 0:
            raise InputError(f"flush_entries must be an int >= 0, got {flush_entries!r}")
        #: Documents held in the incremental tables before a write moves them into a run (0: never).
        self.flush_entries = flush_entries
        # A new store's arguments are checked before anything is made on disk.
        creating = create and not readonly and not os.path.exists(os.path.join(os.fspath(path), DATA_FILE))
        planned = design_for(3 if k is None else k, expected_size, design) if creating else None
        self._storage = Storage(
            path, BASE_DBS, readonly=readonly, create=create, map_size=map_size,
            allow_network_fs=allow_network_fs, verify=verify,
        )
        try:
            if self._storage.is_new:
                self._create(planned or design_for(3 if k is None else k, expected_size, design), pipeline or Pipeline())
            else:
                self._load(pipeline, design)
            self.k = self._check_k(self.design.k if k is None else k)
        except BaseException:
            if self._storage.is_new:
                self._storage.discard()  # a store that could not be created leaves nothing behind
            else:
                self._storage.close()
            raise

    # -- opening --------------------------------------------------------------------------------

    def _create(self, design: Design, pipeline: Pipeline) -> None:
        self.design = design
        self.pipeline = pipeline
        self.header = header = new_header(design, pipeline)
        names = BASE_DBS + [table_name(t) for t in range(len(self.design.tables))]

        def fill(txn: lmdb.Transaction, dbs: dict[str, Any]) -> None:
            meta = dbs["meta"]
            txn.put(H_HEADER, msgpack.packb(header, use_bin_type=True), db=meta)
            if pipeline.idf is not None:
                txn.put(H_IDF, pipeline.idf.to_bytes(), db=meta)
            txn.put(H_NEXT_ID, U64.pack(1), db=meta)
            txn.put(H_COUNT, U64.pack(0), db=meta)

        self._storage.create(names, fill)
        self._bind_dbs()

    def _load(self, pipeline: Pipeline | None, design: str | Design) -> None:
        path = self._storage.path
        with self._storage.read() as txn:
            raw = txn.get(H_HEADER, db=self._storage.dbs["meta"])
            idf_raw = txn.get(H_IDF, db=self._storage.dbs["meta"])
            # Views point into the map: copy what outlives the transaction.
            raw = bytes(raw) if raw is not None else None
            idf_raw = bytes(idf_raw) if idf_raw is not None else None
        if raw is None:
            raise NotAStoreError(f"{path} has no fpstore header")
        self.header = header = decode_header(raw, path)
        self.design, self.pipeline = stored_design_and_pipeline(header, idf_raw, path, pipeline, design)
        self._storage.open_dbs([table_name(t) for t in range(len(self.design.tables))])
        self._bind_dbs()

    def _bind_dbs(self) -> None:
        self._cat = cat = Catalog(self._storage.dbs, self.design)
        # The tables by name, for tools and tests that look below the API.
        self._meta, self._docs, self._keys, self._content = cat.meta, cat.docs, cat.keys, cat.content
        self._blobs, self._dead, self._tables = cat.blobs, cat.dead, cat.tables
        self._state = cat.state

    def _check_k(self, k: object) -> int:
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise InputError(f"k must be an int >= 0, got {k!r}")
        if k > self.design.k:
            raise DesignError(
                f"k={k} is above the store's design ({self.design.name}, exact up to k={self.design.k}); "
                "pass exhaustive=True to scan every fingerprint, or create a store with a larger k"
            )
        return k

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def path(self) -> str:
        return self._storage.path

    @property
    def readonly(self) -> bool:
        return self._storage.readonly

    def close(self) -> None:
        """Close the store (idempotent). Later use raises :class:`~fpstore.errors.ClosedError`."""
        self._storage.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<fpstore.Store {self.path!r} design={self.design.name} k={self.k} pipeline={self.pipeline.id}>"

    # -- input validation ----------------------------------------------------------------------

    def _check_pipeline_id(self, pipeline_id: object) -> None:
        if pipeline_id is None:
            raise PipelineMismatchError(
                "raw fingerprints need the id of the pipeline that made them: pass pipeline_id= "
                f"(this store's is {self.pipeline.id}) or a Fingerprints object"
            )
        if pipeline_id != self.pipeline.id:
            raise PipelineMismatchError(
                f"fingerprints from pipeline {pipeline_id!r} cannot enter this store, whose pipeline is {self.pipeline.id}"
            )

    def _signatures(
        self, n: int | None, texts: Sequence[object] | None, fingerprints: object, pipeline_id: object
    ) -> Fingerprints:
        """One :class:`Fingerprints` batch from exactly one of ``texts`` and ``fingerprints``."""
        if (texts is None) == (fingerprints is None):
            raise InputError("pass exactly one of texts= and fingerprints=")
        if texts is not None:
            if isinstance(texts, (str, bytes)):
                raise InputError("texts must be a sequence of texts; use add() for one document")
            sigs = self.pipeline.signatures(texts)
        elif isinstance(fingerprints, Fingerprints):
            self._check_pipeline_id(fingerprints.pipeline_id)
            if pipeline_id is not None and pipeline_id != fingerprints.pipeline_id:
                raise PipelineMismatchError("pipeline_id= differs from the Fingerprints object's pipeline id")
            sigs = fingerprints
            as_fingerprint_array(sigs.values)
        else:
            self._check_pipeline_id(pipeline_id)
            sigs = Fingerprints(as_fingerprint_array(fingerprints), self.pipeline.id)
        if n is not None and len(sigs) != n:
            raise InputError(f"{n} keys but {len(sigs)} {'texts' if texts is not None else 'fingerprints'}")
        return sigs

    # -- reading helpers (inside a transaction) -------------------------------------------------

    # -- writing helpers (inside a write transaction) -------------------------------------------

    # -- public API: writing --------------------------------------------------------------------

    def add(
        self,
        key: str | bytes,
        *,
        text: object = None,
        fingerprint: int | None = None,
        pipeline_id: str | None = None,
        on_duplicate: str = "insert",
    ) -> AddResult:
        """Add one document (durably, in its own transaction) and say what it duplicates.

        Give ``text`` (fingerprinted with the store's pipeline; the exact-duplicate tier applies)
        or ``fingerprint`` with the ``pipeline_id`` that made it. Re-adding a key replaces that
        document; adding the same key with the same fingerprint and content changes nothing.
        ``on_duplicate="skip"`` stores nothing when an exact or near duplicate exists. Texts below
        the pipeline's ``min_tokens`` are matched only exactly (``short=True``).
        """
        typed = typed_key(key)
        if on_duplicate not in ("insert", "skip"):
            raise InputError(f"on_duplicate must be 'insert' or 'skip', got {on_duplicate!r}")
        if (text is None) == (fingerprint is None):
            raise InputError("pass exactly one of text= and fingerprint=")
        if text is not None:
            sig = self.pipeline.signature(text)
            fp, short, content_hash, flags = sig.fingerprint, sig.short, sig.content_hash, FLAG_TEXT
        else:
            self._check_pipeline_id(pipeline_id)
            fp = _fingerprint_int(fingerprint)
            short, content_hash, flags = False, None, 0
        if short:
            flags |= FLAG_SHORT
        k = self.k

        def work(txn: lmdb.Transaction) -> AddResult:
            old_id = self._cat.id_of(txn, typed)
            if old_id is not None:
                old = self._cat.record(txn, old_id)
                if old is not None and old[1] == fp and old[2] == content_hash and old[4] == flags:
                    return self._cat.verdict(txn, old_id, typed, fp, content_hash, short, k)
            exact_ids = [i for i in self._cat.content_ids(txn, content_hash) if i != old_id] if content_hash else []
            near = {} if short else self._cat.probe(txn, fp, k, exclude=old_id or 0)
            result = self._cat.verdict_from(txn, None, typed, fp, short, exact_ids, near)
            if on_duplicate == "skip" and result.duplicate_of is not None:
                return result
            # A replaced document gets a new id: its old fingerprint may sit in an immutable run,
            # where only a tombstone on the old id can remove it.
            doc_id = self._cat.meta_int(txn, H_NEXT_ID)
            txn.put(H_NEXT_ID, U64.pack(doc_id + 1), db=self._meta)
            if old_id is not None:
                self._cat.remove(txn, old_id)
            else:
                txn.put(H_COUNT, U64.pack(self._cat.meta_int(txn, H_COUNT) + 1), db=self._meta)
            canonical_id = self._cat.canonical_id(txn, exact_ids, near)
            if canonical_id == doc_id:
                canonical_id = 0
            txn.put(U64.pack(doc_id), pack_record(typed, fp, content_hash, canonical_id, flags), db=self._docs)
            txn.put(lookup_key(typed), U64.pack(doc_id), db=self._keys)
            if content_hash is not None:
                txn.put(content_hash + U64.pack(doc_id), b"", db=self._content)
            if not short:
                self._cat.incremental.put(txn, fp, doc_id)
            canonical = self._cat.key_of(txn, canonical_id) if canonical_id else None
            if not short:
                self._flush(txn)
            return AddResult(doc_id, result.key, fp, short, result.exact_duplicate_of, result.near_duplicates, canonical)

        return self._storage.write(work, action=f"adding {key!r}")

    def add_many(
        self,
        keys: Sequence[str | bytes | int],
        *,
        texts: Sequence[object] | None = None,
        fingerprints: object = None,
        pipeline_id: str | None = None,
        checkpoint: tuple[str, Any] | None = None,
        canonicals: Sequence[str | bytes | int | None] | None = None,
    ) -> np.ndarray:
        """Add a batch in one durable transaction; returns the documents' ids (int64).

        Either every document is stored, with ``checkpoint=(name, position)`` recorded in the same
        transaction, or none is. Keys already stored are replaced; a key repeated within the batch
        keeps its last document; a document given again unchanged (same fingerprint, content hash
        and flags) keeps its id, so a rerun of a batch changes nothing. No verdicts are computed
        (use :meth:`add` for them, or :meth:`near_duplicate_pairs` afterwards).

        ``canonicals``, one per key, records the key of the document each one is a variant of (None:
        its own canonical). A canonical key must be stored already or be a key of this batch; any
        other makes the whole batch an :class:`InputError`.
        """
        if isinstance(keys, (str, bytes)):
            raise InputError("keys must be a sequence of keys; use add() for one document")
        typed_keys = [typed_key(k) for k in keys]
        sigs = self._signatures(len(typed_keys), texts, fingerprints, pipeline_id)
        ckpt = encode_checkpoint(checkpoint) if checkpoint is not None else None
        n = len(typed_keys)
        canon_typed: list[bytes | None] = [None] * n
        if canonicals is not None:
            if isinstance(canonicals, (str, bytes)) or not hasattr(canonicals, "__len__") or len(canonicals) != n:
                raise InputError(f"canonicals must be a sequence of one key (or None) per document: {n} keys")
            canon_typed = [None if c is None else typed_key(c, LOOKUP_KEY_BYTES) for c in canonicals]
        fps = sigs.values
        short = sigs.short if sigs.short is not None else np.zeros(n, dtype=bool)
        # Content hashes come with texts, and with Fingerprints that carry them (an import).
        has_hash = sigs.content_hashes is not None
        # Last occurrence of a key wins; earlier ones are dropped before any write.
        last: dict[bytes, int] = {}
        for i, t in enumerate(typed_keys):
            last[t] = i
        keep = np.fromiter(sorted(last.values()), dtype=np.int64, count=len(last))

        def work(txn: lmdb.Transaction) -> np.ndarray:
            ids = np.zeros(n, dtype=np.int64)
            next_id = self._cat.meta_int(txn, H_NEXT_ID)
            count = self._cat.meta_int(txn, H_COUNT)
            kept = keep.tolist()
            old_ids = self._cat.ids_of_many(txn, [typed_keys[i] for i in kept])
            fresh: list[int] = []  # batch positions that get a new id (new keys, changed documents)
            rewrite: list[int] = []  # unchanged documents whose record is rewritten for its canonical
            for i, old_id in zip(kept, old_ids):
                flags = (FLAG_TEXT if has_hash else 0) | (FLAG_SHORT if short[i] else 0)
                if old_id is not None:
                    same = self._cat.unchanged(txn, old_id, int(fps[i]), sigs.content_hash(i), flags, canon_typed[i], typed_keys[i], canonicals is not None)
                    if same is not None:
                        ids[i] = old_id
                        if same == "rewrite":
                            rewrite.append(i)
                        continue
                    # A changed document gets a new id: its old fingerprint may sit in an
                    # immutable run, where only a tombstone on the old id can remove it.
                    self._cat.remove(txn, old_id)
                else:
                    count += 1
                ids[i] = next_id
                next_id += 1
                fresh.append(i)
            canonical_ids = self._cat.resolve_canonicals(txn, [canon_typed[i] for i in fresh + rewrite], last, ids)
            docs: list[tuple[bytes, bytes]] = []
            key_items: list[tuple[bytes, bytes]] = []
            content_items: list[tuple[bytes, bytes]] = []
            for i, canonical_id in zip(fresh + rewrite, canonical_ids):
                doc_id = int(ids[i])
                flags = (FLAG_TEXT if has_hash else 0) | (FLAG_SHORT if short[i] else 0)
                content_hash = sigs.content_hash(i) if has_hash else None
                packed_id = U64.pack(doc_id)
                record = pack_record(typed_keys[i], int(fps[i]), content_hash, 0 if canonical_id == doc_id else canonical_id, flags)
                docs.append((packed_id, record))
                if i in rewrite:
                    continue
                key_items.append((lookup_key(typed_keys[i]), packed_id))
                if content_hash is not None:
                    content_items.append((content_hash + packed_id, b""))
            for i in range(n):  # duplicates within the batch share the surviving document's id
                ids[i] = ids[last[typed_keys[i]]]
            txn.cursor(db=self._docs).putmulti(sorted(docs))
            txn.cursor(db=self._keys).putmulti(sorted(key_items))
            if content_items:
                txn.cursor(db=self._content).putmulti(sorted(content_items))
            fresh_arr = np.array(fresh, dtype=np.int64)
            indexed = fresh_arr[~short[fresh_arr]] if len(fresh_arr) else fresh_arr
            if len(indexed):
                self._cat.incremental.put_many(txn, fps[indexed], ids[indexed].astype(np.uint64))
            txn.put(H_NEXT_ID, U64.pack(next_id), db=self._meta)
            txn.put(H_COUNT, U64.pack(count), db=self._meta)
            if ckpt is not None:
                txn.put(ckpt[0], ckpt[1], db=self._meta)
            if len(indexed):
                self._flush(txn)
            return ids

        return self._storage.write(work, action=f"adding a batch of {n}")

    # -- bulk loads and compaction -------------------------------------------------------------

    def bulk_load(
        self,
        keys: object,
        fingerprints: object = None,
        *,
        pipeline_id: str | None = None,
        progress: Callable[[int, int | None], None] | None = None,
        max_run: int = 1 << 24,
    ) -> int:
        """Load many documents into immutable sorted runs; returns how many were loaded.

        ``keys`` and ``fingerprints`` are parallel sequences (numpy integer arrays of keys take a
        fast path), or ``fingerprints`` is None and ``keys`` is an iterable of ``(keys,
        fingerprints)`` chunks streamed through bounded memory: every ``max_run`` documents become
        one run, written in one durable transaction (a crash loses at most the run in progress).
        Fingerprints need this store's ``pipeline_id`` (or come as a :class:`Fingerprints`).
        Keys already stored are replaced; within one run the last copy of a key wins.
        ``progress(done, total)`` is called after each run (total None when streaming).
        """
        self._storage.check_writable()
        if not isinstance(max_run, int) or max_run < 1:
            raise InputError(f"max_run must be a positive int, got {max_run!r}")
        if fingerprints is not None:
            chunks: Iterable[tuple[object, object]] = [(keys, fingerprints)]
            total: int | None = len(fingerprints)  # type: ignore[arg-type]
        else:
            if isinstance(keys, (str, bytes, np.ndarray)):
                raise InputError("bulk_load takes keys and fingerprints, or an iterable of (keys, fingerprints) chunks")
            chunks, total = keys, None  # type: ignore[assignment]
        done = 0
        pending_keys: list[object] = []
        pending_fps: list[np.ndarray] = []
        pending = 0
        for chunk in chunks:
            if not isinstance(chunk, tuple) or len(chunk) != 2:
                raise InputError("each bulk_load chunk must be a (keys, fingerprints) pair")
            ck, cf = chunk
            sigs = self._signatures(len(ck), None, cf, pipeline_id)  # type: ignore[arg-type]
            pending_keys.append(ck)
            pending_fps.append(sigs.values)
            pending += len(sigs.values)
            while pending >= max_run:
                keys_run, fps_run, pending_keys, pending_fps = take(pending_keys, pending_fps, max_run)
                pending -= len(fps_run)
                done += self._load_run(keys_run, fps_run)
                if progress is not None:
                    progress(done, total)
        if pending:
            keys_run, fps_run, _, _ = take(pending_keys, pending_fps, pending)
            done += self._load_run(keys_run, fps_run)
            if progress is not None:
                progress(done, total)
        return done

    def _load_run(self, keys: object, fps: np.ndarray) -> int:
        """Write one run and its key segment in one transaction."""
        load = prepare_load(keys, fps)
        if load is None:
            return 0
        m = len(load.fps)
        with self._storage.read() as txn:
            state = self._cat.state(txn)
            base = self._cat.meta_int(txn, H_NEXT_ID)
        blobs, run_rec, seg_rec = self._cat.lsm.load_blobs(load, state, base)
        self._storage.reserve(tiers.blobs_size(blobs))
        check_existing = bool(state.segs) or len(self) > 0

        def work(txn: lmdb.Transaction) -> int:
            replaced = 0
            if check_existing:
                for old in self._cat.ids_of_many(txn, load.typed_keys(), load.hashes):
                    if old is not None:
                        self._cat.remove(txn, old)
                        replaced += 1
            self._cat.lsm.add_load(txn, self._cat.state(txn), blobs, run_rec, seg_rec)
            txn.put(H_NEXT_ID, U64.pack(base + m), db=self._meta)
            txn.put(H_COUNT, U64.pack(self._cat.meta_int(txn, H_COUNT) + m - replaced), db=self._meta)
            return m

        return self._storage.write(work, action=f"bulk loading {m} documents")

    def compact(self, *, full: bool = True) -> dict[str, int]:
        """Merge the incremental tables (and, when ``full``, every run) into one new run per table.

        Tombstoned entries are dropped. One write transaction: readers keep their snapshot, and
        a crash leaves the old state or the new one. Returns counts of what was merged.
        """
        self._storage.check_writable()
        with self._storage.read() as txn:
            state = self._cat.state(txn)
            incremental = self._cat.incremental.entries(txn)
            tombstones = txn.stat(self._dead)["entries"]
        merged = state.runs if full else []
        if incremental or len(merged) > 1 or (merged and tombstones):
            # Room for the new run up front (about 8 bytes per entry and table, ids included), so
            # the transaction is not aborted and rerun on a full map after all its work.
            entries = incremental + sum(r["count"] for r in merged)
            self._storage.reserve(entries * 8 * (len(self.design.tables) + 1))

        def work(txn: lmdb.Transaction) -> dict[str, int]:
            # Merge what this transaction sees (another writer may have changed it since the read).
            state = self._cat.state(txn)
            new_state, result = self._cat.lsm.merge(txn, state, state.runs if full else [], incremental=True)
            if new_state is not state:
                self._cat.lsm.save_state(txn, new_state)
            return result

        return self._storage.write(work, action="compacting")

    def _flush(self, txn: lmdb.Transaction) -> None:
        """After a write: flush the incremental tables into a run once they hold
        ``flush_entries`` documents (see :meth:`fpstore.store.lsm.Lsm.flush`)."""
        if self.flush_entries and self._cat.incremental.entries(txn) >= self.flush_entries:
            self._cat.lsm.flush(txn, self._cat.state(txn), self.flush_entries)

    def compact_file(self) -> dict[str, int]:
        """Compact (see :meth:`compact`), then rewrite the file without its free pages.

        LMDB reuses freed pages but never shrinks its file; this copies the live pages to a new
        file and switches to it atomically. It needs the store to itself: another process with the
        store open makes it raise :class:`~fpstore.errors.StorageError` before anything changes.
        """
        result = self.compact()
        tables = [table_name(t) for t in range(len(self.design.tables))]

        def reopen() -> None:
            self._storage.open_dbs(BASE_DBS + tables)
            self._bind_dbs()

        before, after = self._storage.compact_file(reopen)
        return {**result, "file_bytes_before": before, "file_bytes_after": after}

    # -- all pairs ------------------------------------------------------------------------------

    def near_duplicate_pairs(self, k: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every pair of live documents within ``k`` bits, exactly once: ``(id_a, id_b, distance)``.

        ``id_a < id_b``; identical fingerprints are included (distance 0); rows are sorted by
        ``(id_a, id_b)``. Documents too short for near-duplicate matching take no part.
        ``k`` may exceed the design's: the join builds its own tables in memory.
        """
        kq = self.k if k is None else k
        if not isinstance(kq, int) or isinstance(kq, bool) or not 0 <= kq <= 10:
            raise InputError(f"k must be an int in 0..10, got {kq!r}")
        with self._storage.read() as txn:
            fps, ids = self._cat.live_index(txn)
        i, j, d = search.pairs_within(fps, kq)
        a, b = ids[i].astype(np.int64), ids[j].astype(np.int64)
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        order = np.lexsort((hi, lo))
        return lo[order], hi[order], d[order]

    def clusters(self, k: int | None = None) -> list["Cluster"]:
        """Connected components of the near-duplicate graph (size >= 2), largest first.

        Each cluster's canonical member is the document with the smallest id (the oldest);
        ``keys`` lists the canonical first, then the others by id.
        """
        a, b, _ = self.near_duplicate_pairs(k)
        if not len(a):
            return []
        nodes, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)
        labels = _search_kernels.components(len(nodes), inverse[: len(a)].astype(np.int64), inverse[len(a) :].astype(np.int64))
        order = np.lexsort((nodes, labels))
        labels, members = labels[order], nodes[order]
        bounds = np.flatnonzero(np.diff(labels)) + 1
        groups = np.split(members, bounds)
        groups.sort(key=lambda g: (-len(g), int(g[0])))
        with self._storage.read() as txn:
            keys = iter(self._cat.keys_of(txn, [int(i) for g in groups for i in g]))
            out = []
            for g in groups:
                members = [next(keys) for _ in range(len(g))]
                out.append(Cluster(members[0], members, g))
            return out

    def delete(self, key: str | bytes) -> bool:
        """Delete a document; returns whether it existed. Durable when it returns."""
        typed = typed_key(key, LOOKUP_KEY_BYTES)

        def work(txn: lmdb.Transaction) -> bool:
            doc_id = self._cat.id_of(txn, typed)
            if doc_id is None:
                return False
            self._cat.remove(txn, doc_id)
            txn.put(H_COUNT, U64.pack(self._cat.meta_int(txn, H_COUNT) - 1), db=self._meta)
            return True

        return self._storage.write(work, action=f"deleting {key!r}")

    # -- checkpoints ----------------------------------------------------------------------------

    def checkpoint(self, name: str) -> Any:
        """The position last committed for checkpoint ``name``, or None."""
        key = checkpoint_key(name)
        with self._storage.read() as txn:
            raw = txn.get(key, db=self._meta)
            raw = bytes(raw) if raw is not None else None
        return None if raw is None else decode_checkpoint(raw, name)

    def checkpoints(self) -> dict[str, Any]:
        """Every checkpoint of the store: name → position, in one snapshot."""
        out: dict[str, Any] = {}
        with self._storage.read() as txn:
            cur = txn.cursor(db=self._meta)
            if cur.set_range(CHECKPOINT_PREFIX):
                for key, raw in cur:
                    key = bytes(key)
                    if not key.startswith(CHECKPOINT_PREFIX):
                        break
                    try:
                        name = key[len(CHECKPOINT_PREFIX):].decode("utf-8")
                    except UnicodeDecodeError:
                        raise CorruptionError(f"a checkpoint name is not UTF-8: {key!r}") from None
                    out[name] = decode_checkpoint(bytes(raw), name)
        return out

    def set_checkpoint(self, name: str, position: Any) -> None:
        """Record checkpoint ``name`` at ``position`` on its own, durably (``add_many`` records one
        together with its batch, which is what resuming a feed needs)."""
        key, packed = encode_checkpoint((name, position))

        def work(txn: lmdb.Transaction) -> None:
            txn.put(key, packed, db=self._meta)

        self._storage.write(work, action=f"setting checkpoint {name!r}")

    # -- public API: reading --------------------------------------------------------------------

    def query(
        self,
        *,
        text: object = None,
        fingerprint: int | None = None,
        pipeline_id: str | None = None,
        k: int | None = None,
        exhaustive: bool = False,
    ) -> list[Match]:
        """Stored documents within ``k`` bits (default: the store's k), sorted by distance then key.

        Exact: the same set a comparison with every stored fingerprint gives. ``k`` above the
        design's needs ``exhaustive=True``, which compares with every fingerprint (O(n)). A short
        text (below ``min_tokens``) matches only documents with the same content hash.
        """
        if (text is None) == (fingerprint is None):
            raise InputError("pass exactly one of text= and fingerprint=")
        kq = self.k if k is None else k
        if exhaustive:
            if not isinstance(kq, int) or isinstance(kq, bool) or not 0 <= kq <= 64:
                raise InputError(f"k must be an int in 0..64, got {kq!r}")
        else:
            kq = self._check_k(kq)
        content_hash = None
        if text is not None:
            sig = self.pipeline.signature(text)
            fp = sig.fingerprint
            if sig.short:
                content_hash = sig.content_hash
        else:
            self._check_pipeline_id(pipeline_id)
            fp = _fingerprint_int(fingerprint)
        with self._storage.read() as txn:
            if content_hash is not None:
                found = {i: (0, fp) for i in self._cat.content_ids(txn, content_hash)}
            elif exhaustive:
                found = self._cat.scan_all(txn, fp, kq)
            else:
                # One state read serves the probe and the key lookups of this snapshot.
                state = self._cat.state(txn)
                return self._cat.matches(txn, self._cat.probe(txn, fp, kq, state=state), state)
            return self._cat.matches(txn, found)

    def query_many(
        self, fingerprints: object, *, pipeline_id: str | None = None, k: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All matches of many fingerprints in one snapshot, columnar (Manku's batch mode).

        Returns ``(query_index int64, id int64, distance uint8)``, sorted by query index, then
        distance, then id. Keys of ids come from :meth:`keys_of`.
        """
        sigs = self._signatures(None, None, fingerprints, pipeline_id)
        kq = self._check_k(self.k if k is None else k)
        fps = np.ascontiguousarray(sigs.values)
        with self._storage.read() as txn:
            rq, rid, rd, _ = search.batch_probe_runs(self._cat.runs(txn), self.design, fps, kq)
            dead = self._cat.lsm.dead_ids(txn)
            if len(dead) and len(rid):
                keep = ~np.isin(rid.astype(np.uint64), dead)
                rq, rid, rd = rq[keep], rid[keep], rd[keep]
            iq, iid, idist = self._cat.incremental.probe_batch(txn, fps, kq)
        if len(iq):
            # The incremental tables report a document once per table that reaches it.
            first = search.unique_rows(iq, iid)
            iq, iid, idist = iq[first], iid[first], idist[first]
        # Runs report each (query, document) once, and no document is in two tiers.
        q = np.concatenate([rq, iq])
        ids = np.concatenate([rid, iid])
        dist = np.concatenate([rd, idist])
        # Order by (query, distance, id): two stable radix passes instead of a lexsort.
        by_id = search.argsort_u64(ids.astype(np.uint64))
        key = (q[by_id].astype(np.uint64) << np.uint64(8)) | dist[by_id].astype(np.uint64)
        order = by_id[search.argsort_u64(key)]
        return q[order], ids[order], dist[order]

    def keys_of(self, ids: Iterable[int]) -> list[str | bytes | int]:
        """The keys of document ids (as returned by :meth:`query_many`), in one snapshot."""
        with self._storage.read() as txn:
            return self._cat.keys_of(txn, [int(i) for i in ids])

    def get(self, key: str | bytes, default: Any = None) -> Document | Any:
        """The stored :class:`Document` for ``key``, or ``default``."""
        typed = typed_key(key, LOOKUP_KEY_BYTES)
        with self._storage.read() as txn:
            doc_id = self._cat.id_of(txn, typed)
            if doc_id is None:
                return default
            rec = self._cat.record(txn, doc_id)
            if rec is None:
                raise CorruptionError(f"key {key!r} names document {doc_id}, which has no record")
            typed_stored, fp, content_hash, canonical, flags = rec
            live = self._cat.canonical_of(txn, doc_id)
            canonical_key = self._cat.key_of(txn, live) if live != doc_id else None
            return Document(untyped_key(typed_stored), doc_id, fp, content_hash, canonical_key, bool(flags & FLAG_SHORT))

    def __getitem__(self, key: str | bytes) -> Document:
        doc = self.get(key)
        if doc is None:
            raise KeyError(key)
        return doc

    def __contains__(self, key: object) -> bool:
        try:
            typed = typed_key(key, LOOKUP_KEY_BYTES)
        except InputError:
            return False
        with self._storage.read() as txn:
            return self._cat.id_of(txn, typed) is not None

    def __len__(self) -> int:
        with self._storage.read() as txn:
            count = self._cat.meta_int(txn, H_COUNT)
            # Ids start at 1 and are never reused, so more live documents than ids ever given
            # out can only be a damaged counter (list(store) would preallocate from it).
            if count > self._cat.meta_int(txn, H_NEXT_ID) - 1:
                raise CorruptionError(f"the store's document count {count} exceeds the ids it ever assigned: the counter is damaged")
            return count

    def __iter__(self) -> Iterator[str | bytes | int]:
        """Keys in id order; read in batches so no transaction spans a yield."""
        for batch in self._batches(False):
            for _, rec in batch:
                yield untyped_key(rec[0])

    def documents(self) -> Iterator[Document]:
        """Every live :class:`Document` in id order (each what :meth:`get` of its key returns);
        read in batches so no transaction spans a yield."""
        for batch in self._batches(True):
            yield from batch

    def _batches(self, documents: bool) -> Iterator[list[Any]]:
        """Live documents in id order, ``ITER_BATCH`` per snapshot: ``(id, record)`` pairs (the
        record's first field is the typed key), or, when ``documents``, :class:`Document` objects."""
        after = 0
        end = 1 << 64
        while True:
            batch: list[tuple[int, tuple[Any, ...]]] = []
            covered = end  # every live id in (after, covered] is in this batch
            with self._storage.read() as txn:
                cur = txn.cursor(db=self._docs)
                if cur.set_range(U64.pack(after + 1)):
                    for raw_id, raw in cur:
                        batch.append((read_u64(raw_id, "document id"), unpack_record(raw)))
                        if len(batch) >= ITER_BATCH:
                            covered = batch[-1][0]
                            break
                dead = set(self._cat.lsm.dead_ids(txn).tolist())
                for seg in self._cat.segments(txn):
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
                out = [self._cat.document(txn, doc_id, rec) for doc_id, rec in batch] if documents else batch
            yield out
            if covered >= end:
                return
            after = covered

    def warm(self) -> int:
        """Read every page of the index (runs, key segments, incremental tables) once, so that
        later queries find them mapped; returns the bytes read.

        A query touches a few pages of the memory map that LMDB reads from; the first touch of a
        page costs a page fault (microseconds, more under a hypervisor, a disk read when the file
        is not cached). A long-running process pays that once per page; a process that must
        answer fast from its first query can pay it up front, at about 1 GB/s of index.
        """
        import zlib

        total = 0
        with self._storage.read() as txn:
            for db in [self._blobs, *self._tables]:
                for key, value in txn.cursor(db=db):
                    total += len(key) + len(value)
                    zlib.adler32(value)  # reads every byte, so every page is faulted in
        return total

    def info(self) -> dict[str, Any]:
        """Header, design, counts and storage figures, as plain data."""
        storage = self._storage.info()
        n = len(self)
        with self._storage.read() as txn:
            state = self._cat.state(txn)
            incremental = txn.stat(self._tables[0])["entries"]
            tombstones = txn.stat(self._dead)["entries"]
        return {
            "path": self.path,
            "format": self.header["format"],
            "pipeline_id": self.pipeline.id,
            "pipeline": self.pipeline.config,
            "design": self.design.describe(max(n, 1)),
            "k": self.k,
            "documents": n,
            "incremental_entries": incremental,
            "runs": [r["count"] for r in state.runs],
            "tombstones": tombstones,
            "flush_entries": self.flush_entries,
            "file_size": storage["file_size"],
            "map_size": storage["map_size"],
            "created": self.header.get("created"),
            "lmdb": inspect.lmdb_figures(self._storage),
        }

    # -- inspection -----------------------------------------------------------------------------

    def fingerprints(self) -> tuple[np.ndarray, np.ndarray]:
        """``(fingerprints, ids)``, both uint64, of every indexed live document (both tiers; short
        documents are not indexed), in one snapshot; no particular order."""
        with self._storage.read() as txn:
            return self._cat.live_index(txn)

    def verify(self, *, deep: bool = True) -> list[str]:
        """Problems found in the store (read-only, [] when it is sound; at most 100).

        ``deep`` reads every document and every table entry: every live document's record decodes
        and its key maps back to it; the document count agrees; every indexed live document sits
        in table 0 (incremental tables plus runs, less tombstones) with its fingerprint; every
        other table holds exactly table 0's fingerprints, permuted; runs are sorted and decodable.
        Otherwise only the counters, the tables' sizes and the runs' indexes are checked.
        LMDB's structural check of the file is :func:`fpstore.store.storage.structure_problems`.
        """
        problems = inspect.Problems()
        with self._storage.read() as txn:
            count = self._cat.meta_int(txn, H_COUNT)
            next_id = self._cat.meta_int(txn, H_NEXT_ID)
            if not deep:
                inspect.check_shallow(txn, self._tables, self._cat.runs(txn), count, next_id, problems)
                return list(problems)
            dead = set(int(i) for i in self._cat.lsm.dead_ids(txn).tolist())
            index = inspect.check_tables(txn, self.design, self._tables, self._cat.runs(txn), dead, problems)
        if index is not None:
            inspect.check_documents(((key, self.get(key)) for key in self), count, next_id, index, problems)
        return list(problems)

    def stats(self, *, sample: int = 10000, seed: int = 0) -> dict[str, Any]:
        """Per table, candidates per probe and per query over ``sample`` stored fingerprints, and
        histograms of Hamming distances (random pairs; nearest neighbours), as plain data.
        Deterministic for a given ``seed``."""
        fps, _ = self.fingerprints()
        return inspect.table_stats(self.design, np.asarray(fps, dtype=np.uint64), len(self), sample, seed)


def open(
    path: str | os.PathLike[str],
    *,
    k: int | None = None,
    pipeline: Pipeline | None = None,
    design: str | Design = "auto",
    expected_size: int | None = None,
    readonly: bool = False,
    create: bool = True,
    map_size: int | None = None,
    allow_network_fs: bool = False,
    verify: bool = False,
    flush_entries: int = FLUSH_ENTRIES,
) -> Store:
    """Open the store in directory ``path``, creating it (mode 0700) when missing and ``create``.

    A store is created only in a new or an empty directory: a directory holding anything else
    raises :class:`~fpstore.errors.NotAStoreError` and is left untouched. A create that fails (a
    refused argument, a full disk) leaves nothing behind. ``readonly=True`` also opens a store on
    read-only media (or files this user may not write): LMDB's lock file cannot record such a
    reader, so it holds a shared lock on ``writer.lock`` instead, and no writer can start until it
    closes. A store dropped without :meth:`Store.close` is closed when it is collected, with a
    ``ResourceWarning``.

    ``k`` is the default query radius; for a new store it also chooses the design (exact up to k,
    default 3). ``pipeline`` defaults to :class:`Pipeline()` for a new store and must match an
    existing store's. ``design`` is ``"auto"`` (chosen from ``expected_size``), a design name or a
    :class:`~fpstore.index.design.Design`. One process writes; others open with ``readonly=True``.

    ``verify=True`` checks the file's structure before LMDB maps it (verify-then-trust, for
    store files from elsewhere: LMDB itself trusts its pages and can abort on a damaged one).

    ``flush_entries``: once this many documents sit in the incremental tables, the write that
    reached it moves them into a run and merges small runs by size tiers (see docs/tuning.md).
    The writes between flushes stay small and fast; the flushing write takes longer. 0 leaves
    everything in the incremental tables until :meth:`Store.compact`.
    """
    return Store(
        path,
        k=k,
        pipeline=pipeline,
        design=design,
        expected_size=expected_size,
        readonly=readonly,
        create=create,
        map_size=map_size,
        allow_network_fs=allow_network_fs,
        verify=verify,
        flush_entries=flush_entries,
    )


# Old private names, kept until fpstore.spark imports fpstore.store.keys and fpstore.store.results.
_typed_key, _sort_matches = typed_key, sort_matches
