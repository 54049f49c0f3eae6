"""The exact all-pairs self-join of ``(id, fp)`` rows on Spark: :func:`near_duplicates`."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from fpstore import _backend
from fpstore.errors import InputError
from fpstore.index.design import Design
from fpstore.spark.frames import arrow_u64, check_columns, require, to_signed
from fpstore.spark.plans import JoinPlan, flip_free
from fpstore.spark.sketches import SKETCH_COL, check_sketch_column, check_threshold, verify_pairs

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame

_search = _backend.load("search")


def _explode_fn(plan: JoinPlan, fp_col: str, heavy: dict[int, np.ndarray]):
    """mapInArrow body: each distinct fingerprint -> one row per table (v, bucket, fp); rows of
    oversized buckets go to the sub-tables of their table instead."""

    def explode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        for batch in batches:
            fps = arrow_u64(batch.column(batch.schema.get_field_index(fp_col)))
            if not len(fps):
                continue
            vs, buckets, out_fps = [], [], []
            for t, table in enumerate(plan.design.tables):
                shift = np.uint64(64 - table.prefix_bits)
                prefix = table.permute(fps) >> shift
                big = np.isin(prefix, heavy[t]) if t in heavy else np.zeros(len(fps), bool)
                small = ~big
                vs.append(np.full(int(small.sum()), t, np.int32))
                buckets.append(prefix[small])
                out_fps.append(fps[small])
                if big.any():
                    fb = fps[big]
                    for s, sub in enumerate(plan.subs[t]):
                        v = plan.n_tables + t * plan.n_subs + s
                        vs.append(np.full(len(fb), v, np.int32))
                        buckets.append(sub.permute(fb) >> np.uint64(64 - sub.prefix_bits))
                        out_fps.append(fb)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(np.concatenate(vs), pa.int32()),
                    pa.array(np.concatenate(buckets).view(np.int64), pa.int64()),
                    pa.array(to_signed(np.concatenate(out_fps)), pa.int64()),
                ],
                names=["v", "bucket", "fp"],
            )

    return explode


def _prefix_fn(design: Design, fp_col: str):
    """mapInArrow body: (t, prefix) of every table for each fingerprint (heavy-bucket sampling)."""

    def prefixes(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        for batch in batches:
            fps = arrow_u64(batch.column(batch.schema.get_field_index(fp_col)))
            if not len(fps):
                continue
            ts, ps = [], []
            for t, table in enumerate(design.tables):
                ts.append(np.full(len(fps), t, np.int32))
                ps.append(table.permute(fps) >> np.uint64(64 - table.prefix_bits))
            yield pa.RecordBatch.from_arrays(
                [pa.array(np.concatenate(ts), pa.int32()), pa.array(np.concatenate(ps).view(np.int64), pa.int64())],
                names=["t", "prefix"],
            )

    return prefixes


def _verify_fn(plan: JoinPlan):
    """mapInArrow body: all (fa, fb, distance) of one partition of (v, bucket, fp) rows.

    The partition holds whole buckets. Per virtual table present (a handful, never one call per
    group) its rows are permuted, radix-sorted and handed to the compiled ``self_join`` kernel,
    which walks every prefix group of the sorted keys; pairs another table reports are dropped.
    """

    def verify(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa

        parts = [b for b in batches if b.num_rows]
        if not parts:
            return
        tbl = pa.Table.from_batches(parts)
        v_all = tbl.column("v").to_numpy().astype(np.int32, copy=False)
        fp_all = arrow_u64(tbl.column("fp"))
        del tbl, parts
        order_v = np.argsort(v_all, kind="stable")
        v_sorted = v_all[order_v]
        bounds = np.flatnonzero(np.diff(v_sorted)) + 1
        for idx in np.split(order_v, bounds):
            v = int(v_all[idx[0]])
            table, _, _ = plan.vtable(v)
            fps = fp_all[idx]
            keys, order = _search.radix_sort(table.permute(fps), True)
            i, j, d = _search.self_join(keys, table.prefix_bits, plan.k)
            if not len(i):
                continue
            fa, fb = fps[order[i]], fps[order[j]]
            keep = plan.first_here(v, fa ^ fb)
            if not keep.any():
                continue
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array(to_signed(fa[keep]), pa.int64()),
                    pa.array(to_signed(fb[keep]), pa.int64()),
                    pa.array(d[keep].astype(np.int32), pa.int32()),
                ],
                names=["fa", "fb", "distance"],
            )

    return verify


def _heavy_buckets(fps: DataFrame, plan: JoinPlan, fp_col: str, max_bucket: int, seed: int) -> dict[int, np.ndarray]:
    """Buckets (per design table, prefix) estimated to hold more than about ``max_bucket``
    distinct fingerprints, from a sample of ``64 / max_bucket`` of the rows (all when that is
    >= 1), deduplicated. The sample only steers the split; a missed or extra split changes the
    work, never the answer."""
    from pyspark.sql import functions as F

    fraction = min(1.0, 64.0 / max_bucket)
    sample = fps.select(fp_col)
    sample = (sample if fraction >= 1.0 else sample.sample(fraction=fraction, seed=seed)).distinct()
    # A bucket of max_bucket members shows about 64 of them in the sample; flag from half that.
    threshold = max(2, int(math.ceil(fraction * max_bucket / 2)))
    rows = (
        sample.mapInArrow(_prefix_fn(plan.design, fp_col), "t int, prefix long")
        .groupBy("t", "prefix")
        .count()
        .where(F.col("count") >= threshold)
        .collect()
    )
    heavy: dict[int, list[int]] = {}
    for r in rows:
        heavy.setdefault(int(r["t"]), []).append(int(r["prefix"]))
    return {t: np.array(sorted(p), np.int64).view(np.uint64) for t, p in heavy.items()}


def near_duplicates(
    df: DataFrame,
    k: int,
    *,
    id_col: str = "id",
    fp_col: str = "fp",
    design: Design | str | None = None,
    expected_size: int | None = None,
    max_bucket: int | None = 20_000,
    partitions: int | None = None,
    seed: int = 0,
    threshold: float | None = None,
    sketch_col: str = SKETCH_COL,
) -> DataFrame:
    """Every pair of rows within ``k`` bits, exactly once: a DataFrame ``(id_a, id_b, distance)``.

    ``id_a < id_b`` (ids must be unique and comparable); ``distance`` is an int 0..k. Rows with a
    null fingerprint take no part. The same set :func:`fpstore.index.search.pairs_within` gives in
    memory, computed as:

    1. rows grouped by fingerprint: all pairs inside a group at distance 0;
    2. each distinct fingerprint exploded into one row per table of a flip-free design
       (``design``, default :func:`spark_join_design` for ``expected_size``, default the row
       count) keyed by (table, prefix of the permuted fingerprint);
    3. buckets estimated (from a sample) to hold more than ``max_bucket`` fingerprints are split
       again on further bits (:func:`sub_tables`); ``None`` turns the split off;
    4. rows repartitioned by (table, bucket) into ``partitions`` (default
       ``spark.sql.shuffle.partitions``) and verified in ``mapInArrow`` by the compiled
       ``self_join`` kernel; a pair is kept only from the first table whose prefix it shares;
    5. the fingerprint pairs joined back to the ids of their groups.

    A partition is verified in memory: size ``partitions`` so that one holds a few million rows.
    The group-by of step 1 feeds steps 1, 2 and 5; Spark shuffles it once and reuses the exchange
    when ``df`` is read from files, but not over a cached ``df`` (Spark 4 does not reuse
    exchanges above an in-memory relation: measured, the rows are then shuffled four times), so
    pass ``df`` uncached.

    The pairs are candidates by fingerprint only. With ``threshold`` (rows of a pipeline with
    ``sketch_bits``, carrying their ``sketch_col``, as :func:`fingerprint` makes them), each pair
    is joined to both rows' sketches and kept when they estimate a Jaccard similarity of at least
    ``threshold`` (what ``Store.near_duplicate_pairs(threshold=)`` keeps); the frame gains a
    ``similarity`` column (double). That costs two more joins of the pairs.
    """
    require()
    from pyspark.sql import functions as F

    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= 10:
        raise InputError(f"k must be an int in 0..10, got {k!r}")
    if max_bucket is not None and (not isinstance(max_bucket, int) or max_bucket < 2):
        raise InputError(f"max_bucket must be an int >= 2 or None, got {max_bucket!r}")
    check_columns(df, id_col, fp_col)
    if threshold is not None:
        theta = check_threshold(threshold)
        check_sketch_column(df, sketch_col, "near_duplicates(threshold=)")
        sketches = df.where(F.col(fp_col).isNotNull()).select(F.col(id_col).alias("id"), F.col(sketch_col).alias("sketch"))
        pairs = near_duplicates(
            df.select(id_col, fp_col),
            k,
            id_col=id_col,
            fp_col=fp_col,
            design=design,
            expected_size=expected_size,
            max_bucket=max_bucket,
            partitions=partitions,
            seed=seed,
        )
        return verify_pairs(pairs, sketches, theta)
    spark = df.sparkSession
    rows = df.select(F.col(id_col).alias("id"), F.col(fp_col).alias("fp")).where(F.col("fp").isNotNull())
    groups = rows.groupBy("fp").agg(F.collect_list("id").alias("ids"))

    # 1. identical fingerprints: every pair inside a group, at distance 0.
    same = (
        groups.where(F.size("ids") > 1)
        .select(F.col("ids"), F.posexplode("ids").alias("pa", "a"))
        .select("a", "pa", F.posexplode("ids").alias("pb", "b"))
        .where(F.col("pa") < F.col("pb"))
        .select(F.least("a", "b").alias("id_a"), F.greatest("a", "b").alias("id_b"), F.lit(0).alias("distance"))
    )
    if k == 0:
        return same

    # 2-4. distinct fingerprints through the tables.
    if design is None and expected_size is None:
        expected_size = rows.count()
    plan = JoinPlan.build(flip_free(design, k, expected_size or 1), k)
    heavy = _heavy_buckets(rows, plan, "fp", max_bucket, seed) if max_bucket is not None else {}
    # The group sizes are not needed here, but selecting one keeps the aggregate identical to the
    # other uses of ``groups``, so Spark shuffles the rows for it once and reuses the exchange.
    distinct = groups.select("fp", F.size("ids").alias("m"))
    # get() without a default returns the setting's value or built-in default (it never gives None); pyspark types it Optional.
    nparts = partitions or int(spark.conf.get("spark.sql.shuffle.partitions"))  # type: ignore[arg-type]
    keyed = distinct.mapInArrow(_explode_fn(plan, "fp", heavy), "v int, bucket long, fp long")
    fp_pairs = keyed.repartition(nparts, "v", "bucket").mapInArrow(_verify_fn(plan), "fa long, fb long, distance int")

    # 5. back to ids: each fingerprint pair times the ids of both groups.
    ga = groups.select(F.col("fp").alias("fa"), F.col("ids").alias("ids_a"))
    gb = groups.select(F.col("fp").alias("fb"), F.col("ids").alias("ids_b"))
    near = (
        fp_pairs.join(ga, "fa")
        .join(gb, "fb")
        .select(F.explode("ids_a").alias("a"), "ids_b", "distance")
        .select("a", F.explode("ids_b").alias("b"), "distance")
        .select(F.least("a", "b").alias("id_a"), F.greatest("a", "b").alias("id_b"), "distance")
    )
    return same.unionByName(near)
