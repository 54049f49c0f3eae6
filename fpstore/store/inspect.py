"""Looking at a store without changing it: its counts in one snapshot, the deep check, statistics
of its tables, and LMDB's own figures. :class:`~fpstore.store.store.Store` exposes them as
``counts()``, ``verify()``, ``stats()`` and ``info()``; these functions take what they read as
arguments."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import lmdb
import numpy as np

from fpstore.errors import FpstoreError
from fpstore.index.design import Design
from fpstore.index.tiers import Run
from fpstore.store.catalog import Catalog
from fpstore.store.header import H_COUNT, H_NEXT_ID, read_checkpoints
from fpstore.store.incremental import scan_table
from fpstore.store.results import Document
from fpstore.store.storage import Storage

__all__ = [
    "store_info",
    "MAX_PROBLEMS",
    "Problems",
    "counts",
    "check_documents",
    "check_shallow",
    "check_tables",
    "lmdb_figures",
    "table_stats",
    "verify",
]

#: A check stops recording problems after this many (a badly damaged store would list millions).
MAX_PROBLEMS = 100


class Problems(list[str]):
    """A list of problem descriptions that keeps the first :data:`MAX_PROBLEMS`."""

    def add(self, msg: str) -> None:
        if len(self) < MAX_PROBLEMS:
            self.append(msg)


# -- counts --------------------------------------------------------------------------------------


def counts(txn: lmdb.Transaction, cat: Catalog) -> dict[str, Any]:
    """:meth:`Store.counts`: every counter and size of the store, read in the one transaction ``txn``."""
    state = cat.state(txn)
    in_runs = sum(run.count for run in state.runs)
    return {
        "documents": cat.meta_int(txn, H_COUNT),
        "next_id": cat.meta_int(txn, H_NEXT_ID),
        "records": txn.stat(cat.docs)["entries"],
        "keys": txn.stat(cat.keys)["entries"],
        "content_hashes": txn.stat(cat.content)["entries"],
        "tombstones": txn.stat(cat.dead)["entries"],
        "incremental_entries": txn.stat(cat.tables[0])["entries"],
        "table_entries": [txn.stat(db)["entries"] + in_runs for db in cat.tables],
        "runs": [run.count for run in state.runs],
        "segments": [seg.count for seg in state.segs],
        "checkpoints": read_checkpoints(txn, cat.meta),
    }


# -- the deep check ------------------------------------------------------------------------------


def check_tables(
    txn: lmdb.Transaction, design: Design, tables: list[Any], runs: Iterable[Run], dead: set[int], problems: Problems
) -> dict[int, int] | None:
    """Check every table entry of both tiers, inside read transaction ``txn``; returns table 0's
    live entries (id → fingerprint), or None when the tables are too damaged to go on.

    Every other table must hold exactly table 0's fingerprints, permuted (the incremental ones
    with the same ids); runs must be sorted and decodable; no id may be in table 0 twice.
    """
    inc: list[np.ndarray] = []
    for t, db in enumerate(tables):
        pairs, whole = scan_table(txn, db)
        if not whole:
            problems.add(f"table {t} holds keys that are not 16 bytes")
        inc.append(pairs.astype(np.uint64))
    run_fps: list[list[np.ndarray]] = [[] for _ in design.tables]
    run_ids: list[np.ndarray] = []
    for r, run in enumerate(runs):
        try:
            for t in range(len(design.tables)):
                vals = np.asarray(run.table(t).all(), dtype=np.uint64)
                if len(vals) > 1 and np.any(vals[1:] < vals[:-1]):
                    problems.add(f"run {r} table {t} is not sorted")
                run_fps[t].append(vals)
            run_ids.append(np.asarray(run.all_ids(), dtype=np.uint64))
        except FpstoreError as exc:
            problems.add(f"run {r} does not decode: {exc}")
            return None
    fps0 = np.concatenate([inc[0][:, 0]] + run_fps[0]) if len(design.tables) else np.zeros(0, np.uint64)
    ids0 = np.concatenate([inc[0][:, 1]] + run_ids)
    if len(ids0) != len(fps0):
        problems.add("run id lists and table 0 differ in length")
        return None
    for t in range(1, len(design.tables)):
        have = np.sort(np.concatenate([inc[t][:, 0]] + run_fps[t]))
        want = np.sort(design.permute(fps0, t))
        if len(have) != len(want):
            problems.add(f"table {t} holds {len(have):,} entries, table 0 holds {len(want):,}")
        elif not np.array_equal(have, want):
            bad = int(np.count_nonzero(have != want))
            problems.add(f"table {t} differs from table 0 permuted in {bad:,} positions")
        # Incremental entries also carry ids: each must be the permuted entry of that id.
        if len(inc[t]):
            got = sorted(zip(inc[t][:, 1].tolist(), inc[t][:, 0].tolist()))
            exp = sorted(zip(inc[0][:, 1].tolist(), design.permute(inc[0][:, 0], t).tolist()))
            if got != exp:
                problems.add(f"incremental table {t} does not hold the same documents as incremental table 0")
    index: dict[int, int] = {}
    for i, f in zip(ids0.tolist(), fps0.tolist()):
        if i in dead:
            continue
        if i in index:
            problems.add(f"document {i} is in table 0 twice")
        index[i] = f
    return index


def check_documents(
    docs: Iterable[tuple[object, Document | None]], count: int, next_id: int, index: dict[int, int], problems: Problems
) -> None:
    """Check every live document (``(key, document read back by key)`` pairs, from the public
    API) against table 0's entries ``index`` and the store's counters."""
    seen = 0
    indexed_docs = set()
    for key, doc in docs:
        seen += 1
        if doc is None:
            problems.add(f"key {key!r} is listed but cannot be read")
            continue
        if doc.key != key:
            problems.add(f"key {key!r} reads back as {doc.key!r}")
        if not 0 < doc.id < next_id:
            problems.add(f"document {key!r} has id {doc.id}, outside 1..{next_id - 1}")
        if not doc.short:
            indexed_docs.add(doc.id)
            f = index.get(doc.id)
            if f is None:
                problems.add(f"document {key!r} (id {doc.id}) is missing from the tables")
            elif f != doc.fingerprint:
                problems.add(f"document {key!r} (id {doc.id}) has fingerprint {doc.fingerprint:016x} but table 0 holds {f:016x}")
    if seen != count:
        problems.add(f"the store counts {count:,} documents but {seen:,} were read")
    stray = set(index) - indexed_docs
    if stray:
        problems.add(f"{len(stray):,} table entries name no live document (for example id {min(stray)})")


def check_shallow(txn: lmdb.Transaction, tables: list[Any], runs: Iterable[Run], count: int, next_id: int, problems: Problems) -> None:
    """The cheap part of a check (no entry is read): counters, table sizes, run indexes."""
    if count > next_id - 1:
        problems.add(f"the store counts {count:,} documents but assigned only {next_id - 1:,} ids")
    sizes = [txn.stat(db)["entries"] for db in tables]
    for t, n in enumerate(sizes[1:], 1):
        if n != sizes[0]:
            problems.add(f"table {t} holds {n:,} entries, table 0 holds {sizes[0]:,}")
    for r, run in enumerate(runs):
        try:
            for t in range(len(run.meta.tables)):
                run.table(t).check_backed()
        except FpstoreError as exc:
            problems.add(f"run {r} does not decode: {exc}")


def verify(storage: Storage, cat: Catalog, documents: Callable[[], Iterable[tuple[object, Document | None]]], *, deep: bool) -> list[str]:
    """:meth:`Store.verify`: ``documents()`` gives every live ``(key, document read back by key)``."""
    problems = Problems()
    with storage.read() as txn:
        count = cat.meta_int(txn, H_COUNT)
        next_id = cat.meta_int(txn, H_NEXT_ID)
        if not deep:
            check_shallow(txn, cat.tables, cat.runs(txn), count, next_id, problems)
            return list(problems)
        dead = set(int(i) for i in cat.lsm.dead_ids(txn).tolist())
        index = check_tables(txn, cat.design, cat.tables, cat.runs(txn), dead, problems)
        if index is not None and cat.sketches is not None:
            for problem in cat.sketches.problems(txn, np.fromiter(index, dtype=np.int64, count=len(index))):
                problems.add(problem)
    if index is not None:
        check_documents(documents(), count, next_id, index, problems)
    return list(problems)


# -- statistics ----------------------------------------------------------------------------------


def _percentiles(values: np.ndarray) -> dict[str, float]:
    if not len(values):
        return {"p50": 0, "p99": 0, "max": 0, "mean": 0.0}
    return {
        "p50": int(np.percentile(values, 50, method="nearest")),
        "p99": int(np.percentile(values, 99, method="nearest")),
        "max": int(values.max()),
        "mean": float(values.mean()),
    }


def table_stats(design: Design, fps: np.ndarray, documents: int, sample: int, seed: int) -> dict[str, Any]:
    """Candidates per probe and per query of each table over a sample of the indexed fingerprints
    ``fps``, and histograms of the distance of random pairs and to the nearest other fingerprint.
    Deterministic for a given ``seed``."""
    n = len(fps)
    rng = np.random.default_rng(seed)
    pick = rng.choice(n, size=min(sample, n), replace=False) if n else np.zeros(0, np.int64)
    sampled = fps[pick]
    tables = []
    for t, table in enumerate(design.tables):
        keys = np.sort(design.permute(fps, t))
        per_probe: list[int] = []
        per_table: list[int] = []
        for perm in design.permute(sampled, t).tolist():
            total = 0
            for lo, hi in design.probe_prefixes(perm, t):
                c = int(np.searchsorted(keys, np.uint64(hi), "right") - np.searchsorted(keys, np.uint64(lo), "left"))
                per_probe.append(c)
                total += c
            per_table.append(total)
        tables.append(
            {
                "table": t,
                "prefix_bits": table.prefix_bits,
                "flips": table.flips,
                "probes_per_query": table.n_probes,
                "candidates_per_probe": _percentiles(np.array(per_probe, dtype=np.int64)),
                "candidates_per_query": _percentiles(np.array(per_table, dtype=np.int64)),
                "expected_per_probe_uniform": n / 2.0**table.prefix_bits,
            }
        )
    # Distances: random pairs show the background (about 32 for unrelated texts); each sampled
    # fingerprint's nearest other fingerprint shows how near duplicates sit, to choose k by.
    pairs = min(10000, n * (n - 1) // 2) if n > 1 else 0
    random_hist = np.zeros(65, dtype=np.int64)
    if pairs:
        a = rng.integers(0, n, pairs)
        b = (a + rng.integers(1, n, pairs)) % n
        random_hist = np.bincount(np.bitwise_count(fps[a] ^ fps[b]).astype(np.int64), minlength=65)
    nearest_hist = np.zeros(65, dtype=np.int64)
    nn_sample = pick[: max(0, min(len(pick), 50_000_000 // max(n, 1)))]
    if n > 1 and len(nn_sample):
        nearest = []
        for i in nn_sample.tolist():
            d = np.bitwise_count(fps ^ fps[i]).astype(np.int64)
            d[i] = 65
            nearest.append(int(d.min()))
        nearest_hist = np.bincount(np.array(nearest), minlength=66)[:65]
    return {
        "documents": documents,
        "indexed": n,
        "sample": int(len(pick)),
        "seed": seed,
        "design": design.describe(max(n, 1)),
        "tables": tables,
        "distance_random_pairs": {str(d): int(c) for d, c in enumerate(random_hist) if c},
        "distance_nearest_neighbour": {str(d): int(c) for d, c in enumerate(nearest_hist) if c},
        "nearest_neighbour_sample": int(len(nn_sample)),
    }


# -- LMDB's figures ------------------------------------------------------------------------------


def _readers(env_readers: str, last_txnid: int) -> list[dict[str, Any]]:
    """Parse LMDB's reader table (``pid thread txnid`` lines) into dicts with the lag in transactions."""
    out = []
    for line in env_readers.splitlines()[1:]:
        parts = line.split()
        if len(parts) != 3:
            continue
        pid, thread, txnid = parts
        try:
            txn = int(txnid)
        except ValueError:
            txn = None  # "-": a slot not in a transaction
        out.append({"pid": int(pid), "thread": thread, "txnid": txn, "lag": None if txn is None else last_txnid - txn})
    return out


def lmdb_figures(storage: Storage) -> dict[str, Any]:
    """LMDB's own figures of a store: page size and use, map use, readers, and each database's
    entries, pages and bytes."""
    lmdb_info = storage.info()  # env.info, env.stat, readers
    psize = lmdb_info["psize"]
    used_pages = lmdb_info["last_pgno"] + 1
    sub = {}
    tree_pages = lmdb_info["branch_pages"] + lmdb_info["leaf_pages"] + lmdb_info["overflow_pages"]
    with storage.read() as txn:
        for name, db in sorted(storage.dbs.items()):
            st = txn.stat(db)
            pages = st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
            tree_pages += pages
            sub[name] = {"entries": st["entries"], "pages": pages, "bytes": pages * psize}
    return {
        "page_size": psize,
        "pages_used": used_pages,
        # Pages in the file that no tree holds: LMDB's free list (reusable) plus its own
        # bookkeeping; an estimate, since py-lmdb cannot open the free-list database.
        "free_pages": max(used_pages - 2 - tree_pages, 0),
        "map_used": used_pages * psize / lmdb_info["map_size"],
        "last_txnid": lmdb_info["last_txnid"],
        "max_readers": lmdb_info["max_readers"],
        "readers": _readers(lmdb_info["readers"], lmdb_info["last_txnid"]),
        "databases": sub,
    }


def store_info(store: Any, storage: Storage, merges: Any) -> dict[str, Any]:
    """:meth:`Store.info`: header, design, counts, merges and storage figures, as plain data."""
    figures = storage.info()
    n = len(store)  # checks the counter against the ids given out
    counts = store.counts()
    design = store.design
    return {
        "path": store.path,
        "format": store.header["format"],
        "pipeline_id": store.pipeline.id,
        "pipeline": store.pipeline.config,
        "design": design.describe(max(n, 1)),
        "design_detail": {
            **design.config(),
            "probes_per_query": design.probes_per_query(),
            "expected_candidates": design.expected_candidates(max(n, 1)),
        },
        "k": store.k,
        "threshold": store.threshold,
        "documents": n,
        "incremental_entries": counts["incremental_entries"],
        "runs": counts["runs"],
        "tombstones": counts["tombstones"],
        "flush_entries": store.flush_entries,
        "merges": {"mode": merges.mode, "done": merges.merged, "last_error": None if merges.error is None else str(merges.error)},
        "file_size": figures["file_size"],
        "map_size": figures["map_size"],
        "created": store.header.get("created"),
        "lmdb": lmdb_figures(storage),
        "keep_mapped": None if store._keeper is None else store._keeper.info(),
    }
