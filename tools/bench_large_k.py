"""Query cost at large k: the radius the calibration asks for (docs/benchmarks.md, section
"Large k: the radius the data asks for").

    python tools/bench_large_k.py [--n 1000000] [--ks 3,5,8,10] [--queries 2000] [--batch 100000]
                                  [--designs auto,r8,r4f1] [--rounds 1] [--warm] [--sample 200] [--pairs]

For each k and design (``auto``, the design fpstore picks, and any catalogue design named for
that k) the store is bulk-loaded with n random fingerprints, then queried with stored
fingerprints carrying k//2 flipped bits: single queries (one Python call each; p50/p99 µs), and
one ``query_many`` batch (queries/s). Answers are checked against numpy brute force on a sample
(recall 1.0, no extra rows). Numpy brute force on the same stored array runs in the same process
as the baseline, one query at a time (``_bench_common.brute_force``), so that 10^8 fingerprints fit. With ``--rounds``, the
designs of a k run again in reverse order each round; ``--warm`` calls ``Store.warm()`` before the
queries (the state the issue's latency targets name); ``--pairs`` times all pairs within k
(``Store.iter_near_duplicate_pairs``, the streamed join over the store's own tables) last.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import fpstore
from fpstore.index.design import AUTO_DESIGNS, designs_for_k

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _bench_common as bc  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--ks", default="3,5,8,10")
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument(
        "--designs", default="auto", help="comma-separated: auto, auto-pairs and/or catalogue names (skipped at a k whose catalogue lacks them)"
    )
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--warm", action="store_true", help="call Store.warm() after the load, before the queries")
    ap.add_argument("--pairs", action="store_true", help="also time all pairs within k (the streamed join)")
    ap.add_argument("--sample", type=int, default=200, help="queries checked against brute force")
    args = ap.parse_args()
    n = int(args.n)
    rng = np.random.default_rng(7)
    fps = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    print(f"n = {n:,}; load {os.getloadavg()[0]:.1f}")
    print("| k | design | tables | probes/query | single p50 µs | single p99 µs | query_many q/s | brute force q/s | B/doc | load s | all pairs s | exact |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for k in (int(x) for x in args.ks.split(",")):
        names = [name for name in args.designs.split(",") if name in AUTO_DESIGNS or name in {d.name for d in designs_for_k(k)}]
        for r in range(args.rounds):
            for name in names if r % 2 == 0 else names[::-1]:
                measure(k, n, name, fps, rng, args)


def measure(k: int, n: int, name: str, fps: np.ndarray, rng: np.random.Generator, args: argparse.Namespace) -> None:
    """One store of design ``name`` at radius ``k``: its row of the table."""
    d = tempfile.mkdtemp(dir=os.environ.get("TMPDIR"))
    try:
        with fpstore.open(os.path.join(d, "s"), k=k, expected_size=n, design=name) as s:
            pid = s.pipeline.id
            t0 = time.perf_counter()
            s.bulk_load(np.arange(n, dtype=np.uint64), fps, pipeline_id=pid)
            load_s = time.perf_counter() - t0
            if args.warm:
                s.warm()
            flips = np.zeros(args.batch, np.uint64)
            for _ in range(k // 2):
                flips |= np.uint64(1) << rng.integers(0, 64, args.batch).astype(np.uint64)
            q = fps[rng.integers(0, n, args.batch)] ^ flips
            lat = []
            for x in q[: args.queries].tolist():
                t0 = time.perf_counter()
                s.query(fingerprint=x, pipeline_id=pid)
                lat.append(time.perf_counter() - t0)
            lat_us = np.array(lat) * 1e6
            t0 = time.perf_counter()
            qi, ids, dist = s.query_many(q, pipeline_id=pid)
            batch_rate = len(q) / (time.perf_counter() - t0)
            sample = q[: args.sample]
            t0 = time.perf_counter()
            truth = bc.brute_force(fps, sample.tolist(), k)
            brute_rate = len(sample) / (time.perf_counter() - t0)
            want = {(i, int(j)) for i, found in enumerate(truth) for j in found}
            in_sample = qi < len(sample)
            keys = s.keys_of(ids[in_sample])
            got = set(zip(qi[in_sample].tolist(), keys))
            exact = got == want
            size = bc.store_sizes(s)["file_size"]
            pairs_s = "–"
            if args.pairs:
                t0 = time.perf_counter()
                for _ in s.iter_near_duplicate_pairs(k):
                    pass
                pairs_s = f"{time.perf_counter() - t0:.1f}"
            label = f"{s.design.name} ({name})" if name in AUTO_DESIGNS else s.design.name
            print(
                f"| {k} | {label} | {len(s.design.tables)} | {s.design.probes_per_query()} | "
                f"{np.percentile(lat_us, 50):.0f} | {np.percentile(lat_us, 99):.0f} | {batch_rate:,.0f} | {brute_rate:,.0f} | "
                f"{size / n:.0f} | {load_s:.1f} | {pairs_s} | {exact} |",
                flush=True,
            )
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
