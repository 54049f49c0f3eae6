"""A read context for bursts: one snapshot, one read transaction, many calls
(``with store.reader() as r: r.query(...)``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from fpstore.errors import ClosedError, InputError
from fpstore.fingerprint.kinds import content_of
from fpstore.fingerprint.pipeline import Fingerprints
from fpstore.fingerprint.text import Text
from fpstore.hamming import RawFingerprints
from fpstore.store.inputs import check_pipeline_id, fingerprint_int, signature_of, signatures
from fpstore.store.keys import LOOKUP_KEY_BYTES, Key, typed_key
from fpstore.store.results import Document, Match
from fpstore.store.sketches import check_sketch, check_threshold, check_verifiable, verified, verified_columns

if TYPE_CHECKING:
    from fpstore.store.store import Store

__all__ = ["Reader", "document_ids", "query_fingerprint"]

_MAX_ID = (1 << 63) - 1


def document_ids(ids: object) -> list[int] | np.ndarray:
    """Document ids given to :meth:`Store.keys_of`: a 1-D integer array, or an iterable of ints,
    each in 1..2**63-1 (the ids this store gives); anything else is an InputError (a float or a
    string is not rounded into an id)."""
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1 or ids.dtype.kind not in "iu":
            raise InputError(f"document ids must be a 1-D integer array, got {ids.ndim}-D {ids.dtype}")
        outside = (ids < 1) | (ids > _MAX_ID)
        if outside.any():
            raise InputError(f"document id {int(ids[outside][0])} is outside 1..2**63-1: not an id this store gives")
        return ids
    if isinstance(ids, (str, bytes)) or not isinstance(ids, Iterable):
        raise InputError(f"document ids must be an iterable of ints, got {type(ids).__name__}")
    out = list(ids)
    for i in out:
        if not isinstance(i, (int, np.integer)) or isinstance(i, (bool, np.bool_)):
            raise InputError(f"document ids are ints, got {i!r}")
        if not 1 <= i <= _MAX_ID:
            raise InputError(f"document id {i} is outside 1..2**63-1: not an id this store gives")
    return [int(i) for i in out]


def query_fingerprint(store: Store, fingerprint: object, pipeline_id: str | None, k: int | None) -> list[Match]:
    """:meth:`Store.query` of a raw fingerprint (not exhaustive, no sketch, no threshold), in a read
    transaction of its own: the single query's path, with no :class:`Reader` made for one call."""
    check_pipeline_id(store.pipeline, pipeline_id)
    fp = fingerprint_int(fingerprint)
    kq = store._check_k(store.k if k is None else k)
    storage = store._storage
    with storage.read() as txn:
        cat = store._cat  # read with the share held: redesign and compact_file rebind it
        return cat.query(txn, fp, kq, cat.snapshot_chunks(txn, storage.mapping))


class Reader:
    """Reads of one :class:`Store` in one snapshot: what a crawler's burst of lookups needs
    without a read transaction per call. Made by :meth:`Store.reader`; use it in a ``with`` block,
    from the thread that made it (an LMDB read transaction belongs to one thread). Every call sees
    the store as it was when the block began: writes committed since are not seen (open a new
    reader for them), and a long-lived reader keeps the pages of its snapshot from being reused."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._reading: Any = None
        self._txn: Any = None
        # Run and column chunks read in this reader's snapshot, by name (Catalog.snapshot_chunks):
        # a burst of queries reaches the same few hundred chunks again and again, and each read
        # is an LMDB lookup.
        self._chunks: dict[bytes, Any] = {}

    def __enter__(self) -> Reader:
        if self._reading is not None:
            raise ClosedError("this reader is already open")
        storage = self._store._storage
        reading = storage.read()
        txn = reading.__enter__()
        try:
            self._chunks = self._store._cat.snapshot_chunks(txn, storage.mapping)
        except BaseException as exc:
            # A snapshot that cannot be read (a damaged run index): end the read begun here, or
            # the thread keeps its share of the map.
            reading.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self._reading, self._txn = reading, txn
        return self

    def __exit__(self, *exc: Any) -> None:
        reading, self._reading, self._txn = self._reading, None, None
        self._chunks = {}  # views into the map: not valid past the transaction
        if reading is not None:
            reading.__exit__(*exc)

    def _open_txn(self) -> Any:
        if self._txn is None:
            raise ClosedError("use a reader inside its with block")
        self._store._storage.check_open()
        return self._txn

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
        image: Any = None,
    ) -> list[Match]:
        """:meth:`Store.query` in this reader's snapshot."""
        store, txn = self._store, self._open_txn()
        content = content_of(store.pipeline, text, image)
        if (
            fingerprint is not None
            and content is None
            and sketch is None
            and threshold is None
            and store.threshold is None
            and not exhaustive
        ):
            # Nothing to verify: the single fingerprint's path, the chunks of earlier calls kept.
            check_pipeline_id(store.pipeline, pipeline_id)
            fp = fingerprint_int(fingerprint)
            return store._cat.query(txn, fp, store._check_k(store.k if k is None else k), self._chunks)
        fp, short, text_hash, text_sketch = signature_of(store.pipeline, content, fingerprint, pipeline_id)
        if sketch is not None:
            if content is not None:
                raise InputError("sketch= goes with fingerprint=; a text's sketch is computed from it")
            text_sketch = check_sketch(store.pipeline.sketch_bits // 64, sketch)
        sketch = text_sketch
        threshold = store.threshold if threshold is None else check_threshold(threshold)
        sketches = store._cat.sketches
        check_verifiable(sketches, sketch, threshold, "a query with text= (or fingerprint= and sketch=)")
        kq = store.k if k is None else k
        if exhaustive:
            if not isinstance(kq, int) or isinstance(kq, bool) or not 0 <= kq <= 64:
                raise InputError(f"k must be an int in 0..64, got {kq!r}")
        else:
            kq = store._check_k(kq)
        cat = store._cat
        content_hash = text_hash if short else None  # a short text: the exact tier only
        if content_hash is not None:
            found = {i: (0, fp) for i in cat.content_ids(txn, content_hash)}
        elif exhaustive:
            found = cat.scan_all(txn, fp, kq)
        else:
            # A read transaction: what the snapshot's earlier queries read is kept (Catalog.snapshot).
            return verified(sketches, txn, cat.query(txn, fp, kq, self._chunks), sketch, threshold)
        return verified(sketches, txn, cat.matches(txn, found), sketch, threshold)

    def query_many(
        self,
        fingerprints: RawFingerprints | Fingerprints,
        *,
        pipeline_id: str | None = None,
        k: int | None = None,
        threshold: float | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`Store.query_many` in this reader's snapshot."""
        store, txn = self._store, self._open_txn()
        sigs = signatures(store.pipeline, None, None, fingerprints, pipeline_id)
        kq = store._check_k(store.k if k is None else k)
        theta = store.threshold if threshold is None else check_threshold(threshold)
        check_verifiable(store._cat.sketches, sigs.sketches, theta, "Fingerprints with sketches")
        q, ids, dist, _ = store._cat.probe_many(txn, np.ascontiguousarray(sigs.values), kq, self._chunks, reading=True)
        return verified_columns(store._cat.sketches, txn, (q, ids, dist), sigs.sketches, theta)

    def get(self, key: Key, default: Any = None) -> Document | Any:
        """:meth:`Store.get` in this reader's snapshot."""
        doc = self._store._cat.get(self._open_txn(), typed_key(key, LOOKUP_KEY_BYTES), key)
        return default if doc is None else doc

    @property
    def threshold(self) -> float | None:
        """The store's verification threshold (:attr:`Store.threshold`)."""
        return self._store.threshold

    def sketches_of(self, ids: Iterable[int]) -> np.ndarray | None:
        """The stored sketches of document ids (uint64[n, W]), or None in a store without sketches."""
        sketches = self._store._cat.sketches
        return None if sketches is None else sketches.get(self._open_txn(), np.asarray(document_ids(ids), dtype=np.int64))

    def keys_of(self, ids: Iterable[int]) -> list[Key]:
        """:meth:`Store.keys_of` in this reader's snapshot."""
        txn = self._open_txn()
        return self._store._cat.keys_of(txn, document_ids(ids), memo=self._chunks, reading=True, asked=True)
