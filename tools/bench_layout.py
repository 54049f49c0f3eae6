"""Composite 16-byte keys against a dupsort table for the store's incremental tables (figures in
docs/format.md, section "Sub-databases").

    python tools/bench_layout.py [--n 200000] [--repeat 5]

Each layout stores n (permuted fingerprint, id) entries in one LMDB sub-database, as the store's
incremental tables would: composite = key fingerprint(8, BE) || id(8, BE) with an empty value;
dupsort = key fingerprint(8, BE) with id(8, BE) as a sorted duplicate value. It reports the pages
each uses, insert rate in batches of 1,000 (durable commits) and prefix-scan probe rate
(16-bit prefix ranges, the r4 design at this n), medians of --repeat runs, in one process.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import struct
import tempfile
import time

import lmdb
import numpy as np

PAIR = struct.Struct(">QQ")
U64 = struct.Struct(">Q")


def run(layout: str, fps: np.ndarray, ids: np.ndarray, queries: np.ndarray) -> dict[str, float]:
    d = tempfile.mkdtemp(dir=os.environ.get("TMPDIR"))
    try:
        env = lmdb.open(d, lib_version=0, max_dbs=4, map_size=1 << 32)
        db = env.open_db(b"t", dupsort=(layout == "dupsort"))
        t0 = time.perf_counter()
        for lo in range(0, len(fps), 1000):
            f, i = fps[lo : lo + 1000], ids[lo : lo + 1000]
            order = np.lexsort((i, f))
            with env.begin(write=True) as txn:
                cur = txn.cursor(db=db)
                if layout == "composite":
                    cur.putmulti([(PAIR.pack(int(f[j]), int(i[j])), b"") for j in order.tolist()])
                else:
                    cur.putmulti([(U64.pack(int(f[j])), U64.pack(int(i[j]))) for j in order.tolist()])
        insert = len(fps) / (time.perf_counter() - t0)
        pages = env.stat()["psize"] * (env.info()["last_pgno"] + 1)
        t0 = time.perf_counter()
        found = 0
        with env.begin() as txn:
            cur = txn.cursor(db=db)
            for q in queries.tolist():
                lo, hi = q & ~0xFFFFFFFFFFFF, q | 0xFFFFFFFFFFFF
                if cur.set_range(U64.pack(lo) + (bytes(8) if layout == "composite" else b"")):
                    for key in cur.iternext(keys=True, values=False):
                        if U64.unpack_from(key)[0] > hi:
                            break
                        found += 1
        probe = len(queries) / (time.perf_counter() - t0)
        env.close()
        return {"bytes_per_entry": pages / len(fps), "insert_per_s": insert, "probes_per_s": probe, "found": found}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    fps = rng.integers(0, 2**64, size=args.n, dtype=np.uint64)
    ids = np.arange(1, args.n + 1, dtype=np.uint64)
    queries = fps[rng.integers(0, args.n, 20_000)]
    results: dict[str, list[dict[str, float]]] = {"composite": [], "dupsort": []}
    for _ in range(args.repeat):
        for layout in results:
            results[layout].append(run(layout, fps, ids, queries))
    print(f"n = {args.n:,}, medians of {args.repeat}\n")
    print("| layout | bytes/entry | insert/s (batches of 1,000, durable) | 16-bit prefix probes/s |")
    print("|---|---:|---:|---:|")
    for layout, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print(f"| {layout} | {med['bytes_per_entry']:.1f} | {med['insert_per_s']:,.0f} | {med['probes_per_s']:,.0f} |")


if __name__ == "__main__":
    main()
