"""What a new run costs the reads that meet it first (docs/benchmarks.md, "A new run's first
reads"): every flush of the incremental tables and every merge makes a run, and the first query
of the next snapshot builds its tables' indexes.

    cd /work/main && python tools/bench_new_runs.py
    PYTHONPATH=<tree> python tools/bench_new_runs.py --code <tree>    # another checkout, same script

1. ``RunIndex.from_bytes`` of one table's index for runs of 5,000 to 10^6 uniform random keys
   (the encoder's defaults): the best of 7 repeats of 200 calls, µs a call.
2. A store growing by ``add_many`` of 1,000 random fingerprints (merges in the background) to
   ``--n``; after each call a new ``Store.reader()`` answers 20 random single queries: the first
   query of each reader (a new snapshot, often with a new run) against the other 19, and one
   ``Store.query`` after the reader. p50 / p90 / p99 µs. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
import timeit
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--code", help="a checkout whose fpstore to measure (default: this one)")
    ap.add_argument("--tmp", default="/work/bench-tmp")
    args = ap.parse_args()
    sys.path.insert(0, args.code or str(Path(__file__).resolve().parent.parent))
    import fpstore
    from fpstore.index import runs

    bc = importlib.import_module("_bench_common")  # after fpstore: it would import this checkout's

    print(f"fpstore from {Path(fpstore.__file__).parent}; {bc.uptime()}")
    for n in (5_000, 20_000, 320_000, 1_000_000):
        keys = np.sort(np.random.default_rng(1).integers(0, 2**64, n, dtype=np.uint64))
        index, _ = runs.encode_run(keys)
        raw = index.to_bytes()
        best = min(timeit.repeat(lambda raw=raw: runs.RunIndex.from_bytes(raw), number=200, repeat=7)) / 200
        print(f"RunIndex.from_bytes, {n:,} keys ({index.nblocks:,} blocks): {best * 1e6:.1f} us")

    rng = np.random.default_rng(1)
    n, batch = int(args.n), 1000
    fps = bc.random_fps(n, rng)
    queries = bc.random_fps(21 * (n // batch), rng).tolist()
    first: list[int] = []
    rest: list[int] = []
    after: list[int] = []
    clock = time.perf_counter_ns
    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.tmp) as d, fpstore.open(Path(d) / "s", k=3, expected_size=n) as store:
        pid = store.pipeline.id
        q = iter(queries)
        for lo in range(0, n, batch):
            store.add_many(np.arange(lo, lo + batch), fingerprints=fps[lo : lo + batch], pipeline_id=pid)
            with store.reader() as r:
                for j in range(20):
                    t0 = clock()
                    r.query(fingerprint=next(q), pipeline_id=pid)
                    (first if j == 0 else rest).append(clock() - t0)
            t0 = clock()
            store.query(fingerprint=next(q), pipeline_id=pid)
            after.append(clock() - t0)
        runs_at_end = store.counts()["runs"]
    for name, values in (("first query of a reader", first), ("its other 19", rest), ("store.query after it", after)):
        a = np.array(values) / 1e3
        print(
            f"{name}: p50 {np.percentile(a, 50):.1f}, p90 {np.percentile(a, 90):.1f}, p99 {np.percentile(a, 99):.1f} us ({len(a):,} queries)"
        )
    print(f"runs at the end: {len(runs_at_end)}; {bc.uptime()}")


if __name__ == "__main__":
    main()
