"""Fingerprints computed on the executors: :func:`fingerprint`, and the pipeline as it travels to
them (its config and idf bytes, rebuilt and checked on arrival)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from fpstore.errors import InputError, PipelineMismatchError
from fpstore.fingerprint.pipeline import IdfTable, Pipeline
from fpstore.spark.frames import require, to_signed
from fpstore.spark.sketches import SKETCH_COL, sketch_array

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame


def pipeline_payload(pipeline: Pipeline) -> dict[str, Any]:
    if not isinstance(pipeline, Pipeline):
        raise InputError(f"pipeline must be a fpstore.Pipeline, not {type(pipeline).__name__}")
    return {
        "config": pipeline.config,
        "idf": None if pipeline.idf is None else pipeline.idf.to_bytes(),
        "id": pipeline.id,
    }


def rebuild_pipeline(payload: dict[str, Any]) -> Pipeline:
    """The driver's pipeline, rebuilt on an executor; refuses one whose id differs (another
    fpstore version on the executors would fingerprint differently)."""
    idf = None if payload["idf"] is None else IdfTable.from_bytes(payload["idf"])
    pipe = Pipeline.from_config(payload["config"], idf)
    if pipe.id != payload["id"]:
        raise PipelineMismatchError(
            f"the executors rebuild pipeline {pipe.id}, not the driver's {payload['id']}: "
            "install the same fpstore version on the driver and the executors"
        )
    return pipe


def _fingerprint_fn(payload: dict[str, Any], text_col: str):
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        pipe = rebuild_pipeline(payload)
        words = pipe.sketch_bits // 64
        for batch in batches:
            col = batch.column(batch.schema.get_field_index(text_col))
            texts = col.to_pylist()
            valid = np.array([t is not None for t in texts], bool)
            n = len(texts)
            fps = np.zeros(n, np.uint64)
            ntok = np.zeros(n, np.int64)
            short = np.zeros(n, bool)
            sketches = np.zeros((n, words), np.uint64)
            if valid.any():
                sigs = pipe.signatures([t for t in texts if t is not None], threads=1)
                assert sigs.tokens is not None and sigs.short is not None  # Pipeline.signatures fills every column
                fps[valid], ntok[valid], short[valid] = sigs.values, sigs.tokens, sigs.short
                if words:
                    assert sigs.sketches is not None  # a pipeline with sketch_bits fills them
                    sketches[valid] = sigs.sketches
            mask = None if valid.all() else ~valid
            arrays = list(batch.columns) + [
                pa.array(to_signed(fps), pa.int64(), mask=mask),
                pa.array(ntok, pa.int64(), mask=mask),
                pa.array(short, pa.bool_(), mask=mask),
            ]
            names = list(batch.schema.names) + ["fp", "tokens", "short"]
            if words:
                arrays.append(sketch_array(sketches, mask))
                names.append(SKETCH_COL)
            yield pa.RecordBatch.from_arrays(arrays, names=names)

    return run


def fingerprint(df: DataFrame, text_col: str, pipeline: Pipeline) -> DataFrame:
    """``df`` with columns ``fp`` (LongType, the uint64 bit pattern), ``tokens`` and ``short``
    computed on the executors by ``pipeline`` (string or binary texts; null text gives nulls), and
    for a pipeline with ``sketch_bits``, ``sketch`` (BinaryType: the verification sketch's words,
    8 bytes each, little-endian; see :mod:`fpstore.spark.sketches`).

    The pipeline travels as its config and idf bytes and is rebuilt with
    :meth:`Pipeline.from_config` on each executor, which checks that its id equals the driver's:
    fingerprints in the frame are those of ``pipeline.id`` (pass it as ``pipeline_id`` to a store).
    """
    require()
    from pyspark.sql.types import BinaryType, BooleanType, LongType, StringType, StructField, StructType

    added = ["fp", "tokens", "short"] + ([SKETCH_COL] if isinstance(pipeline, Pipeline) and pipeline.sketch_bits else [])

    if text_col not in df.columns:
        raise InputError(f"the DataFrame has no column {text_col!r} (columns: {df.columns})")
    if not isinstance(df.schema[text_col].dataType, (StringType, BinaryType)):
        raise InputError(f"text column {text_col!r} must be string or binary, got {df.schema[text_col].dataType.simpleString()}")
    for name in added:
        if name in df.columns:
            raise InputError(f"the DataFrame already has a column {name!r}")
    payload = pipeline_payload(pipeline)
    rebuild_pipeline(payload)  # fail on the driver first when the config does not round-trip
    fields = [StructField("fp", LongType()), StructField("tokens", LongType()), StructField("short", BooleanType())]
    if pipeline.sketch_bits:
        fields.append(StructField(SKETCH_COL, BinaryType()))
    schema = StructType(list(df.schema.fields) + fields)
    return df.mapInArrow(_fingerprint_fn(payload, text_col), schema)
