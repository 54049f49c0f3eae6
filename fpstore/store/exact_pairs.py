"""Pairs of short documents, exact duplicates by content hash: the part of the all-pairs join
(:mod:`fpstore.store.pairs`) that the tables cannot give.

A text below the pipeline's ``min_tokens`` is stored with ``FLAG_SHORT`` and is in no table;
:meth:`Store.query` matches it by its content hash only. Here likewise: two live documents of one
content hash, one of them at least short, are a pair at the Hamming distance of their stored
fingerprints (0 for texts of one pipeline: equal hashes come from equal token streams), kept when
within k like every other pair. Pairs of two documents that are not short come from the tables
alone, so no pair is found twice. Documents stored by fingerprint (bulk loads, ``add`` with a
fingerprint) have no content hash and take no part here; deleted and replaced documents have
left the content table with their record (:meth:`Catalog.remove`).

The content table's keys are content hash ‖ id (big-endian), so the documents of one hash are
adjacent, ids ascending. :func:`groups` reads the table in key order, :data:`READ_ENTRIES` keys
at a time, and reads the records (fingerprint, flags) of the hashes held by two documents or
more; :func:`pairs_of` expands the groups with a short member about
:data:`~fpstore.index.pairs_stream.EXPAND_ROWS` candidate rows at a time. Memory: one read of
keys (24 bytes each), the members of a hash that goes on past it, and the rows being expanded;
never the table. Time: the keys are read at about 0.5 µs each, and the records of documents
whose hash is held more than once at a few µs each (a loaded two-core machine: 0.56 s for
300,000 keys, 60,000 of them in such groups).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import lmdb
import numpy as np

from fpstore.errors import CorruptionError
from fpstore.index.pairs_stream import Expansion, Window
from fpstore.store.catalog import Catalog
from fpstore.store.header import U64
from fpstore.store.keys import FLAG_SHORT, unpack_record

__all__ = ["READ_ENTRIES", "Groups", "groups", "pairs_of"]

#: Keys of the content table read at a time.
READ_ENTRIES = 1 << 16

_ENTRY = np.dtype([("hash", ">u8", (2,)), ("id", ">u8")])  # a content table key: 16 + 8 bytes

Pairs = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Groups:
    """Documents that share a content hash, one of them at least short: group ``g`` is
    ``ids[starts[g] : starts[g] + sizes[g]]`` (ascending), with their fingerprints and short flags."""

    ids: np.ndarray
    fps: np.ndarray
    short: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray


def groups(txn: lmdb.Transaction, cat: Catalog) -> Iterator[Groups]:
    """The content table's groups of two documents or more with a short member, in content-hash
    order, read in ``txn`` a batch of keys at a time (see the module docstring)."""
    keys = txn.cursor(db=cat.content).iternext(keys=True, values=False)
    carry = np.zeros(0, _ENTRY)
    while True:
        # Each key (a view into the map) is copied and let go at once: a list of views makes
        # the cyclic garbage collector scan them over and over (several times slower).
        raw = bytearray()
        count = 0
        for key in itertools.islice(keys, READ_ENTRIES):
            raw += key
            count += 1
        if len(raw) != _ENTRY.itemsize * count:
            raise CorruptionError("content table entry has the wrong length")
        entries = np.concatenate([carry, np.frombuffer(raw, _ENTRY)]) if len(carry) else np.frombuffer(raw, _ENTRY)
        last = count < READ_ENTRIES
        if not len(entries):
            return
        h = entries["hash"]
        first = np.ones(len(entries), bool)
        first[1:] = np.any(h[1:] != h[:-1], axis=1)
        starts = np.flatnonzero(first)
        cut = len(entries) if last else int(starts[-1])  # the last hash may go on in the next read
        carry = entries[cut:].copy()
        starts = starts[starts < cut]
        found = _members(txn, cat, entries[:cut], starts, np.diff(np.append(starts, cut)))
        if found is not None:
            yield found
        if last:
            return


def _members(txn: lmdb.Transaction, cat: Catalog, entries: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> Groups | None:
    """The groups of ``entries`` (one per hash, at ``starts``) of two documents or more with a
    short member, their records read; None when there is none."""
    multi = sizes > 1
    if not multi.any():
        return None
    chosen = entries[np.repeat(multi, sizes)]
    sizes = sizes[multi]
    ids = chosen["id"].astype(np.uint64)
    fps = np.zeros(len(ids), np.uint64)
    short = np.zeros(len(ids), bool)
    hashes = chosen["hash"].astype(">u8").tobytes()  # the keys' own bytes (a concatenation may make them native)
    for n, doc_id in enumerate(ids.tolist()):
        raw = txn.get(U64.pack(doc_id), db=cat.docs)
        if raw is None:
            raise CorruptionError(f"the content table names document {int(ids[n])}, which has no record")
        _typed, fp, stored_hash, _canonical, flags = unpack_record(raw)
        if stored_hash != hashes[16 * n : 16 * n + 16]:
            raise CorruptionError(f"the content table holds document {int(ids[n])} under a content hash its record does not have")
        fps[n] = fp
        short[n] = bool(flags & FLAG_SHORT)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    keep = np.maximum.reduceat(short, starts)
    if not keep.any():
        return None
    members = np.repeat(keep, sizes)
    sizes = sizes[keep]
    return Groups(ids[members], fps[members], short[members], np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64), sizes)


def pairs_of(batches: Iterable[Groups], k: int) -> Iterator[Pairs]:
    """Every pair of each group with a short member, within ``k`` bits: ``(id_a, id_b, distance)``
    (uint64, uint64, uint8; ``id_a < id_b``), about ``EXPAND_ROWS`` candidate rows at a time."""
    for g in batches:
        ngroups = len(g.starts)
        every = np.arange(ngroups)
        # The expansion pairs positions in the group arrays (ascending as the ids are).
        where = Window(np.zeros(ngroups, np.uint64), g.starts, g.sizes, np.arange(len(g.ids), dtype=np.int64))
        for x, y, _ in Expansion(every, every, np.zeros(ngroups, np.uint8), where, where, upper=True).chunks():
            d = np.bitwise_count(g.fps[x] ^ g.fps[y]).astype(np.uint8)
            keep = (g.short[x] | g.short[y]) & (d <= k)
            if keep.any():
                yield g.ids[x[keep]], g.ids[y[keep]], d[keep]
