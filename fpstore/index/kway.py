"""Sorted uint64 sources merged in bounded memory: how a merge or a compaction reads the runs it
replaces, one table at a time, without holding any of them whole.

Each source yields ascending pieces (a decoded chunk of a run's table, say), optionally with a
value per key (table 0's document ids). :func:`merge_sorted` repeatedly takes, from every source,
the keys up to the smallest last key among the sources' current pieces: no later piece of any
source can hold a key below it, so what is taken is the next stretch of the merged order. Memory
is one piece per source and the stretch being handed out. :class:`Removal` takes given keys out
of such a stream, one copy per key given (the entries of deleted documents, found by id in
table 0, leave every other table this way).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from fpstore.errors import CorruptionError
from fpstore.index import search

__all__ = ["Piece", "Removal", "merge_sorted"]

#: Keys (uint64, ascending) and their values (uint64, same length), or None for keys alone.
Piece = tuple[np.ndarray, np.ndarray | None]


class _Head:
    """A source's current piece and how much of it has been handed out."""

    __slots__ = ("source", "keys", "values", "pos", "last")

    def __init__(self, source: Iterator[Piece]) -> None:
        self.source = source
        self.keys: np.ndarray | None = None
        self.values: np.ndarray | None = None
        self.pos = 0
        self.last: int | None = None

    def advance(self, what: str) -> bool:
        """Read the source's next non-empty piece; False once it is exhausted."""
        for keys, values in self.source:
            if not len(keys):
                continue
            if self.last is not None and int(keys[0]) < self.last:
                raise CorruptionError(f"{what}: a source's keys descend ({int(keys[0])} after {self.last}); the run is damaged")
            self.keys, self.values, self.pos, self.last = keys, values, 0, int(keys[-1])
            return True
        self.keys = self.values = None
        return False


def merge_sorted(sources: Iterable[Iterator[Piece]], what: str) -> Iterator[Piece]:
    """The merged ascending order of ``sources`` (iterators of ascending pieces), in pieces.

    Within each piece handed out, keys that compare equal keep the order of their sources, then
    their order within a source; equal keys that straddle a source's pieces may come in another
    order (a key goes with its own value whatever the order). Either every source gives values or
    none does. A source whose keys descend from one piece to the next raises
    :class:`CorruptionError` naming ``what``.
    """
    heads = []
    for source in sources:
        head = _Head(iter(source))
        if head.advance(what):
            heads.append(head)
    while heads:
        bound = min(h.last for h in heads if h.last is not None)
        keys_parts: list[np.ndarray] = []
        value_parts: list[np.ndarray] = []
        for h in heads:
            assert h.keys is not None
            end = h.pos + int(np.searchsorted(h.keys[h.pos :], np.uint64(bound), side="right"))
            if end > h.pos:
                keys_parts.append(h.keys[h.pos : end])
                if h.values is not None:
                    value_parts.append(h.values[h.pos : end])
                h.pos = end
        if value_parts and len(value_parts) != len(keys_parts):
            raise ValueError("merge_sorted: some sources give values and some do not")
        yield _merged(keys_parts, value_parts)
        heads = [h for h in heads if h.pos < len(h.keys) or h.advance(what)]  # type: ignore[arg-type]


def _merged(keys_parts: Sequence[np.ndarray], value_parts: Sequence[np.ndarray]) -> Piece:
    if len(keys_parts) == 1:
        return keys_parts[0], (value_parts[0] if value_parts else None)
    keys = np.concatenate(keys_parts)
    if not value_parts:
        return search.sort_u64(keys), None
    order = search.argsort_u64(keys)  # stable: equal keys stay in source order
    return keys[order], np.concatenate(value_parts)[order]


class Removal:
    """Takes ``keys`` (any order, repeats meaning as many copies) out of a stream of ascending
    pieces, one copy for each key given. :attr:`missing` counts the copies never found."""

    def __init__(self, keys: np.ndarray) -> None:
        self._unique, counts = np.unique(np.asarray(keys, np.uint64), return_counts=True)
        self._left = counts.astype(np.int64)
        self._next = 0  # keys below _unique[_next] are done with: later pieces start above them

    @property
    def missing(self) -> int:
        return int(self._left.sum())

    def apply(self, piece: np.ndarray) -> np.ndarray:
        """``piece`` (ascending, at or above every piece before it) less the copies to remove."""
        i = self._next
        if i >= len(self._unique) or not len(piece):
            return piece
        top = piece[-1]
        j = i + int(np.searchsorted(self._unique[i:], top, side="right"))
        # Keys below the piece's first were not in the stream (a damaged run): counted missing.
        targets, wanted = self._unique[i:j], self._left[i:j]
        starts = np.searchsorted(piece, targets, side="left")
        found = np.searchsorted(piece, targets, side="right") - starts
        taken = np.minimum(found, wanted)
        self._left[i:j] -= taken
        # The piece's last key may go on in the next piece; the ones below it are settled.
        self._next = j - 1 if j > i and self._left[j - 1] > 0 and targets[-1] == top else j
        total = int(taken.sum())
        if not total:
            return piece
        # Positions starts[x] .. starts[x] + taken[x] - 1, for every x, in one vector.
        offsets = np.arange(total) - np.repeat(np.cumsum(taken) - taken, taken)
        keep = np.ones(len(piece), dtype=bool)
        keep[np.repeat(starts, taken) + offsets] = False
        return piece[keep]
