"""The kernel's radix sort of uint64 keys (docs/benchmarks.md, "Sorting a run's keys"): the full
sort that first splits by the top 11 bits (``msd_min`` at its default) against the same kernel's
plain LSD passes (``msd_min`` above n) and numpy, with and without the order, in one process,
rounds alternating; medians of ``--rounds``.

    cd /work/main && python tools/bench_sort.py
    cd /work/main && python tools/bench_sort.py --n 1e6 4e6 16777216 --rounds 7

Keys: uniform random uint64 (what a run's permuted fingerprints and key hashes are). Not
collected by pytest; tunes nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _bench_common as bc  # noqa: E402

from fpstore import _backend  # noqa: E402

LSD_ONLY = 1 << 62


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--n", type=float, nargs="*", default=[1 << 20, 1 << 22, 1 << 24])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    kernel = _backend.load("search")
    print(f"kernel {kernel.__name__}; {bc.uptime()}")
    print("| n | what | LSD passes only s | split by the top bits first s | numpy s | LSD ÷ split | numpy ÷ split |")
    print("|--:|---|--:|--:|--:|--:|--:|")
    rng = np.random.default_rng(1)
    for n in (int(x) for x in args.n):
        keys = rng.integers(0, 2**64, n, dtype=np.uint64)
        for what, with_order in (("sort", False), ("argsort (stable)", True)):
            runs: dict[str, Callable[[], object]] = {
                "lsd": lambda: kernel.radix_sort(keys, with_order, 64, LSD_ONLY),
                "split": lambda: kernel.radix_sort(keys, with_order, 64),
                "numpy": (lambda: np.argsort(keys, kind="stable")) if with_order else (lambda: np.sort(keys)),
            }
            times: dict[str, list[float]] = {name: [] for name in runs}
            for _ in range(args.rounds):
                for name, fn in runs.items():
                    t = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - t)
            med = {name: statistics.median(ts) for name, ts in times.items()}
            print(
                f"| {n:,} | {what} | {med['lsd']:.3f} | {med['split']:.3f} | {med['numpy']:.3f} "
                f"| {med['lsd'] / med['split']:.2f} | {med['numpy'] / med['split']:.2f} |"
            )
    print(f"end: {bc.uptime()}")


if __name__ == "__main__":
    main()
