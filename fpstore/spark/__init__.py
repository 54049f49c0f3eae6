"""fpstore on Apache Spark: the batch work of a corpus that outgrows one machine.

Four DataFrame operations, with the same kernels and table designs as the store
(``docs/scale-out.md`` shows how to run them on a cluster and what they cost):

* :func:`near_duplicates` — the exact all-pairs self-join (Manku §3.3) of ``(id, fp)`` rows.
* :func:`query_batch` — Manku's batch mode: the small side's sorted tables broadcast, the large
  side streamed past them without a shuffle.
* :func:`fingerprint` — fingerprints computed on the executors by the same :class:`Pipeline`.
* :func:`build_shards` — one complete fpstore per shard, bulk-loaded on the executors, with a
  manifest; :class:`ShardSet` opens them and answers like one store (it needs no Spark).

**Fingerprints in Spark.** Spark has no unsigned 64-bit type. A fingerprint column is a
``LongType`` (signed 64-bit) holding the fingerprint's two's-complement bit pattern: the uint64
``f`` is stored as ``f - 2**64`` when ``f >= 2**63``. Every bit, hence every Hamming distance, is
unchanged; equality, grouping, joining and hashing work as they are; only Spark's *ordering* of the
column differs from unsigned order (fingerprints with the top bit set sort first), and nothing here
relies on it. In numpy the mapping is a free view: ``fps.view(np.int64)`` and back
``col.view(np.uint64)`` (:func:`to_signed`, :func:`to_unsigned`); in Python ints,
``f - (f >> 63 << 64)`` and ``s & (2**64 - 1)``.

PySpark, pyarrow and pandas are the ``fpstore[spark]`` extra; this module imports them only when a
Spark function runs, so :class:`ShardSet` and the conversions work without them. The executors
need fpstore itself installed, with its compiled kernels (``docs/scale-out.md``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import socket
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import numpy as np

from fpstore import _backend
from fpstore.index.design import Design, Table, design_for
from fpstore.errors import DesignError, FormatError, InputError, PipelineMismatchError
from fpstore.fingerprint.pipeline import IdfTable, Pipeline

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "MANIFEST",
    "ShardSet",
    "build_shards",
    "fingerprint",
    "fingerprints_frame",
    "near_duplicates",
    "query_batch",
    "shard_of",
    "spark_batch_design",
    "spark_join_design",
    "to_signed",
    "to_unsigned",
]

_search = _backend.load("search")

#: File name of the manifest :func:`build_shards` writes next to the shard stores.
MANIFEST = "manifest.json"
#: Manifest format; :class:`ShardSet` refuses any other.
MANIFEST_FORMAT = 1
#: The routing rule :func:`build_shards` applies and :func:`shard_of` computes.
ROUTING = "blake2b-64(typed key) mod shards"

_EXTRA_HINT = (
    "fpstore.spark needs PySpark 4.x with pyarrow and pandas: pip install 'fpstore[spark]' "
    "(and Java 17 for Spark itself)"
)


def _require() -> None:
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


def _arrow_u64(column: "pa.Array | pa.ChunkedArray") -> np.ndarray:
    """uint64 fingerprints of an Arrow int64 column without nulls."""
    arr = column.to_numpy(zero_copy_only=False) if hasattr(column, "to_numpy") else np.asarray(column)
    return to_unsigned(arr.astype(np.int64, copy=False))


def fingerprints_frame(
    spark: "SparkSession", ids: Sequence[Any] | np.ndarray, fps: np.ndarray, *, id_col: str = "id", fp_col: str = "fp"
) -> "DataFrame":
    """A DataFrame ``(id_col, fp_col)`` from ids and uint64 fingerprints (``fp_col`` a LongType
    holding the two's-complement bit pattern, see the module docstring)."""
    _require()
    import pyarrow as pa

    fps = np.asarray(fps)
    table = pa.table({id_col: pa.array(ids), fp_col: pa.array(to_signed(fps), pa.int64())})
    return spark.createDataFrame(table)


def _check_columns(df: "DataFrame", *cols: str) -> None:
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


# --------------------------------------------------------------------------------------------
# Tables: permutations, prefixes and the split of oversized buckets
# --------------------------------------------------------------------------------------------


def _permute(values: np.ndarray, table: Table) -> np.ndarray:
    """Permuted keys (uint64) of uint64 ``values`` for ``table``: its segments lead in key order."""
    out = np.zeros(len(values), np.uint64)
    top = 64
    for start, width in _merged_segments(table):
        top -= width
        mask = np.uint64((1 << width) - 1)
        out |= ((values >> np.uint64(start)) & mask) << np.uint64(top)
    return out


def _merged_segments(table: Table) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, width in table.segments:
        if merged and start + width == merged[-1][0]:
            merged[-1] = [start, merged[-1][1] + width]
        else:
            merged.append([start, width])
    return [(s, w) for s, w in merged]


def _bit_order(table: Table) -> list[int]:
    """Fingerprint bit at each key position, most significant key bit first."""
    out: list[int] = []
    for start, width in table.segments:
        out.extend(range(start + width - 1, start - 1, -1))
    return out


def _table_from_order(order: Sequence[int], prefix_bits: int) -> Table:
    """The :class:`Table` whose key takes fingerprint bits ``order`` (MSB first)."""
    segs: list[tuple[int, int]] = []
    for bit in order:
        if segs and segs[-1][0] - 1 == bit:
            segs[-1] = (bit, segs[-1][1] + 1)
        else:
            segs.append((bit, 1))
    return Table(tuple(segs), prefix_bits)


def _sub_tables(table: Table, k: int) -> list[Table]:
    """Second-level tables for an oversized bucket of ``table`` (Manku's two-level split).

    All members of a bucket share the table's prefix, so two of them within ``k`` bits differ in
    at most ``k`` of the remaining ``64 - prefix_bits`` bits. Those bits are cut into ``k + 1``
    blocks; the pair agrees on at least one block, and the sub-table whose key leads with the
    prefix and then that block puts both in one sub-bucket. ``k + 1`` sub-tables, each with a
    prefix longer by ``(64 - prefix_bits) / (k + 1)`` bits: about 2**12 times smaller buckets for
    k = 3 on 16-bit prefixes, for 4 times the rows of that bucket.
    """
    order = _bit_order(table)
    p = table.prefix_bits
    rest = order[p:]
    r2 = k + 1
    base, extra = divmod(len(rest), r2)
    blocks, pos = [], 0
    for j in range(r2):
        w = base + (1 if j < extra else 0)
        blocks.append(rest[pos : pos + w])
        pos += w
    subs = []
    for j in range(r2):
        if not blocks[j]:
            continue
        lead = order[:p] + blocks[j]
        tail = [b for jj in range(r2) if jj != j for b in blocks[jj]]
        subs.append(_table_from_order(lead + tail, len(lead)))
    return subs


@dataclass(frozen=True)
class _JoinPlan:
    """Virtual tables of a self-join: the design's tables, then each one's sub-tables.

    Virtual table ``v < T`` is design table ``v``; ``T + t * S + s`` is sub-table ``s`` of table
    ``t`` (``S`` sub-tables per table), used for the rows of that table's oversized buckets.
    """

    k: int
    design: Design
    subs: tuple[tuple[Table, ...], ...]

    @classmethod
    def build(cls, design: Design, k: int) -> "_JoinPlan":
        return cls(k, design, tuple(tuple(_sub_tables(t, k)) for t in design.tables))

    @property
    def n_tables(self) -> int:
        return len(self.design.tables)

    @property
    def n_subs(self) -> int:
        return len(self.subs[0]) if self.subs else 0

    def vtable(self, v: int) -> tuple[Table, int, int]:
        """(table, top table t, sub-table s or -1) of virtual table ``v``."""
        T = self.n_tables
        if v < T:
            return self.design.tables[v], v, -1
        t, s = divmod(v - T, self.n_subs)
        return self.subs[t][s], t, s

    def first_here(self, v: int, diff: np.ndarray) -> np.ndarray:
        """True for pairs (by ``a ^ b``) that no earlier table or sub-table puts in one bucket.

        Two fingerprints share a table's prefix exactly when they agree on the fingerprint bits
        that land in it (``Table.prefix_mask``). A pair is kept only in the first design table
        whose prefix it shares (the rule of :func:`fpstore.index.search.pairs_within`), and within an
        oversized bucket only in the first sub-table whose longer prefix it shares.
        """
        _, t, s = self.vtable(v)
        keep = np.ones(len(diff), bool)
        for earlier in range(t):
            keep &= (diff & np.uint64(self.design.tables[earlier].prefix_mask())) != 0
        for earlier in range(max(s, 0)):
            keep &= (diff & np.uint64(self.subs[t][earlier].prefix_mask())) != 0
        return keep


#: Spark cost constants (CPU microseconds, measured by tools/bench_spark.py on local[2], see
#: docs/scale-out.md). near_duplicates: each extra table costs about C_KEY per distinct
#: fingerprint (explode, shuffle, sort, verify); a comparison in the self_join kernel C_CMP.
#: query_batch: a stored row costs about C_PROBE per table (permute, two reads of the direct
#: index) and C_CAND per candidate it meets (gather, popcount, filter); measured on the mapInArrow
#: body alone, without Spark's per-row cost, which no design changes.
C_KEY = 0.5
C_CMP = 0.003
C_PROBE = 0.065
C_CAND = 0.045


def _flip_free_catalogue(k: int) -> list[Design]:
    from fpstore.index.design import designs_for_k

    return [d for d in designs_for_k(k) if all(t.flips == 0 for t in d.tables)]


def spark_join_design(k: int, n: int) -> Design:
    """The flip-free design of least Spark cost for a self-join of ``n`` distinct fingerprints:
    ``C_KEY`` per table per fingerprint plus ``C_CMP`` per comparison (``n / 2**(p + 1)`` per
    fingerprint and table). k = 3: r4 up to about 4 * 10**7, then r5 (10 tables; 8 * 10**9 gives
    buckets of ~140) up to about 1.5 * 10**10, where the store's model would already take r6 and
    shuffle twice the rows."""
    n = max(int(n), 1)
    return min(
        _flip_free_catalogue(k),
        key=lambda d: sum(C_KEY + C_CMP * n / 2.0 ** (t.prefix_bits + 1) for t in d.tables),
    )


def spark_batch_design(k: int, q: int) -> Design:
    """The flip-free design of least cost per streamed row for a batch of ``q`` queries:
    ``C_PROBE`` per table plus ``C_CAND`` per candidate (``q / 2**p`` per table). k = 3: r4 below
    about 1.5 * 10**5 queries, r5 above."""
    q = max(int(q), 1)
    return min(
        _flip_free_catalogue(k),
        key=lambda d: sum(C_PROBE + C_CAND * q / 2.0**t.prefix_bits for t in d.tables),
    )


def _flip_free(design: Design | str | None, k: int, n: int, batch: bool = False) -> Design:
    if design is None:
        return spark_batch_design(k, n) if batch else spark_join_design(k, n)
    d = design_for(design.k if isinstance(design, Design) else k, n, design)
    if d.k < k:
        raise DesignError(f"design {d.name!r} is exact up to k={d.k}, not k={k}")
    if any(t.flips for t in d.tables):
        raise DesignError(f"design {d.name!r} uses multi-probe flips; a join needs a design without flips")
    return d


# --------------------------------------------------------------------------------------------
# near_duplicates
# --------------------------------------------------------------------------------------------


def _explode_fn(plan: _JoinPlan, fp_col: str, heavy: dict[int, np.ndarray]):
    """mapInArrow body: each distinct fingerprint -> one row per table (v, bucket, fp); rows of
    oversized buckets go to the sub-tables of their table instead."""

    def explode(batches: Iterator["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        import pyarrow as pa

        for batch in batches:
            fps = _arrow_u64(batch.column(batch.schema.get_field_index(fp_col)))
            if not len(fps):
                continue
            vs, buckets, out_fps = [], [], []
            for t, table in enumerate(plan.design.tables):
                shift = np.uint64(64 - table.prefix_bits)
                prefix = _permute(fps, table) >> shift
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
                        buckets.append(_permute(fb, sub) >> np.uint64(64 - sub.prefix_bits))
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

    def prefixes(batches: Iterator["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        import pyarrow as pa

        for batch in batches:
            fps = _arrow_u64(batch.column(batch.schema.get_field_index(fp_col)))
            if not len(fps):
                continue
            ts, ps = [], []
            for t, table in enumerate(design.tables):
                ts.append(np.full(len(fps), t, np.int32))
                ps.append(_permute(fps, table) >> np.uint64(64 - table.prefix_bits))
            yield pa.RecordBatch.from_arrays(
                [pa.array(np.concatenate(ts), pa.int32()), pa.array(np.concatenate(ps).view(np.int64), pa.int64())],
                names=["t", "prefix"],
            )

    return prefixes


def _verify_fn(plan: _JoinPlan):
    """mapInArrow body: all (fa, fb, distance) of one partition of (v, bucket, fp) rows.

    The partition holds whole buckets. Per virtual table present (a handful, never one call per
    group) its rows are permuted, radix-sorted and handed to the compiled ``self_join`` kernel,
    which walks every prefix group of the sorted keys; pairs another table reports are dropped.
    """

    def verify(batches: Iterator["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        import pyarrow as pa

        parts = [b for b in batches if b.num_rows]
        if not parts:
            return
        tbl = pa.Table.from_batches(parts)
        v_all = tbl.column("v").to_numpy().astype(np.int32, copy=False)
        fp_all = _arrow_u64(tbl.column("fp"))
        del tbl, parts
        order_v = np.argsort(v_all, kind="stable")
        v_sorted = v_all[order_v]
        bounds = np.flatnonzero(np.diff(v_sorted)) + 1
        for idx in np.split(order_v, bounds):
            v = int(v_all[idx[0]])
            table, _, _ = plan.vtable(v)
            fps = fp_all[idx]
            keys, order = _search.radix_sort(_permute(fps, table), True)
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


def _heavy_buckets(fps: "DataFrame", plan: _JoinPlan, fp_col: str, max_bucket: int, seed: int) -> dict[int, np.ndarray]:
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
    df: "DataFrame",
    k: int,
    *,
    id_col: str = "id",
    fp_col: str = "fp",
    design: Design | str | None = None,
    expected_size: int | None = None,
    max_bucket: int | None = 20_000,
    partitions: int | None = None,
    seed: int = 0,
) -> "DataFrame":
    """Every pair of rows within ``k`` bits, exactly once: a DataFrame ``(id_a, id_b, distance)``.

    ``id_a < id_b`` (ids must be unique and comparable); ``distance`` is an int 0..k. Rows with a
    null fingerprint take no part. The same set :func:`fpstore.index.search.pairs_within` gives in
    memory, computed as:

    1. rows grouped by fingerprint: all pairs inside a group at distance 0;
    2. each distinct fingerprint exploded into one row per table of a flip-free design
       (``design``, default :func:`spark_join_design` for ``expected_size``, default the row
       count) keyed by (table, prefix of the permuted fingerprint);
    3. buckets estimated (from a sample) to hold more than ``max_bucket`` fingerprints are split
       again on further bits (:func:`_sub_tables`); ``None`` turns the split off;
    4. rows repartitioned by (table, bucket) into ``partitions`` (default
       ``spark.sql.shuffle.partitions``) and verified in ``mapInArrow`` by the compiled
       ``self_join`` kernel; a pair is kept only from the first table whose prefix it shares;
    5. the fingerprint pairs joined back to the ids of their groups.

    A partition is verified in memory: size ``partitions`` so that one holds a few million rows.
    The group-by of step 1 feeds steps 1, 2 and 5; Spark shuffles it once and reuses the exchange
    when ``df`` is read from files, but not over a cached ``df`` (Spark 4 does not reuse
    exchanges above an in-memory relation: measured, the rows are then shuffled four times), so
    pass ``df`` uncached.
    """
    _require()
    from pyspark.sql import functions as F

    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= 10:
        raise InputError(f"k must be an int in 0..10, got {k!r}")
    if max_bucket is not None and (not isinstance(max_bucket, int) or max_bucket < 2):
        raise InputError(f"max_bucket must be an int >= 2 or None, got {max_bucket!r}")
    _check_columns(df, id_col, fp_col)
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
    plan = _JoinPlan.build(_flip_free(design, k, expected_size or 1), k)
    heavy = _heavy_buckets(rows, plan, "fp", max_bucket, seed) if max_bucket is not None else {}
    # The group sizes are not needed here, but selecting one keeps the aggregate identical to the
    # other uses of ``groups``, so Spark shuffles the rows for it once and reuses the exchange.
    distinct = groups.select("fp", F.size("ids").alias("m"))
    nparts = partitions or int(spark.conf.get("spark.sql.shuffle.partitions"))
    keyed = distinct.mapInArrow(_explode_fn(plan, "fp", heavy), "v int, bucket long, fp long")
    fp_pairs = keyed.repartition(nparts, "v", "bucket").mapInArrow(
        _verify_fn(plan), "fa long, fb long, distance int"
    )

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


# --------------------------------------------------------------------------------------------
# query_batch
# --------------------------------------------------------------------------------------------

_BROADCAST_CACHE: dict[str, Any] = {}


def _query_tables(payload: dict[str, Any]) -> tuple[Any, ...]:
    """The broadcast queries' sorted tables, built once per Python worker process (workers are
    reused across tasks; this function is pickled by reference, so its cache persists)."""
    key = payload["token"]
    built = _BROADCAST_CACHE.get(key)
    if built is None:
        design = Design.from_config(payload["design"])
        masks = [np.uint64(t.prefix_mask()) for t in design.tables]
        qfps = payload["fps"]
        # Direct index on the top b bits of each sorted table (b about log2 of the batch, at most
        # the prefix): a stored row finds its candidate range with two array reads instead of
        # binary searches; rows that share only those b bits are filtered by the prefix mask.
        b = min(max(1, int(np.ceil(np.log2(max(len(qfps), 2))))), 24)
        tables = []
        for table in design.tables:
            keys, order = _search.radix_sort(_permute(qfps, table), True)
            bits = min(b, table.prefix_bits)
            top = keys >> np.uint64(64 - bits) if bits else np.zeros(len(keys), np.uint64)
            offsets = np.searchsorted(top, np.arange(2**bits + 1, dtype=np.uint64)).astype(
                np.int32 if len(keys) < 2**31 else np.int64
            )
            tables.append((table, bits, offsets, order))
        built = (masks, tables, qfps, payload["ids"])
        _BROADCAST_CACHE.clear()
        _BROADCAST_CACHE[key] = built
    return built


def _probe_fn(bc: Any, k: int, fp_col: str, id_col: str, out_names: tuple[str, str, str]):
    """mapInArrow body: stream stored rows past the broadcast query tables."""

    def probe(batches: Iterator["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
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
            sfps = _arrow_u64(col)
            out_q, out_s, out_d = [], [], []
            for t, (table, bits, offsets, qorder) in enumerate(tables):
                top = _permute(sfps, table) >> np.uint64(64 - bits) if bits else np.zeros(len(sfps), np.uint64)
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
            if not len(qi):
                continue
            yield pa.RecordBatch.from_arrays(
                [
                    qids.take(pa.array(qi)),
                    batch.column(batch.schema.get_field_index(id_col)).take(pa.array(si)),
                    pa.array(np.concatenate(out_d), pa.int32()),
                ],
                names=list(out_names),
            )

    return probe


def query_batch(
    stored_df: "DataFrame",
    queries_df: "DataFrame",
    k: int,
    *,
    id_col: str = "id",
    fp_col: str = "fp",
    query_id_col: str | None = None,
    query_fp_col: str | None = None,
    design: Design | str | None = None,
) -> "DataFrame":
    """Every (query, stored row) pair within ``k`` bits, exactly once: ``(query_id, id, distance)``.

    Manku's batch mode: the queries (the small side: collected to the driver) are built into one
    sorted permuted table per table of a flip-free design (``design``, default
    :func:`spark_batch_design` for the batch size) and broadcast; every partition of
    ``stored_df`` streams its rows past them in ``mapInArrow``, so the large side is read once and
    never shuffled. A (query, row) pair is reported from the first table whose prefix both share.
    ``query_id_col``/``query_fp_col`` default to ``id_col``/``fp_col``.
    """
    _require()
    from pyspark.sql.types import IntegerType, StructField, StructType

    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= 10:
        raise InputError(f"k must be an int in 0..10, got {k!r}")
    qid, qfp = query_id_col or id_col, query_fp_col or fp_col
    _check_columns(stored_df, id_col, fp_col)
    _check_columns(queries_df, qid, qfp)
    q = queries_df.select(qid, qfp).where(queries_df[qfp].isNotNull()).toArrow()
    qfps = _arrow_u64(q.column(qfp).combine_chunks())
    qids = q.column(qid).combine_chunks()
    d = _flip_free(design, k, max(len(qfps), 1), batch=True)
    payload = {"token": uuid.uuid4().hex, "design": d.config(), "fps": qfps, "ids": qids}
    bc = stored_df.sparkSession.sparkContext.broadcast(payload)
    names = ("query_id", "id", "distance")
    schema = StructType(
        [
            StructField(names[0], queries_df.schema[qid].dataType),
            StructField(names[1], stored_df.schema[id_col].dataType),
            StructField(names[2], IntegerType(), False),
        ]
    )
    return stored_df.select(id_col, fp_col).mapInArrow(_probe_fn(bc, k, fp_col, id_col, names), schema)


# --------------------------------------------------------------------------------------------
# fingerprint
# --------------------------------------------------------------------------------------------


def _pipeline_payload(pipeline: Pipeline) -> dict[str, Any]:
    if not isinstance(pipeline, Pipeline):
        raise InputError(f"pipeline must be a fpstore.Pipeline, not {type(pipeline).__name__}")
    return {
        "config": pipeline.config,
        "idf": None if pipeline.idf is None else pipeline.idf.to_bytes(),
        "id": pipeline.id,
    }


def _rebuild_pipeline(payload: dict[str, Any]) -> Pipeline:
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
    def run(batches: Iterator["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        import pyarrow as pa

        pipe = _rebuild_pipeline(payload)
        for batch in batches:
            col = batch.column(batch.schema.get_field_index(text_col))
            texts = col.to_pylist()
            valid = np.array([t is not None for t in texts], bool)
            n = len(texts)
            fps = np.zeros(n, np.uint64)
            ntok = np.zeros(n, np.int64)
            short = np.zeros(n, bool)
            if valid.any():
                sigs = pipe.signatures([t for t in texts if t is not None], threads=1)
                fps[valid], ntok[valid], short[valid] = sigs.values, sigs.tokens, sigs.short
            mask = None if valid.all() else ~valid
            arrays = list(batch.columns) + [
                pa.array(to_signed(fps), pa.int64(), mask=mask),
                pa.array(ntok, pa.int64(), mask=mask),
                pa.array(short, pa.bool_(), mask=mask),
            ]
            yield pa.RecordBatch.from_arrays(arrays, names=list(batch.schema.names) + ["fp", "tokens", "short"])

    return run


def fingerprint(df: "DataFrame", text_col: str, pipeline: Pipeline) -> "DataFrame":
    """``df`` with columns ``fp`` (LongType, the uint64 bit pattern), ``tokens`` and ``short``
    computed on the executors by ``pipeline`` (string or binary texts; null text gives nulls).

    The pipeline travels as its config and idf bytes and is rebuilt with
    :meth:`Pipeline.from_config` on each executor, which checks that its id equals the driver's:
    fingerprints in the frame are those of ``pipeline.id`` (pass it as ``pipeline_id`` to a store).
    """
    _require()
    from pyspark.sql.types import BinaryType, BooleanType, LongType, StringType, StructField, StructType

    if text_col not in df.columns:
        raise InputError(f"the DataFrame has no column {text_col!r} (columns: {df.columns})")
    if not isinstance(df.schema[text_col].dataType, (StringType, BinaryType)):
        raise InputError(f"text column {text_col!r} must be string or binary, got {df.schema[text_col].dataType.simpleString()}")
    for name in ("fp", "tokens", "short"):
        if name in df.columns:
            raise InputError(f"the DataFrame already has a column {name!r}")
    payload = _pipeline_payload(pipeline)
    _rebuild_pipeline(payload)  # fail on the driver first when the config does not round-trip
    schema = StructType(
        list(df.schema.fields)
        + [StructField("fp", LongType()), StructField("tokens", LongType()), StructField("short", BooleanType())]
    )
    return df.mapInArrow(_fingerprint_fn(payload, text_col), schema)


# --------------------------------------------------------------------------------------------
# build_shards and ShardSet
# --------------------------------------------------------------------------------------------


def _typed_key(key: object) -> bytes:
    from fpstore.store.store import _typed_key as typed

    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        key = int(key)
    return typed(key)


def shard_of(key: object, shards: int) -> int:
    """The shard :func:`build_shards` routes document ``key`` to: the first 8 bytes of
    BLAKE2b(typed key) as a big-endian integer, modulo ``shards`` (the typed key is the store's:
    ``b"i"`` + 8 big-endian bytes for an int, ``b"s"`` + UTF-8 for a str, ``b"b"`` + the bytes)."""
    digest = hashlib.blake2b(_typed_key(key), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def _shard_dir(s: int) -> str:
    return f"shard-{s:05d}"


def _route_fn(id_col: str, shards: int):
    def route(batches: Iterator["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        import pyarrow as pa

        for batch in batches:
            ids = batch.column(batch.schema.get_field_index(id_col)).to_pylist()
            sh = np.fromiter((shard_of(i, shards) for i in ids), np.int32, count=len(ids))
            yield pa.RecordBatch.from_arrays(
                list(batch.columns) + [pa.array(sh, pa.int32())], names=list(batch.schema.names) + ["_shard"]
            )

    return route


def _write_fn(root: str, payload: dict[str, Any], design_cfg: dict[str, Any], k: int, id_col: str, fp_col: str):
    def write(batches: Iterator["pa.RecordBatch"]) -> Iterator["pa.RecordBatch"]:
        import pyarrow as pa

        import fpstore

        parts = [b for b in batches if b.num_rows]
        if not parts:
            return
        tbl = pa.Table.from_batches(parts)
        shard_col = tbl.column("_shard").to_numpy()
        pipe = _rebuild_pipeline(payload)
        design = Design.from_config(design_cfg)
        out_s, out_n, out_b = [], [], []
        for s in np.unique(shard_col).tolist():
            sel = tbl.filter(pa.array(shard_col == s))
            id_arr = sel.column(id_col).combine_chunks()
            fps = _arrow_u64(sel.column(fp_col).combine_chunks())
            if pa.types.is_integer(id_arr.type):
                keys: Any = id_arr.to_numpy().astype(np.int64, copy=False)
            else:
                keys = id_arr.to_pylist()
            final = os.path.join(root, _shard_dir(s))
            # A retried task starts over: build beside the final path, then rename into place.
            tmp = f"{final}.tmp-{uuid.uuid4().hex[:8]}"
            with fpstore.open(tmp, k=k, pipeline=pipe, design=design, expected_size=len(fps)) as store:
                store.bulk_load(keys, fps, pipeline_id=pipe.id)
                count = len(store)
            if os.path.exists(final):
                shutil.rmtree(final)
            os.rename(tmp, final)
            size = sum(os.path.getsize(os.path.join(final, f)) for f in os.listdir(final))
            out_s.append(s)
            out_n.append(count)
            out_b.append(size)
        host = socket.gethostname()
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(out_s, pa.int32()),
                pa.array(out_n, pa.int64()),
                pa.array(out_b, pa.int64()),
                pa.array([host] * len(out_s), pa.string()),
            ],
            names=["shard", "count", "bytes", "host"],
        )

    return write


def build_shards(
    df: "DataFrame",
    path: str | os.PathLike[str],
    *,
    shards: int,
    k: int,
    pipeline_id: str,
    pipeline: Pipeline | None = None,
    id_col: str = "id",
    fp_col: str = "fp",
    design: Design | str = "auto",
    expected_size: int | None = None,
) -> dict[str, Any]:
    """Build ``shards`` complete fpstores under ``path`` from ``(id, fp)`` rows; returns the manifest.

    Routing: by a hash of the document key (:func:`shard_of`), not by fingerprint bits. A query
    within ``k`` must reach every shard whose range of top-``b`` fingerprint bits lies within ``k``
    bits of its own: ``sum(C(b, i) for i <= k)`` of the ``2**b`` shards, which is all 8 of 8
    shards and 15 of 16 for k = 3, so fingerprint routing would save almost no probes; it would
    also give unequal shards (real fingerprints cluster) and move a document to another shard when
    its text changes, leaving the old version behind. With key routing every query visits every
    shard (:class:`ShardSet` does), shards are equal in size, and a key always lives in one shard.

    Each shard is bulk-loaded (:meth:`Store.bulk_load`) by one task on an executor into
    ``path/shard-NNNNN`` (a local path: in a cluster, a directory every executor and the reader can
    reach, see docs/scale-out.md), with one design for all shards (``design`` chosen for
    ``expected_size / shards``; ``expected_size`` defaults to the row count). ``pipeline`` (default
    ``Pipeline()``) must have id ``pipeline_id``. Keys must be unique (integer keys non-negative, as
    the store requires); rows with a null fingerprint are skipped. ``path/manifest.json`` records the shards, the routing rule, the pipeline, the
    design and the counts.
    """
    _require()
    from pyspark.sql import functions as F

    if not isinstance(shards, int) or isinstance(shards, bool) or not 1 <= shards <= 99_999:
        raise InputError(f"shards must be an int in 1..99999, got {shards!r}")
    _check_columns(df, id_col, fp_col)
    pipe = pipeline if pipeline is not None else Pipeline()
    if pipe.id != pipeline_id:
        raise PipelineMismatchError(
            f"pipeline_id {pipeline_id!r} is not the id of the pipeline the shards would record ({pipe.id}); "
            "pass pipeline= the pipeline that made the fingerprints"
        )
    root = os.path.abspath(os.fspath(path))
    if os.path.exists(os.path.join(root, MANIFEST)):
        raise InputError(f"{root} already holds a shard set ({MANIFEST}); choose an empty directory")
    os.makedirs(root, exist_ok=True)
    rows = df.select(id_col, fp_col).where(F.col(fp_col).isNotNull())
    if expected_size is None:
        expected_size = rows.count()
    d = design_for(k, max(1, expected_size // shards), design)
    payload = _pipeline_payload(pipe)
    routed = rows.mapInArrow(_route_fn(id_col, shards), f"{_schema_ddl(rows)}, _shard int")
    written = (
        routed.repartition(shards, "_shard")
        .mapInArrow(_write_fn(root, payload, d.config(), k, id_col, fp_col), "shard int, count long, bytes long, host string")
        .collect()
    )
    counts = {int(r["shard"]): (int(r["count"]), int(r["bytes"]), r["host"]) for r in written}
    import fpstore

    for s in range(shards):
        if s not in counts:  # no row routed here: an empty store keeps every shard openable
            with fpstore.open(os.path.join(root, _shard_dir(s)), k=k, pipeline=pipe, design=d):
                pass
            counts[s] = (0, 0, socket.gethostname())
    manifest = {
        "format": MANIFEST_FORMAT,
        "shards": [
            {"shard": s, "path": _shard_dir(s), "count": counts[s][0], "bytes": counts[s][1], "host": counts[s][2]}
            for s in range(shards)
        ],
        "routing": {
            "rule": ROUTING,
            "by": "key",
            "query": "every shard (a near-duplicate may be in any)",
        },
        "k": k,
        "pipeline_id": pipe.id,
        "pipeline": pipe.config,
        "design": d.config(),
        "count": sum(c[0] for c in counts.values()),
        "created": int(time.time()),
    }
    tmp = os.path.join(root, MANIFEST + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
    os.replace(tmp, os.path.join(root, MANIFEST))
    return manifest


def _schema_ddl(df: "DataFrame") -> str:
    return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in df.schema.fields)


class ShardSet:
    """The shard stores of :func:`build_shards`, opened read-only, answering like one store.

    Every query visits every shard (routing is by key). Document ids are per shard, so ids
    returned here are global: ``local_id * shards + shard`` (:meth:`split_id`); :meth:`keys_of`
    maps them to keys. Needs fpstore only, not Spark.
    """

    def __init__(self, path: str | os.PathLike[str], *, allow_network_fs: bool = False) -> None:
        import fpstore

        self.path = os.path.abspath(os.fspath(path))
        try:
            with open(os.path.join(self.path, MANIFEST), encoding="utf-8") as fh:
                manifest = json.load(fh)
        except FileNotFoundError:
            raise FormatError(f"{self.path} holds no {MANIFEST}: not a shard set") from None
        except ValueError as exc:
            raise FormatError(f"{MANIFEST} in {self.path} does not parse: {exc}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
            raise FormatError(f"{MANIFEST} in {self.path}: unknown format {manifest.get('format')!r}")
        self.manifest = manifest
        self.design = Design.from_config(manifest["design"])
        self.pipeline_id: str = manifest["pipeline_id"]
        entries = sorted(manifest["shards"], key=lambda e: e["shard"])
        if [e["shard"] for e in entries] != list(range(len(entries))):
            raise FormatError(f"{MANIFEST} in {self.path}: shards must be numbered 0..n-1")
        self.stores = []
        try:
            for e in entries:
                sub = os.path.normpath(os.path.join(self.path, e["path"]))
                if os.path.dirname(sub) != self.path:
                    raise FormatError(f"{MANIFEST}: shard path {e['path']!r} leaves the shard set")
                st = fpstore.open(sub, readonly=True, create=False, allow_network_fs=allow_network_fs)
                self.stores.append(st)
                if st.pipeline.id != self.pipeline_id or st.design.config() != self.design.config():
                    raise FormatError(f"shard {e['shard']} differs from the manifest in pipeline or design")
        except BaseException:
            self.close()
            raise
        self.k: int = self.stores[0].k if self.stores else manifest["k"]
        self.pipeline = self.stores[0].pipeline

    @property
    def shards(self) -> int:
        return len(self.stores)

    def shard_of(self, key: object) -> int:
        """The shard that holds (or would hold) document ``key``."""
        return shard_of(key, self.shards)

    def split_id(self, gid: int) -> tuple[int, int]:
        """(shard, that shard's document id) of a global id."""
        local, shard = divmod(int(gid), self.shards)
        return shard, local

    def query(self, **kwargs: Any) -> list[Any]:
        """:meth:`Store.query` over every shard (same arguments), merged: sorted by distance then
        key; each ``Match.id`` is a global id."""
        from fpstore.store.store import Match, _sort_matches

        out = []
        for s, st in enumerate(self.stores):
            for m in st.query(**kwargs):
                out.append(Match(m.key, m.distance, m.fingerprint, m.id * self.shards + s))
        return _sort_matches(out)

    def query_many(
        self, fingerprints: object, *, pipeline_id: str | None = None, k: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`Store.query_many` over every shard: ``(query_index, global id, distance)``
        sorted by query index, distance, id."""
        qs, ids, ds = [], [], []
        for s, st in enumerate(self.stores):
            q, i, d = st.query_many(fingerprints, pipeline_id=pipeline_id, k=k)
            qs.append(q)
            ids.append(i * self.shards + s)
            ds.append(d)
        if not qs:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint8)
        q, i, d = np.concatenate(qs), np.concatenate(ids), np.concatenate(ds)
        order = np.lexsort((i, d, q))
        return q[order], i[order], d[order]

    def keys_of(self, ids: Iterable[int]) -> list[Any]:
        """Keys of global ids (as :meth:`query_many` returns them)."""
        ids = [int(i) for i in ids]
        out: list[Any] = [None] * len(ids)
        by_shard: dict[int, list[tuple[int, int]]] = {}
        for pos, gid in enumerate(ids):
            shard, local = self.split_id(gid)
            by_shard.setdefault(shard, []).append((pos, local))
        for shard, items in by_shard.items():
            keys = self.stores[shard].keys_of([local for _, local in items])
            for (pos, _), key in zip(items, keys):
                out[pos] = key
        return out

    def __len__(self) -> int:
        return sum(len(st) for st in self.stores)

    def close(self) -> None:
        for st in getattr(self, "stores", []):
            st.close()

    def __enter__(self) -> "ShardSet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ShardSet({self.path!r}, shards={self.shards}, documents={len(self)})"
