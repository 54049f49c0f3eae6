"""Table designs: how the 64 fingerprint bits are permuted into table keys, and why that is exact.

A design is a list of tables (Manku, Jain, Das Sarma, WWW 2007, section 3). Each table stores every
fingerprint under a *permuted key*: the fingerprint's bits rearranged by segments, so that a chosen
set of bit positions leads. A query probes each table for the stored keys whose leading
``prefix_bits`` equal the query's (or, with ``flips > 0``, lie within ``flips`` bits of them), and
the store then verifies every candidate with a popcount. The design is *exact* for radius ``k``
when every pair of fingerprints within Hamming distance ``k`` meets in at least one probe; that is
what :meth:`Design.covers` proves, by exhaustive arithmetic rather than sampling.

Conventions used throughout:

* Fingerprints and permuted keys are unsigned 64-bit integers (``numpy.uint64`` arrays or plain
  ``int`` in ``[0, 2**64)``). Byte order plays no part here: keys are numbers; the storage layer
  writes them big-endian so that numeric order is byte order and a prefix is a key range.
* Bit ``0`` is the least significant bit (``value & 1``). A segment ``(start, width)`` is the
  fingerprint bits ``start .. start + width - 1``; a table lists its segments most significant
  first, in the order they appear in the permuted key.
* Table 0 of every design is the identity permutation; the store relies on it (it can answer an
  exact lookup, or recover a fingerprint, from table 0 without unpermuting).

The catalogue (:func:`designs_for_k`) holds, for each ``k`` in ``0 .. 10``: one-level Manku designs
(``"r5"``), two-level designs (``"4x4"``) and multi-probe designs (``"r2f1"``). :func:`design_for`
picks one by the cost model documented there and in ``docs/designs.md``.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from fpstore.errors import DesignError, InputError

__all__ = [
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

#: Largest query radius any design answers exactly; above it only an exhaustive scan is exact.
MAX_K: int = 10
#: Expected store size assumed by :func:`design_for` when the caller gives none.
DEFAULT_EXPECTED_SIZE: int = 10**6

_BITS = 64
_FULL = (1 << _BITS) - 1

# Limits on designs read from untrusted configs. They bound the work a hostile header can cause on
# open (probe enumeration, the coverage proof) while leaving room far beyond the catalogue.
_MAX_TABLES = 256
_MAX_PROBES_PER_QUERY = 1 << 20
_MAX_NAME_LEN = 64
# Node budget of the coverage search: the catalogue's hardest design (8x8, k=7) needs 4,616
# nodes; a hostile 256-table header reaches the budget in about 10 s and is refused.
_COVER_BUDGET = 200_000

# Catalogue limits: "~64 tables" and a probe count a Python loop can still enumerate per query.
_CATALOGUE_MAX_TABLES = 64
_CATALOGUE_MAX_PROBES = 20_000
_MULTI_MAX_PREFIX = 40

# Cost model (relative units, one B-tree / run-index seek = 1). See design_cost().
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


def _is_int(value: object) -> bool:
    """True for a plain int (bool is an int subclass but never a valid field here)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _n_probes(prefix_bits: int, flips: int) -> int:
    """Prefixes within ``flips`` bits of a ``prefix_bits``-bit prefix: sum C(p, i) for i <= f."""
    return sum(math.comb(prefix_bits, i) for i in range(flips + 1))


@dataclass(frozen=True)
class Table:
    """One permuted table: its key layout, exact-match prefix width and multi-probe flips.

    ``segments`` are ``(start_bit, width)`` runs of the fingerprint in the order they appear in the
    permuted key, most significant first; together they cover bits 0..63 exactly once. The
    permuted key's leading ``prefix_bits`` bits are probed; ``flips > 0`` makes a probe visit every
    prefix within ``flips`` bits of the query's. Construction validates all of this and raises
    :class:`~fpstore.errors.DesignError`; lists are accepted and normalised to tuples.
    """

    segments: tuple[tuple[int, int], ...]
    prefix_bits: int
    flips: int = 0

    def __post_init__(self) -> None:
        segs = _validate_segments(self.segments, "segments")
        object.__setattr__(self, "segments", segs)
        if not _is_int(self.prefix_bits) or not 0 <= self.prefix_bits <= _BITS:
            raise DesignError(f"prefix_bits must be an int in 0..64, got {self.prefix_bits!r}")
        if not _is_int(self.flips) or not 0 <= self.flips <= self.prefix_bits:
            raise DesignError(
                f"flips must be an int in 0..prefix_bits ({self.prefix_bits}), got {self.flips!r}"
            )
        if _n_probes(self.prefix_bits, self.flips) > _MAX_PROBES_PER_QUERY:
            raise DesignError(
                f"prefix_bits={self.prefix_bits} with flips={self.flips} needs "
                f"{_n_probes(self.prefix_bits, self.flips):,} probes per query "
                f"(limit {_MAX_PROBES_PER_QUERY:,}); use fewer flips or more tables"
            )

    @property
    def n_probes(self) -> int:
        """Prefixes one query visits in this table: ``sum(C(prefix_bits, i) for i <= flips)``."""
        return _n_probes(self.prefix_bits, self.flips)

    def prefix_mask(self) -> int:
        """The fingerprint bit positions that land in the probed prefix, as a 64-bit mask."""
        mask = 0
        offset = 0  # bits of the permuted key already placed above this segment
        for start, width in self.segments:
            take = min(width, max(0, self.prefix_bits - offset))
            if take:
                # The prefix takes the *top* `take` bits of the segment (keys are MSB first).
                mask |= ((1 << take) - 1) << (start + width - take)
            offset += width
        return mask

    def _moves(self) -> tuple[tuple[int, int, int], ...]:
        """``(src_shift, mask, dst_shift)`` triples: ``key |= ((fp >> src) & mask) << dst``.

        Segments that are adjacent in both the fingerprint and the key are merged, so the identity
        permutation (however it is split into segments) becomes the single move ``(0, ~0, 0)``.
        """
        merged: list[list[int]] = []  # [start, width] in key order
        for start, width in self.segments:
            if merged and start + width == merged[-1][0]:
                # Next key bits continue directly below the previous run in the fingerprint too.
                merged[-1] = [start, merged[-1][1] + width]
            else:
                merged.append([start, width])
        moves = []
        top = _BITS
        for start, width in merged:
            top -= width
            moves.append((start, (1 << width) - 1, top))
        return tuple(moves)


def _validate_segments(segments: object, where: str) -> tuple[tuple[int, int], ...]:
    """Check that ``segments`` is a sequence of ``(start, width)`` int pairs tiling bits 0..63."""
    if not isinstance(segments, (list, tuple)):
        raise DesignError(f"{where} must be a list of [start_bit, width] pairs, got {segments!r}")
    if not 1 <= len(segments) <= _BITS:
        raise DesignError(f"{where} must hold 1..64 segments, got {len(segments)}")
    out: list[tuple[int, int]] = []
    covered = 0
    for i, seg in enumerate(segments):
        if not isinstance(seg, (list, tuple)) or len(seg) != 2:
            raise DesignError(f"{where}[{i}] must be a [start_bit, width] pair, got {seg!r}")
        start, width = seg
        if not _is_int(start) or not _is_int(width):
            raise DesignError(f"{where}[{i}] must hold two ints, got {seg!r}")
        if not (0 <= start < _BITS and 1 <= width <= _BITS and start + width <= _BITS):
            raise DesignError(
                f"{where}[{i}] = ({start}, {width}) is outside bits 0..63 "
                "(need 0 <= start, 1 <= width, start + width <= 64)"
            )
        mask = ((1 << width) - 1) << start
        if covered & mask:
            raise DesignError(f"{where}[{i}] = ({start}, {width}) overlaps an earlier segment")
        covered |= mask
        out.append((start, width))
    if covered != _FULL:
        missing = [b for b in range(_BITS) if not covered >> b & 1]
        raise DesignError(f"{where} leave fingerprint bits {missing} uncovered")
    return tuple(out)


# --------------------------------------------------------------------------------------------
# Coverage proof
# --------------------------------------------------------------------------------------------


def _atoms(tables: Sequence[Table]) -> tuple[list[int], list[list[int]], list[list[int]]]:
    """Group the 64 bit positions by the set of tables whose prefix holds them.

    Bits in the same group ("atom") are interchangeable for coverage: a placement of differing
    bits matters only through how many fall in each atom. Bits in no prefix never hurt and are
    dropped. Returns (atom sizes, tables of each atom, atoms of each table).
    """
    masks = [t.prefix_mask() for t in tables]
    groups: dict[int, int] = {}
    for bit in range(_BITS):
        sig = 0
        for ti, m in enumerate(masks):
            if m >> bit & 1:
                sig |= 1 << ti
        if sig:
            groups[sig] = groups.get(sig, 0) + 1
    sizes: list[int] = []
    atom_tables: list[list[int]] = []
    table_atoms: list[list[int]] = [[] for _ in tables]
    for sig, size in sorted(groups.items()):
        a = len(sizes)
        sizes.append(size)
        members = [ti for ti in range(len(tables)) if sig >> ti & 1]
        atom_tables.append(members)
        for ti in members:
            table_atoms[ti].append(a)
    return sizes, atom_tables, table_atoms


def _evading_placement(tables: Sequence[Table], k: int) -> list[int] | None:
    """Find differing-bit counts per atom, summing to <= k, that give every table > flips bits.

    Returns the counts per atom (a counterexample to exactness), or None when none exists, i.e.
    when the tables cover radius k. Exhaustive over count vectors, organised as a branching search:
    any evading placement must put one more bit into the prefix of each table not yet evaded, so
    it branches on the atoms of the undefeated table with the fewest options; visited count
    vectors are memoised, and a branch stops once some table needs more bits than remain.
    Raises DesignError when the search exceeds its node budget (only a hostile config can).
    """
    sizes, atom_tables, table_atoms = _atoms(tables)
    need = [t.flips + 1 for t in tables]  # bits in a table's prefix that make it miss the pair
    hits = [0] * len(tables)
    counts = [0] * len(sizes)
    seen: set[tuple[int, ...]] = set()

    def search(remaining: int) -> bool:
        state = tuple(counts)
        if state in seen:
            return False
        seen.add(state)
        if len(seen) > _COVER_BUDGET:
            raise DesignError(
                f"design too irregular to prove exact within {_COVER_BUDGET:,} steps; "
                "use a catalogue design"
            )
        best: list[int] | None = None
        worst_deficit = 0
        for ti, atoms in enumerate(table_atoms):
            deficit = need[ti] - hits[ti]
            if deficit <= 0:
                continue
            options = [a for a in atoms if counts[a] < sizes[a]]
            if sum(sizes[a] - counts[a] for a in options) < deficit:
                return False  # this table can never be evaded from here
            worst_deficit = max(worst_deficit, deficit)
            if best is None or len(options) < len(best):
                best = options
        if best is None:
            return True  # every table evaded
        if worst_deficit > remaining:
            return False
        for a in best:
            counts[a] += 1
            for ti in atom_tables[a]:
                hits[ti] += 1
            found = search(remaining - 1)
            if found:
                return True
            counts[a] -= 1
            for ti in atom_tables[a]:
                hits[ti] -= 1
        return False

    return list(counts) if search(min(k, _BITS)) else None


def _placement_bits(tables: Sequence[Table], counts: list[int]) -> list[int]:
    """Concrete bit positions for an evading count vector (lowest bits of each atom)."""
    masks = [t.prefix_mask() for t in tables]
    sigs: dict[int, list[int]] = {}
    for bit in range(_BITS):
        sig = sum(1 << ti for ti, m in enumerate(masks) if m >> bit & 1)
        if sig:
            sigs.setdefault(sig, []).append(bit)
    bits: list[int] = []
    for (_, members), c in zip(sorted(sigs.items()), counts):
        bits.extend(members[:c])
    return sorted(bits)


# --------------------------------------------------------------------------------------------
# Design
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Design:
    """A set of permuted tables that answers every query of radius <= ``k`` exactly.

    Construction validates the design completely (types, each table's segments, table 0 being the
    identity, the probe budget, and the coverage proof ``covers(k)``) and raises
    :class:`~fpstore.errors.DesignError` otherwise: a ``Design`` object is always exact for its
    ``k``. Any radius ``k' <= k`` is exact on the same tables.
    """

    k: int
    name: str
    tables: tuple[Table, ...]
    _moves: tuple[tuple[tuple[int, int, int], ...], ...] = field(
        init=False, repr=False, compare=False
    )
    _cover_cache: dict[int, bool] = field(init=False, repr=False, compare=False)
    _flip_cache: dict[int, tuple[int, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not _is_int(self.k) or not 0 <= self.k <= MAX_K:
            raise DesignError(
                f"k must be an int in 0..{MAX_K}, got {self.k!r} "
                f"(k above {MAX_K} needs an exhaustive scan)"
            )
        if (
            not isinstance(self.name, str)
            or not 1 <= len(self.name) <= _MAX_NAME_LEN
            or not self.name.isprintable()
        ):
            raise DesignError(
                f"design name must be a printable str of 1..{_MAX_NAME_LEN} chars, "
                f"got {self.name!r}"
            )
        if not isinstance(self.tables, (list, tuple)) or not self.tables:
            raise DesignError(f"design {self.name!r}: tables must be a non-empty list of Table")
        if len(self.tables) > _MAX_TABLES:
            raise DesignError(
                f"design {self.name!r}: {len(self.tables)} tables exceed the limit of {_MAX_TABLES}"
            )
        for i, t in enumerate(self.tables):
            if not isinstance(t, Table):
                raise DesignError(f"design {self.name!r}: tables[{i}] is not a Table: {t!r}")
        object.__setattr__(self, "tables", tuple(self.tables))
        moves = tuple(t._moves() for t in self.tables)
        if moves[0] != ((0, _FULL, 0),):
            raise DesignError(
                f"design {self.name!r}: table 0 must be the identity permutation "
                f"(its segments must run from bit 63 down to bit 0), got {self.tables[0].segments}"
            )
        probes = sum(t.n_probes for t in self.tables)
        if probes > _MAX_PROBES_PER_QUERY:
            raise DesignError(
                f"design {self.name!r}: {probes:,} probes per query exceed the limit "
                f"of {_MAX_PROBES_PER_QUERY:,}"
            )
        object.__setattr__(self, "_moves", moves)
        object.__setattr__(self, "_cover_cache", {})
        object.__setattr__(self, "_flip_cache", {})
        evading = _evading_placement(self.tables, self.k)
        if evading is not None:
            bits = _placement_bits(self.tables, evading)
            raise DesignError(
                f"design {self.name!r} is not exact at k={self.k}: fingerprints differing in "
                f"bits {bits} meet in no table's probe"
            )
        self._cover_cache[self.k] = True

    # -- permutation ---------------------------------------------------------------------------

    def _check_table(self, table: int) -> int:
        """Return ``table`` if it indexes a table, else raise InputError."""
        if not _is_int(table) or not 0 <= table < len(self.tables):
            raise InputError(
                f"table index must be an int in 0..{len(self.tables) - 1}, got {table!r}"
            )
        return table

    def permute(self, fps: np.ndarray, table: int) -> np.ndarray:
        """Permuted keys of ``fps`` (uint64 array, any shape) for ``table``: a new uint64 array.

        Raises InputError when ``fps`` is not a uint64 array (a signed array would silently
        reinterpret its sign bit) or ``table`` is out of range.
        """
        return self._apply(fps, self._moves[self._check_table(table)], inverse=False)

    def unpermute(self, keys: np.ndarray, table: int) -> np.ndarray:
        """Inverse of :meth:`permute`: fingerprints (uint64) from ``table``'s permuted keys."""
        return self._apply(keys, self._moves[self._check_table(table)], inverse=True)

    @staticmethod
    def _apply(
        values: np.ndarray, moves: tuple[tuple[int, int, int], ...], inverse: bool
    ) -> np.ndarray:
        if not isinstance(values, np.ndarray) or values.dtype != np.uint64:
            got = values.dtype if isinstance(values, np.ndarray) else type(values).__name__
            raise InputError(f"expected a numpy uint64 array, got {got}")
        if len(moves) == 1:  # identity (every move tuple of one run is (0, ~0, 0))
            return values.copy()
        out = np.zeros_like(values)
        for src, mask, dst in moves:
            if inverse:
                src, dst = dst, src
            out |= ((values >> np.uint64(src)) & np.uint64(mask)) << np.uint64(dst)
        return out

    def permute_one(self, fp: int, table: int) -> int:
        """Permuted key (int) of one fingerprint ``fp`` for ``table``.

        The hot path of single queries: neither ``fp`` (an int in ``[0, 2**64)``) nor ``table``
        is checked here; the caller validates once.
        """
        key = 0
        for src, mask, dst in self._moves[table]:
            key |= ((fp >> src) & mask) << dst
        return key

    def unpermute_one(self, key: int, table: int) -> int:
        """Inverse of :meth:`permute_one` (same unchecked contract)."""
        fp = 0
        for src, mask, dst in self._moves[table]:
            fp |= ((key >> dst) & mask) << src
        return fp

    # -- probing -------------------------------------------------------------------------------

    def _flip_masks(self, table: int) -> tuple[int, ...]:
        """XOR patterns of <= flips bits over a ``prefix_bits``-bit prefix (cached per table)."""
        masks = self._flip_cache.get(table)
        if masks is None:
            t = self.tables[table]
            out = [0]
            for f in range(1, t.flips + 1):
                for combo in itertools.combinations(range(t.prefix_bits), f):
                    out.append(sum(1 << b for b in combo))
            masks = tuple(out)
            self._flip_cache[table] = masks
        return masks

    def probe_prefixes(self, key: int, table: int) -> list[tuple[int, int]]:
        """Inclusive key ranges ``[(lo, hi)]`` of ``table`` to scan for a query whose permuted key
        is ``key``.

        One range without flips; with flips, one per prefix within ``flips`` bits of the query's
        (``Table.n_probes`` of them), disjoint and sorted ascending by ``lo``.
        """
        t = self.tables[self._check_table(table)]
        p = t.prefix_bits
        if p == 0:
            return [(0, _FULL)]
        shift = _BITS - p
        low = (1 << shift) - 1
        q = key >> shift
        if t.flips == 0:
            lo = q << shift
            return [(lo, lo | low)]
        prefixes = sorted(q ^ m for m in self._flip_masks(table))
        return [(x << shift, (x << shift) | low) for x in prefixes]

    def probes_per_query(self) -> int:
        """Probes (key ranges) one query visits, summed over all tables."""
        return sum(t.n_probes for t in self.tables)

    def expected_candidates(self, n: int) -> float:
        """Expected candidates per query over all tables and probes, for ``n`` uniform random fps.

        Each probe covers ``2**(64 - prefix_bits)`` of the ``2**64`` keys, so it holds
        ``n / 2**prefix_bits`` entries on average; real fingerprints cluster and give more.
        """
        return float(sum(t.n_probes * n / 2.0**t.prefix_bits for t in self.tables))

    # -- exactness -------------------------------------------------------------------------------

    def covers(self, k: int) -> bool:
        """True iff EVERY placement of <= ``k`` differing bits leaves some table with <= flips
        differing bits in its prefix, i.e. the design answers radius ``k`` exactly.

        Computed exactly (not sampled) over the count vectors of differing bits per atom (bit
        positions grouped by the tables whose prefix holds them). ``k >= 64`` is the same as 64.
        """
        if not _is_int(k) or k < 0:
            raise DesignError(f"k must be a non-negative int, got {k!r}")
        k = min(k, _BITS)
        cached = self._cover_cache.get(k)
        if cached is None:
            cached = _evading_placement(self.tables, k) is None
            self._cover_cache[k] = cached
        return cached

    # -- persistence and display ------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """A plain dict (ints, strs, lists; msgpack-able) that fully describes the design."""
        return {
            "k": self.k,
            "name": self.name,
            "tables": [
                {
                    "segments": [[s, w] for s, w in t.segments],
                    "prefix_bits": t.prefix_bits,
                    "flips": t.flips,
                }
                for t in self.tables
            ],
        }

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> "Design":
        """Rebuild a design from :meth:`config` output read from disk (untrusted).

        Validates every field (types, ranges, segments tiling bits 0..63, table 0 the identity,
        coverage at ``k``) and raises :class:`~fpstore.errors.DesignError` naming the bad field.
        """
        if not isinstance(cfg, dict):
            raise DesignError(f"design config must be a dict, got {type(cfg).__name__}")
        expected = {"k", "name", "tables"}
        if set(cfg) != expected:
            missing = sorted(expected - set(cfg), key=str)
            extra = sorted(set(cfg) - expected, key=str)
            raise DesignError(f"design config keys: missing {missing}, unknown {extra}")
        tables_cfg = cfg["tables"]
        if not isinstance(tables_cfg, (list, tuple)) or not tables_cfg:
            raise DesignError("design config field 'tables' must be a non-empty list")
        if len(tables_cfg) > _MAX_TABLES:
            raise DesignError(f"design config holds {len(tables_cfg)} tables (limit {_MAX_TABLES})")
        tables = []
        table_keys = {"segments", "prefix_bits", "flips"}
        for i, tc in enumerate(tables_cfg):
            if not isinstance(tc, dict) or set(tc) != table_keys:
                raise DesignError(
                    f"design config field 'tables[{i}]' must be a dict with keys "
                    f"{sorted(table_keys)}, got {tc!r}"
                )
            try:
                tables.append(Table(tc["segments"], tc["prefix_bits"], tc["flips"]))
            except DesignError as exc:
                raise DesignError(f"design config field 'tables[{i}]': {exc}") from None
        return cls(k=cfg["k"], name=cfg["name"], tables=tuple(tables))

    def prefix_range(self) -> tuple[int, int]:
        """Smallest and largest prefix width over the tables."""
        widths = [t.prefix_bits for t in self.tables]
        return min(widths), max(widths)

    def describe(self, n: int | None = None) -> str:
        """One line: name, k, tables, prefix bits, flips, probes, and (given n) candidates."""
        lo, hi = self.prefix_range()
        prefix = f"{lo}" if lo == hi else f"{lo}-{hi}"
        flips = sorted({t.flips for t in self.tables})
        flip_txt = "no flips" if flips == [0] else "flips " + "/".join(map(str, flips))
        probes = self.probes_per_query()
        text = (
            f"{self.name} (k={self.k}): {len(self.tables)} tables, prefix {prefix} bits, "
            f"{flip_txt}, {probes} probes/query"
        )
        if n is not None:
            cand = self.expected_candidates(n)
            text += (
                f", ~{cand / probes:.3g} candidates/probe ({cand:.3g}/query) at n={n:,}"
            )
        return text


# --------------------------------------------------------------------------------------------
# Catalogue
# --------------------------------------------------------------------------------------------


def _equal_blocks(total: int, r: int) -> list[int]:
    """Widths of ``r`` contiguous blocks splitting ``total`` bits as equally as possible."""
    base, extra = divmod(total, r)
    return [base + 1 if j < extra else base for j in range(r)]


def _blocks(r: int) -> list[tuple[int, int]]:
    """The ``r`` blocks of the 64 bits as ``(start, width)``, most significant block first."""
    out = []
    top = _BITS
    for w in _equal_blocks(_BITS, r):
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


def _split_run(
    segments: Sequence[tuple[int, int]], widths: Iterable[int]
) -> list[list[tuple[int, int]]]:
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
        subs = _split_run(rest, _equal_blocks(remaining, r2))
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


@functools.lru_cache(maxsize=None)
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
                    or n_tables * _n_probes(min_prefix, f) > _CATALOGUE_MAX_PROBES
                ):
                    continue
                tables = _one_level_tables(r, chosen, f)
                if _evading_placement(tables, k) is None:
                    d = Design(k, f"r{r}f{f}", tables)
                    # Prefixes wider than 40 bits leave < n / 2**40 candidates per probe, nothing
                    # below 10**12 fingerprints: extra width then only multiplies the probes.
                    if (
                        d.probes_per_query() <= _CATALOGUE_MAX_PROBES
                        and d.prefix_range()[0] <= _MULTI_MAX_PREFIX
                    ):
                        multi.append(d)
                    break  # narrower prefixes for this (r, f) only cost more
    # Keep the multi-probe designs that no other design beats on tables, probes and candidates.
    for d in multi:
        sig = _cost_signature(d)
        if not any(
            o is not d
            and all(a <= b for a, b in zip(_cost_signature(o), sig))
            and _cost_signature(o) != sig
            for o in designs + multi
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
    if not _is_int(k):
        raise DesignError(f"k must be an int, got {k!r}")
    if k < 0:
        raise DesignError(f"k must be >= 0, got {k}")
    if k > MAX_K:
        raise DesignError(
            f"k={k}: k above {MAX_K} needs an exhaustive scan; no table design answers it exactly"
        )
    return k


def design_cost(design: Design, n: int) -> float:
    """Cost model used by :func:`design_for`, in relative units (one probe = 1).

    ``probes * C_PROBE + expected_candidates(n) * C_CANDIDATE + tables * C_TABLE
    + max(0, tables - 20) * C_TABLE_CROWD``. Probes are seeks, candidates are sequential reads
    plus a popcount; the table terms stand for space and write amplification (each table stores
    every fingerprint again), steeper beyond 20 tables.
    """
    tables = len(design.tables)
    return (
        design.probes_per_query() * C_PROBE
        + design.expected_candidates(n) * C_CANDIDATE
        + tables * C_TABLE
        + max(0, tables - _CROWD_FREE_TABLES) * C_TABLE_CROWD
    )


def design_for(
    k: int, expected_size: int | None = None, design: str | Design = "auto"
) -> Design:
    """The design a store of radius ``k`` should use.

    ``design="auto"`` picks the catalogue design of least :func:`design_cost` at ``expected_size``
    (10**6 when None); ties go to fewer tables, then catalogue order. A name picks that
    catalogue design; a :class:`Design` is returned after checking that its k equals ``k``.
    Raises DesignError for k outside 0..10, an unknown name, or a design of another k.
    """
    _check_k(k)
    if expected_size is None:
        expected_size = DEFAULT_EXPECTED_SIZE
    if not _is_int(expected_size) or expected_size < 0:
        raise DesignError(f"expected_size must be a non-negative int, got {expected_size!r}")
    if isinstance(design, Design):
        if design.k != k:
            raise DesignError(
                f"design {design.name!r} is built for k={design.k}, but the store asks for k={k}"
            )
        # Rebuilding re-runs every check, in case the object was altered behind the frozen API.
        return Design.from_config(design.config())
    if not isinstance(design, str):
        raise DesignError(f"design must be 'auto', a catalogue name or a Design, got {design!r}")
    catalogue = _catalogue(k)
    if design == "auto":
        n = max(expected_size, 1)
        return min(
            enumerate(catalogue), key=lambda ic: (design_cost(ic[1], n), len(ic[1].tables), ic[0])
        )[1]
    for d in catalogue:
        if d.name == design:
            return d
    names = ", ".join(d.name for d in catalogue)
    raise DesignError(f"unknown design {design!r} for k={k}; the catalogue has: {names}")
