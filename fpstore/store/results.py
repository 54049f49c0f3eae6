"""What the store returns: matches, documents, add verdicts and clusters, and their order."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import numpy as np

from fpstore.store.keys import Key

__all__ = ["AddResult", "Cluster", "Document", "Match", "key_order", "plain_results", "sort_matches"]


class Match(NamedTuple):
    """A stored document within the query radius. ``similarity`` is the Jaccard similarity its
    verification sketch and the query's estimate (stores whose pipeline has ``sketch_bits``, for
    queries that carry a sketch: texts; otherwise None)."""

    key: Key
    distance: int
    fingerprint: int
    id: int
    similarity: float | None = None


@dataclass(frozen=True)
class Document:
    """A stored document: its key, id, fingerprint, content hash and canonical key."""

    key: Key
    id: int
    fingerprint: int
    content_hash: bytes | None
    canonical: Key | None
    short: bool


@dataclass(frozen=True)
class AddResult:
    """What :meth:`Store.add` did and found.

    ``id`` is the document's id (None when ``on_duplicate="skip"`` skipped it); ``exact_duplicate_of``
    the key of an earlier document with the same content hash; ``near_duplicates`` the matches within
    the store's k (exact duplicates included, the document itself excluded); ``canonical`` the key of
    the document this one is a variant of (None when it is its own canonical).
    """

    id: int | None
    key: Key
    fingerprint: int
    short: bool
    exact_duplicate_of: Key | None
    near_duplicates: list[Match]
    canonical: Key | None

    @property
    def duplicate_of(self) -> Key | None:
        """The key of the exact or nearest duplicate, or None for a new document."""
        if self.exact_duplicate_of is not None:
            return self.exact_duplicate_of
        return self.near_duplicates[0].key if self.near_duplicates else None


_add_result_fields = operator.attrgetter(*(f.name for f in fields(AddResult)))


def plain_results(results: Sequence[AddResult]) -> tuple[Any, ...]:
    """``results`` as one flat tuple of their fields, each list of matches as its length and the
    matches' fields: equal when the results are equal, and, holding only ints, strings, bytes,
    floats and None, not tracked by the cycle collector once it has looked at it (the staged
    adds' results, kept until their commit)."""
    out: list[Any] = []
    for result in results:
        for value in _add_result_fields(result):
            if type(value) is list:
                out.append(len(value))
                out.extend(itertools.chain.from_iterable(value))
            else:
                out.append(value)
    return tuple(out)


class Cluster(NamedTuple):
    """Documents connected by near-duplicate pairs; ``canonical`` is the oldest (smallest id)."""

    canonical: Key
    keys: list[Key]
    ids: np.ndarray


def key_order(key: Key) -> tuple[int, object]:
    """A sort key for user keys of mixed types: ints, then str, then bytes (they do not compare)."""
    return (0 if isinstance(key, int) else 1 if isinstance(key, str) else 2, key)


def sort_matches(matches: list[Match]) -> list[Match]:
    """Matches by distance, then key (:func:`key_order`)."""
    return sorted(matches, key=lambda m: (m.distance, key_order(m.key)))
