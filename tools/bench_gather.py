"""Group commit with and without gathering (docs/benchmarks.md, section "The crawler's write
path", "Gathering a group"): C threads calling ``Store.add`` in a loop, the leader's wait for the
callers of its last group on (``fpstore.store.group.GATHER_MAX_S`` = 2 ms) and off (0), A/B in
one process.

    cd /work/main && python tools/bench_gather.py
    cd /work/main && python tools/bench_gather.py --n 1e5 --callers 2 16 --seconds 1 --rounds 1   # a quick look

A store of ``--n`` uniform random fingerprints bulk-loaded (k = 3, design ``auto``, durable
commits). For each round and each C in ``--callers``, the two settings run one after the other
(order alternating by round), each a window of ``--seconds``: every thread adds fresh random
fingerprints under fresh keys as fast as it can. Figures: adds/s (adds ÷ window), p99 of each
add's wall time, and the mean group (the store's group-commit counters); medians of the rounds.
Not collected by pytest; tunes nothing. The store goes under ``--tmp`` and is deleted at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _bench_common as bc  # noqa: E402

import fpstore  # noqa: E402
from fpstore.store import group  # noqa: E402


def window(store: fpstore.Store, pid: str, callers: int, seconds: float, tag: str, seed: int) -> tuple[float, float, float]:
    stop = time.perf_counter() + seconds
    counts = [0] * callers
    lat: list[list[int]] = [[] for _ in range(callers)]

    def work(i: int) -> None:
        fps = np.random.default_rng(seed * 1000 + i).integers(0, 2**64, 200_000, dtype=np.uint64).tolist()
        j = 0
        while time.perf_counter() < stop:
            t = time.perf_counter_ns()
            store.add(f"{tag}-{seed}-{i}-{j}", fingerprint=fps[j], pipeline_id=pid)
            lat[i].append(time.perf_counter_ns() - t)
            j += 1
        counts[i] = j

    g0, r0 = store._adds.groups, store._adds.requests
    t0 = time.perf_counter()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    all_lat = np.concatenate([np.array(x, dtype=np.float64) for x in lat]) / 1e6
    groups = max(1, store._adds.groups - g0)
    return sum(counts) / wall, float(np.percentile(all_lat, 99)), (store._adds.requests - r0) / groups


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--callers", type=int, nargs="*", default=[1, 2, 4, 16, 64])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tmp", default=bc.DEFAULT_TMP)
    args = ap.parse_args()
    n = int(args.n)
    path = bc.fresh_dir(Path(args.tmp) / "gather")
    start = bc.uptime()
    results: dict[tuple[int, str], list[tuple[float, float, float]]] = {}
    on = group.GATHER_MAX_S
    try:
        with fpstore.open(path, k=3, expected_size=n) as store:
            pid = store.pipeline.id
            store.bulk_load(np.arange(n), bc.random_fps(n, np.random.default_rng(args.seed)), pipeline_id=pid)
            for r in range(args.rounds):
                for c in args.callers:
                    for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
                        group.GATHER_MAX_S = on if mode == "on" else 0.0
                        results.setdefault((c, mode), []).append(window(store, pid, c, args.seconds, mode, r))
    finally:
        group.GATHER_MAX_S = on
        bc.remove(path)
    print(f"<!-- {' '.join(sys.argv)} -->\nfpstore {bc.code_version()}. Load before: `{start}`; after: `{bc.uptime()}`.\n")
    rows = []
    for c in args.callers:
        off = [statistics.median(x) for x in zip(*results[(c, "off")])]
        gathered = [statistics.median(x) for x in zip(*results[(c, "on")])]
        rows.append([c, f"{off[0]:,.0f}", f"{off[1]:.1f}", f"{off[2]:.1f}", f"{gathered[0]:,.0f}", f"{gathered[1]:.1f}", f"{gathered[2]:.1f}",
                     f"{gathered[0] / off[0]:.2f}x"])
    print(bc.md_table(["callers", "off: adds/s", "p99 ms", "group", "gathering: adds/s", "p99 ms", "group", "adds/s ratio"], rows))


if __name__ == "__main__":
    main()
