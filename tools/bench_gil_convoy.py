"""What another busy thread does to a write made of many py-lmdb calls (docs/benchmarks.md, section
"Growth by adds"): py-lmdb releases the interpreter lock around each get and put, and takes it
back after, so a write of thousands of puts hands the lock to a busy thread thousands of times.

    python tools/bench_gil_convoy.py [--puts 4000] [--n 4e6]

Times one transaction of ``--puts`` sorted 8-byte puts (``Cursor.putmulti``, a scratch LMDB
environment, no sync) alone; beside a thread running a pure-Python loop; beside a thread
running small numpy calls; and beside ``Store.compact()`` of an fpstore store of ``--n``
random fingerprints in four runs (a merge's work). Medians of the transactions in each phase.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import lmdb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _bench_common as bc  # noqa: E402
import fpstore  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--puts", type=int, default=4000)
    ap.add_argument("--n", type=float, default=4e6)
    ap.add_argument("--tmp", default=bc.DEFAULT_TMP)
    args = ap.parse_args()
    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    d = tempfile.mkdtemp(dir=args.tmp)
    rng = np.random.default_rng(1)
    try:
        env = lmdb.open(os.path.join(d, "scratch"), map_size=1 << 30, max_dbs=2, sync=False)
        db = env.open_db(b"t")

        def write_ms() -> float:
            items = sorted((k.tobytes(), b"x" * 8) for k in rng.integers(0, 2**63, args.puts).astype(">u8"))
            t = time.perf_counter()
            with env.begin(write=True, db=db) as txn:
                txn.cursor().putmulti(items)
            return (time.perf_counter() - t) * 1e3

        def beside(work: Callable[[Callable[[], bool]], None], rounds: int = 30) -> list[float]:
            done = threading.Event()
            th = threading.Thread(target=work, args=(done.is_set,))
            th.start()
            try:
                return [write_ms() for _ in range(rounds)]
            finally:
                done.set()
                th.join()

        def python_loop(stop: Callable[[], bool]) -> None:
            x = 0
            while not stop():
                for i in range(1000):
                    x += i

        def numpy_calls(stop: Callable[[], bool]) -> None:
            a = np.arange(200)
            while not stop():
                for _ in range(100):
                    a.sum()

        print(f"one transaction of {args.puts:,} puts; {bc.uptime()}")
        print(f"alone: {np.median([write_ms() for _ in range(30)]):.1f} ms")
        print(f"beside a pure-Python loop: {np.median(beside(python_loop)):.1f} ms")
        print(f"beside small numpy calls: {np.median(beside(numpy_calls)):.1f} ms")
        n = int(args.n)
        fps = bc.random_fps(n, rng)
        with fpstore.open(os.path.join(d, "store"), k=3, expected_size=n, merges="manual") as s:
            for i in range(4):
                part = slice(i * n // 4, (i + 1) * n // 4)
                s.bulk_load(np.arange(part.start, part.stop, dtype=np.uint64), fps[part], pipeline_id=s.pipeline.id)
            finished = threading.Event()
            seconds = [0.0]

            def compact() -> None:
                t = time.perf_counter()
                s.compact()
                seconds[0] = time.perf_counter() - t
                finished.set()

            th = threading.Thread(target=compact)
            th.start()
            during = []
            while not finished.is_set():
                during.append(write_ms())
            th.join()
        print(
            f"beside compact() of {n:,} in 4 runs ({seconds[0]:.2f} s): median {np.median(during):.1f} ms, "
            f"p90 {np.percentile(during, 90):.1f}, max {max(during):.1f} ({len(during)} transactions)"
        )
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
