"""Where a batch of verdict probes should switch from one probe per fingerprint to one batch
(docs/benchmarks.md, section "The crawler's write path"): the thresholds the read and write paths use.

    cd /work/main && python tools/bench_probe_crossover.py

* **incremental tables** (``fpstore.store.incremental.PROBE_US`` and ``SCAN_US``): for tables holding E
  entries (E = 256, 1,024, 4,096: ``flush_entries`` is 4,096 by default) and batches of m random
  fingerprints, the median time of ``IncrementalTables.probe`` once per fingerprint against
  ``IncrementalTables.scan_batch`` (table 0 read once, the other orders sorted in memory).
* **query_many** (``fpstore.store.catalog.SMALL_BATCH_*`` for a merge on one thread, with
  ``--one-thread``, and ``THREADED_BATCH_*`` for a merge on threads, as it runs by default): on stores of
  ``--query-many-n`` bulk-loaded fingerprints, ``Catalog.probe_many`` for m = 16 .. 8,192 with one
  probe per query against the merge of the sorted batch with every table; the crossover m is
  reported with c, the chunks of the runs' table 0 (the merge's cost grows with the chunks it
  reaches).
* **both tiers** (what a group of adds pays to find its stored neighbours): on a store of ``--n`` bulk-loaded
  fingerprints plus 2,000 incremental ones, ``Catalog.probe`` once per fingerprint against one
  ``Catalog.probe_many``, for m = 4 .. 512.

k = 3, design ``auto``; medians of ``--repeat`` runs, each on fresh fingerprints, in one read
transaction. The store goes under ``--tmp`` and is deleted at the end. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _bench_common as bc  # noqa: E402

import fpstore  # noqa: E402


def median_ms(fn: Callable[[np.ndarray], Any], m: int, repeat: int, rng: np.random.Generator) -> float:
    times = []
    for _ in range(repeat):
        fps = rng.integers(0, 2**64 - 1, m, dtype=np.uint64)
        t = time.perf_counter()
        fn(fps)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def incremental(tmp: str, repeat: int, rng: np.random.Generator) -> None:
    print("incremental tables: ms per batch (per-fingerprint probes / one scan)")
    print("| entries | " + " | ".join(f"m = {m}" for m in (1, 4, 16, 64, 256, 1024)) + " |")
    print("|---" * 7 + "|")
    with tempfile.TemporaryDirectory(dir=tmp) as d, fpstore.open(Path(d) / "s", k=3, flush_entries=0) as store:
        pid, inc = store.pipeline.id, store._cat.incremental
        for entries in (256, 1024, 4096):
            more = entries - len(store)
            store.add_many([f"e{entries}-{i}" for i in range(more)], fingerprints=rng.integers(0, 2**64 - 1, more, dtype=np.uint64), pipeline_id=pid)
            cells = []
            with store._storage.read() as txn:
                for m in (1, 4, 16, 64, 256, 1024):
                    one = median_ms(lambda f: [inc.probe(txn, int(x), 3) for x in f.tolist()], m, repeat, rng)
                    scan = median_ms(lambda f: inc.scan_batch(txn, f, 3), m, repeat, rng)
                    cells.append(f"{one:.2f} / {scan:.2f}")
            print(f"| {entries:,} | " + " | ".join(cells) + " |")


def both_tiers(tmp: str, n: int, repeat: int, rng: np.random.Generator) -> None:
    print(f"\nboth tiers, n = {n:,} bulk-loaded + 2,000 incremental: ms per batch (Catalog.probe per fingerprint / probe_many)")
    sizes = (4, 8, 16, 32, 64, 96, 128, 256, 512)
    print("| " + " | ".join(f"m = {m}" for m in sizes) + " |")
    print("|---" * len(sizes) + "|")
    with tempfile.TemporaryDirectory(dir=tmp) as d, fpstore.open(Path(d) / "s", k=3) as store:
        pid, cat = store.pipeline.id, store._cat
        store.bulk_load(np.arange(n), rng.integers(0, 2**64 - 1, n, dtype=np.uint64), pipeline_id=pid)
        store.add_many([f"x{i}" for i in range(2000)], fingerprints=rng.integers(0, 2**64 - 1, 2000, dtype=np.uint64), pipeline_id=pid)
        cells = []
        with store._storage.read() as txn:
            for m in sizes:
                one = median_ms(lambda f: [cat.probe(txn, int(x), 3) for x in f.tolist()], m, repeat, rng)
                batch = median_ms(lambda f: cat.probe_many(txn, f, 3), m, repeat, rng)
                cells.append(f"{one:.2f} / {batch:.2f}")
        print("| " + " | ".join(cells) + " |")


def query_many_paths(tmp: str, sizes_n: list[int], repeat: int, rng: np.random.Generator) -> None:
    """``Catalog.probe_many``'s two ways through bulk-loaded runs, forced in turn: one probe per
    query (``search.probe_runs_each``) and the merge (``search.batch_probe_runs``)."""
    from fpstore.store import catalog

    sizes = (16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
    print("\nquery_many through the runs: ms per batch (one probe per query / the merge); the last column "
          "is the first m where the probes stop paying")
    print("| n | chunks | " + " | ".join(f"m = {m}" for m in sizes) + " | crossover m |")
    print("|---" * (len(sizes) + 3) + "|")
    saved = catalog._small_batch_limit
    try:
        for n in sizes_n:
            with tempfile.TemporaryDirectory(dir=tmp) as d, fpstore.open(Path(d) / "s", k=3, expected_size=n) as store:
                pid, cat = store.pipeline.id, store._cat
                store.bulk_load(np.arange(n), rng.integers(0, 2**64 - 1, n, dtype=np.uint64), pipeline_id=pid)
                store.warm()
                cells, cross = [], None
                with store._storage.read() as txn:
                    chunks = sum(run.table(0).index.nchunks for run in cat.runs(txn))
                    # The snapshot's chunks, as query_many reads them (Reader).
                    memo = cat.snapshot_chunks(txn, store._storage.mapping)
                    for m in sizes:
                        catalog._small_batch_limit = lambda chunks0: 10**9
                        each = median_ms(lambda f: cat.probe_many(txn, f, 3, memo), m, repeat, rng)
                        catalog._small_batch_limit = lambda chunks0: 0
                        merge = median_ms(lambda f: cat.probe_many(txn, f, 3, memo), m, repeat, rng)
                        cells.append(f"{each:.2f} / {merge:.2f}")
                        if cross is None and each > merge:
                            cross = m
                print(f"| {n:,} | {chunks} | " + " | ".join(cells) + f" | {cross} |")
    finally:
        catalog._small_batch_limit = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--n", type=float, default=1e6, help="fingerprints bulk-loaded for the both-tiers table")
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--query-many-n", type=float, nargs="*", default=[1e5, 1e6, 1e7], help="store sizes of the query_many table")
    ap.add_argument("--only-query-many", action="store_true", help="only the query_many table")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tmp", default=bc.DEFAULT_TMP)
    ap.add_argument("--one-thread", action="store_true", help="the merge on one thread (the fit of SMALL_BATCH_*)")
    args = ap.parse_args()
    if args.one_thread:
        from fpstore.index import search

        search.THREADED_MERGE_QUERIES = search.THREADED_MERGE_QUERIES_SMALL = 10**12
    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    if not args.only_query_many:
        incremental(args.tmp, args.repeat, rng)
        both_tiers(args.tmp, int(args.n), args.repeat, rng)
    query_many_paths(args.tmp, [int(x) for x in args.query_many_n], args.repeat, rng)


if __name__ == "__main__":
    main()
