"""The sketch column: every document's verification sketch, by id, in blocks of 64 documents.

A store whose pipeline has ``sketch_bits`` keeps each document's sketch (W = sketch_bits / 64
words) in the ``sketches`` sub-database, keyed by the block number ``id // 64`` (8 bytes,
big-endian); a block's value is 64 × W little-endian uint64 words, slot ``id % 64`` first to last.
Ids are given out in increasing order, so a bulk load fills whole blocks and an add rewrites one
small block. The column does not depend on the index layout: merges, flushes and redesigns leave
it alone, and a replaced or deleted document's slot is simply never read again.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import lmdb
import numpy as np

from fpstore.errors import CorruptionError, InputError
from fpstore.fingerprint.pipeline import sketch_similarity
from fpstore.store.header import U64
from fpstore.store.results import AddResult, Match

__all__ = ["BLOCK", "DB_NAME", "Sketches", "check_sketch", "check_threshold", "verdict_similarities", "verified", "verified_columns"]

DB_NAME = "sketches"
#: Documents per block.
BLOCK = 64


class Sketches:
    """Reads and writes of the sketch column (``words`` uint64 words per document)."""

    def __init__(self, db: Any, words: int) -> None:
        self.db = db
        self.words = words
        self._block_bytes = BLOCK * words * 8

    def _block(self, txn: lmdb.Transaction, block: int) -> np.ndarray | None:
        raw = txn.get(U64.pack(block), db=self.db)
        if raw is None:
            return None
        if len(raw) != self._block_bytes:
            raise CorruptionError(f"sketch block {block} holds {len(raw)} bytes, expected {self._block_bytes}")
        return np.frombuffer(raw, dtype="<u8").reshape(BLOCK, self.words)

    def put(self, txn: lmdb.Transaction, ids: np.ndarray, sketches: np.ndarray) -> None:
        """Store ``sketches[i]`` (uint64[n, words]) as the sketch of ``ids[i]``."""
        ids = np.asarray(ids, dtype=np.int64)
        if len(ids) == 0:
            return
        order = np.argsort(ids, kind="stable")
        ids, sketches = ids[order], np.asarray(sketches, dtype=np.uint64)[order]
        blocks = ids // BLOCK
        starts = np.flatnonzero(np.r_[True, blocks[1:] != blocks[:-1]])
        ends = np.r_[starts[1:], len(ids)]
        items = []
        for lo, hi in zip(starts.tolist(), ends.tolist()):
            block = int(blocks[lo])
            slots = ids[lo:hi] % BLOCK
            if hi - lo == BLOCK:  # a whole block (a bulk load): nothing to keep from before
                values = np.empty((BLOCK, self.words), dtype="<u8")
            else:
                old = self._block(txn, block)
                values = np.zeros((BLOCK, self.words), dtype="<u8") if old is None else old.copy()
            values[slots] = sketches[lo:hi]
            items.append((U64.pack(block), values.tobytes()))
        txn.cursor(db=self.db).putmulti(items)

    def get(self, txn: lmdb.Transaction, ids: np.ndarray) -> np.ndarray:
        """The sketches of ``ids`` (uint64[n, words]); an id whose block is missing raises
        :class:`CorruptionError` (every document of a store with a sketch has one)."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.empty((len(ids), self.words), dtype=np.uint64)
        if len(ids) == 0:
            return out
        blocks, where = np.unique(ids // BLOCK, return_inverse=True)
        values = np.empty((len(blocks), BLOCK, self.words), dtype=np.uint64)
        for j, block in enumerate(blocks.tolist()):
            got = self._block(txn, block)
            if got is None:
                raise CorruptionError(f"the sketch of document {int(ids[where == j][0])} is missing (block {block})")
            values[j] = got
        out[:] = values[where, ids % BLOCK]
        return out

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


def verified(
    sketches: Sketches | None, txn: lmdb.Transaction, matches: list[Match], sketch: np.ndarray | None, threshold: float | None
) -> list[Match]:
    """``matches`` with their estimated similarity to a query of sketch ``sketch`` filled in, and
    with ``threshold``, only those at or above it (order kept). Without a sketch on either side
    the matches come back as they are, and a threshold cannot be applied: InputError."""
    if sketches is None or sketch is None:
        if threshold is not None:
            raise InputError(
                "threshold= needs a verification sketch on both sides: a store whose pipeline has sketch_bits, queried with text="
            )
        return matches
    if not matches:
        return matches
    stored = sketches.get(txn, np.fromiter((m.id for m in matches), dtype=np.int64, count=len(matches)))
    sims = sketch_similarity(stored, np.asarray(sketch, dtype=np.uint64)[None, :]).tolist()
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
    if threshold is None:
        return columns
    if sketches is None or query_sketches is None:
        raise InputError(
            "threshold= needs a verification sketch on both sides: a store whose pipeline has sketch_bits, and Fingerprints with sketches"
        )
    if query_sketches.shape[1] != sketches.words:
        raise InputError(f"the queries' sketches have {64 * query_sketches.shape[1]} bits; this store keeps {64 * sketches.words}")
    q, ids, dist = columns
    if len(q) == 0:
        return columns
    keep = sketch_similarity(sketches.get(txn, ids), query_sketches[q]) >= threshold
    return q[keep], ids[keep], dist[keep]
