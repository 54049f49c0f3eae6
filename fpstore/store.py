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

import hashlib
import os
import struct
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

import lmdb
import msgpack
import numpy as np

from fpstore._version import __version__ as _fpstore_version
from fpstore.design import Design, design_for
from fpstore.errors import (
    CorruptionError,
    DesignError,
    FormatError,
    InputError,
    NotAStoreError,
    PipelineMismatchError,
)
from fpstore.hamming import as_fingerprint_array
from fpstore.pipeline import Fingerprints, IdfTable, Pipeline
from fpstore.storage import Storage

__all__ = ["AddResult", "Document", "Match", "Store", "open"]

MAGIC = "fpstore"
FORMAT_VERSION = 1
#: Features this build understands; a store listing any other required feature is refused.
KNOWN_FEATURES: frozenset[str] = frozenset()

BASE_DBS = ["meta", "docs", "keys", "content"]
H_HEADER, H_IDF, H_NEXT_ID, H_COUNT = b"header", b"idf", b"next_id", b"count"
CHECKPOINT_PREFIX = b"checkpoint\x00"

_U64 = struct.Struct(">Q")
_PAIR = struct.Struct(">QQ")
_ZERO8 = bytes(8)
_MAX_RAW_KEY = 400  # typed keys longer than this are stored by hash (LMDB keys stop at 511 bytes)
FLAG_SHORT = 1
FLAG_TEXT = 2
ITER_BATCH = 1000


def _table_name(t: int) -> str:
    return f"t{t:02d}"


# -- keys and records ----------------------------------------------------------------------------


def _typed_key(key: object) -> bytes:
    """A user key as bytes that remember whether it was str or bytes (str keys may hold surrogates)."""
    if isinstance(key, str):
        return b"s" + key.encode("utf-8", "surrogatepass")
    if isinstance(key, (bytes, bytearray, memoryview)):
        return b"b" + bytes(key)
    raise InputError(f"keys must be str or bytes, not {type(key).__name__}")


def _untyped_key(typed: bytes) -> str | bytes:
    tag, body = typed[:1], typed[1:]
    if tag == b"s":
        try:
            return body.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            raise CorruptionError(f"stored key is not valid UTF-8: {exc}") from None
    if tag == b"b":
        return body
    raise CorruptionError(f"stored key has unknown type tag {tag!r}")


def _lookup_key(typed: bytes) -> bytes:
    """The ``keys`` table's key for a typed key: itself, or a hash when LMDB could not hold it."""
    if len(typed) <= _MAX_RAW_KEY:
        return typed
    return b"h" + hashlib.blake2b(typed, digest_size=32).digest()


def _pack_record(typed_key: bytes, fp: int, content_hash: bytes | None, canonical: int, flags: int) -> bytes:
    return msgpack.packb([typed_key, fp, content_hash, canonical, flags], use_bin_type=True)


def _unpack_record(raw: bytes) -> tuple[bytes, int, bytes | None, int, int]:
    """Decode a stored record; any deviation from the format raises :class:`CorruptionError`."""
    try:
        rec = msgpack.unpackb(raw, raw=False, use_list=True, max_bin_len=1 << 20, max_array_len=16, max_map_len=0)
    except Exception as exc:  # msgpack raises a variety of ValueError/TypeError subclasses
        raise CorruptionError(f"document record does not decode: {exc}") from None
    if not isinstance(rec, list) or len(rec) != 5:
        raise CorruptionError("document record is not a 5-element array")
    typed, fp, content_hash, canonical, flags = rec
    if (
        not isinstance(typed, bytes)
        or not isinstance(fp, int)
        or not 0 <= fp < 1 << 64
        or not (content_hash is None or (isinstance(content_hash, bytes) and len(content_hash) == 16))
        or not isinstance(canonical, int)
        or not 0 <= canonical < 1 << 64
        or not isinstance(flags, int)
    ):
        raise CorruptionError("document record has fields of the wrong type")
    return typed, fp, content_hash, canonical, flags


def _u64(raw: bytes, what: str) -> int:
    if len(raw) != 8:
        raise CorruptionError(f"{what} is {len(raw)} bytes, expected 8")
    return _U64.unpack(raw)[0]


# -- results -------------------------------------------------------------------------------------


class Match(NamedTuple):
    """A stored document within the query radius."""

    key: str | bytes
    distance: int
    fingerprint: int
    id: int


@dataclass(frozen=True)
class Document:
    """A stored document: its key, id, fingerprint, content hash and canonical key."""

    key: str | bytes
    id: int
    fingerprint: int
    content_hash: bytes | None
    canonical: str | bytes | None
    short: bool


@dataclass(frozen=True)
class AddResult:
    """What :meth:`Store.add` did and found.

    ``id`` is the document's id (None when ``on_duplicate="skip"`` skipped it); ``exact_duplicate_of``
    the key of an earlier document with the same content hash; ``near_duplicates`` the matches within
    the store's k (exact duplicates included, the document itself excluded); ``canonical`` the key of
    the document this one is a variant of (None when it is its own canonical).
    """

    id: int | None
    key: str | bytes
    fingerprint: int
    short: bool
    exact_duplicate_of: str | bytes | None
    near_duplicates: list[Match]
    canonical: str | bytes | None

    @property
    def duplicate_of(self) -> str | bytes | None:
        """The key of the exact or nearest duplicate, or None for a new document."""
        if self.exact_duplicate_of is not None:
            return self.exact_duplicate_of
        return self.near_duplicates[0].key if self.near_duplicates else None


# -- the store -----------------------------------------------------------------------------------


def _sort_matches(matches: list[Match]) -> list[Match]:
    # str and bytes keys do not compare with each other; order str first, then bytes.
    return sorted(matches, key=lambda m: (m.distance, isinstance(m.key, bytes), m.key))


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
    ) -> None:
        if pipeline is not None and not isinstance(pipeline, Pipeline):
            raise InputError(f"pipeline must be a fpstore.Pipeline, not {type(pipeline).__name__}")
        self._storage = Storage(
            path, BASE_DBS, readonly=readonly, create=create, map_size=map_size, allow_network_fs=allow_network_fs
        )
        try:
            if self._storage.is_new:
                self._create(k, pipeline or Pipeline(), design, expected_size)
            else:
                self._load(pipeline, design)
            self.k = self._check_k(self.design.k if k is None else k)
        except BaseException:
            self._storage.close()
            raise

    # -- opening --------------------------------------------------------------------------------

    def _create(self, k: int | None, pipeline: Pipeline, design: str | Design, expected_size: int | None) -> None:
        self.design = design_for(3 if k is None else k, expected_size, design)
        self.pipeline = pipeline
        import platform

        header = {
            "magic": MAGIC,
            "format": FORMAT_VERSION,
            "features": sorted(KNOWN_FEATURES),
            "pipeline": pipeline.config,
            "pipeline_id": pipeline.id,
            "design": self.design.config(),
            "created": {
                "fpstore": _fpstore_version,
                "lmdb": ".".join(map(str, lmdb.version())),
                "py-lmdb": lmdb.__version__,
                "python": platform.python_version(),
                "time": int(time.time()),
            },
        }
        self.header = header
        names = BASE_DBS + [_table_name(t) for t in range(len(self.design.tables))]

        def fill(txn: lmdb.Transaction, dbs: dict[str, Any]) -> None:
            meta = dbs["meta"]
            txn.put(H_HEADER, msgpack.packb(header, use_bin_type=True), db=meta)
            if pipeline.idf is not None:
                txn.put(H_IDF, pipeline.idf.to_bytes(), db=meta)
            txn.put(H_NEXT_ID, _U64.pack(1), db=meta)
            txn.put(H_COUNT, _U64.pack(0), db=meta)

        self._storage.create(names, fill)
        self._bind_dbs()

    def _load(self, pipeline: Pipeline | None, design: str | Design) -> None:
        path = self._storage.path
        with self._storage.read() as txn:
            raw = txn.get(H_HEADER, db=self._storage.dbs["meta"])
            idf_raw = txn.get(H_IDF, db=self._storage.dbs["meta"])
        if raw is None:
            raise NotAStoreError(f"{path} has no fpstore header")
        header = self._decode_header(raw)
        self.header = header
        try:
            self.design = Design.from_config(header["design"])
        except DesignError as exc:
            raise FormatError(f"{path}: the stored table design is invalid: {exc}") from exc
        if isinstance(design, Design) and design.config() != self.design.config():
            raise DesignError(f"{path} was created with design {self.design.name}, not {design.name}")
        if isinstance(design, str) and design != "auto" and design != self.design.name:
            raise DesignError(f"{path} was created with design {self.design.name!r}, not {design!r}")
        idf = IdfTable.from_bytes(idf_raw) if idf_raw is not None else None
        stored = Pipeline.from_config(header["pipeline"], idf)
        if stored.id != header["pipeline_id"]:
            raise FormatError(f"{path}: the header's pipeline id does not match its pipeline config")
        if pipeline is not None and pipeline.id != stored.id:
            diff = {
                f: (stored.config.get(f), pipeline.config.get(f))
                for f in sorted(set(stored.config) | set(pipeline.config))
                if stored.config.get(f) != pipeline.config.get(f)
            }
            fields = ", ".join(f"{f}: store has {a!r}, given {b!r}" for f, (a, b) in diff.items())
            raise PipelineMismatchError(
                f"{path} was created with pipeline {stored.id}, not {pipeline.id} ({fields}); "
                "fingerprints of different pipelines are not comparable"
            )
        self.pipeline = stored
        self._storage.open_dbs([_table_name(t) for t in range(len(self.design.tables))])
        self._bind_dbs()

    def _decode_header(self, raw: bytes) -> dict[str, Any]:
        path = self._storage.path
        try:
            header = msgpack.unpackb(raw, raw=False, strict_map_key=True, max_bin_len=1 << 20)
        except Exception as exc:
            raise FormatError(f"{path}: the store header does not decode ({exc})") from None
        if not isinstance(header, dict) or header.get("magic") != MAGIC:
            raise NotAStoreError(f"{path} is not an fpstore store (bad magic)")
        fmt = header.get("format")
        if not isinstance(fmt, int) or fmt > FORMAT_VERSION or fmt < 1:
            raise FormatError(
                f"{path} has format version {fmt!r}; this fpstore ({_fpstore_version}) reads versions 1..{FORMAT_VERSION}: upgrade fpstore"
            )
        features = header.get("features")
        if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
            raise FormatError(f"{path}: the header's feature list is malformed")
        unknown = sorted(set(features) - KNOWN_FEATURES)
        if unknown:
            raise FormatError(f"{path} requires features this fpstore does not know: {unknown}; upgrade fpstore")
        for field in ("pipeline", "pipeline_id", "design"):
            if field not in header:
                raise FormatError(f"{path}: the header lacks {field!r}")
        return header

    def _bind_dbs(self) -> None:
        dbs = self._storage.dbs
        self._meta, self._docs, self._keys, self._content = dbs["meta"], dbs["docs"], dbs["keys"], dbs["content"]
        self._tables = [dbs[_table_name(t)] for t in range(len(self.design.tables))]

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

    def _id_of(self, txn: lmdb.Transaction, typed: bytes) -> int | None:
        raw = txn.get(_lookup_key(typed), db=self._keys)
        if raw is None:
            return None
        doc_id = _u64(raw, "key table entry")
        # A hashed lookup key could in principle collide; the record holds the full key.
        if len(typed) > _MAX_RAW_KEY:
            rec = self._record(txn, doc_id)
            if rec is None or rec[0] != typed:
                return None
        return doc_id

    def _record(self, txn: lmdb.Transaction, doc_id: int) -> tuple[bytes, int, bytes | None, int, int] | None:
        raw = txn.get(_U64.pack(doc_id), db=self._docs)
        return None if raw is None else _unpack_record(raw)

    def _key_of(self, txn: lmdb.Transaction, doc_id: int) -> str | bytes:
        rec = self._record(txn, doc_id)
        if rec is None:
            raise CorruptionError(f"an index entry names document {doc_id}, which has no record")
        return _untyped_key(rec[0])

    def _content_ids(self, txn: lmdb.Transaction, content_hash: bytes) -> list[int]:
        """Ids of documents with this content hash, oldest first."""
        cur = txn.cursor(db=self._content)
        out: list[int] = []
        if cur.set_range(content_hash):
            for key in cur.iternext(keys=True, values=False):
                if key[:16] != content_hash:
                    break
                if len(key) != 24:
                    raise CorruptionError("content table entry has the wrong length")
                out.append(_U64.unpack_from(key, 16)[0])
        return out

    def _probe(self, txn: lmdb.Transaction, fp: int, k: int, exclude: int = 0) -> dict[int, tuple[int, int]]:
        """Ids within ``k`` of ``fp`` → (distance, fingerprint), over every table of the design."""
        design = self.design
        found: dict[int, tuple[int, int]] = {}
        for t, db in enumerate(self._tables):
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

    def _scan_all(self, txn: lmdb.Transaction, fp: int, k: int) -> dict[int, tuple[int, int]]:
        """Exhaustive mode: compare with every indexed fingerprint (table 0 is the identity)."""
        found: dict[int, tuple[int, int]] = {}
        cur = txn.cursor(db=self._tables[0])
        for key in cur.iternext(keys=True, values=False):
            cand, doc_id = _PAIR.unpack(key)
            d = (cand ^ fp).bit_count()
            if d <= k:
                found[doc_id] = (d, cand)
        return found

    def _matches(self, txn: lmdb.Transaction, found: dict[int, tuple[int, int]]) -> list[Match]:
        return _sort_matches([Match(self._key_of(txn, i), d, f, i) for i, (d, f) in found.items()])

    # -- writing helpers (inside a write transaction) -------------------------------------------

    def _meta_int(self, txn: lmdb.Transaction, name: bytes) -> int:
        raw = txn.get(name, db=self._meta)
        if raw is None:
            raise CorruptionError(f"the store's meta table lacks {name.decode()}")
        return _u64(raw, name.decode())

    def _remove(self, txn: lmdb.Transaction, doc_id: int) -> tuple[bytes, int, bytes | None, int, int] | None:
        """Delete document ``doc_id`` and all its index entries; returns its record."""
        rec = self._record(txn, doc_id)
        if rec is None:
            return None
        typed, fp, content_hash, _canonical, flags = rec
        txn.delete(_U64.pack(doc_id), db=self._docs)
        txn.delete(_lookup_key(typed), db=self._keys)
        if content_hash is not None:
            txn.delete(content_hash + _U64.pack(doc_id), db=self._content)
        if not flags & FLAG_SHORT:
            for t, db in enumerate(self._tables):
                txn.delete(_PAIR.pack(self.design.permute_one(fp, t), doc_id), db=db)
        return rec

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
        typed = _typed_key(key)
        if on_duplicate not in ("insert", "skip"):
            raise InputError(f"on_duplicate must be 'insert' or 'skip', got {on_duplicate!r}")
        if (text is None) == (fingerprint is None):
            raise InputError("pass exactly one of text= and fingerprint=")
        if text is not None:
            sig = self.pipeline.signature(text)
            fp, short, content_hash, flags = sig.fingerprint, sig.short, sig.content_hash, FLAG_TEXT
        else:
            self._check_pipeline_id(pipeline_id)
            fp = int(as_fingerprint_array([fingerprint], "fingerprint")[0])
            short, content_hash, flags = False, None, 0
        if short:
            flags |= FLAG_SHORT
        k = self.k

        def work(txn: lmdb.Transaction) -> AddResult:
            old_id = self._id_of(txn, typed)
            if old_id is not None:
                old = self._record(txn, old_id)
                if old is not None and old[1] == fp and old[2] == content_hash and old[4] == flags:
                    return self._verdict(txn, old_id, typed, fp, content_hash, short, k)
            exact_ids = [i for i in self._content_ids(txn, content_hash) if i != old_id] if content_hash else []
            near = {} if short else self._probe(txn, fp, k, exclude=old_id or 0)
            result = self._verdict_from(txn, None, typed, fp, short, exact_ids, near)
            if on_duplicate == "skip" and result.duplicate_of is not None:
                return result
            if old_id is not None:
                self._remove(txn, old_id)
                doc_id = old_id
            else:
                doc_id = self._meta_int(txn, H_NEXT_ID)
                txn.put(H_NEXT_ID, _U64.pack(doc_id + 1), db=self._meta)
                txn.put(H_COUNT, _U64.pack(self._meta_int(txn, H_COUNT) + 1), db=self._meta)
            canonical_id = self._canonical_id(txn, exact_ids, near)
            if canonical_id == doc_id:
                canonical_id = 0
            txn.put(_U64.pack(doc_id), _pack_record(typed, fp, content_hash, canonical_id, flags), db=self._docs)
            txn.put(_lookup_key(typed), _U64.pack(doc_id), db=self._keys)
            if content_hash is not None:
                txn.put(content_hash + _U64.pack(doc_id), b"", db=self._content)
            if not short:
                for t, db in enumerate(self._tables):
                    txn.put(_PAIR.pack(self.design.permute_one(fp, t), doc_id), b"", db=db)
            canonical = self._key_of(txn, canonical_id) if canonical_id else None
            return AddResult(doc_id, result.key, fp, short, result.exact_duplicate_of, result.near_duplicates, canonical)

        return self._storage.write(work, action=f"adding {key!r}")

    def _canonical_of(self, txn: lmdb.Transaction, doc_id: int) -> int:
        """The live canonical of a stored document: its recorded canonical, or itself.

        A canonical document may have been deleted since it was recorded; its variants then fall
        back to themselves (this is not damage, so it raises nothing).
        """
        rec = self._record(txn, doc_id)
        if rec is None:
            raise CorruptionError(f"document {doc_id} is indexed but has no record")
        canonical = rec[3]
        if canonical and canonical != doc_id and self._record(txn, canonical) is not None:
            return canonical
        return doc_id

    def _canonical_id(self, txn: lmdb.Transaction, exact_ids: list[int], near: dict[int, tuple[int, int]]) -> int:
        """The canonical of a new document: its exact duplicate's, else its nearest neighbour's, else 0 (itself)."""
        if exact_ids:
            return self._canonical_of(txn, exact_ids[0])
        if near:
            return self._canonical_of(txn, min(near, key=lambda i: (near[i][0], i)))
        return 0

    def _verdict_from(
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
        exact = self._key_of(txn, exact_ids[0]) if exact_ids else None
        canonical_id = self._canonical_id(txn, exact_ids, near)
        canonical = self._key_of(txn, canonical_id) if canonical_id else None
        return AddResult(doc_id, _untyped_key(typed), fp, short, exact, self._matches(txn, near), canonical)

    def _verdict(
        self, txn: lmdb.Transaction, doc_id: int, typed: bytes, fp: int, content_hash: bytes | None, short: bool, k: int
    ) -> AddResult:
        """The verdict for a document re-added unchanged: the same neighbours a new add would see."""
        exact_ids = [i for i in self._content_ids(txn, content_hash) if i != doc_id] if content_hash else []
        near = {} if short else self._probe(txn, fp, k, exclude=doc_id)
        res = self._verdict_from(txn, doc_id, typed, fp, short, exact_ids, near)
        canonical_id = self._canonical_of(txn, doc_id)
        canonical = self._key_of(txn, canonical_id) if canonical_id != doc_id else None
        return AddResult(doc_id, res.key, fp, short, res.exact_duplicate_of, res.near_duplicates, canonical)

    def add_many(
        self,
        keys: Sequence[str | bytes],
        *,
        texts: Sequence[object] | None = None,
        fingerprints: object = None,
        pipeline_id: str | None = None,
        checkpoint: tuple[str, Any] | None = None,
    ) -> np.ndarray:
        """Add a batch in one durable transaction; returns the documents' ids (int64).

        Either every document is stored, with ``checkpoint=(name, position)`` recorded in the same
        transaction, or none is. Keys already stored are replaced; a key repeated within the batch
        keeps its last document. No verdicts are computed (use :meth:`add` for them, or
        :meth:`near_duplicate_pairs` afterwards); canonical keys are left unset.
        """
        if isinstance(keys, (str, bytes)):
            raise InputError("keys must be a sequence of keys; use add() for one document")
        typed_keys = [_typed_key(k) for k in keys]
        sigs = self._signatures(len(typed_keys), texts, fingerprints, pipeline_id)
        ckpt = self._encode_checkpoint(checkpoint) if checkpoint is not None else None
        n = len(typed_keys)
        fps = sigs.values
        short = sigs.short if sigs.short is not None else np.zeros(n, dtype=bool)
        has_text = texts is not None
        # Last occurrence of a key wins; earlier ones are dropped before any write.
        last: dict[bytes, int] = {}
        for i, t in enumerate(typed_keys):
            last[t] = i
        keep = np.fromiter(sorted(last.values()), dtype=np.int64, count=len(last))
        design = self.design

        def work(txn: lmdb.Transaction) -> np.ndarray:
            ids = np.zeros(n, dtype=np.int64)
            next_id = self._meta_int(txn, H_NEXT_ID)
            count = self._meta_int(txn, H_COUNT)
            docs: list[tuple[bytes, bytes]] = []
            key_items: list[tuple[bytes, bytes]] = []
            content_items: list[tuple[bytes, bytes]] = []
            for i in keep.tolist():
                typed = typed_keys[i]
                old_id = self._id_of(txn, typed)
                if old_id is not None:
                    self._remove(txn, old_id)
                    doc_id = old_id
                else:
                    doc_id = next_id
                    next_id += 1
                    count += 1
                ids[i] = doc_id
                flags = (FLAG_TEXT if has_text else 0) | (FLAG_SHORT if short[i] else 0)
                content_hash = sigs.content_hash(i) if has_text else None
                packed_id = _U64.pack(doc_id)
                docs.append((packed_id, _pack_record(typed, int(fps[i]), content_hash, 0, flags)))
                key_items.append((_lookup_key(typed), packed_id))
                if content_hash is not None:
                    content_items.append((content_hash + packed_id, b""))
            for i in range(n):  # duplicates within the batch share the surviving document's id
                ids[i] = ids[last[typed_keys[i]]]
            txn.cursor(db=self._docs).putmulti(docs)
            txn.cursor(db=self._keys).putmulti(sorted(key_items))
            if content_items:
                txn.cursor(db=self._content).putmulti(sorted(content_items))
            indexed = keep[~short[keep]]
            if len(indexed):
                doc_ids = ids[indexed].astype(np.uint64)
                for t, db in enumerate(self._tables):
                    perm = design.permute(fps[indexed], t)
                    order = np.lexsort((doc_ids, perm))
                    pairs = np.empty((len(order), 2), dtype=">u8")
                    pairs[:, 0] = perm[order]
                    pairs[:, 1] = doc_ids[order]
                    buf = pairs.tobytes()
                    txn.cursor(db=db).putmulti([(buf[j : j + 16], b"") for j in range(0, len(buf), 16)])
            txn.put(H_NEXT_ID, _U64.pack(next_id), db=self._meta)
            txn.put(H_COUNT, _U64.pack(count), db=self._meta)
            if ckpt is not None:
                txn.put(ckpt[0], ckpt[1], db=self._meta)
            return ids

        return self._storage.write(work, action=f"adding a batch of {n}")

    def delete(self, key: str | bytes) -> bool:
        """Delete a document; returns whether it existed. Durable when it returns."""
        typed = _typed_key(key)

        def work(txn: lmdb.Transaction) -> bool:
            doc_id = self._id_of(txn, typed)
            if doc_id is None:
                return False
            self._remove(txn, doc_id)
            txn.put(H_COUNT, _U64.pack(self._meta_int(txn, H_COUNT) - 1), db=self._meta)
            return True

        return self._storage.write(work, action=f"deleting {key!r}")

    # -- checkpoints ----------------------------------------------------------------------------

    @staticmethod
    def _encode_checkpoint(checkpoint: object) -> tuple[bytes, bytes]:
        if not isinstance(checkpoint, tuple) or len(checkpoint) != 2 or not isinstance(checkpoint[0], str):
            raise InputError("checkpoint must be a (name: str, position) pair")
        name, position = checkpoint
        try:
            packed = msgpack.packb(position, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InputError(f"checkpoint position must be msgpack-able (int, str, bytes, list, dict): {exc}") from None
        key = CHECKPOINT_PREFIX + name.encode("utf-8")
        if len(key) > 400:
            raise InputError("checkpoint name is too long (at most ~380 bytes of UTF-8)")
        return key, packed

    def checkpoint(self, name: str) -> Any:
        """The position last committed with ``checkpoint=(name, position)``, or None."""
        key, _ = self._encode_checkpoint((name, None))
        with self._storage.read() as txn:
            raw = txn.get(key, db=self._meta)
        if raw is None:
            return None
        try:
            return msgpack.unpackb(raw, raw=False, max_bin_len=1 << 20)
        except Exception as exc:
            raise CorruptionError(f"checkpoint {name!r} does not decode: {exc}") from None

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
            fp = int(as_fingerprint_array([fingerprint], "fingerprint")[0])
        with self._storage.read() as txn:
            if content_hash is not None:
                found = {i: (0, fp) for i in self._content_ids(txn, content_hash)}
            elif exhaustive:
                found = self._scan_all(txn, fp, kq)
            else:
                found = self._probe(txn, fp, kq)
            return self._matches(txn, found)

    def query_many(
        self, fingerprints: object, *, pipeline_id: str | None = None, k: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All matches of many fingerprints in one snapshot, columnar.

        Returns ``(query_index int64, id int64, distance uint8)``, sorted by query index, then
        distance, then id. Keys of ids come from :meth:`keys_of`.
        """
        sigs = self._signatures(None, None, fingerprints, pipeline_id)
        kq = self._check_k(self.k if k is None else k)
        fps = sigs.values
        q_out: list[int] = []
        id_out: list[int] = []
        d_out: list[int] = []
        with self._storage.read() as txn:
            for qi, fp in enumerate(fps.tolist()):
                for doc_id, (d, _) in self._probe(txn, fp, kq).items():
                    q_out.append(qi)
                    id_out.append(doc_id)
                    d_out.append(d)
        q = np.array(q_out, dtype=np.int64)
        ids = np.array(id_out, dtype=np.int64)
        dist = np.array(d_out, dtype=np.uint8)
        order = np.lexsort((ids, dist, q))
        return q[order], ids[order], dist[order]

    def keys_of(self, ids: Iterable[int]) -> list[str | bytes]:
        """The keys of document ids (as returned by :meth:`query_many`), in one snapshot."""
        with self._storage.read() as txn:
            return [self._key_of(txn, int(i)) for i in ids]

    def get(self, key: str | bytes, default: Any = None) -> Document | Any:
        """The stored :class:`Document` for ``key``, or ``default``."""
        typed = _typed_key(key)
        with self._storage.read() as txn:
            doc_id = self._id_of(txn, typed)
            if doc_id is None:
                return default
            rec = self._record(txn, doc_id)
            if rec is None:
                raise CorruptionError(f"key {key!r} names document {doc_id}, which has no record")
            typed_stored, fp, content_hash, canonical, flags = rec
            live = self._canonical_of(txn, doc_id)
            canonical_key = self._key_of(txn, live) if live != doc_id else None
            return Document(_untyped_key(typed_stored), doc_id, fp, content_hash, canonical_key, bool(flags & FLAG_SHORT))

    def __getitem__(self, key: str | bytes) -> Document:
        doc = self.get(key)
        if doc is None:
            raise KeyError(key)
        return doc

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, (str, bytes, bytearray, memoryview)):
            return False
        with self._storage.read() as txn:
            return self._id_of(txn, _typed_key(key)) is not None

    def __len__(self) -> int:
        with self._storage.read() as txn:
            return self._meta_int(txn, H_COUNT)

    def __iter__(self) -> Iterator[str | bytes]:
        """Keys in insertion (id) order; read in batches so no transaction spans a yield."""
        after = 0
        while True:
            with self._storage.read() as txn:
                cur = txn.cursor(db=self._docs)
                batch: list[str | bytes] = []
                if cur.set_range(_U64.pack(after + 1)):
                    for raw_id, raw in cur:
                        after = _u64(raw_id, "document id")
                        batch.append(_untyped_key(_unpack_record(raw)[0]))
                        if len(batch) >= ITER_BATCH:
                            break
            if not batch:
                return
            yield from batch

    def info(self) -> dict[str, Any]:
        """Header, design, counts and storage figures, as plain data."""
        storage = self._storage.info()
        n = len(self)
        return {
            "path": self.path,
            "format": self.header["format"],
            "pipeline_id": self.pipeline.id,
            "pipeline": self.pipeline.config,
            "design": self.design.describe(max(n, 1)),
            "k": self.k,
            "documents": n,
            "file_size": storage["file_size"],
            "map_size": storage["map_size"],
            "created": self.header.get("created"),
        }


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
) -> Store:
    """Open the store in directory ``path``, creating it (mode 0700) when missing and ``create``.

    ``k`` is the default query radius; for a new store it also chooses the design (exact up to k,
    default 3). ``pipeline`` defaults to :class:`Pipeline()` for a new store and must match an
    existing store's. ``design`` is ``"auto"`` (chosen from ``expected_size``), a design name or a
    :class:`~fpstore.design.Design`. One process writes; others open with ``readonly=True``.
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
    )
