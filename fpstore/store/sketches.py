"""The sketch column: every document's verification sketch, by id, in blocks of documents.

A store whose pipeline has ``sketch_bits`` keeps each document's sketch (W = sketch_bits / 64
words) in the ``sketches`` sub-database, keyed by the block number ``id // B`` (8 bytes,
big-endian), B = :func:`block_size` (W) = 4080 // (8 W) documents; a block's value is B × W
little-endian uint64 words, slot ``id % B`` first to last. 4,080 bytes is what one 4 KiB LMDB
overflow page holds after its header: a block of 64 sketches of 256 bits (2,048 bytes) was just
too large to sit in a leaf and took a page of its own, twice its bytes.
Ids are given out in increasing order, so a bulk load fills whole blocks and an add rewrites one
small block. The column does not depend on the index layout: merges, flushes and redesigns leave
it alone, and a replaced or deleted document's slot is simply never read again.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import lmdb
import numpy as np

from fpstore.errors import CorruptionError, InputError
from fpstore.fingerprint.pipeline import DEFAULT_SKETCH_BITS, sketch_similarity
from fpstore.store.header import U64
from fpstore.store.results import AddResult, Match

__all__ = [
    "BLOCK_BYTES",
    "CANDIDATE_K",
    "DB_NAME",
    "DEFAULT_SKETCH_BITS",
    "DEFAULT_THRESHOLD",
    "NEEDS_SKETCH",
    "Sketches",
    "block_size",
    "check_sketch",
    "check_threshold",
    "check_verifiable",
    "stored_threshold",
    "verdict_similarities",
    "verified",
    "verified_columns",
    "verify_near",
]

DB_NAME = "sketches"
#: Bytes of sketches per block at most: one 4 KiB overflow page less its 16-byte header.
BLOCK_BYTES = 4080
#: Up to this many ids, :meth:`Sketches.similarities` compares in plain Python ints.
_FEW = 32


def block_size(words: int) -> int:
    """Documents per block of sketches of ``words`` words (510 for 1 word, 127 for 4, 63 for 8)."""
    return BLOCK_BYTES // (8 * words)


#: A new store that verifies (``threshold=``, or no ``k``) and is given no pipeline gets ``Pipeline()``,
#: whose sketch has DEFAULT_SKETCH_BITS, and without ``k`` the candidate radius CANDIDATE_K: at θ = 0.8 F1 rises with the radius up to 8
#: (docs/tuning.md, "Verified similarity"), but k = 7 shares k = 6's index (r4f1) and k = 8 costs
#: 4-5 times its query time; at k = 7, 512 bits reach F1 0.95 where 256 do not, within the same
#: query costs (docs/designs.md, "Verification radius k_c").
CANDIDATE_K = 7
#: The threshold of a new store opened without ``k`` and ``threshold`` whose pipeline has a sketch
#: (the default one has): the truth threshold of the evaluation in docs/tuning.md.
DEFAULT_THRESHOLD = 0.8
NEEDS_SKETCH = "threshold= needs a pipeline with a verification sketch, such as fpstore.Pipeline() (512 bits)"


class Sketches:
    """Reads and writes of the sketch column (``words`` uint64 words per document)."""

    def __init__(self, db: Any, words: int) -> None:
        self.db = db
        self.words = words
        self.block = block_size(words)
        self._block_bytes = self.block * words * 8

    def _raw(self, txn: lmdb.Transaction, block: int) -> bytes | memoryview | None:
        """Block ``block``'s bytes (a view into the map), length checked; None when missing."""
        raw = txn.get(U64.pack(block), db=self.db)
        if raw is not None and len(raw) != self._block_bytes:
            raise CorruptionError(f"sketch block {block} holds {len(raw)} bytes, expected {self._block_bytes}")
        return raw

    def _block(self, txn: lmdb.Transaction, block: int) -> np.ndarray | None:
        raw = self._raw(txn, block)
        return None if raw is None else np.frombuffer(raw, dtype="<u8").reshape(self.block, self.words)

    def put(self, txn: lmdb.Transaction, ids: np.ndarray, sketches: np.ndarray) -> None:
        """Store ``sketches[i]`` (uint64[n, words]) as the sketch of ``ids[i]``."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return
        order = np.argsort(ids, kind="stable")
        ids, sketches = ids[order], np.asarray(sketches, dtype=np.uint64)[order]
        size = self.block
        items = []
        for block, lo, hi in self._runs(ids):
            slots = ids[lo:hi] % size
            if hi - lo == size:  # a whole block (a bulk load): nothing to keep from before
                values = np.empty((size, self.words), dtype="<u8")
            else:
                old = self._block(txn, block)
                values = np.zeros((size, self.words), dtype="<u8") if old is None else old.copy()
            values[slots] = sketches[lo:hi]
            items.append((U64.pack(block), values.tobytes()))
        txn.cursor(db=self.db).putmulti(items)

    def _runs(self, ids: np.ndarray) -> list[tuple[int, int, int]]:
        """``(block, lo, hi)`` for each block the sorted ``ids`` touch: ``ids[lo:hi]`` lie in it."""
        if len(ids) == 0:
            return []
        blocks = ids // self.block
        starts = np.flatnonzero(np.r_[True, blocks[1:] != blocks[:-1]])
        ends = np.r_[starts[1:], len(ids)]
        return [(int(blocks[lo]), lo, hi) for lo, hi in zip(starts.tolist(), ends.tolist())]

    def get(self, txn: lmdb.Transaction, ids: np.ndarray) -> np.ndarray:
        """The sketches of ``ids`` (uint64[n, words]); an id whose block is missing raises
        :class:`CorruptionError` (every document of a store with a sketch has one)."""
        ids = np.asarray(ids, dtype=np.int64)
        n = len(ids)
        if n == 0:
            return np.empty((0, self.words), dtype=np.uint64)
        blocks, where = np.unique(ids // self.block, return_inverse=True)
        fetch, pack, db = txn.get, U64.pack, self.db
        found = [fetch(pack(block), db=db) for block in blocks.tolist()]
        if not all(raw is not None and len(raw) == self._block_bytes for raw in found):
            for j, raw in enumerate(found):
                if raw is None:
                    raise CorruptionError(f"the sketch of document {int(ids[where == j][0])} is missing (block {int(blocks[j])})")
                self._raw(txn, int(blocks[j]))  # raises for the wrong length
        raws = cast(list[bytes | memoryview], found)
        slots = ids % self.block
        if n > 8 * len(blocks):
            # Many ids per block (a small store, a join's sorted ids): whole blocks in one copy.
            values = np.frombuffer(b"".join(raws), dtype="<u8").reshape(len(blocks), self.block, self.words)
            return values[where, slots].astype(np.uint64, copy=False)
        # A few ids per block (a batch's matches in a large store): each sketch's bytes alone,
        # where copying and indexing whole blocks cost 2-3 us per id.
        width = 8 * self.words
        joined = b"".join([raws[j][s : s + width] for j, s in zip(where.tolist(), (slots * width).tolist())])
        return np.frombuffer(joined, dtype="<u8").reshape(n, self.words).astype(np.uint64)

    def similarities(self, txn: lmdb.Transaction, ids: list[int], sketch: np.ndarray) -> list[float]:
        """The similarity each of ``ids`` has to ``sketch`` (:func:`sketch_similarity`). A few ids
        (a single query's matches, an add's candidates) take a path without numpy: each sketch as
        one Python int, compared with a XOR and a popcount, which costs a microsecond where the
        array path costs tens."""
        if len(ids) > _FEW:
            return sketch_similarity(self.get(txn, np.array(ids, dtype=np.int64)), np.asarray(sketch, dtype=np.uint64)[None, :]).tolist()
        query = int.from_bytes(np.asarray(sketch, dtype="<u8").tobytes(), "little")
        width, bits = 8 * self.words, 64 * self.words
        out = []
        for doc_id in ids:
            block, slot = divmod(doc_id, self.block)
            raw = self._raw(txn, block)
            if raw is None:
                raise CorruptionError(f"the sketch of document {doc_id} is missing (block {block})")
            stored = int.from_bytes(raw[slot * width : (slot + 1) * width], "little")
            out.append(max(0.0, 1.0 - 2.0 * (stored ^ query).bit_count() / bits))
        return out

    def problems(self, txn: lmdb.Transaction, ids: np.ndarray, limit: int = 10) -> list[str]:
        """What is wrong with the sketches of live documents ``ids``: a block missing or of the
        wrong length, or a slot never written (all words zero: a real sketch of a text with
        shingles is never that)."""
        found: list[str] = []
        ids = np.unique(np.asarray(ids, dtype=np.int64))
        for block, lo, hi in self._runs(ids):
            try:
                values = self._block(txn, block)
            except CorruptionError as exc:
                found.append(str(exc))
                values = None
            else:
                if values is None:
                    found.append(f"sketch block {block} is missing (documents {int(ids[lo])}..{int(ids[hi - 1])})")
            if values is not None:
                empty = ids[lo:hi][~values[ids[lo:hi] % self.block].any(axis=1)]
                if len(empty):
                    found.append(f"{len(empty)} documents have no sketch in block {block} (for example id {int(empty[0])})")
            if len(found) >= limit:
                break
        return found

    def verify_pairs(self, txn: lmdb.Transaction, a: np.ndarray, b: np.ndarray, threshold: float) -> np.ndarray:
        """A boolean mask of the pairs ``(a[i], b[i])`` whose sketches estimate a similarity of at
        least ``threshold``."""
        if len(a) == 0:
            return np.zeros(0, dtype=bool)
        return sketch_similarity(self.get(txn, a), self.get(txn, b)) >= threshold


def check_sketch(words: int, sketch: object) -> np.ndarray:
    """A query's sketch as given with a raw fingerprint: ``words`` uint64 values (an array or a
    sequence of ints), in a store that keeps sketches of that length."""
    if words == 0:
        raise InputError("sketch= is for stores whose pipeline has a verification sketch (sketch_bits)")
    if isinstance(sketch, np.ndarray):
        values = sketch.tolist() if sketch.ndim == 1 and sketch.dtype.kind in "iu" else None
    elif isinstance(sketch, (list, tuple)):
        values = list(sketch)
    else:
        values = None
    if values is None or len(values) != words or not all(_is_word(w) for w in values):
        raise InputError(f"sketch must be {words} uint64 words (the store's pipeline makes {64 * words}-bit sketches), got {sketch!r:.80}")
    return np.array([int(w) for w in values], dtype=np.uint64)


def _is_word(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and 0 <= int(value) < 1 << 64


def check_threshold(threshold: object) -> float | None:
    """A similarity threshold as given to a query: None, or a number in [0, 1]."""
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= float(threshold) <= 1.0:
        raise InputError(f"threshold must be a number in [0, 1], got {threshold!r}")
    return float(threshold)


def stored_threshold(header: dict[str, Any], path: str) -> float | None:
    """The verification threshold a store's header records (None: answers by radius alone)."""
    value = header.get("threshold")
    try:
        return check_threshold(value)
    except InputError:
        raise CorruptionError(f"{path}: the header's threshold {value!r} is not a number in [0, 1]") from None


def verify_near(
    sketches: Sketches | None,
    txn: lmdb.Transaction,
    near: dict[int, tuple[int, int]],
    sketch: np.ndarray | None,
    threshold: float | None,
    pending: dict[int, np.ndarray] | None = None,
) -> dict[int, tuple[int, int]]:
    """The candidates of an add (``{id: (distance, fingerprint)}``) whose sketches reach
    ``threshold``; ``pending`` holds the sketches of documents this transaction has not written
    yet (an add group's earlier documents)."""
    if not threshold or sketches is None or sketch is None or not near:
        return near
    ids = [i for i in near if not pending or i not in pending]
    sims = dict(zip(ids, sketches.similarities(txn, ids, sketch)))
    if pending:
        for i in near:
            if i in pending:
                sims[i] = float(sketch_similarity(pending[i], np.asarray(sketch, dtype=np.uint64)))
    return {i: near[i] for i in near if sims[i] >= threshold}


def check_verifiable(sketches: Sketches | None, query_sketch: object, threshold: float | None, queries: str) -> None:
    """InputError when ``threshold`` (above 0: every estimate is at least 0, so 0 keeps every
    candidate) cannot be applied: the store keeps no sketches, or the query (``queries`` says
    what carries one) has none."""
    if threshold and sketches is None:
        raise InputError(
            "a threshold needs verification sketches, and this store keeps none: a sketch is made from the texts, so ingest "
            "them into a new store made without k= (or with threshold=)"
        )
    if threshold and query_sketch is None:
        raise InputError(
            f"answers at threshold {threshold} are verified with the query's sketch, which a bare fingerprint does not carry: "
            f"give {queries}, or threshold=0 for every candidate within k, unverified"
        )


def verified(
    sketches: Sketches | None, txn: lmdb.Transaction, matches: list[Match], sketch: np.ndarray | None, threshold: float | None
) -> list[Match]:
    """``matches`` with their estimated similarity to a query of sketch ``sketch`` filled in, and
    with ``threshold``, only those at or above it (order kept); without a sketch on either side,
    the matches as they are (see :func:`check_verifiable`)."""
    check_verifiable(sketches, sketch, threshold, "a query with text= (or fingerprint= and sketch=)")
    threshold = threshold or None
    if sketches is None or sketch is None:
        return matches
    if not matches:
        return matches
    sims = sketches.similarities(txn, [m.id for m in matches], sketch)
    return [m._replace(similarity=s) for m, s in zip(matches, sims) if threshold is None or s >= threshold]


def verdict_similarities(
    sketches: Sketches | None, txn: lmdb.Transaction, results: list[AddResult], adds_sketches: list[np.ndarray | None]
) -> list[AddResult]:
    """Add verdicts with their near duplicates' estimated similarities filled in (every match's
    sketch must be in ``txn``: call after the adds' own sketches are written)."""
    if sketches is None:
        return results
    out = []
    for result, sketch in zip(results, adds_sketches):
        if result.near_duplicates and sketch is not None:
            result = dataclasses.replace(result, near_duplicates=verified(sketches, txn, result.near_duplicates, sketch, None))
        out.append(result)
    return out


def verified_columns(
    sketches: Sketches | None,
    txn: lmdb.Transaction,
    columns: tuple[np.ndarray, np.ndarray, np.ndarray],
    query_sketches: np.ndarray | None,
    threshold: float | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``query_many``'s ``(query index, id, distance)`` rows, with ``threshold``, only those whose
    stored sketch and their query's (``query_sketches[query index]``) reach it."""
    check_verifiable(sketches, query_sketches, threshold, "Fingerprints with sketches")
    if not threshold or sketches is None or query_sketches is None:
        return columns
    if query_sketches.shape[1] != sketches.words:
        raise InputError(f"the queries' sketches have {64 * query_sketches.shape[1]} bits; this store keeps {64 * sketches.words}")
    q, ids, dist = columns
    if len(q) == 0:
        return columns
    keep = sketch_similarity(sketches.get(txn, ids), query_sketches[q]) >= threshold
    return q[keep], ids[keep], dist[keep]
