"""Tables and designs: how the 64 fingerprint bits are permuted into table keys, and why that is exact.

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

The catalogue of designs and the choice among them live in :mod:`fpstore.index.design`, which
re-exports :class:`Table`, :class:`Design` and :data:`MAX_K`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np

from fpstore.errors import DesignError, InputError

__all__ = ["MAX_K", "Design", "Table", "count_probes", "evading_placement", "is_int"]

#: Largest query radius any design answers exactly; above it only an exhaustive scan is exact.
MAX_K: int = 10

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


def is_int(value: object) -> TypeGuard[int]:
    """True for a plain int (bool is an int subclass but never a valid field here)."""
    return isinstance(value, int) and not isinstance(value, bool)


def count_probes(prefix_bits: int, flips: int) -> int:
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
        if not is_int(self.prefix_bits) or not 0 <= self.prefix_bits <= _BITS:
            raise DesignError(f"prefix_bits must be an int in 0..64, got {self.prefix_bits!r}")
        if not is_int(self.flips) or not 0 <= self.flips <= self.prefix_bits:
            raise DesignError(f"flips must be an int in 0..prefix_bits ({self.prefix_bits}), got {self.flips!r}")
        if count_probes(self.prefix_bits, self.flips) > _MAX_PROBES_PER_QUERY:
            raise DesignError(
                f"prefix_bits={self.prefix_bits} with flips={self.flips} needs "
                f"{count_probes(self.prefix_bits, self.flips):,} probes per query "
                f"(limit {_MAX_PROBES_PER_QUERY:,}); use fewer flips or more tables"
            )

    @property
    def n_probes(self) -> int:
        """Prefixes one query visits in this table: ``sum(C(prefix_bits, i) for i <= flips)``."""
        return count_probes(self.prefix_bits, self.flips)

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

    def moves(self) -> tuple[tuple[int, int, int], ...]:
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

    def permute(self, values: np.ndarray) -> np.ndarray:
        """Permuted keys of ``values`` (uint64 array, any shape) for this table: a new uint64
        array whose leading bits are this table's segments in key order. Raises InputError when
        ``values`` is not a uint64 array. (:meth:`Design.permute` does the same by table index.)"""
        return _apply_moves(values, self.moves(), inverse=False)


def _apply_moves(values: np.ndarray, moves: tuple[tuple[int, int, int], ...], inverse: bool) -> np.ndarray:
    """``values`` through ``moves`` (:meth:`Table.moves`), or back when ``inverse``."""
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
        if not is_int(start) or not is_int(width):
            raise DesignError(f"{where}[{i}] must hold two ints, got {seg!r}")
        if not (0 <= start < _BITS and 1 <= width <= _BITS and start + width <= _BITS):
            raise DesignError(f"{where}[{i}] = ({start}, {width}) is outside bits 0..63 (need 0 <= start, 1 <= width, start + width <= 64)")
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


def evading_placement(tables: Sequence[Table], k: int) -> list[int] | None:
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
            raise DesignError(f"design too irregular to prove exact within {_COVER_BUDGET:,} steps; use a catalogue design")
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
    _moves: tuple[tuple[tuple[int, int, int], ...], ...] = field(init=False, repr=False, compare=False)
    _cover_cache: dict[int, bool] = field(init=False, repr=False, compare=False)
    _flip_cache: dict[int, tuple[int, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not is_int(self.k) or not 0 <= self.k <= MAX_K:
            raise DesignError(f"k must be an int in 0..{MAX_K}, got {self.k!r} (k above {MAX_K} needs an exhaustive scan)")
        if not isinstance(self.name, str) or not 1 <= len(self.name) <= _MAX_NAME_LEN or not self.name.isprintable():
            raise DesignError(f"design name must be a printable str of 1..{_MAX_NAME_LEN} chars, got {self.name!r}")
        if not isinstance(self.tables, (list, tuple)) or not self.tables:
            raise DesignError(f"design {self.name!r}: tables must be a non-empty list of Table")
        if len(self.tables) > _MAX_TABLES:
            raise DesignError(f"design {self.name!r}: {len(self.tables)} tables exceed the limit of {_MAX_TABLES}")
        for i, t in enumerate(self.tables):
            if not isinstance(t, Table):
                raise DesignError(f"design {self.name!r}: tables[{i}] is not a Table: {t!r}")
        object.__setattr__(self, "tables", tuple(self.tables))
        moves = tuple(t.moves() for t in self.tables)
        if moves[0] != ((0, _FULL, 0),):
            raise DesignError(
                f"design {self.name!r}: table 0 must be the identity permutation "
                f"(its segments must run from bit 63 down to bit 0), got {self.tables[0].segments}"
            )
        probes = sum(t.n_probes for t in self.tables)
        if probes > _MAX_PROBES_PER_QUERY:
            raise DesignError(f"design {self.name!r}: {probes:,} probes per query exceed the limit of {_MAX_PROBES_PER_QUERY:,}")
        object.__setattr__(self, "_moves", moves)
        object.__setattr__(self, "_cover_cache", {})
        object.__setattr__(self, "_flip_cache", {})
        evading = evading_placement(self.tables, self.k)
        if evading is not None:
            bits = _placement_bits(self.tables, evading)
            raise DesignError(
                f"design {self.name!r} is not exact at k={self.k}: fingerprints differing in bits {bits} meet in no table's probe"
            )
        self._cover_cache[self.k] = True

    # -- permutation ---------------------------------------------------------------------------

    def _check_table(self, table: int) -> int:
        """Return ``table`` if it indexes a table, else raise InputError."""
        if not is_int(table) or not 0 <= table < len(self.tables):
            raise InputError(f"table index must be an int in 0..{len(self.tables) - 1}, got {table!r}")
        return table

    def permute(self, fps: np.ndarray, table: int) -> np.ndarray:
        """Permuted keys of ``fps`` (uint64 array, any shape) for ``table``: a new uint64 array.

        Raises InputError when ``fps`` is not a uint64 array (a signed array would silently
        reinterpret its sign bit) or ``table`` is out of range.
        """
        return _apply_moves(fps, self._moves[self._check_table(table)], inverse=False)

    def unpermute(self, keys: np.ndarray, table: int) -> np.ndarray:
        """Inverse of :meth:`permute`: fingerprints (uint64) from ``table``'s permuted keys."""
        return _apply_moves(keys, self._moves[self._check_table(table)], inverse=True)

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

    def moves(self, table: int) -> tuple[tuple[int, int, int], ...]:
        """:meth:`Table.moves` of ``table`` (computed once, when the design is built; unchecked)."""
        return self._moves[table]

    # -- probing -------------------------------------------------------------------------------

    def prefix_masks(self) -> tuple[int, ...]:
        """:meth:`Table.prefix_mask` of each table: the fingerprint bits its probed prefix holds."""
        return tuple(t.prefix_mask() for t in self.tables)

    def flip_masks(self, table: int) -> tuple[int, ...]:
        """XOR patterns of <= flips bits over a ``prefix_bits``-bit prefix (cached per table;
        ``table`` unchecked), 0 first."""
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
        prefixes = sorted(q ^ m for m in self.flip_masks(table))
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
        if not is_int(k) or k < 0:
            raise DesignError(f"k must be a non-negative int, got {k!r}")
        k = min(k, _BITS)
        cached = self._cover_cache.get(k)
        if cached is None:
            cached = evading_placement(self.tables, k) is None
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
    def from_config(cls, cfg: dict[str, Any]) -> Design:
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
                raise DesignError(f"design config field 'tables[{i}]' must be a dict with keys {sorted(table_keys)}, got {tc!r}")
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
        text = f"{self.name} (k={self.k}): {len(self.tables)} tables, prefix {prefix} bits, {flip_txt}, {probes} probes/query"
        if n is not None:
            cand = self.expected_candidates(n)
            text += f", ~{cand / probes:.3g} candidates/probe ({cand:.3g}/query) at n={n:,}"
        return text
