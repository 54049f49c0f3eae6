"""Spark-side plumbing shared by the jobs: the ``fpstore[spark]`` extra, uint64 fingerprints as
Spark ``LongType`` columns (see :mod:`fpstore.spark`), and column checks.

PySpark and pyarrow are imported only inside the functions that need them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fpstore.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

_EXTRA_HINT = "fpstore.spark needs PySpark 4.x with pyarrow and pandas: pip install 'fpstore[spark]' (and Java 17 for Spark itself)"


def require() -> None:
    """Import PySpark and pyarrow, or raise ImportError naming the ``fpstore[spark]`` extra."""
    try:
        import pandas  # noqa: F401  (mapInArrow needs it installed, though it moves no pandas)
        import pyarrow  # noqa: F401
        import pyspark.sql  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"{_EXTRA_HINT}; missing: {exc.name or exc}") from exc


# --------------------------------------------------------------------------------------------
# uint64 <-> Spark LongType
# --------------------------------------------------------------------------------------------


def to_signed(fps: np.ndarray) -> np.ndarray:
    """uint64 fingerprints as the int64 bit patterns a Spark ``LongType`` column holds (a view)."""
    fps = np.ascontiguousarray(fps)
    if fps.dtype != np.uint64:
        raise InputError(f"fingerprints must be a uint64 array, got {fps.dtype}")
    return fps.view(np.int64)


def to_unsigned(col: np.ndarray) -> np.ndarray:
    """The uint64 fingerprints of an int64 (Spark ``LongType``) array (a view)."""
    col = np.ascontiguousarray(col)
    if col.dtype != np.int64:
        raise InputError(f"a Spark fingerprint column must be int64 (LongType), got {col.dtype}")
    return col.view(np.uint64)


def arrow_u64(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """uint64 fingerprints of an Arrow int64 column without nulls."""
    arr = column.to_numpy(zero_copy_only=False) if hasattr(column, "to_numpy") else np.asarray(column)
    return to_unsigned(arr.astype(np.int64, copy=False))


def fingerprints_frame(
    spark: SparkSession, ids: Sequence[Any] | np.ndarray, fps: np.ndarray, *, id_col: str = "id", fp_col: str = "fp"
) -> DataFrame:
    """A DataFrame ``(id_col, fp_col)`` from ids and uint64 fingerprints (``fp_col`` a LongType
    holding the two's-complement bit pattern, see the module docstring)."""
    require()
    import pyarrow as pa

    fps = np.asarray(fps)
    table = pa.table({id_col: pa.array(ids), fp_col: pa.array(to_signed(fps), pa.int64())})
    return spark.createDataFrame(table)


def check_columns(df: DataFrame, *cols: str) -> None:
    from pyspark.sql.types import LongType

    names = df.columns
    for c in cols:
        if c not in names:
            raise InputError(f"the DataFrame has no column {c!r} (columns: {names})")
    fp = cols[-1]
    dtype = df.schema[fp].dataType
    if not isinstance(dtype, LongType):
        raise InputError(
            f"fingerprint column {fp!r} must be LongType (the uint64 bit pattern as signed 64-bit: "
            f"fpstore.spark.to_signed), got {dtype.simpleString()}"
        )


def schema_ddl(df: DataFrame) -> str:
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in df.schema.fields)
