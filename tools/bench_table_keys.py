"""Reading every key of an LMDB table at once, as ``Lsm.dead_ids`` (the tombstones, read by every
``query_many``) and the incremental tables' scans do (docs/benchmarks.md, section "Reading a
table's keys").

    cd /work/main && python tools/bench_table_keys.py
    cd /work/main && python tools/bench_table_keys.py --n 1e5 1e6 --repeat 5

A table of n 8-byte keys (big-endian 1..n, as tombstones are stored) is read in one read
transaction (``buffers=True``, as the store reads) three ways: ``b"".join`` of the cursor's keys
(a list of memory views first), ``b"".join`` of a ``bytes`` copy of each, and
``fpstore.store.incremental.table_keys`` (a ``bytearray`` appended key by key). Medians of
``--repeat`` reads, interleaved. Not collected by pytest; tunes nothing.
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

import lmdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _bench_common as bc  # noqa: E402

from fpstore.store.incremental import table_keys  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--n", type=float, nargs="*", default=[1e4, 1e5, 1e6])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--tmp", default=bc.DEFAULT_TMP)
    args = ap.parse_args()
    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    start = bc.uptime()
    rows = []
    for n in (int(x) for x in args.n):
        with tempfile.TemporaryDirectory(dir=args.tmp) as d:
            env = lmdb.open(d, map_size=1 << 32, max_dbs=1)
            db = env.open_db(b"dead")
            with env.begin(write=True) as txn:
                txn.cursor(db=db).putmulti([(struct.pack(">Q", i), b"") for i in range(1, n + 1)])
            ways = {
                "join of views": lambda txn, db=db: b"".join(txn.cursor(db=db).iternext(keys=True, values=False)),
                "join of copies": lambda txn, db=db: b"".join([bytes(k) for k in txn.cursor(db=db).iternext(keys=True, values=False)]),
                "table_keys": lambda txn, db=db: table_keys(txn, db),
            }
            times: dict[str, list[float]] = {name: [] for name in ways}
            with env.begin(buffers=True) as txn:
                want = None
                for _ in range(args.repeat):
                    for name, way in ways.items():
                        t = time.perf_counter()
                        got = bytes(way(txn))
                        times[name].append(time.perf_counter() - t)
                        want = want or got
                        assert got == want, name
            env.close()
        med = {name: statistics.median(t) for name, t in times.items()}
        rows.append([bc.fmt_n(n)] + [f"{med[name] * 1e3:,.1f}" for name in ways] + [f"{med['join of views'] / med['table_keys']:.1f}x"])
    print(f"<!-- {' '.join(sys.argv)} -->\nfpstore {bc.code_version()}. Load before: `{start}`; after: `{bc.uptime()}`.\n")
    print(bc.md_table(["keys", "join of views ms", "join of copies ms", "table_keys ms", "views ÷ table_keys"], rows))


if __name__ == "__main__":
    main()
