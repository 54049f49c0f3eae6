"""The feed oracle: batch ``i`` is a pure function of ``i`` (seeded numpy), so a store fed batches
``0..c`` with ``checkpoint=("feed", c)`` must hold exactly those documents after any crash; and the
checks of what one snapshot of such a store shows (public API only: ``Store.counts``)."""

from __future__ import annotations

import functools

import numpy as np

import fpstore

SEED = 20240611
FEED = "feed"
MIN_BATCH, MAX_BATCH = 200, 1000


# -- the oracle ----------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def batch(i: int) -> tuple[tuple[str, ...], np.ndarray]:
    """Batch ``i``: keys ``b{i}-{j}`` and 200..1000 random uint64 fingerprints, a pure function of i."""
    rng = np.random.default_rng([SEED, i])
    n = int(rng.integers(MIN_BATCH, MAX_BATCH + 1))
    fps = rng.integers(0, np.iinfo(np.uint64).max, size=n, dtype=np.uint64, endpoint=True)
    fps.setflags(write=False)
    return tuple(f"b{i}-{j}" for j in range(n)), fps


def batch_sketches(i: int, words: int) -> np.ndarray:
    """The verification sketches of batch ``i`` (uint64[n, words]) for a store whose pipeline has
    one: random words, also a pure function of i."""
    rng = np.random.default_rng([SEED, i, words])
    return rng.integers(0, np.iinfo(np.uint64).max, size=(batch_size(i), words), dtype=np.uint64, endpoint=True)


def batch_size(i: int) -> int:
    return len(batch(i)[0])


_prefix = [0]  # _prefix[i] = documents in batches 0..i-1


def total(upto: int | None) -> int:
    """Documents in batches ``0..upto`` (0 when ``upto`` is None: nothing committed yet)."""
    if upto is None or upto < 0:
        return 0
    while len(_prefix) <= upto + 1:
        _prefix.append(_prefix[-1] + batch_size(len(_prefix) - 1))
    return _prefix[upto + 1]


# -- checks inside one snapshot -------------------------------------------------------------------


class CheckFailed(AssertionError):
    pass


def snapshot(store) -> dict:
    """Count, checkpoint and entries of every table, all read in ONE read transaction
    (:meth:`fpstore.Store.counts`). Every table's entries are those of its incremental B-tree plus
    its runs (a run holds every table for the same documents)."""
    counts = store.counts()
    entries = {"docs": counts["records"], "dead": counts["tombstones"], "keys": counts["keys"],
               "content": counts["content_hashes"]}
    entries.update((f"t{t:02d}", n) for t, n in enumerate(counts["table_entries"]))
    return {"count": counts["documents"], "next_id": counts["next_id"], "ckpt": counts["checkpoints"].get(FEED),
            "entries": entries}


def check_snapshot(snap: dict) -> None:
    """Every table agrees with the count, and the count is exactly batches 0..checkpoint."""
    count, ckpt, entries = snap["count"], snap["ckpt"], snap["entries"]
    want = total(ckpt)
    if count != want:
        raise CheckFailed(f"count {count} but checkpoint {ckpt} implies {want} documents")
    for name in ("content", "dead"):
        if entries[name] != 0:
            raise CheckFailed(f"{name} table has {entries[name]} entries; fingerprint-only batches of new keys add none")
    bad = {name: n for name, n in entries.items() if name not in ("content", "dead") and n != count}
    if bad:
        raise CheckFailed(f"tables disagree with count {count} (checkpoint {ckpt}): {bad}")
    if snap["next_id"] != count + 1:  # keys are never repeated across batches, so ids are dense
        raise CheckFailed(f"next_id {snap['next_id']} but {count} documents were added")


def check_keys(store, pipeline_id: str, picks: list[tuple[int, int]]) -> int:
    """Each (batch, j) is stored with its fingerprint, and a query finds it at distance 0 and nothing else.

    Returns how many keys were checked. Uses the public API (one transaction per call)."""
    if not picks:
        return 0
    fps = np.array([batch(i)[1][j] for i, j in picks], dtype=np.uint64)
    ids = []
    for (i, j), fp in zip(picks, fps.tolist()):
        key = batch(i)[0][j]
        doc = store.get(key)
        if doc is None:
            raise CheckFailed(f"key {key} of committed batch {i} is missing")
        if doc.fingerprint != fp:
            raise CheckFailed(f"key {key} has fingerprint {doc.fingerprint}, expected {fp}")
        ids.append(doc.id)
    words = store.pipeline.sketch_bits // 64
    if words:  # each document's sketch is stored with it: the query by its own sketch is similarity 1
        sketches = np.array([batch_sketches(i, words)[j] for i, j in picks], dtype=np.uint64)
        queries = fpstore.Fingerprints(fps, pipeline_id, sketches=sketches)
        q, found, dist = store.query_many(queries, threshold=1.0)
    else:
        q, found, dist = store.query_many(fps, pipeline_id=pipeline_id)
    exact = {(int(a), int(b)) for a, b, d in zip(q, found, dist) if d == 0}
    missing = [picks[n] for n, doc_id in enumerate(ids) if (n, doc_id) not in exact]
    if missing:
        raise CheckFailed(f"query_many does not find {len(missing)} stored fingerprints at distance 0, e.g. {missing[:3]}")
    # Random 64-bit fingerprints have no neighbour within k=3 (p < 1e-9 here): exactly one match each.
    if len(q) != len(picks):
        raise CheckFailed(f"query_many returned {len(q)} matches for {len(picks)} stored fingerprints")
    return len(picks)


def interval_fp(i: int) -> int:
    """Document i's fingerprint in the ``interval-adder`` worker: every tenth near the one before it."""
    rng = np.random.default_rng([SEED, i // 10])
    base = int(rng.integers(0, 2**64, dtype=np.uint64))
    return base ^ (1 << (i % 10)) if i % 10 else base


def check_interval_adds(path: str, acks: list[int], syncs: list[int], where: str) -> int:
    """The store an ``interval-adder`` left at ``path`` (killed, or a power-cut copy) holds exactly
    d0..dj with its checkpoint at j, for a j at or after the last ``synced`` and at most the add in
    flight after the last ``ack``; returns j (-1: nothing)."""
    with fpstore.open(path, readonly=True) as store:
        j = store.checkpoint(FEED)
        docs = {d.key: d.fingerprint for d in store.documents()}
    j = -1 if j is None else j
    assert docs == {f"d{i}": interval_fp(i) for i in range(j + 1)}, f"{where}: not the adds up to {j}"
    if syncs:
        assert j >= syncs[-1], f"{where}: synced {syncs[-1]}, the store holds only up to {j}"
    if acks:
        assert j <= acks[-1] + 1, f"{where}: the store holds {j}, beyond the add in flight after {acks[-1]}"
    return j
