"""Verification sketches in Spark: the ``sketch`` column and the check of a pair against a
similarity threshold.

A pipeline with ``sketch_bits = 64 W`` gives each document W more one-bit MinHash words (see
:class:`fpstore.Pipeline`). In a DataFrame they travel as one ``BinaryType`` value of ``8 W`` bytes,
the words little-endian, first to last (the encoding of the export stream and of ``dump``):
:func:`fpstore.spark.fingerprint` writes it, and :func:`~fpstore.spark.near_duplicates`,
:func:`~fpstore.spark.query_batch` (``threshold=``) and :func:`~fpstore.spark.build_shards` read
it. A pair within ``k`` bits whose sketches estimate a Jaccard similarity below the threshold is a
fingerprint collision the sketch rejects.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from fpstore.errors import InputError
from fpstore.fingerprint.pipeline import MAX_SKETCH_BITS, sketch_similarity

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = ["SKETCH_COL", "arrow_sketches", "check_sketch_column", "check_threshold", "sketch_array", "verify_pairs"]

#: The default name of the sketch column.
SKETCH_COL = "sketch"


def check_threshold(threshold: object) -> float:
    """A similarity threshold: a number in [0, 1]."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= float(threshold) <= 1.0:
        raise InputError(f"threshold must be a number in [0, 1], got {threshold!r}")
    return float(threshold)


def check_sketch_column(df: DataFrame, col: str, why: str) -> None:
    """InputError unless ``df`` has a binary column ``col`` (``why``: what needs it)."""
    from pyspark.sql.types import BinaryType

    if col not in df.columns:
        raise InputError(
            f"{why} needs each row's verification sketch, and the DataFrame has no column {col!r} (columns: {df.columns}): "
            "fpstore.spark.fingerprint(df, text_col, pipeline) adds it for a pipeline with sketch_bits"
        )
    dtype = df.schema[col].dataType
    if not isinstance(dtype, BinaryType):
        raise InputError(f"sketch column {col!r} must be binary (8 bytes per 64-bit word, little-endian), got {dtype.simpleString()}")


def sketch_array(sketches: np.ndarray, mask: np.ndarray | None = None) -> pa.Array:
    """uint64[n, W] sketches as an Arrow binary array of ``8 W`` bytes each (null where ``mask``)."""
    import pyarrow as pa

    n, words = sketches.shape
    data = pa.py_buffer(np.ascontiguousarray(sketches, dtype="<u8").tobytes())
    offsets = pa.py_buffer((np.arange(n + 1, dtype=np.int32) * (8 * words)).tobytes())
    valid = None
    if mask is not None and mask.any():
        # A null keeps its 8 W bytes in the data (Arrow allows it): offsets stay regular.
        valid = pa.py_buffer(np.packbits(~np.asarray(mask, bool), bitorder="little").tobytes())
    return pa.Array.from_buffers(pa.binary(), n, [valid, offsets, data])


def arrow_sketches(column: pa.Array | pa.ChunkedArray, words: int | None, what: str) -> np.ndarray:
    """uint64[n, W] of an Arrow binary column of sketches, each checked to be ``8 W`` bytes (W =
    ``words``, or that of the first value when None: W in 1..8) before it is read; a null or a value of
    another length raises :class:`InputError` naming ``what``."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    n = len(column)
    if column.null_count:
        raise InputError(f"{what} holds a row without its sketch (null); every row needs one")
    if not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        raise InputError(f"{what} must be binary, got {column.type}")
    offsets = np.frombuffer(column.buffers()[1], np.int64 if pa.types.is_large_binary(column.type) else np.int32)
    offsets = offsets[column.offset : column.offset + n + 1].astype(np.int64)
    lengths = np.diff(offsets)
    if words is None:
        if n == 0:
            return np.zeros((0, 1), np.uint64)
        width = int(lengths[0])
        if width % 8 or not 8 <= width <= MAX_SKETCH_BITS // 8:
            raise InputError(f"{what} holds a sketch of {width} bytes; a sketch is 8 to {MAX_SKETCH_BITS // 8} bytes, a multiple of 8")
        words = width // 8
    bad = lengths != 8 * words
    if bad.any():
        raise InputError(f"{what} holds a sketch of {int(lengths[bad][0])} bytes; expected {8 * words} ({64 * words}-bit sketches)")
    if n == 0:
        return np.zeros((0, words), np.uint64)
    data = np.frombuffer(column.buffers()[2], np.uint8)[offsets[0] : offsets[-1]]
    return data.view("<u8").reshape(n, words).astype(np.uint64)


def _similarity_fn(threshold: float):
    """mapInArrow body: ``(id_a, id_b, distance, sketch_a, sketch_b)`` rows -> the pairs whose
    sketches estimate at least ``threshold``, with ``similarity``."""

    def verify(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        for batch in batches:
            if not batch.num_rows:
                continue
            a = arrow_sketches(batch.column(3), None, "the sketch column")
            b = arrow_sketches(batch.column(4), a.shape[1], "the sketch column")
            sim = sketch_similarity(a, b)
            keep = sim >= threshold
            if not keep.any():
                continue
            mask = pa.array(keep)
            yield pa.RecordBatch.from_arrays(
                [
                    batch.column(0).filter(mask),
                    batch.column(1).filter(mask),
                    batch.column(2).filter(mask),
                    pa.array(sim[keep], pa.float64()),
                ],
                names=["id_a", "id_b", "distance", "similarity"],
            )

    return verify


def verify_pairs(pairs: DataFrame, rows: DataFrame, threshold: float) -> DataFrame:
    """``pairs`` ``(id_a, id_b, distance)`` whose rows' sketches (``rows``: ``(id, sketch)``, one
    row per id) estimate a similarity of at least ``threshold``, with a ``similarity`` column."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, IntegerType, StructField, StructType

    sa = rows.select(F.col("id").alias("id_a"), F.col("sketch").alias("sketch_a"))
    sb = rows.select(F.col("id").alias("id_b"), F.col("sketch").alias("sketch_b"))
    joined = pairs.join(sa, "id_a").join(sb, "id_b").select("id_a", "id_b", "distance", "sketch_a", "sketch_b")
    id_type = pairs.schema["id_a"].dataType
    schema = StructType(
        [
            StructField("id_a", id_type),
            StructField("id_b", id_type),
            StructField("distance", IntegerType()),
            StructField("similarity", DoubleType()),
        ]
    )
    return joined.mapInArrow(_similarity_fn(threshold), schema)
