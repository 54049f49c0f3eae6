"""The store: documents, their fingerprints in permuted tables, and exact near-duplicate answers.

One LMDB environment holds the documents, their keys and content hashes, one table per
permutation of the design and the immutable runs (docs/format.md gives every byte).

A query permutes its fingerprint for every table, scans the key range of each probe prefix,
verifies every candidate with a popcount (permutations preserve Hamming distance) and reports
each document once: exactly what comparing with every stored fingerprint would report.

:class:`Store` is the facade: it checks input and owns transactions. Beside it: :mod:`.catalog`
(the tables read together), :mod:`.writes`, :mod:`.incremental` and :mod:`.lsm` (the tiers),
:mod:`.header`, :mod:`.keys`, :mod:`.sketches`, :mod:`.results`, :mod:`.inspect`, :mod:`.pairs`, :mod:`.explain` and :mod:`.storage` (LMDB).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, cast

import numpy as np

from fpstore.closing import Closing
from fpstore.errors import CorruptionError, DesignError, InputError, NotAStoreError, StorageError
from fpstore.fingerprint.image import DEFAULT_IMAGE_K, ImageInput, ImagePipeline
from fpstore.fingerprint.kinds import AnyPipeline, content_of, is_image
from fpstore.fingerprint.pipeline import DEFAULT_K, Fingerprints, Pipeline
from fpstore.fingerprint.text import Text
from fpstore.hamming import RawFingerprints
from fpstore.index.arrays import int_in
from fpstore.index.design import DEFAULT_EXPECTED_SIZE, Design, design_for
from fpstore.store import inspect, pairs
from fpstore.store import storage as storage_module
from fpstore.store.catalog import Catalog
from fpstore.store.explain import Explanation, explain
from fpstore.store.group import GroupCommit
from fpstore.store.header import (
    BASE_DBS,
    H_COUNT,
    H_HEADER,
    H_IDF,
    H_NEXT_ID,
    checkpoint_key,
    column_dbs,
    decode_checkpoint,
    decode_header,
    encode_checkpoint,
    fill_meta,
    has_int_key_column,
    new_header,
    read_checkpoints,
    stored_design_and_pipeline,
    table_name,
)
from fpstore.store.inputs import OneAdd, batch_adds, load_columns, pack_adds, prepare_add, prepare_batch, unpack_adds
from fpstore.store.keys import LOOKUP_KEY_BYTES, Key, KeyBatch, typed_key, untyped_key
from fpstore.store.lsm import FLUSH_ENTRIES, runs_of
from fpstore.store.merging import MERGE_MODES, Merger, clean_up
from fpstore.store.reading import Reader, query_fingerprint
from fpstore.store.redesign import redesign_plan, switch_design, write_header
from fpstore.store.residency import PageKeeper, check_interval
from fpstore.store.results import AddResult, Cluster, Document, Match, plain_results
from fpstore.store.rows import arrow_table, record_batches
from fpstore.store.sketches import CANDIDATE_K, DEFAULT_THRESHOLD, NEEDS_SKETCH, check_threshold, stored_threshold
from fpstore.store.staging import StagedRequests
from fpstore.store.storage import DATA_FILE, Storage, store_path
from fpstore.store.writes import add_batch, add_group, compact, delete_one, load_run

__all__ = ["AddResult", "Cluster", "Document", "Explanation", "Match", "Store"]

Progress = Callable[[int, int | None], None] | None


def _needs_sketch(pipeline: AnyPipeline) -> str:
    if is_image(pipeline):
        return "threshold= is defined for text pipelines with a verification sketch; an image store matches within k bits (docs/images.md)"
    return NEEDS_SKETCH


def default_pipeline(k: object, threshold: object, **options: Any) -> Pipeline:
    """``Pipeline(**options)`` as a new store opened with ``k`` and ``threshold`` makes it: a
    ``k`` given without a threshold asks for answers within k bits, which need no sketch, so
    unless ``options`` name ``sketch_bits`` the pipeline then keeps none (``fpstore-admin``'s
    pipeline options go through here too)."""
    if "sketch_bits" not in options and k is not None and threshold is None:
        options["sketch_bits"] = 0
    return Pipeline(**options)


def _new_store_answers(pipeline: AnyPipeline | None, k: int | None, threshold: float | None) -> tuple[AnyPipeline, float | None]:
    """The pipeline and threshold a new store gets from what its open gave.

    A store verifies by default: ``Pipeline()`` with its sketch, threshold 0.8. A ``k`` given
    without a threshold answers within k bits (:func:`default_pipeline`); so does a pipeline given
    without a sketch."""
    if pipeline is None:
        pipeline = default_pipeline(k, threshold)
    if threshold is None and k is None and isinstance(pipeline, Pipeline) and pipeline.sketch_bits:
        threshold = DEFAULT_THRESHOLD
    return pipeline, threshold


class Store(Closing):
    """A near-duplicate store in a directory. Create or open one with :func:`fpstore.open`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        k: int | None = None,
        pipeline: AnyPipeline | None = None,
        design: str | Design = "auto",
        expected_size: int | None = None,
        readonly: bool = False,
        create: bool = True,
        map_size: int | None = None,
        allow_network_fs: bool = False,
        verify: bool = False,
        flush_entries: int = FLUSH_ENTRIES,
        durability: str = "full",
        commit_interval: float | None = None,
        merges: str = "background",
        threshold: float | None = None,
        keep_mapped: float | None = None,
    ) -> None:
        if pipeline is not None and not isinstance(pipeline, (Pipeline, ImagePipeline)):
            raise InputError(f"pipeline must be a fpstore.Pipeline or fpstore.ImagePipeline, not {type(pipeline).__name__}")
        if isinstance(flush_entries, bool) or not isinstance(flush_entries, int) or flush_entries < 0:
            raise InputError(f"flush_entries must be an int >= 0, got {flush_entries!r}")
        if merges not in MERGE_MODES:
            raise InputError(f"merges must be one of {', '.join(MERGE_MODES)}, got {merges!r}")
        keep_interval = check_interval(keep_mapped)
        #: Documents held in the incremental tables before a write moves them into a run (0: never).
        self.flush_entries = flush_entries
        # A new store's arguments are checked before anything is made on disk.
        path = store_path(path)
        creating = create and not readonly and not os.path.exists(os.path.join(path, DATA_FILE))
        self.threshold = check_threshold(threshold)
        new_pipeline, new_threshold = _new_store_answers(pipeline, k, self.threshold)
        default_k = DEFAULT_IMAGE_K[new_pipeline.kind] if isinstance(new_pipeline, ImagePipeline) else DEFAULT_K
        new_k = (default_k if new_threshold is None else CANDIDATE_K) if k is None else k
        planned = design_for(new_k, expected_size, design) if creating else None
        self._storage = Storage(
            path,
            BASE_DBS,
            readonly=readonly,
            create=create,
            map_size=map_size,
            allow_network_fs=allow_network_fs,
            verify=verify,
            durability=durability,
            commit_interval=commit_interval,
        )
        try:
            if self._storage.is_new:
                self.threshold = new_threshold
                self._create(planned or design_for(new_k, expected_size, design), new_pipeline)
            else:
                self._load(pipeline, design)
            self.k = self._check_k(self.design.k if k is None else k)
            self._merges = Merger(self._storage, self, merges)
            if not readonly:
                clean_up(self._storage, self._cat)  # what a merge that died left behind
            self._storage.on_commit = [self._merges.after_commit]
            self._keeper = None if keep_interval is None else PageKeeper(self._storage, keep_interval)
            stager = self._storage.stager
            self._adds: GroupCommit[OneAdd, AddResult] | StagedRequests[OneAdd, AddResult] = (
                GroupCommit(self._commit_adds)
                if stager is None
                else StagedRequests(
                    stager,
                    self._add_group,
                    lambda add: self._commit_adds([add])[0],
                    pack=pack_adds,
                    unpack=unpack_adds,
                    digest=plain_results,
                )
            )
        except BaseException:
            if self._storage.is_new:
                self._storage.discard()  # a store that could not be created leaves nothing behind
            else:
                self._storage.close()
            raise

    # -- opening --------------------------------------------------------------------------------

    def _create(self, design: Design, pipeline: AnyPipeline) -> None:
        self.design = design
        self.pipeline = pipeline
        if self.threshold is not None and not pipeline.sketch_bits:
            raise InputError(_needs_sketch(pipeline))
        self.header = header = new_header(design, pipeline, self.threshold)
        names = BASE_DBS + [table_name(t) for t in range(len(self.design.tables))] + column_dbs(pipeline)

        self._storage.create(names, lambda txn, dbs: fill_meta(txn, dbs["meta"], header, pipeline.idf))
        self._bind_dbs()

    def _load(self, pipeline: AnyPipeline | None, design: str | Design) -> None:
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
        if self.threshold is not None and not self.pipeline.sketch_bits:
            raise InputError(_needs_sketch(self.pipeline))
        self.threshold = stored_threshold(header, path) if self.threshold is None else self.threshold
        self._storage.open_dbs([table_name(t) for t in range(len(self.design.tables))] + column_dbs(self.pipeline))
        self._bind_dbs()

    def _bind_dbs(self) -> None:
        self._cat = Catalog(
            self._storage.dbs, self.design, self.pipeline.sketch_bits // 64, self.threshold, has_int_key_column(self.header)
        )
        # A run read inside a transaction that then aborts has an id the next one gives out again.
        incremental = self._cat.incremental
        cat = self._cat
        self._storage.on_abort = [cat.cache.clear, incremental.aborted, cat.forget_written_chunks]
        self._storage.on_begin_write = [incremental.begin_write]
        self._storage.on_committed = [incremental.committed, cat.committed]
        self._storage.on_staged = [incremental.staged]

    def _check_k(self, k: object) -> int:
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise InputError(f"k must be an int >= 0, got {k!r}")
        if k > self.design.k:
            raise DesignError(
                f"k={k} is above the store's design ({self.design.name}, exact up to k={self.design.k}); "
                f"pass exhaustive=True to scan every fingerprint, or index the store for that radius: store.redesign({k})"
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
        """Close the store (idempotent). Later use raises :class:`~fpstore.errors.ClosedError`.
        A background merge in progress gives up (the next writer's open clears what it wrote).

        Other threads' reads and writes in progress end first; their next calls raise
        :class:`~fpstore.errors.ClosedError`. Reads another thread holds open (a :meth:`reader`
        block, a pairs iterator, directly or through the background merge waiting for them) are
        waited for up to 10 s, then :class:`~fpstore.errors.StorageError` is raised and the store
        stays open, as it was; so it is at once when the calling thread holds one itself."""
        # Refused before anything stops, so that a refused close leaves the store as it was.
        self._storage.check_no_own_read("closing the store")
        keeper = getattr(self, "_keeper", None)  # absent when __init__ failed before it
        if keeper is not None:
            keeper.close()
        if not self._merges.close(timeout=storage_module.CLOSE_WAIT_S):
            if keeper is not None:
                keeper.resume()
            raise storage_module.close_refused(self.path, "the background merge, which waits for reads")
        try:
            self._storage.close()
        except StorageError:
            if self._storage.is_open():
                self._merges.resume()
                if keeper is not None:
                    keeper.resume()
            raise

    def __repr__(self) -> str:
        return f"<fpstore.Store {self.path!r} design={self.design.name} k={self.k} pipeline={self.pipeline.id}>"

    # -- public API: writing --------------------------------------------------------------------

    def add(
        self,
        key: Key,
        *,
        text: Text | None = None,
        fingerprint: int | np.integer | None = None,
        pipeline_id: str | None = None,
        on_duplicate: str = "insert",
        checkpoint: tuple[str, Any] | None = None,
        image: ImageInput | None = None,
    ) -> AddResult:
        """Add one document, durably, and say what it duplicates.

        Give ``text`` (fingerprinted with the store's pipeline; the exact-duplicate tier applies),
        ``image`` in a store of image fingerprints (:class:`~fpstore.fingerprint.image.ImagePipeline`:
        encoded bytes, a path or a PIL image), or ``fingerprint`` with the ``pipeline_id`` that
        made it. Re-adding a key replaces that
        document; adding the same key with the same fingerprint and content changes nothing.
        ``on_duplicate="skip"`` stores nothing when an exact or near duplicate exists. Texts below
        the pipeline's ``min_tokens`` are matched only exactly (``short=True``).
        ``checkpoint=(name, position)`` is recorded in the same transaction.

        Threads may call it at once: concurrent adds are committed together, in the order they
        arrived, each seeing the ones before it (group commit, :mod:`fpstore.store.group`); each
        returns once its transaction is durable, or, with ``durability="interval"``, once it is
        staged in the transaction that commits within ``commit_interval`` (:meth:`sync`).
        """
        self._storage.check_writable()  # before queueing: a closed or forked store raises here
        content = content_of(self.pipeline, text, image)
        add = prepare_add(self.pipeline, key, content, fingerprint, pipeline_id, on_duplicate, checkpoint)
        if self._storage.holds_read():
            # Alone, in this thread: queued behind a group that must grow the map, it would wait
            # for that growth, which waits for this thread's read (Storage.take_write_lock).
            return self._commit_adds([add])[0]
        return self._adds.submit(add)

    def _add_group(self, txn: Any, adds: Sequence[OneAdd]) -> list[AddResult]:
        return add_group(self._cat, txn, adds, self.k, self.flush_entries)

    def _commit_adds(self, adds: Sequence[OneAdd]) -> list[AddResult]:
        action = f"adding {adds[0].key!r}" if len(adds) == 1 else f"adding a group of {len(adds)} documents"
        # The catalog as the transaction finds it: a redesign or a file compaction in another
        # thread replaces it (and its table handles) while this write waits for the write lock.
        staged = self._adds if isinstance(self._adds, StagedRequests) else None
        return self._storage.stage(
            lambda txn: self._add_group(txn, adds), action=action, group=(staged, adds) if staged is not None else None
        )

    def sync(self) -> None:
        """Return once every add acknowledged so far is durable. With ``durability="interval"``
        this commits the staged adds now (a crawler calls it before it reports progress it must
        not lose); in the other modes every acknowledged write is already durable."""
        self._storage.sync()

    def add_many(
        self,
        keys: Sequence[Key],
        *,
        texts: Sequence[Text] | None = None,
        fingerprints: RawFingerprints | Fingerprints | None = None,
        pipeline_id: str | None = None,
        checkpoint: tuple[str, Any] | None = None,
        canonicals: Sequence[Key | None] | None = None,
        images: Sequence[ImageInput] | None = None,
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

        ``images`` takes the place of ``texts`` in a store of image fingerprints; an image that does
        not decode makes the whole batch an :class:`InputError` naming its index.
        """
        contents = content_of(self.pipeline, texts, images, "s")
        batch = prepare_batch(self.pipeline, keys, contents, fingerprints, pipeline_id, checkpoint, canonicals)
        action = f"adding a batch of {len(batch.typed_keys)}"
        return self._storage.write(lambda txn: add_batch(self._cat, txn, batch, self.flush_entries), action=action)

    def add_each(
        self,
        keys: Sequence[Key],
        *,
        texts: Sequence[Text] | None = None,
        fingerprints: RawFingerprints | Fingerprints | None = None,
        pipeline_id: str | None = None,
        checkpoint: tuple[str, Any] | None = None,
        images: Sequence[ImageInput] | None = None,
    ) -> list[AddResult]:
        """Add a batch in one durable transaction with a verdict for each document: one
        :class:`AddResult` per document, in the order given, as successive :meth:`add` calls would
        give (each sees the documents before it, of the store and of the batch; a repeated key
        replaces its earlier copy; canonicals come from the verdicts). ``checkpoint`` as in
        :meth:`add_many`; ``images`` as in :meth:`add_many`."""
        batch = prepare_batch(
            self.pipeline, keys, content_of(self.pipeline, texts, images, "s"), fingerprints, pipeline_id, checkpoint, None
        )
        adds = batch_adds(batch, keys)
        return self._storage.write(
            lambda txn: add_group(self._cat, txn, adds, self.k, self.flush_entries, batch.ckpt), action=f"adding a batch of {len(adds)}"
        )

    # -- bulk loads and compaction -------------------------------------------------------------

    def bulk_load(
        self,
        keys: KeyBatch | Iterable[tuple[KeyBatch, RawFingerprints | Fingerprints]],
        fingerprints: RawFingerprints | Fingerprints | None = None,
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
        # Which of the two forms keys has follows from fingerprints (the overloads above), which
        # narrowing cannot see: the casts name the form each branch has.
        chunks: Iterable[tuple[KeyBatch, RawFingerprints | Fingerprints]]
        if fingerprints is not None:
            chunks = [(cast(KeyBatch, keys), fingerprints)]
            total: int | None = len(fingerprints)
        else:
            if isinstance(keys, (str, bytes, np.ndarray)):
                raise InputError("bulk_load takes keys and fingerprints, or an iterable of (keys, fingerprints) chunks")
            chunks, total = cast(Iterable[tuple[KeyBatch, RawFingerprints | Fingerprints]], keys), None
        done = 0
        for keys_run, fps_run in runs_of(chunks, max_run, lambda ck, cf: load_columns(self.pipeline, len(ck), cf, pipeline_id)):
            done += load_run(self._storage, self._cat, keys_run, fps_run)
            if progress is not None:
                progress(done, total)
        return done

    def compact(self, *, full: bool = True, progress: Callable[[int, int | None], None] | None = None) -> dict[str, int]:
        """Merge the incremental tables (and, when ``full``, every run) into one new run per table.

        Tombstoned entries are dropped. The incremental tables move into a run in one write
        transaction; the runs are then merged as a tier merge is (:mod:`fpstore.store.merging`),
        table by table from the sorted runs, in steps of a few MiB, each a transaction of its
        own, with tier merges paused meanwhile. Memory is a decoded chunk of each run, a step's
        blobs and the store's tombstones, not the runs; adds from other threads go on between steps.
        Readers keep their snapshot; a crash leaves the old runs or the new one (what a crash
        left half-written is deleted at the writer's next open). Returns counts: runs merged,
        incremental documents moved, entries in runs afterwards. ``progress(tables written,
        tables)`` as the runs' merge writes each table.
        """
        self._storage.check_writable()
        with self._merges.paused():
            return compact(self._storage, lambda: self._cat, full, progress)

    def merge_runs(self) -> dict[str, int]:
        """Run the merges of full size tiers now, in this thread, and return their counts. With
        ``merges="background"`` (the default) a thread of the store does this after the flushes
        that make them due, and ``"inline"`` right after such a write; ``"manual"`` leaves them
        to this call (or :meth:`compact`). Each merge is written in steps of a few MiB, each a
        transaction of its own, so no write waits long for one (:mod:`fpstore.store.merging`)."""
        self._storage.check_writable()
        return self._merges.run()

    def compact_file(self) -> dict[str, int]:
        """Compact (see :meth:`compact`), then rewrite the file without its free pages.

        LMDB reuses freed pages but never shrinks its file; this copies the live pages to a new
        file and switches to it atomically. It needs the store to itself: another process with the
        store open, or a read this thread holds open (a :meth:`reader` block), makes it raise
        :class:`~fpstore.errors.StorageError` before anything changes.
        """
        self._storage.check_no_own_read("file compaction")
        result = self.compact()
        tables = [table_name(t) for t in range(len(self.design.tables))]

        def reopen() -> None:
            self._storage.open_dbs(BASE_DBS + tables + column_dbs(self.pipeline))
            self._bind_dbs()

        with self._merges.paused():
            before, after = self._storage.compact_file(reopen)
        return {**result, "file_bytes_before": before, "file_bytes_after": after}

    def redesign(
        self,
        k: int | None = None,
        *,
        threshold: float | None = None,
        design: str | Design = "auto",
        expected_size: int | None = None,
        progress: Callable[[int, int | None], None] | None = None,
    ) -> dict[str, Any]:
        """Index the store for radius ``k`` (a new table design; the documents stay as they are),
        and/or, in a store with sketches, make ``threshold`` its verification threshold (without
        ``k``, with the candidate radius 7), recorded in the same transaction.

        ``design`` and ``expected_size`` choose the design as :func:`fpstore.open` does for a new
        store (``expected_size`` defaults to the store's size, at least 10^6). Every fingerprint
        is indexed again and the store switches in one transaction: a crash leaves the old design
        or the new one. Like :meth:`compact_file` it needs the store alone: another process with
        it open, or a read this thread holds open, makes it raise
        :class:`~fpstore.errors.StorageError` before anything changes.
        Afterwards :attr:`k` is ``k``. ``progress(tables encoded, tables)`` as the tables are built.
        """
        self._storage.check_writable()
        k, header = redesign_plan(self, k, threshold)
        new = design_for(k, expected_size if expected_size is not None else max(len(self), DEFAULT_EXPECTED_SIZE), design)
        before = self.design
        with self._merges.paused(), self._storage.alone("a redesign"):
            if new.config() == before.config():
                counts = {"entries": len(self)}
                if header != self.header:
                    self.header = write_header(self._storage, self._cat, header)
            else:
                try:
                    self.header, counts = switch_design(self._storage, self._cat, header, new, progress)
                    self.design = new
                finally:
                    # Handles of tables an aborted write dropped are closed: open the design's again.
                    self._storage.open_dbs([table_name(t) for t in range(len(self.design.tables))] + column_dbs(self.pipeline))
                    self._bind_dbs()
            self.k = k
            if threshold is not None:  # else an open's own threshold stays
                self.threshold = self._cat.threshold = stored_threshold(self.header, self.path)
        return {
            "design_before": before.name,
            "design_after": new.name,
            "k": k,
            "threshold": self.threshold,
            "entries": int(counts["entries"]),
        }

    # -- all pairs ------------------------------------------------------------------------------

    def iter_near_duplicate_pairs(
        self,
        k: int | None = None,
        *,
        batch_size: int = pairs.BATCH_SIZE,
        progress: Progress = None,
        memory_budget: int | None = None,
        threshold: float | None = None,
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Every pair of live documents within ``k`` bits, each once, in batches of at most
        ``batch_size``: ``(id_a int64, id_b int64, distance uint8)``, ``id_a < id_b``, table by table, then
        the short documents' (exact duplicates: one content hash). Up to the design's k it streams the store's
        sorted tables in one snapshot, held until the iterator is exhausted or closed (take it from one thread;
        a write of that thread that must grow the map raises StorageError meanwhile); above it the join is in
        memory and refused beyond ``memory_budget`` bytes (MemoryBudgetError). ``threshold`` (stores with a sketch) keeps
        the pairs whose sketches estimate at least that similarity. Details: :mod:`fpstore.store.pairs`."""
        return pairs.iter_pairs(
            self._storage,
            self._cat,
            self.k if k is None else k,
            batch_size=batch_size,
            progress=progress,
            memory_budget=memory_budget,
            threshold=self.threshold if threshold is None else threshold,
        )

    def near_duplicate_pairs(
        self, k: int | None = None, *, progress: Progress = None, memory_budget: int | None = None, threshold: float | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every pair of live documents within ``k`` bits, exactly once: ``(id_a, id_b, distance)``,
        ``id_a < id_b``, identical fingerprints included, rows sorted by ``(id_a, id_b)``; short
        documents pair by content hash. :meth:`iter_near_duplicate_pairs` collected in one set of arrays."""
        return pairs.sorted_pairs(
            self.iter_near_duplicate_pairs(k, batch_size=1 << 20, progress=progress, memory_budget=memory_budget, threshold=threshold)
        )

    def clusters(
        self, k: int | None = None, *, progress: Progress = None, memory_budget: int | None = None, threshold: float | None = None
    ) -> list[Cluster]:
        """Connected components of the near-duplicate graph (size >= 2), largest first, by a
        union-find over :meth:`iter_near_duplicate_pairs` (same arguments). Each cluster's canonical
        member is the document with the smallest id (the oldest); ``keys`` lists it first, then the
        others by id."""
        batches = self.iter_near_duplicate_pairs(k, batch_size=1 << 20, progress=progress, memory_budget=memory_budget, threshold=threshold)
        return pairs.clusters(self._storage, self._cat, batches)

    def delete(self, key: Key) -> bool:
        """Delete a document; returns whether it existed. Durable when it returns."""
        typed = typed_key(key, LOOKUP_KEY_BYTES)

        return self._storage.write(lambda txn: delete_one(self._cat, txn, typed), action=f"deleting {key!r}")

    # -- checkpoints ----------------------------------------------------------------------------

    def checkpoint(self, name: str) -> Any:
        """The position last committed for checkpoint ``name``, or None."""
        key = checkpoint_key(name)
        with self._storage.read() as txn:
            raw = txn.get(key, db=self._cat.meta)
            raw = bytes(raw) if raw is not None else None
        return None if raw is None else decode_checkpoint(raw, name)

    def checkpoints(self) -> dict[str, Any]:
        """Every checkpoint of the store: name → position, in one snapshot."""
        with self._storage.read() as txn:
            return read_checkpoints(txn, self._cat.meta)

    def set_checkpoint(self, name: str, position: Any) -> None:
        """Record checkpoint ``name`` at ``position`` on its own, durably (``add_many`` records one
        together with its batch, which is what resuming a feed needs)."""
        key, packed = encode_checkpoint((name, position))
        self._storage.write(lambda txn: txn.put(key, packed, db=self._cat.meta), action=f"setting checkpoint {name!r}")

    # -- public API: reading --------------------------------------------------------------------

    def query(
        self,
        *,
        text: Text | None = None,
        fingerprint: int | np.integer | None = None,
        pipeline_id: str | None = None,
        k: int | None = None,
        exhaustive: bool = False,
        threshold: float | None = None,
        sketch: Any = None,
        image: ImageInput | None = None,
    ) -> list[Match]:
        """Stored documents within ``k`` bits (default: the store's k), sorted by distance then key.

        Exact: the same set a comparison with every stored fingerprint gives. ``k`` above the
        design's needs ``exhaustive=True``, which compares with every fingerprint (O(n)). A short
        text (below ``min_tokens``) matches only documents with the same content hash. In a store
        whose pipeline has a sketch, the matches of a text (or of a fingerprint given with its
        ``sketch``, uint64 words) carry their estimated ``similarity``, and ``threshold`` keeps
        only those at or above it (verified candidates). ``image`` takes the place of ``text`` in a
        store of image fingerprints.
        """
        if (
            fingerprint is not None
            and text is None
            and image is None
            and sketch is None
            and threshold is None
            and self.threshold is None
            and not exhaustive
        ):
            return query_fingerprint(self, fingerprint, pipeline_id, k)  # nothing to verify: the single query's path
        with self.reader() as r:
            return r.query(
                text=text,
                fingerprint=fingerprint,
                pipeline_id=pipeline_id,
                k=k,
                exhaustive=exhaustive,
                threshold=threshold,
                sketch=sketch,
                image=image,
            )

    def explain(self, key_a: Key, key_b: Key, *, text_a: Text | None = None, text_b: Text | None = None, sample: int = 5) -> Explanation:
        """Why two stored documents match or not (:class:`~fpstore.store.explain.Explanation`): the Hamming distance
        of their fingerprints, the Jaccard similarity it estimates (MinHash pipelines; SimHash gives none), whether they
        are exact duplicates (one content hash) and paired at the store's k; given both texts, the exact Jaccard similarity
        of their shingle sets under the store's pipeline and up to ``sample`` shingles shared and only in each. A key not
        stored raises :class:`~fpstore.errors.UnknownKeyError` (a KeyError)."""
        with self.reader() as r:
            return explain(r, self.pipeline, self.k, key_a, key_b, text_a, text_b, sample)

    def reader(self) -> Reader:
        """A read context for a burst of reads in one snapshot, for one thread:
        ``with store.reader() as r: r.query(...)``. Each call of :meth:`query` opens and closes a
        read transaction; a reader opens one for all its calls (see :class:`Reader`)."""
        _ = self._storage.env  # a closed or forked store raises here
        return Reader(self)

    def query_many(
        self,
        fingerprints: RawFingerprints | Fingerprints,
        *,
        pipeline_id: str | None = None,
        k: int | None = None,
        threshold: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All matches of many fingerprints in one snapshot, columnar (Manku's batch mode).

        Returns ``(query_index int64, id int64, distance uint8)``, sorted by query index, then
        distance, then id. Keys of ids come from :meth:`keys_of`. ``threshold`` (a store with
        sketches, ``Fingerprints`` with theirs) keeps the rows whose sketches reach it.
        """
        with self.reader() as r:
            return r.query_many(fingerprints, pipeline_id=pipeline_id, k=k, threshold=threshold)

    def keys_of(self, ids: Iterable[int]) -> list[Key]:
        """The keys of document ids (as returned by :meth:`query_many`), in one snapshot."""
        with self.reader() as r:
            return r.keys_of(ids)

    def get(self, key: Key, default: Any = None) -> Document | Any:
        """The stored :class:`Document` for ``key``, or ``default``."""
        with self.reader() as r:
            return r.get(key, default)

    def __getitem__(self, key: Key) -> Document:
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

    def __iter__(self) -> Iterator[Key]:
        """Keys in id order; read in batches so no transaction spans a yield."""
        for batch in self._batches(False):
            for _, rec in batch:
                yield untyped_key(rec[0])

    def documents(self) -> Iterator[Document]:
        """Every live :class:`Document` in id order (each what :meth:`get` of its key returns);
        read in batches so no transaction spans a yield."""
        for batch in self._batches(True):
            yield from batch

    def record_batches(self, batch_size: int = 65_536) -> Iterator[Any]:
        """Every live document as rows of ``pyarrow.RecordBatch`` es (columns in
        :mod:`fpstore.store.rows`; with ``sketch`` when the store keeps sketches), for pandas,
        polars or DuckDB; needs pyarrow."""
        return record_batches(self, batch_size)

    def to_arrow(self) -> Any:
        """Every live document as one ``pyarrow.Table`` (see :meth:`record_batches`)."""
        return arrow_table(self.record_batches())

    def _batches(self, documents: bool, sketches: bool = False) -> Iterator[list[Any]]:
        """Live documents in id order, a batch per snapshot (see :meth:`Catalog.batch`); with
        ``sketches`` (a store that keeps them), each document with its sketch from that snapshot."""
        after = 0
        while True:
            with self._storage.read() as txn:
                out, covered = self._cat.batch(txn, after, documents)
                if sketches and self._cat.sketches is not None:
                    out = list(zip(out, self._cat.sketches.get(txn, np.fromiter((d.id for d in out), np.int64, len(out)))))
            yield out
            if covered >= 1 << 64:
                return
            after = covered

    def copy(self, path: str | os.PathLike[str], *, compact: bool = True) -> int:
        """Copy one snapshot into new or empty directory ``path``, synced; returns its size."""
        return self._storage.copy(os.fspath(path), compact=compact)

    def warm(self) -> int:
        """Read every page of the index (runs, key segments, incremental tables) once, with the
        records and tombstones an answer reads (a document added by :meth:`add` or
        :meth:`add_many` keeps its key in its record), so that later queries find them mapped;
        returns the bytes read.

        A query touches a few pages of the memory map that LMDB reads from; the first touch of a
        page costs a page fault (microseconds, more under a hypervisor, a disk read when the file
        is not cached). A long-running process pays that once per page; a process that must
        answer fast from its first query can pay it up front, at about 1 GB/s of index. It also
        decodes every block of every run once, recording the points single probes restart from
        (about 0.15 s more at 10^7 documents), and builds the occupied cells of the run tables of
        up to 2^23 keys whose probe ranges hold less than a key on average (a store grown by adds
        and an r5 design: docs/format.md); a damaged run raises
        :class:`~fpstore.errors.CorruptionError`.
        """
        storage = self._storage
        with storage.read() as txn:
            cat = self._cat
            return cat.warm(txn, cat.snapshot_chunks(txn, storage.mapping))

    def counts(self) -> dict[str, Any]:
        """Every counter of the store, read in one snapshot: ``documents`` (live), ``next_id``,
        ``records``, ``keys`` and ``content_hashes`` of the incremental tier, ``tombstones``,
        ``incremental_entries`` (table 0's B-tree), ``table_entries`` (per table, B-tree plus
        runs), the entries of each run (``runs``) and key segment (``segments``), and every
        ``checkpoints`` position."""
        with self._storage.read() as txn:
            return inspect.counts(txn, self._cat)

    def info(self) -> dict[str, Any]:
        """Header, design, counts, merges and storage figures, as plain data."""
        return inspect.store_info(self, self._storage, self._merges)

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
        return inspect.verify(self._storage, self._cat, lambda: ((key, self.get(key)) for key in self), deep=deep)

    def stats(self, *, sample: int = 10000, seed: int = 0) -> dict[str, Any]:
        """Per table, candidates per probe and per query over ``sample`` stored fingerprints, and
        histograms of Hamming distances (random pairs; nearest neighbours), as plain data.
        Deterministic for a given ``seed``."""
        sample, seed = int_in(sample, "sample", 0, 1 << 40), int_in(seed, "seed", 0, (1 << 64) - 1)
        fps, _ = self.fingerprints()
        return inspect.table_stats(self.design, np.asarray(fps, dtype=np.uint64), len(self), sample, seed)
