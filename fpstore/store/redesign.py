"""A new table design for an existing store: every live fingerprint indexed again under it, and
the switch made in one write transaction.

The documents, keys, content hashes and key segments do not depend on the design; the tables
do. The write reads the fingerprints and ids of table 0 (the identity permutation in every
design) from the incremental tables and every run, encodes one run with the new design's
tables, empties the incremental tables, drops the tables the new design does not have, and
stores the new header and state. A crash before the commit leaves the old design, after it the
new one; nothing in between is ever visible. Tables the new design adds are created empty before
the write (an empty table no design names is harmless, and a rerun reuses it).

Other openers hold table handles and the design read when they opened, so the switch needs the
store alone (:meth:`Storage.alone`), as file compaction does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import lmdb
import msgpack

from fpstore.errors import InputError
from fpstore.index.design import Design
from fpstore.store.catalog import Catalog
from fpstore.store.header import H_HEADER, table_name
from fpstore.store.sketches import CANDIDATE_K, NEEDS_SKETCH, check_threshold
from fpstore.store.storage import Storage

__all__ = ["switch_design"]

log = logging.getLogger(__name__)


def redesign_plan(store: Any, k: object, threshold: object) -> tuple[int, dict[str, Any]]:
    """The radius and the header a :meth:`Store.redesign` asks for: ``threshold`` (checked, and
    only for a store with sketches) goes into the header; without ``k``, a threshold brings the
    candidate radius :data:`CANDIDATE_K`."""
    theta = check_threshold(threshold)
    if k is None and theta is None:
        raise InputError("redesign needs k=, threshold=, or both")
    if theta is not None and not store.pipeline.sketch_bits:
        raise InputError(
            f"{NEEDS_SKETCH}: this store keeps no sketches, and they are made from the texts: "
            "ingest the texts again into a new store with one"
        )
    header = store.header if theta is None else {**store.header, "threshold": theta}
    return (CANDIDATE_K if k is None else k), header  # type: ignore[return-value]  # design_for checks k


def write_header(storage: Storage, cat: Catalog, header: dict[str, Any]) -> dict[str, Any]:
    """Store ``header`` (a redesign that changes only the threshold); returns it."""
    packed = msgpack.packb(header, use_bin_type=True)
    storage.write(lambda txn: txn.put(H_HEADER, packed, db=cat.meta), action="recording the store's threshold")
    return header


def switch_design(
    storage: Storage, cat: Catalog, header: dict[str, Any], new: Design, progress: Callable[[int, int | None], None] | None = None
) -> tuple[dict[str, Any], dict[str, int]]:
    """Index the store bound to ``cat`` under design ``new``; returns (the new header, counts).

    The caller holds ``storage.alone(...)`` and binds a new :class:`Catalog` afterwards (on
    success or failure: an aborted write may close the handles of tables it dropped).
    ``progress(tables encoded, tables)`` as the new run is encoded.
    """
    old_names = [table_name(t) for t in range(len(cat.design.tables))]
    new_names = [table_name(t) for t in range(len(new.tables))]
    with storage.read() as txn:
        state = cat.state(txn)
        entries = cat.incremental.entries(txn) + sum(r.count for r in state.runs)
    # Room for the new run up front (about 8 bytes per entry and table, ids included), so the
    # transaction is not aborted and rerun on a full map after all its work.
    storage.reserve(entries * 8 * (len(new.tables) + 1))
    storage.add_dbs([name for name in new_names if name not in old_names])
    new_cat = Catalog(storage.dbs, new)
    surplus = [storage.dbs[name] for name in old_names if name not in new_names]
    new_header = {**header, "design": new.config()}
    packed = msgpack.packb(new_header, use_bin_type=True)

    def work(txn: lmdb.Transaction) -> dict[str, int]:
        state = cat.state(txn)  # runs of the old design: their table 0 and ids serve any design
        new_state, counts = new_cat.lsm.merge(txn, state, list(state.runs), incremental=True, rewrite=True, progress=progress)
        for db in surplus:
            txn.drop(db, delete=True)
        new_cat.lsm.save_state(txn, new_state)
        txn.put(H_HEADER, packed, db=cat.meta)
        return counts

    counts = storage.write(work, action=f"redesigning the store as {new.name}")
    for name in old_names:
        if name not in new_names:
            del storage.dbs[name]
    log.info("redesigned %s from %s to %s: %d entries", storage.path, cat.design.name, new.name, counts["entries"])
    return new_header, counts
