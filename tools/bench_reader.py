"""One Python call per query: ``Store.query`` (a read transaction per call) against the same calls
through ``Store.reader()`` (one read transaction for the burst) (docs/benchmarks.md, section
"Reads in a burst").

    cd /work/main && python tools/bench_reader.py

A store of ``--n`` (10^6) uniform random fingerprints, bulk-loaded (k = 3, design ``auto``), then
``--rounds`` rounds of ``--queries`` (10,000) single-fingerprint queries (half stored fingerprints
with one bit flipped, half random) through each path, alternated A, B per round, each path with
queries of its own (no path finds the key blocks or pages of the other's matches read already);
wall time of each call (``perf_counter_ns``): p50 and p99 of every round's calls pooled, and the
ratio of the medians. ``--warm`` calls ``Store.warm()`` after the load (the issue's "after warm()").
The store goes under ``--tmp`` and is deleted at the end. Not collected by pytest.

    PYTHONPATH=<tree> python <tree>/tools/bench_reader.py --n 1e7 --warm   # another checkout
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _bench_common as bc  # noqa: E402

import fpstore  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tmp", default=bc.DEFAULT_TMP)
    ap.add_argument("--warm", action="store_true", help="call Store.warm() after the load")
    args = ap.parse_args()
    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    n = int(args.n)
    clock = time.perf_counter_ns
    with tempfile.TemporaryDirectory(dir=args.tmp) as d, fpstore.open(Path(d) / "s", k=3) as store:
        stored = bc.random_fps(n, rng)
        pid = store.pipeline.id
        store.bulk_load(np.arange(n), stored, pipeline_id=pid)
        os.sync()  # the load's dirty pages written back now, not during the timed queries
        warmed = ""
        if args.warm:
            t0 = time.perf_counter()
            store.warm()
            warmed = f" after warm() ({time.perf_counter() - t0:.2f} s)"
        print(f"n={n:,} design {store.design.name}{warmed}: {bc.uptime()}")
        lat: dict[str, list[int]] = {"store.query": [], "reader.query": []}

        def queries() -> list[int]:
            half = args.queries // 2
            return np.concatenate(
                [bc.flip_bits(stored[rng.integers(0, n, half)], rng, 1, 1), bc.random_fps(args.queries - half, rng)]
            ).tolist()

        for q in queries()[:200]:  # the run indexes, loaded on the first query after opening
            store.query(fingerprint=q, pipeline_id=pid)
        for _ in range(args.rounds):
            out = lat["store.query"]
            for q in queries():
                t0 = clock()
                store.query(fingerprint=q, pipeline_id=pid)
                out.append(clock() - t0)
            out = lat["reader.query"]
            qs = queries()
            with store.reader() as r:
                for q in qs:
                    t0 = clock()
                    r.query(fingerprint=q, pipeline_id=pid)
                    out.append(clock() - t0)
        print(f"end: {bc.uptime()}")
        print("| path | calls | p50 µs | p99 µs |")
        print("|---|--:|--:|--:|")
        for name, xs in lat.items():
            a = np.array(xs) / 1e3
            print(f"| `{name}` | {len(a):,} | {np.percentile(a, 50):.1f} | {np.percentile(a, 99):.1f} |")
        ratio = np.median(lat["store.query"]) / np.median(lat["reader.query"])
        print(f"\nstore.query p50 ÷ reader.query p50 = {ratio:.2f}")


if __name__ == "__main__":
    main()
