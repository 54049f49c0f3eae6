"""Manku's batch mode on Spark: :func:`query_batch` broadcasts the queries' fingerprints, each
Python worker builds their sorted permuted tables once, and the stored rows stream past them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from fpstore import _backend
from fpstore.errors import InputError
from fpstore.index.design import Design
from fpstore.spark.frames import arrow_u64, check_columns, require
from fpstore.spark.plans import flip_free
from fpstore.spark.sketches import SKETCH_COL, arrow_sketches, check_sketch_column, check_threshold

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame

_search = _backend.load("search")

_BROADCAST_CACHE: dict[str, Any] = {}


def _query_tables(payload: dict[str, Any]) -> tuple[Any, ...]:
    """The broadcast queries' sorted tables, built once per Python worker process (workers are
    reused across tasks; this function is pickled by reference, so its cache persists)."""
    key = payload["token"]
    built = _BROADCAST_CACHE.get(key)
    if built is None:
        design = Design.from_config(payload["design"])
        masks = [np.uint64(m) for m in design.prefix_masks()]
        qfps = payload["fps"]
        # Direct index on the top b bits of each sorted table (b about log2 of the batch, at most
        # the prefix): a stored row finds its candidate range with two array reads instead of
        # binary searches; rows that share only those b bits are filtered by the prefix mask.
        b = min(max(1, int(np.ceil(np.log2(max(len(qfps), 2))))), 24)
        tables = []
        for table in design.tables:
            keys, order = _search.radix_sort(table.permute(qfps), True)
            bits = min(b, table.prefix_bits)
            top = keys >> np.uint64(64 - bits) if bits else np.zeros(len(keys), np.uint64)
            offsets = np.searchsorted(top, np.arange(2**bits + 1, dtype=np.uint64)).astype(np.int32 if len(keys) < 2**31 else np.int64)
            tables.append((table, bits, offsets, order))
        built = (masks, tables, qfps, payload["ids"])
        _BROADCAST_CACHE.clear()
        _BROADCAST_CACHE[key] = built
    return built


def _probe_fn(bc: Any, k: int, fp_col: str, id_col: str, out_names: tuple[str, ...], threshold: float | None, sketch_col: str):
    """mapInArrow body: stream stored rows past the query tables built from the broadcast; with
    ``threshold``, keep the pairs whose sketches (the broadcast's and ``sketch_col``) reach it."""
    from fpstore.fingerprint.pipeline import sketch_similarity

    def probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        built = _query_tables(bc.value)
        masks, tables, qfps, qids = built
        for batch in batches:
            col = batch.column(batch.schema.get_field_index(fp_col))
            if col.null_count:
                batch = batch.filter(col.is_valid())
                col = batch.column(batch.schema.get_field_index(fp_col))
            if not batch.num_rows:
                continue
            sfps = arrow_u64(col)
            out_q, out_s, out_d = [], [], []
            for t, (table, bits, offsets, qorder) in enumerate(tables):
                top = table.permute(sfps) >> np.uint64(64 - bits) if bits else np.zeros(len(sfps), np.uint64)
                lo = offsets[top].astype(np.int64)
                counts = offsets[top + np.uint64(1)] - lo
                total = int(counts.sum())
                if not total:
                    continue
                srow = np.repeat(np.arange(len(sfps)), counts)
                pos = np.repeat(lo - (np.cumsum(counts) - counts), counts) + np.arange(total)
                qi = qorder[pos]
                diff = sfps[srow] ^ qfps[qi]
                dist = np.bitwise_count(diff)
                # Within k, sharing this table's whole prefix, and no earlier table's.
                keep = (dist <= k) & ((diff & masks[t]) == 0)
                for earlier in range(t):
                    keep &= (diff & masks[earlier]) != 0
                out_q.append(qi[keep])
                out_s.append(srow[keep])
                out_d.append(dist[keep].astype(np.int32))
            if not out_q:
                continue
            qi = np.concatenate(out_q)
            si = np.concatenate(out_s)
            di = np.concatenate(out_d)
            extra = []
            if threshold is not None and len(qi):
                qsk = bc.value["sketches"]
                ssk = arrow_sketches(batch.column(batch.schema.get_field_index(sketch_col)), qsk.shape[1], "the stored rows' sketch column")
                sim = sketch_similarity(qsk[qi], ssk[si])
                keep = sim >= threshold
                qi, si, di, sim = qi[keep], si[keep], di[keep], sim[keep]
                extra = [pa.array(sim, pa.float64())]
            if not len(qi):
                continue
            yield pa.RecordBatch.from_arrays(
                [
                    qids.take(pa.array(qi)),
                    batch.column(batch.schema.get_field_index(id_col)).take(pa.array(si)),
                    pa.array(di, pa.int32()),
                    *extra,
                ],
                names=list(out_names),
            )

    return probe


def query_batch(
    stored_df: DataFrame,
    queries_df: DataFrame,
    k: int,
    *,
    id_col: str = "id",
    fp_col: str = "fp",
    query_id_col: str | None = None,
    query_fp_col: str | None = None,
    design: Design | str | None = None,
    threshold: float | None = None,
    sketch_col: str = SKETCH_COL,
    query_sketch_col: str | None = None,
) -> DataFrame:
    """Every (query, stored row) pair within ``k`` bits, exactly once: ``(query_id, id, distance)``.

    Manku's batch mode: the queries (the small side: collected to the driver) are broadcast with
    a flip-free design (``design``, default :func:`spark_batch_design` for the batch size); each
    Python worker builds one sorted permuted table per table of the design, once, and every
    partition of ``stored_df`` streams its rows past them in ``mapInArrow``, so the large side is
    read once and never shuffled. A (query, row) pair is reported from the first table whose
    prefix both share.
    ``query_id_col``/``query_fp_col``/``query_sketch_col`` default to ``id_col``/``fp_col``/``sketch_col``.

    The pairs are candidates by fingerprint only. With ``threshold`` (rows of a pipeline with
    ``sketch_bits`` on both sides, carrying their sketch columns, as :func:`fingerprint` makes
    them), the queries' sketches travel with the broadcast, each candidate is kept when the two
    sketches estimate a Jaccard similarity of at least ``threshold`` (what
    ``Store.query_many(threshold=)`` keeps), and the frame gains ``similarity`` (double); still no
    shuffle.
    """
    require()
    from pyspark.sql.types import DoubleType, IntegerType, StructField, StructType

    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= 10:
        raise InputError(f"k must be an int in 0..10, got {k!r}")
    qid, qfp = query_id_col or id_col, query_fp_col or fp_col
    qsk = query_sketch_col or sketch_col
    check_columns(stored_df, id_col, fp_col)
    check_columns(queries_df, qid, qfp)
    theta = None
    if threshold is not None:
        theta = check_threshold(threshold)
        check_sketch_column(stored_df, sketch_col, "query_batch(threshold=)")
        check_sketch_column(queries_df, qsk, "query_batch(threshold=)")
    q = queries_df.select(qid, qfp, *([qsk] if theta is not None else [])).where(queries_df[qfp].isNotNull()).toArrow()
    qfps = arrow_u64(q.column(qfp).combine_chunks())
    qids = q.column(qid).combine_chunks()
    d = flip_free(design, k, max(len(qfps), 1), batch=True)
    payload = {"token": uuid.uuid4().hex, "design": d.config(), "fps": qfps, "ids": qids}
    if theta is not None:
        payload["sketches"] = arrow_sketches(q.column(qsk), None, "the queries' sketch column")
    bc = stored_df.sparkSession.sparkContext.broadcast(payload)
    names: tuple[str, ...] = ("query_id", "id", "distance")
    fields = [
        StructField(names[0], queries_df.schema[qid].dataType),
        StructField(names[1], stored_df.schema[id_col].dataType),
        StructField(names[2], IntegerType(), False),
    ]
    if theta is not None:
        names += ("similarity",)
        fields.append(StructField("similarity", DoubleType(), False))
    stored = stored_df.select(id_col, fp_col, *([sketch_col] if theta is not None else []))
    return stored.mapInArrow(_probe_fn(bc, k, fp_col, id_col, names, theta, sketch_col), StructType(fields))
