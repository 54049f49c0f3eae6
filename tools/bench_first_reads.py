"""The first reads of a freshly opened store (docs/benchmarks.md, section "A run chunk's checksum
on its first read"): what checking each run chunk's CRC-32 on its first read costs.

    python tools/bench_first_reads.py [--n 1e7] [--queries 300] [--rounds 3]

Bulk-loads ``--n`` uniform random fingerprints (k = 3, design ``auto``) once, then per round, each
in a new process (a fresh open, nothing cached): ``--queries`` single queries without ``warm()``
(stored fingerprints with one bit flipped; p50 / p90 / mean µs, and the first), ``warm()``'s
time, then as many other such queries (none read before but by ``warm()``: p50 / p90 / p99),
and the first queries again. Medians over the rounds. ``--evict`` drops the store's file from the
page cache before each open (``posix_fadvise(DONTNEED)``): a start on a machine that has not read
it yet. Run it with each tree's
``PYTHONPATH`` to compare two commits on the same store (``--store`` keeps it between runs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _bench_common as bc  # noqa: E402

import fpstore  # noqa: E402


def one_open(store: str, seed: int, queries: int) -> dict[str, float]:
    """One fresh open's first queries, its warm() and the queries after it (run in a child)."""
    with fpstore.open(store, readonly=True) as s:
        pid = s.pipeline.id
        fps, _ = s.fingerprints()
        rng = np.random.default_rng(seed)
        q = (np.asarray(fps, np.uint64)[rng.integers(0, len(fps), queries)] ^ np.uint64(1)).tolist()
        other = (np.asarray(fps, np.uint64)[rng.integers(0, len(fps), queries)] ^ np.uint64(2)).tolist()
    with fpstore.open(store, readonly=True) as s:  # a new open: nothing read yet
        clock = time.perf_counter_ns
        first = []
        for x in q:
            t = clock()
            s.query(fingerprint=x, pipeline_id=pid)
            first.append(clock() - t)
        t = time.perf_counter()
        s.warm()
        warm_s = time.perf_counter() - t
        fresh = []  # queries this process has not asked before: what warm() alone prepared
        for x in other:
            t = clock()
            s.query(fingerprint=x, pipeline_id=pid)
            fresh.append(clock() - t)
        after = []
        for x in q:
            t = clock()
            s.query(fingerprint=x, pipeline_id=pid)
            after.append(clock() - t)
    f, a, o = np.array(first) / 1e3, np.array(after) / 1e3, np.array(fresh) / 1e3
    return {
        "first_p50": float(np.percentile(f, 50)),
        "first_p90": float(np.percentile(f, 90)),
        "first_mean": float(f.mean()),
        "first_query": float(f[0]),
        "warm_s": warm_s,
        "after_p50": float(np.percentile(a, 50)),
        "other_p50": float(np.percentile(o, 50)),
        "other_p90": float(np.percentile(o, 90)),
        "other_p99": float(np.percentile(o, 99)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--n", type=float, default=1e7)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--store", default=None, help="a store to use, or to make (kept); default: a new one in --tmp")
    ap.add_argument("--tmp", default=bc.DEFAULT_TMP)
    ap.add_argument("--evict", action="store_true", help="drop the store's file from the page cache before each open")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one_open(args.child[0], int(args.child[1]), args.queries)))
        return
    n = int(args.n)
    store = args.store or os.path.join(args.tmp, f"first_reads_{n}")
    if not os.path.exists(os.path.join(store, "data.mdb")):
        fps = bc.random_fps(n, np.random.default_rng(1))
        with fpstore.open(store, k=3, expected_size=n) as s:
            s.bulk_load(np.arange(n, dtype=np.uint64), fps, pipeline_id=s.pipeline.id)
    print(f"fpstore {fpstore.__file__}; n = {n:,}; {bc.uptime()}")
    rows = []
    for r in range(args.rounds):
        if args.evict:  # the store's pages out of the page cache: a restart on a cold machine
            fd = os.open(os.path.join(store, "data.mdb"), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        out = subprocess.run(
            [sys.executable, __file__, "--queries", str(args.queries), "--child", store, str(r + 5)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    med = {k: float(np.median([row[k] for row in rows])) for k in rows[0]}
    print(
        f"first {args.queries} queries of a fresh open: p50 {med['first_p50']:.0f} µs, p90 {med['first_p90']:.0f}, "
        f"mean {med['first_mean']:.0f}, the first {med['first_query']:.0f}; warm() {med['warm_s']:.2f} s; "
        f"after warm(): other queries p50 {med['other_p50']:.1f} µs, p90 {med['other_p90']:.1f}, p99 {med['other_p99']:.1f}; "
        f"the same queries again p50 {med['after_p50']:.1f} (medians of {args.rounds} opens)"
    )


if __name__ == "__main__":
    main()
