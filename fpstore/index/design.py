"""Table designs: the catalogue of exact designs for each radius, and the choice among them.

A design is a list of permuted tables (Manku, Jain, Das Sarma, WWW 2007, section 3) that answers
every query of radius ``k`` exactly. :class:`Table` and :class:`Design`, with the conventions on
bits, segments and keys and the coverage proof, live in :mod:`fpstore.index.tables`; the cost
models live in :mod:`fpstore.index.costs`. This module re-exports both.

The catalogue (:func:`designs_for_k`) holds, for each ``k`` in ``0 .. 10``: one-level Manku designs
(``"r5"``), two-level designs (``"4x4"``) and multi-probe designs (``"r2f1"``). :func:`design_for`
picks one by the cost model documented there and in ``docs/designs.md``.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType

from fpstore.errors import DesignError
from fpstore.index.costs import C_CANDIDATE, C_PROBE, C_TABLE, C_TABLE_CROWD, design_cost, pairs_design_cost
from fpstore.index.tables import MAX_K, Design, Table, count_probes, evading_placement, is_int

__all__ = [
    "AUTO_DESIGNS",
    "C_CANDIDATE",
    "C_PROBE",
    "C_TABLE",
    "C_TABLE_CROWD",
    "DEFAULT_EXPECTED_SIZE",
    "Design",
    "MAX_K",
    "Table",
    "design_cost",
    "design_for",
    "designs_for_k",
]

#: The ``design`` values that ask :func:`design_for` to choose: by the cost of queries
#: (:func:`design_cost`), or of queries and all pairs (:func:`pairs_design_cost`).
AUTO_DESIGNS: Mapping[str, Callable[[Design, int], float]] = MappingProxyType({"auto": design_cost, "auto-pairs": pairs_design_cost})

#: Expected store size assumed by :func:`design_for` when the caller gives none.
DEFAULT_EXPECTED_SIZE: int = 10**6

_BITS = 64

# Catalogue limits: "~64 tables" and a probe count a Python loop can still enumerate per query.
_CATALOGUE_MAX_TABLES = 64
_CATALOGUE_MAX_PROBES = 20_000
_MULTI_MAX_PREFIX = 40

# --------------------------------------------------------------------------------------------
# Catalogue
# --------------------------------------------------------------------------------------------


def equal_blocks(total: int, r: int) -> list[int]:
    """Widths of ``r`` contiguous blocks splitting ``total`` bits as equally as possible."""
    base, extra = divmod(total, r)
    return [base + 1 if j < extra else base for j in range(r)]


def _blocks(r: int) -> list[tuple[int, int]]:
    """The ``r`` blocks of the 64 bits as ``(start, width)``, most significant block first."""
    out = []
    top = _BITS
    for w in equal_blocks(_BITS, r):
        top -= w
        out.append((top, w))
    return out


def _one_level_tables(r: int, chosen: int, flips: int = 0) -> tuple[Table, ...]:
    """One table per choice of ``chosen`` of ``r`` blocks; those blocks lead, in bit order.

    The first combination is the top blocks, so table 0 is the identity.
    """
    blocks = _blocks(r)
    tables = []
    for combo in itertools.combinations(range(r), chosen):
        rest = [j for j in range(r) if j not in combo]
        segs = tuple(blocks[j] for j in combo) + tuple(blocks[j] for j in rest)
        prefix = sum(blocks[j][1] for j in combo)
        tables.append(Table(segs, prefix, flips))
    return tuple(tables)


def _split_run(segments: Sequence[tuple[int, int]], widths: Iterable[int]) -> list[list[tuple[int, int]]]:
    """Cut a key-ordered run of fingerprint segments into consecutive pieces of ``widths`` bits."""
    pieces: list[list[tuple[int, int]]] = []
    queue = list(segments)
    for w in widths:
        piece: list[tuple[int, int]] = []
        while w:
            start, width = queue.pop(0)
            take = min(w, width)
            # Take the top `take` bits of the segment; put the rest back at the front.
            piece.append((start + width - take, take))
            if take < width:
                queue.insert(0, (start, width - take))
            w -= take
        pieces.append(piece)
    return pieces


def _two_level_tables(r1: int, r2: int, k: int) -> tuple[Table, ...]:
    """Manku's two-level split: choose ``r1 - k`` of ``r1`` blocks, then ``r2 - k`` of ``r2``
    blocks of the remaining bits (which still hold at most k differences)."""
    blocks = _blocks(r1)
    tables = []
    for combo1 in itertools.combinations(range(r1), r1 - k):
        lead = [blocks[j] for j in combo1]
        rest = [blocks[j] for j in range(r1) if j not in combo1]
        remaining = sum(w for _, w in rest)
        subs = _split_run(rest, equal_blocks(remaining, r2))
        for combo2 in itertools.combinations(range(r2), r2 - k):
            segs = list(lead)
            for j in combo2:
                segs.extend(subs[j])
            for j in range(r2):
                if j not in combo2:
                    segs.extend(subs[j])
            prefix = sum(w for _, w in lead) + sum(w for j in combo2 for _, w in subs[j])
            tables.append(Table(tuple(segs), prefix))
    return tuple(tables)


def _cost_signature(d: Design) -> tuple[int, int, float]:
    """(tables, probes, candidates per stored fingerprint): lower is better in every field."""
    return len(d.tables), d.probes_per_query(), d.expected_candidates(1)


@functools.cache
def _catalogue(k: int) -> tuple[Design, ...]:
    """Build (once per k) the catalogue described in :func:`designs_for_k`."""
    designs: list[Design] = []
    if k == 0:
        return (Design(0, "r1", _one_level_tables(1, 1)),)

    # One-level Manku designs: r blocks, a table per choice of the r - k blocks that must agree.
    r = k + 1
    while math.comb(r, k) <= _CATALOGUE_MAX_TABLES and r <= k + 6:
        designs.append(Design(k, f"r{r}", _one_level_tables(r, r - k)))
        r += 1

    # Two-level designs (Manku's 4x4 for k=3, generalised to r1, r2 in k+1..k+2).
    for r1, r2 in itertools.product((k + 1, k + 2), repeat=2):
        if math.comb(r1, k) * math.comb(r2, k) <= _CATALOGUE_MAX_TABLES:
            designs.append(Design(k, f"{r1}x{r2}", _two_level_tables(r1, r2, k)))

    # Multi-probe designs "r{r}f{f}": r blocks, f flips, and the widest prefix (most blocks per
    # table, within the table and probe limits) that still covers k. f >= k would make the full
    # 64-bit prefix exact (one table enumerating the query's Hamming ball): far too many probes.
    multi: list[Design] = []
    for f in range(1, min(k - 1, 5) + 1):
        for r in range(2, 17):
            for chosen in range(r - 1, 0, -1):
                n_tables = math.comb(r, chosen)
                min_prefix = _BITS // r * chosen
                if (
                    n_tables > _CATALOGUE_MAX_TABLES
                    or f >= min_prefix  # a probe would scan the whole table
                    or n_tables * count_probes(min_prefix, f) > _CATALOGUE_MAX_PROBES
                ):
                    continue
                tables = _one_level_tables(r, chosen, f)
                if evading_placement(tables, k) is None:
                    d = Design(k, f"r{r}f{f}", tables)
                    # Prefixes wider than 40 bits leave < n / 2**40 candidates per probe, nothing
                    # below 10**12 fingerprints: extra width then only multiplies the probes.
                    if d.probes_per_query() <= _CATALOGUE_MAX_PROBES and d.prefix_range()[0] <= _MULTI_MAX_PREFIX:
                        multi.append(d)
                    break  # narrower prefixes for this (r, f) only cost more
    # Keep the multi-probe designs that no other design beats on tables, probes and candidates.
    for d in multi:
        sig = _cost_signature(d)
        if not any(
            o is not d and all(a <= b for a, b in zip(_cost_signature(o), sig)) and _cost_signature(o) != sig for o in designs + multi
        ):
            designs.append(d)
    return tuple(designs)


def designs_for_k(k: int) -> list[Design]:
    """The catalogue for radius ``k`` (0..10): one-level, two-level and multi-probe designs.

    Deterministic order: one-level ``r{r}`` by r, two-level ``{r1}x{r2}``, multi-probe
    ``r{r}f{f}``. Raises DesignError for k outside 0..10.
    """
    _check_k(k)
    return list(_catalogue(k))


def _check_k(k: object) -> int:
    if not is_int(k):
        raise DesignError(f"k must be an int, got {k!r}")
    if k < 0:
        raise DesignError(f"k must be >= 0, got {k}")
    if k > MAX_K:
        raise DesignError(f"k={k}: k above {MAX_K} needs an exhaustive scan; no table design answers it exactly")
    return k


def flip_free_designs(k: int) -> list[Design]:
    """The catalogue designs for radius ``k`` without multi-probe flips: the ones whose tables a
    join can sort and group by prefix (flipped prefixes do not form groups)."""
    return [d for d in designs_for_k(k) if all(t.flips == 0 for t in d.tables)]


def design_for(k: int, expected_size: int | None = None, design: str | Design = "auto") -> Design:
    """The design a store of radius ``k`` should use.

    ``design="auto"`` picks the catalogue design of least :func:`design_cost` at ``expected_size``
    (10**6 when None); ties go to fewer tables, then catalogue order. ``design="auto-pairs"`` does
    the same by :func:`pairs_design_cost`, for a store that also computes all pairs (the
    near-duplicate pairs, clusters, dedup) after its loads. A name picks that
    catalogue design; a :class:`Design` is returned after checking that its k equals ``k``.
    Raises DesignError for k outside 0..10, an unknown name, or a design of another k.
    """
    _check_k(k)
    if expected_size is None:
        expected_size = DEFAULT_EXPECTED_SIZE
    if not is_int(expected_size) or expected_size < 0:
        raise DesignError(f"expected_size must be a non-negative int, got {expected_size!r}")
    if isinstance(design, Design):
        if design.k != k:
            raise DesignError(f"design {design.name!r} is built for k={design.k}, but the store asks for k={k}")
        # Rebuilding re-runs every check, in case the object was altered behind the frozen API.
        return Design.from_config(design.config())
    if not isinstance(design, str):
        raise DesignError(f"design must be 'auto', 'auto-pairs', a catalogue name or a Design, got {design!r}")
    catalogue = _catalogue(k)
    cost = AUTO_DESIGNS.get(design)
    if cost is not None:
        n = max(expected_size, 1)
        return min(enumerate(catalogue), key=lambda ic: (cost(ic[1], n), len(ic[1].tables), ic[0]))[1]
    for d in catalogue:
        if d.name == design:
            return d
    names = ", ".join(d.name for d in catalogue)
    raise DesignError(f"unknown design {design!r} for k={k}; the catalogue has: {names}")
