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
========================  ==========================================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from fpstore.errors import InputError
from fpstore.store.keys import Key
from fpstore.store.results import Document

__all__ = ["COLUMNS", "arrow_batches", "arrow_table", "key_column", "rows"]

COLUMNS = ("key", "key_type", "id", "fingerprint", "canonical", "short", "content_hash")


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


def rows(documents: Iterable[Document]) -> Iterator[dict[str, Any]]:
    """One dict of :data:`COLUMNS` per document."""
    for d in documents:
        key, key_type = key_column(d.key)
        yield {
            "key": key,
            "key_type": key_type,
            "id": d.id,
            "fingerprint": f"{d.fingerprint:016x}",
            "canonical": None if d.canonical is None else key_column(d.canonical)[0],
            "short": d.short,
            "content_hash": None if d.content_hash is None else d.content_hash.hex(),
        }


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError:
        raise InputError("Arrow and Parquet output need pyarrow: pip install 'fpstore[arrow]'") from None
    return pyarrow


def arrow_schema() -> Any:
    pa = _pyarrow()
    return pa.schema(
        [
            ("key", pa.string()),
            ("key_type", pa.string()),
            ("id", pa.uint64()),
            ("fingerprint", pa.string()),
            ("canonical", pa.string()),
            ("short", pa.bool_()),
            ("content_hash", pa.string()),
        ]
    )


def arrow_batches(documents: Iterable[Document], batch_size: int) -> Iterator[Any]:
    """The documents as ``pyarrow.RecordBatch`` es of at most ``batch_size`` rows (at least one,
    empty, when there are none, so that the schema always reaches the reader)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"batch_size must be an int >= 1, got {batch_size!r}")
    pa = _pyarrow()
    schema = arrow_schema()
    columns: dict[str, list[Any]] = {c: [] for c in COLUMNS}
    sent = False
    for row in rows(documents):
        for c in COLUMNS:
            columns[c].append(row[c])
        if len(columns["id"]) >= batch_size:
            yield pa.RecordBatch.from_pydict(columns, schema=schema)
            sent = True
            columns = {c: [] for c in COLUMNS}
    if columns["id"] or not sent:
        yield pa.RecordBatch.from_pydict(columns, schema=schema)


def arrow_table(batches: Iterable[Any]) -> Any:
    """One ``pyarrow.Table`` of record batches (of :func:`arrow_batches`)."""
    return _pyarrow().Table.from_batches(list(batches))
