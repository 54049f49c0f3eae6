"""Packs the generated NFKC tables (``_nfkc_v1``) into the arrays the compiled kernel reads.

The kernel (``cext/_simhash_c.pyx``, ``set_nfkc_tables``) computes NFKC of the NFKC-active runs
without the GIL, so that the batch path's threads normalise text in parallel. It reads:

* ``stage1`` uint16[0x110000 >> 7] and ``stage2`` uint32[128 * blocks]: a two-stage table of one
  record per code point, ``stage2[stage1[cp >> 7] * 128 + (cp & 127)]`` (identical blocks of 128
  records are stored once: 4.4 MB of records become about 100 kB, which stays in cache).
  A record holds the canonical combining class (bits 0-7), :data:`UNASSIGNED`, :data:`SECOND`,
  and where the code point's NFKD form lies in ``pool`` (length in bits 10-14, 0 when NFKD leaves
  it alone; offset in bits 15-31).
* ``pool`` uint32: the NFKD forms, one after another.
* ``comp`` uint64[power of two]: an open-addressing table of the canonical compositions, each
  entry ``first << 42 | second << 21 | composite`` (0 marks an empty slot), at slot
  :func:`comp_slot` of ``first << 21 | second`` or the next free one after it.

The kernel checks every index these imply when the tables are installed, not while it runs.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fpstore.fingerprint import _nfkc_v1

BLOCK = 128
UNASSIGNED = 1 << 8  #: unassigned in the tables' Unicode version: a newer one may map it
SECOND = 1 << 9  #: may be the second code point of a canonical composition
LEN_SHIFT = 10
OFF_SHIFT = 15
_HASH_MUL = 0x9E3779B97F4A7C15
_M64 = (1 << 64) - 1


class NfkcTables(NamedTuple):
    stage1: np.ndarray
    stage2: np.ndarray
    pool: np.ndarray
    comp: np.ndarray


def comp_slot(key: int, bits: int) -> int:
    """Home slot of composition key ``first << 21 | second`` in a table of ``2**bits`` slots."""
    return ((key * _HASH_MUL) & _M64) >> (64 - bits)


def _records() -> tuple[np.ndarray, np.ndarray]:
    rec = np.zeros(0x110000, dtype=np.uint32)
    for start, end, ccc in _nfkc_v1.CCC_RANGES:
        rec[start:end] = ccc
    for start, end in _nfkc_v1.UNASSIGNED_RANGES:
        rec[start:end] |= UNASSIGNED
    rec[0x1161:0x1176] |= SECOND  # Hangul vowel and trailing jamo compose arithmetically
    rec[0x11A8:0x11C3] |= SECOND
    for _, second, _ in _nfkc_v1.COMPOSITIONS:
        rec[second] |= SECOND
    pool: list[int] = []
    for cp, *form in _nfkc_v1.DECOMPOSITIONS:
        rec[cp] |= (len(form) << LEN_SHIFT) | (len(pool) << OFF_SHIFT)
        pool += form
    if len(pool) >= 1 << (32 - OFF_SHIFT) or max(len(r) for r in _nfkc_v1.DECOMPOSITIONS) > 31:
        raise ValueError("NFKD forms do not fit the record layout")  # a generator change, never at run time
    return rec, np.array(pool, dtype=np.uint32)


def _compositions() -> np.ndarray:
    bits = max(4, (4 * len(_nfkc_v1.COMPOSITIONS)).bit_length())  # load factor <= 1/4
    table = np.zeros(1 << bits, dtype=np.uint64)
    mask = (1 << bits) - 1
    for first, second, composite in _nfkc_v1.COMPOSITIONS:
        key = first << 21 | second
        slot = comp_slot(key, bits)
        while table[slot]:
            slot = (slot + 1) & mask
        table[slot] = key << 21 | composite
    return table


def pack() -> NfkcTables:
    """The kernel's arrays, built from the generated tables (a few milliseconds)."""
    rec, pool = _records()
    rows = rec.reshape(-1, BLOCK)
    first: dict[bytes, int] = {}  # block contents -> its number (np.unique(axis=0) takes 40x longer)
    stage1 = np.array([first.setdefault(row.tobytes(), len(first)) for row in rows], dtype=np.uint16)
    blocks = np.frombuffer(b"".join(first), dtype=np.uint32).copy()
    tables = NfkcTables(stage1, blocks, pool, _compositions())
    for a in tables:
        a.setflags(write=False)
    return tables
