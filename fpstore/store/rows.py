"""A store's documents as table rows: the columns of :meth:`Store.record_batches` (Apache Arrow,
for pandas, polars and DuckDB) and of ``fpstore-admin dump``.

Columns, one row per live document in id order:

========================  ==========================================================================
``key``                   the key as text: str keys as they are (a lone surrogate, from a file name
                          that is not UTF-8, escaped as ``\\udcXX``), int keys in decimal, bytes keys
                          as ``hex:`` and their hex digits
``key_type``              ``"str"``, ``"int"`` or ``"bytes"``: how to read ``key`` back
``id``                    the document's id (uint64)
``fingerprint``           the 64-bit fingerprint, 16 hex digits
``canonical``             the key of the document this one is a variant of (as ``key``), or null
``short``                 too short for near-duplicate matching (matched exactly only)
``content_hash``          the content hash, 32 hex digits, or null (documents added as fingerprints)
``sketch``                only for stores whose pipeline has ``sketch_bits``: the verification
                          sketch, W × 8 bytes (W = sketch_bits / 64 uint64 words, each
                          little-endian); hex in :func:`store_rows` (``dump``'s JSON Lines and
                          CSV), fixed-size binary in Arrow
========================  ==========================================================================

The ``sketch`` column comes from the store itself (:func:`store_rows`, :func:`record_batches`):
:func:`rows` and :func:`arrow_batches` of bare :class:`Document` objects have the first seven.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from fpstore.errors import InputError
from fpstore.store.documents import documents_with_sketches, sketch_words
from fpstore.store.keys import Key
from fpstore.store.results import Document

__all__ = [
    "COLUMNS",
    "SKETCH_COLUMN",
    "arrow_batches",
    "arrow_table",
    "columns_of",
    "key_column",
    "record_batches",
    "rows",
    "store_rows",
]

COLUMNS = ("key", "key_type", "id", "fingerprint", "canonical", "short", "content_hash")
#: The column added for a store whose pipeline has a verification sketch.
SKETCH_COLUMN = "sketch"


def columns_of(store: Any) -> tuple[str, ...]:
    """The columns of ``store``'s rows: :data:`COLUMNS`, and ``sketch`` when it keeps sketches."""
    return COLUMNS + ((SKETCH_COLUMN,) if sketch_words(store) else ())


def key_column(key: Key) -> tuple[str, str]:
    """``(key as text, key type)``, see the module docstring."""
    if isinstance(key, bytes):
        return "hex:" + key.hex(), "bytes"
    if isinstance(key, int):
        return str(key), "int"
    try:
        key.encode("utf-8")
        return key, "str"
    except UnicodeEncodeError:
        return key.encode("utf-8", "backslashreplace").decode("utf-8"), "str"


def _row(d: Document) -> dict[str, Any]:
    key, key_type = key_column(d.key)
    return {
        "key": key,
        "key_type": key_type,
        "id": d.id,
        "fingerprint": f"{d.fingerprint:016x}",
        "canonical": None if d.canonical is None else key_column(d.canonical)[0],
        "short": d.short,
        "content_hash": None if d.content_hash is None else d.content_hash.hex(),
    }


def _sketch_bytes(sketch: np.ndarray) -> bytes:
    return sketch.astype("<u8").tobytes()


def rows(documents: Iterable[Document]) -> Iterator[dict[str, Any]]:
    """One dict of :data:`COLUMNS` per document."""
    for d in documents:
        yield _row(d)


def store_rows(store: Any) -> Iterator[dict[str, Any]]:
    """One dict of :func:`columns_of` ``store`` per live document, in id order: with the sketch as
    hex (W × 16 digits) when the store keeps sketches."""
    for d, sketch in documents_with_sketches(store):
        row = _row(d)
        if sketch is not None:
            row[SKETCH_COLUMN] = _sketch_bytes(sketch).hex()
        yield row


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        raise InputError("Arrow and Parquet output need pyarrow: pip install 'fpstore[arrow]'") from None
    return pyarrow


def arrow_schema(sketch_words: int = 0) -> Any:
    """The Arrow schema of the rows; with ``sketch_words`` > 0, a last ``sketch`` column of
    fixed-size binary (``8 * sketch_words`` bytes)."""
    pa = _pyarrow()
    fields = [
        ("key", pa.string()),
        ("key_type", pa.string()),
        ("id", pa.uint64()),
        ("fingerprint", pa.string()),
        ("canonical", pa.string()),
        ("short", pa.bool_()),
        ("content_hash", pa.string()),
    ]
    if sketch_words:
        fields.append((SKETCH_COLUMN, pa.binary(8 * sketch_words)))
    return pa.schema(fields)


def _check_batch_size(batch_size: object) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch_size must be an int >= 1, got {batch_size!r}")


def _batches(table_rows: Iterable[dict[str, Any]], schema: Any, batch_size: int) -> Iterator[Any]:
    pa = _pyarrow()
    names = schema.names
    columns: dict[str, list[Any]] = {c: [] for c in names}
    sent = False
    for row in table_rows:
        for c in names:
            columns[c].append(row[c])
        if len(columns["id"]) >= batch_size:
            yield pa.RecordBatch.from_pydict(columns, schema=schema)
            sent = True
            columns = {c: [] for c in names}
    if columns["id"] or not sent:
        yield pa.RecordBatch.from_pydict(columns, schema=schema)


def arrow_batches(documents: Iterable[Document], batch_size: int) -> Iterator[Any]:
    """The documents as ``pyarrow.RecordBatch`` es of at most ``batch_size`` rows (at least one,
    empty, when there are none, so that the schema always reaches the reader); :data:`COLUMNS`."""
    _check_batch_size(batch_size)
    return _batches(rows(documents), arrow_schema(), batch_size)


def record_batches(store: Any, batch_size: int = 65_536) -> Iterator[Any]:
    """Every live document of ``store`` as ``pyarrow.RecordBatch`` es (as :func:`arrow_batches`),
    with the ``sketch`` column (fixed-size binary) when the store keeps sketches."""
    _check_batch_size(batch_size)
    words = sketch_words(store)

    def arrow_rows() -> Iterator[dict[str, Any]]:
        for d, sketch in documents_with_sketches(store):
            row = _row(d)
            if sketch is not None:
                row[SKETCH_COLUMN] = _sketch_bytes(sketch)
            yield row

    return _batches(arrow_rows(), arrow_schema(words), batch_size)


def arrow_table(batches: Iterable[Any]) -> Any:
    """One ``pyarrow.Table`` of record batches (of :func:`arrow_batches`)."""
    return _pyarrow().Table.from_batches(list(batches))
