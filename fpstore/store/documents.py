"""A store's documents with their verification sketches: what ``export``, ``dump`` and the Arrow
tables read from a store whose pipeline has ``sketch_bits``.

:meth:`Store.documents` gives :class:`Document` objects; these read each batch of them and their
sketches (:class:`fpstore.store.sketches.Sketches`) in one read snapshot, so a document and its
sketch always come from the same state of the store.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from fpstore.errors import InputError
from fpstore.store.results import Document

__all__ = ["documents_with_sketches", "sketch_words", "sketches_of"]


def sketch_words(store: Any) -> int:
    """W, the uint64 words of each document's sketch in ``store`` (0: the store keeps none)."""
    return int(store.pipeline.sketch_bits) // 64


def documents_with_sketches(store: Any) -> Iterator[tuple[Document, np.ndarray | None]]:
    """Every live document of ``store`` in id order (as :meth:`Store.documents`), each with its
    sketch (uint64[W], a copy) or None when the store keeps no sketch; a batch and its sketches
    per read snapshot, so no transaction spans a yield. A missing sketch raises
    :class:`~fpstore.errors.CorruptionError`."""
    if store._cat.sketches is None:
        for doc in store.documents():
            yield doc, None
        return
    for batch in store._batches(True, sketches=True):
        yield from batch


def sketches_of(store: Any, ids: np.ndarray) -> np.ndarray:
    """The sketches (uint64[n, W]) of document ids ``ids``, in one read snapshot. A store without
    a sketch raises :class:`~fpstore.errors.InputError`; an id without a sketch (never given out)
    :class:`~fpstore.errors.CorruptionError`."""
    with store.reader() as reader:
        found = reader.sketches_of(np.asarray(ids, dtype=np.int64).tolist())
    if found is None:
        raise InputError("this store keeps no verification sketch (its pipeline has no sketch_bits)")
    return found
