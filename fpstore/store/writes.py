"""The store's write paths: :meth:`Store.add` and :meth:`Store.add_many` inside the caller's write
transaction, the flush that follows a write, a bulk load's run and compaction (the jobs of
:mod:`fpstore.store.lsm`, each in its own write transaction)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import lmdb
import numpy as np

from fpstore.index import tiers
from fpstore.store import merging
from fpstore.store.catalog import Catalog
from fpstore.store.header import H_COUNT, H_NEXT_ID, U64
from fpstore.store.inputs import Batch, OneAdd
from fpstore.store.keys import FLAG_SHORT, FLAG_TEXT, KeyBatch, lookup_key, pack_record
from fpstore.store.lsm import prepare_load
from fpstore.store.ordered import add_segment, segments
from fpstore.store.results import AddResult
from fpstore.store.sketches import verdict_similarities, verify_near
from fpstore.store.storage import Storage

__all__ = ["add_batch", "add_group", "add_one", "compact", "delete_one", "flush", "load_run"]

log = logging.getLogger(__name__)


def flush(cat: Catalog, txn: lmdb.Transaction, flush_entries: int) -> None:
    """After a write: flush the incremental tables into a run once they hold ``flush_entries``
    documents (0: never; see :meth:`fpstore.store.lsm.Lsm.flush`)."""
    if flush_entries and cat.incremental.entries(txn) >= flush_entries:
        cat.wrote_run()
        cat.lsm.flush(txn, cat.state(txn), flush_entries)


def add_one(cat: Catalog, txn: lmdb.Transaction, add: OneAdd, k: int) -> AddResult:
    """Add one document and its verdict within ``k`` (the caller checks for a flush afterwards);
    in a store with sketches, the near duplicates carry their estimated similarity."""
    result = _add_one(cat, txn, add, k)
    return verdict_similarities(cat.sketches, txn, [result], [add.sketch])[0]


def _add_one(cat: Catalog, txn: lmdb.Transaction, add: OneAdd, k: int) -> AddResult:
    typed, fp, content_hash, short, flags = add.typed, add.fp, add.content_hash, add.short, add.flags
    old_id = cat.id_of(txn, typed)
    if old_id is not None:
        old = cat.record(txn, old_id)
        if old is not None and old[1] == fp and old[2] == content_hash and old[4] == flags:
            return cat.verdict(txn, old_id, typed, fp, content_hash, short, k, add.sketch)
    exact_ids = [i for i in cat.content_ids(txn, content_hash) if i != old_id] if content_hash else []
    near = {} if short else verify_near(cat.sketches, txn, cat.probe(txn, fp, k, exclude=old_id or 0), add.sketch, cat.threshold)
    result = cat.verdict_from(txn, None, typed, fp, short, exact_ids, near)
    if add.on_duplicate == "skip" and result.duplicate_of is not None:
        return result
    # A replaced document gets a new id: its old fingerprint may sit in an immutable run,
    # where only a tombstone on the old id can remove it.
    doc_id = cat.next_id(txn)
    txn.put(H_NEXT_ID, U64.pack(doc_id + 1), db=cat.meta)
    if old_id is not None:
        cat.remove(txn, old_id)
    else:
        txn.put(H_COUNT, U64.pack(cat.meta_int(txn, H_COUNT) + 1), db=cat.meta)
    canonical_id = cat.canonical_id(txn, exact_ids, near)
    if canonical_id == doc_id:
        canonical_id = 0
    txn.put(U64.pack(doc_id), pack_record(typed, fp, content_hash, canonical_id, flags), db=cat.docs)
    txn.put(lookup_key(typed), U64.pack(doc_id), db=cat.keys)
    if content_hash is not None:
        txn.put(content_hash + U64.pack(doc_id), b"", db=cat.content)
    if not short:
        cat.incremental.put(txn, fp, doc_id)
    if cat.sketches is not None and add.sketch is not None:
        cat.sketches.put(txn, np.array([doc_id]), add.sketch[None])
    canonical = cat.key_of(txn, canonical_id) if canonical_id else None
    return AddResult(doc_id, result.key, fp, short, result.exact_duplicate_of, result.near_duplicates, canonical)


def add_group(
    cat: Catalog,
    txn: lmdb.Transaction,
    adds: Sequence[OneAdd],
    k: int,
    flush_entries: int,
    checkpoint: tuple[bytes, bytes] | None = None,
) -> list[AddResult]:
    """Add documents one after another in one transaction, each with its verdict and checkpoint,
    then ``checkpoint`` (a batch's): what the same adds in the same order would do one transaction
    each (a later one sees the earlier ones). Runs of adds with distinct keys are answered
    together (:mod:`fpstore.store.ordered`), with a flush check after each instead of one per add."""
    results: list[AddResult] = []
    for start, end in segments(adds):
        if end - start == 1:
            results.append(add_one(cat, txn, adds[start], k))
        else:
            results.extend(add_segment(cat, txn, adds[start:end], k))
        if any(not a.short for a in adds[start:end]):
            flush(cat, txn, flush_entries)
    for a in adds:
        if a.checkpoint is not None:
            txn.put(a.checkpoint[0], a.checkpoint[1], db=cat.meta)
    if checkpoint is not None:
        txn.put(checkpoint[0], checkpoint[1], db=cat.meta)
    return results


def delete_one(cat: Catalog, txn: lmdb.Transaction, typed: bytes) -> bool:
    """Delete the live document of a typed key; returns whether there was one."""
    doc_id = cat.id_of(txn, typed)
    if doc_id is None:
        return False
    cat.remove(txn, doc_id)
    txn.put(H_COUNT, U64.pack(cat.meta_int(txn, H_COUNT) - 1), db=cat.meta)
    return True


def add_batch(cat: Catalog, txn: lmdb.Transaction, batch: Batch, flush_entries: int) -> np.ndarray:
    """Write ``batch``; returns the documents' ids (int64), one per key given."""
    typed_keys, sigs, canon_typed, last, keep, ckpt = batch.typed_keys, batch.sigs, batch.canon_typed, batch.last, batch.keep, batch.ckpt
    n = len(typed_keys)
    fps = sigs.values
    short = sigs.short if sigs.short is not None else np.zeros(n, dtype=bool)
    # Content hashes come with texts, and with Fingerprints that carry them (an import).
    has_hash = sigs.content_hashes is not None
    ids = np.zeros(n, dtype=np.int64)
    next_id = cat.next_id(txn)
    count = cat.meta_int(txn, H_COUNT)
    kept = keep.tolist()
    old_ids = cat.ids_of_many(txn, [typed_keys[i] for i in kept])
    fresh: list[int] = []  # batch positions that get a new id (new keys, changed documents)
    rewrite: list[int] = []  # unchanged documents whose record is rewritten for its canonical
    for i, old_id in zip(kept, old_ids):
        flags = (FLAG_TEXT if has_hash else 0) | (FLAG_SHORT if short[i] else 0)
        if old_id is not None:
            same = cat.unchanged(
                txn, old_id, int(fps[i]), sigs.content_hash(i), flags, canon_typed[i], typed_keys[i], batch.canonicals_given
            )
            if same is not None:
                ids[i] = old_id
                if same == "rewrite":
                    rewrite.append(i)
                continue
            # A changed document gets a new id: its old fingerprint may sit in an
            # immutable run, where only a tombstone on the old id can remove it.
            cat.remove(txn, old_id)
        else:
            count += 1
        ids[i] = next_id
        next_id += 1
        fresh.append(i)
    canonical_ids = cat.resolve_canonicals(txn, [canon_typed[i] for i in fresh + rewrite], last, ids)
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
    txn.cursor(db=cat.docs).putmulti(sorted(docs))
    txn.cursor(db=cat.keys).putmulti(sorted(key_items))
    if content_items:
        txn.cursor(db=cat.content).putmulti(sorted(content_items))
    fresh_arr = np.array(fresh, dtype=np.int64)
    if cat.sketches is not None and sigs.sketches is not None and len(fresh_arr):
        cat.sketches.put(txn, ids[fresh_arr], sigs.sketches[fresh_arr])
    indexed = fresh_arr[~short[fresh_arr]] if len(fresh_arr) else fresh_arr
    if len(indexed):
        cat.incremental.put_many(txn, fps[indexed], ids[indexed].astype(np.uint64))
    txn.put(H_NEXT_ID, U64.pack(next_id), db=cat.meta)
    txn.put(H_COUNT, U64.pack(count), db=cat.meta)
    if ckpt is not None:
        txn.put(ckpt[0], ckpt[1], db=cat.meta)
    if len(indexed):
        flush(cat, txn, flush_entries)
    return ids


def load_run(storage: Storage, cat: Catalog, keys: KeyBatch, fps: np.ndarray) -> int:
    """Write one bulk-load run and its key segment in one transaction; returns its documents."""
    load = prepare_load(keys, fps)
    if load is None:
        return 0
    m = len(load.fps)
    # The run is encoded before the write lock is taken, numbered from what a read sees now; a
    # write committed meanwhile by another thread (an add, a merge's reservation) may take those
    # numbers, and then the write encodes the run again from its own reading.
    with storage.read() as txn:
        state = cat.state(txn)
        base = cat.next_id(txn)
    prepared = (state.next_run, state.next_seg, base), cat.lsm.load_blobs(load, state, base)
    storage.reserve(tiers.blobs_size(prepared[1][0]))

    def work(txn: lmdb.Transaction) -> int:
        state = cat.state(txn)
        base = cat.next_id(txn)
        numbers, (blobs, run_rec, seg_rec) = prepared
        if numbers != (state.next_run, state.next_seg, base):
            blobs, run_rec, seg_rec = cat.lsm.load_blobs(load, state, base)
        replaced = 0
        if state.segs or cat.meta_int(txn, H_COUNT):  # else no key can be replaced
            for old in cat.ids_of_many(txn, load.typed_keys(), load.hashes, load.hash_order):
                if old is not None:
                    cat.remove(txn, old)
                    replaced += 1
        cat.lsm.add_load(txn, cat.state(txn), blobs, run_rec, seg_rec)
        if cat.sketches is not None and load.sketches is not None:
            cat.sketches.put(txn, np.arange(base, base + m), load.sketches)
        txn.put(H_NEXT_ID, U64.pack(base + m), db=cat.meta)
        txn.put(H_COUNT, U64.pack(cat.meta_int(txn, H_COUNT) + m - replaced), db=cat.meta)
        return m

    done = storage.write(work, action=f"bulk loading {m} documents")
    log.info("bulk load: a run of %d documents", done)
    return done


def compact(
    storage: Storage, catalog: Callable[[], Catalog], full: bool, progress: Callable[[int, int | None], None] | None = None
) -> dict[str, int]:
    """:meth:`Store.compact`: the incremental tables into a run in one transaction, then, when
    ``full``, every run into one, merged as a tier merge is (:func:`merging.merge_runs`: in steps,
    in bounded memory). ``catalog()`` is the store's catalog as each transaction finds it (a
    redesign or a file compaction in another thread may replace it meanwhile); tier merges are
    paused by the caller. ``progress(tables written, tables)`` as the runs' merge writes them."""
    storage.check_writable()
    with storage.read() as txn:
        cat = catalog()
        incremental = cat.incremental.entries(txn)
    flushed = 0
    if incremental:
        # Room for the new run up front (about 8 bytes per entry and table, ids included), so
        # the transaction is not aborted and rerun on a full map after all its work.
        storage.reserve(incremental * 8 * (len(cat.design.tables) + 1))

        def flush(txn: lmdb.Transaction) -> int:
            # Merge what this transaction sees (another writer may have changed it since the read).
            cat = catalog()
            state = cat.state(txn)
            cat.wrote_run()
            new_state, result = cat.lsm.merge(txn, state, [], incremental=True)
            if new_state is not state:
                cat.lsm.save_state(txn, new_state)
            return result["incremental"]

        flushed = storage.write(flush, action="compacting the incremental tables")
    merged = None
    if full:
        # Merges are paused: a merging marker now is one a merge that failed to give up left,
        # which would make the merge below stand aside. Cleared as the writer's open clears it.
        merging.clean_up(storage, catalog())
        with storage.read() as txn:
            cat = catalog()
            runs = list(cat.state(txn).runs)
        merged = merging.merge_runs(storage, cat, runs, progress=progress) if runs else None
    with storage.read() as txn:
        entries = sum(rec.count for rec in catalog().state(txn).runs)
    result = {"runs_merged": merged["runs_merged"] if merged else 0, "incremental": flushed, "entries": int(entries)}
    log.info("compacted: %d runs and %d incremental documents merged; %d entries in runs", result["runs_merged"], flushed, entries)
    return result
