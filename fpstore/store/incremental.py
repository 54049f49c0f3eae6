"""The incremental tier: one LMDB B-tree per table of the design, keyed by permuted fingerprint
(8 bytes, big-endian) ‖ document id (8 bytes, big-endian), with empty values.

Big-endian makes byte order numeric order, so a probe prefix is a key range. New documents enter
here, one entry per table, until a flush moves them into a run (see :mod:`fpstore.store.lsm`).
"""

from __future__ import annotations

from typing import Any

import lmdb
import numpy as np

from fpstore.errors import CorruptionError

__all__ = ["scan_table", "table_entries"]


def scan_table(txn: lmdb.Transaction, db: Any) -> tuple[np.ndarray, bool]:
    """Every entry of one incremental table, in key order: ``(pairs, whole)`` where ``pairs`` is
    ``(n, 2)`` big-endian uint64 (permuted fingerprint, id) and ``whole`` is False when the keys'
    total length is not a multiple of 16 bytes (the ragged tail is cut off: the table is damaged)."""
    raw = b"".join(txn.cursor(db=db).iternext(keys=True, values=False))
    whole = len(raw) % 16 == 0
    if not whole:
        raw = raw[: len(raw) // 16 * 16]
    return np.frombuffer(raw, dtype=">u8").reshape(-1, 2), whole


def table_entries(txn: lmdb.Transaction, db: Any, t: int) -> np.ndarray:
    """:func:`scan_table` of table ``t``; damage raises :class:`CorruptionError`."""
    pairs, whole = scan_table(txn, db)
    if not whole:
        raise CorruptionError(f"table {t} holds keys of the wrong length")
    return pairs
