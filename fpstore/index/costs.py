"""The cost models that choose a table design, one per kind of work (see ``docs/designs.md`` and
``docs/scale-out.md``): a store's queries (:func:`design_cost`, used by
:func:`fpstore.index.design.design_for`), the in-memory self-join (:func:`join_cost`, used by
:func:`fpstore.index.search.join_design`), and the two Spark jobs (:func:`spark_join_cost`,
:func:`spark_batch_cost`, used by :func:`fpstore.spark.spark_join_design` and
:func:`fpstore.spark.spark_batch_design`). Each takes a design and a size and returns a cost to
minimise over the catalogue; lower is better.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from fpstore.index.tables import Design

__all__ = [
    "C_CANDIDATE",
    "C_JOIN_COMPARE",
    "C_PROBE",
    "C_TABLE",
    "C_TABLE_CROWD",
    "SCALE_EXPONENT",
    "SCALE_FROM",
    "SPARK_CAND",
    "SPARK_CMP",
    "SPARK_KEY",
    "SPARK_PROBE",
    "candidate_cost",
    "design_cost",
    "join_cost",
    "pairs_design_cost",
    "size_factor",
    "spark_batch_cost",
    "spark_join_cost",
    "table_cost",
]

# A store's queries (relative units, one B-tree / run-index seek = 1). See design_cost().
#: Cost of one probe: a cursor seek (B-tree descent, or run-index lookup plus block decode).
C_PROBE: float = 1.0
#: Cost of one candidate: decode it in a run block, popcount and compare. Measured on this
#: store (docs/benchmarks.md): a run probe costs ~4 us of fixed work, while the kernel decodes and
#: verifies a 256-entry block in ~1 us, so a candidate costs ~1/250 of a probe; candidates in the
#: incremental LMDB tables cost more (a cursor step each), hence 0.01 rather than 0.004.
C_CANDIDATE: float = 0.01
#: Per-table cost charged per query: each table stores every fingerprint again (space, page cache,
#: one more write per add), amortised over a workload of about one add per query.
C_TABLE: float = 1.0
#: Extra per-table cost above 20 tables: designs beyond ~20 tables win only when k forces them.
C_TABLE_CROWD: float = 10.0
_CROWD_FREE_TABLES = 20
#: Beyond SCALE_FROM documents, relative to a probe, a candidate costs less and a table more, each
#: by the factor ``(n / SCALE_FROM) ** SCALE_EXPONENT``. A candidate stays a decode and a popcount
#: in a block already read. A probe grows: past 2**24 documents a bulk-loaded store holds several
#: runs per table (``bulk_load``'s ``max_run``), each probed, and their indexes and blocks leave the
#: CPU caches; a table's first probe grows most. Fitted to twelve designs measured at 10**8, where
#: the factor is 3.2 (tools/bench_large_k.py; docs/designs.md, "The cost model at 10^8"); at 10**7,
#: where it is 1, the designs it would have moved measured slower.
SCALE_FROM: int = 1 << 24
SCALE_EXPONENT: float = 0.65
#: A comparison of the all-pairs join, in probes, at every size (pairs_design_cost). Set by hand so
#: that k=3 moves from r4 to r5 at 10**8, where a load and a join measured about even on the two
#: (docs/designs.md); near a vector popcount's ~1 ns (join_cost) against a one-run store's probe.
C_JOIN_COMPARE: float = 0.002


def size_factor(n: int) -> float:
    """``(n / SCALE_FROM) ** SCALE_EXPONENT``, and 1 up to :data:`SCALE_FROM` documents."""
    return max(1.0, n / SCALE_FROM) ** SCALE_EXPONENT


def candidate_cost(n: int) -> float:
    """What one candidate costs, in probes, in a store of ``n`` documents."""
    return C_CANDIDATE / size_factor(n)


def table_cost(n: int) -> float:
    """What one table costs, in probes, in a store of ``n`` documents."""
    return C_TABLE * size_factor(n)


def design_cost(design: Design, n: int) -> float:
    """Cost model of a store's queries, used by :func:`~fpstore.index.design.design_for`, in relative units (one probe = 1).

    ``probes * C_PROBE + expected_candidates(n) * candidate_cost(n) + tables * table_cost(n)
    + max(0, tables - 20) * C_TABLE_CROWD``. Probes are seeks, candidates are sequential reads
    plus a popcount; the table terms stand for each table's first probe, space and write
    amplification (each table stores every fingerprint again), steeper beyond 20 tables.
    """
    tables = len(design.tables)
    return (
        design.probes_per_query() * C_PROBE
        + design.expected_candidates(n) * candidate_cost(n)
        + tables * table_cost(n)
        + max(0, tables - _CROWD_FREE_TABLES) * C_TABLE_CROWD
    )


def pairs_design_cost(design: Design, n: int) -> float:
    """Cost model of a store that also computes all pairs (``design="auto-pairs"``): its
    :func:`design_cost` plus one join per document's worth of queries. The join reads the
    store's own tables (fpstore.index.pairs_stream), and there each document meets the others
    of its probes' prefix groups, a pair counted once: half a query's candidates, each charged
    :data:`C_JOIN_COMPARE`."""
    return design_cost(design, n) + design.expected_candidates(n) / 2 * C_JOIN_COMPARE


def join_cost(design: Design, n: int) -> float:
    """Cost (ns) of the in-memory self-join over ``n`` distinct fingerprints (``n >= 1``): per
    table, a permute and radix sort of all n (~30 ns each) plus the comparisons inside prefix
    groups, about n^2 / 2^(p+1) popcounts at ~1 ns."""
    return sum(30.0 * n + n * n / 2.0 ** (t.prefix_bits + 1) for t in design.tables)


#: Spark cost constants (CPU microseconds, measured by tools/bench_spark.py on local[2], see
#: docs/scale-out.md; fpstore.spark.plans names them C_KEY, C_CMP, C_PROBE and C_CAND).
#: near_duplicates: each extra table costs about SPARK_KEY per distinct fingerprint (explode,
#: shuffle, sort, verify); a comparison in the self_join kernel SPARK_CMP. query_batch: a stored
#: row costs about SPARK_PROBE per table (permute, two reads of the direct index) and SPARK_CAND
#: per candidate it meets (gather, popcount, filter); measured on the mapInArrow body alone,
#: without Spark's per-row cost, which no design changes.
SPARK_KEY = 0.5
SPARK_CMP = 0.003
SPARK_PROBE = 0.065
SPARK_CAND = 0.045


def spark_join_cost(design: Design, n: int) -> float:
    """Spark self-join cost per distinct fingerprint for ``n`` of them (``n >= 1``): SPARK_KEY per
    table plus SPARK_CMP per comparison (``n / 2**(p + 1)`` per fingerprint and table)."""
    return sum(SPARK_KEY + SPARK_CMP * n / 2.0 ** (t.prefix_bits + 1) for t in design.tables)


def spark_batch_cost(design: Design, q: int) -> float:
    """Spark batch cost per streamed row for ``q`` queries (``q >= 1``): SPARK_PROBE per table
    plus SPARK_CAND per candidate (``q / 2**p`` per table)."""
    return sum(SPARK_PROBE + SPARK_CAND * q / 2.0**t.prefix_bits for t in design.tables)
