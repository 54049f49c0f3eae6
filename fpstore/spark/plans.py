"""Table plans of the Spark jobs: Manku's two-level split of oversized buckets, the self-join's
virtual tables, and the choice of a flip-free design by Spark's cost models
(:mod:`fpstore.index.costs`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fpstore.errors import DesignError
from fpstore.index.costs import SPARK_CAND, SPARK_CMP, SPARK_KEY, SPARK_PROBE, spark_batch_cost, spark_join_cost
from fpstore.index.design import Design, Table, design_for, equal_blocks, flip_free_designs


def bit_order(table: Table) -> list[int]:
    """Fingerprint bit at each key position, most significant key bit first."""
    out: list[int] = []
    for start, width in table.segments:
        out.extend(range(start + width - 1, start - 1, -1))
    return out


def table_from_order(order: Sequence[int], prefix_bits: int) -> Table:
    """The :class:`Table` whose key takes fingerprint bits ``order`` (MSB first)."""
    segs: list[tuple[int, int]] = []
    for bit in order:
        if segs and segs[-1][0] - 1 == bit:
            segs[-1] = (bit, segs[-1][1] + 1)
        else:
            segs.append((bit, 1))
    return Table(tuple(segs), prefix_bits)


def sub_tables(table: Table, k: int) -> list[Table]:
    """Second-level tables for an oversized bucket of ``table`` (Manku's two-level split).

    All members of a bucket share the table's prefix, so two of them within ``k`` bits differ in
    at most ``k`` of the remaining ``64 - prefix_bits`` bits. Those bits are cut into ``k + 1``
    blocks; the pair agrees on at least one block, and the sub-table whose key leads with the
    prefix and then that block puts both in one sub-bucket. ``k + 1`` sub-tables, each with a
    prefix longer by ``(64 - prefix_bits) / (k + 1)`` bits: about 2**12 times smaller buckets for
    k = 3 on 16-bit prefixes, for 4 times the rows of that bucket.
    """
    order = bit_order(table)
    p = table.prefix_bits
    rest = order[p:]
    r2 = k + 1
    blocks, pos = [], 0
    for w in equal_blocks(len(rest), r2):
        blocks.append(rest[pos : pos + w])
        pos += w
    subs = []
    for j in range(r2):
        if not blocks[j]:
            continue
        lead = order[:p] + blocks[j]
        tail = [b for jj in range(r2) if jj != j for b in blocks[jj]]
        subs.append(table_from_order(lead + tail, len(lead)))
    return subs


@dataclass(frozen=True)
class JoinPlan:
    """Virtual tables of a self-join: the design's tables, then each one's sub-tables.

    Virtual table ``v < T`` is design table ``v``; ``T + t * S + s`` is sub-table ``s`` of table
    ``t`` (``S`` sub-tables per table), used for the rows of that table's oversized buckets.
    """

    k: int
    design: Design
    subs: tuple[tuple[Table, ...], ...]

    @classmethod
    def build(cls, design: Design, k: int) -> JoinPlan:
        return cls(k, design, tuple(tuple(sub_tables(t, k)) for t in design.tables))

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


#: Spark's cost constants (:mod:`fpstore.index.costs`, measured by tools/bench_spark.py).
C_KEY, C_CMP, C_PROBE, C_CAND = SPARK_KEY, SPARK_CMP, SPARK_PROBE, SPARK_CAND


def spark_join_design(k: int, n: int) -> Design:
    """The flip-free design of least Spark cost for a self-join of ``n`` distinct fingerprints:
    ``C_KEY`` per table per fingerprint plus ``C_CMP`` per comparison (``n / 2**(p + 1)`` per
    fingerprint and table). k = 3: r4 up to about 4 * 10**7, then r5 (10 tables; 8 * 10**9 gives
    buckets of ~140) up to about 1.5 * 10**10, where the store's model would already take r6 and
    shuffle twice the rows."""
    n = max(int(n), 1)
    return min(flip_free_designs(k), key=lambda d: spark_join_cost(d, n))


def spark_batch_design(k: int, q: int) -> Design:
    """The flip-free design of least cost per streamed row for a batch of ``q`` queries:
    ``C_PROBE`` per table plus ``C_CAND`` per candidate (``q / 2**p`` per table). k = 3: r4 below
    about 1.5 * 10**5 queries, r5 above."""
    q = max(int(q), 1)
    return min(flip_free_designs(k), key=lambda d: spark_batch_cost(d, q))


def flip_free(design: Design | str | None, k: int, n: int, batch: bool = False) -> Design:
    if design is None:
        return spark_batch_design(k, n) if batch else spark_join_design(k, n)
    d = design_for(design.k if isinstance(design, Design) else k, n, design)
    if d.k < k:
        raise DesignError(f"design {d.name!r} is exact up to k={d.k}, not k={k}")
    if any(t.flips for t in d.tables):
        raise DesignError(f"design {d.name!r} uses multi-probe flips; a join needs a design without flips")
    return d
