"""The incremental tier's probes through its B-trees against the writer's copy in memory
(docs/benchmarks.md, "The crawler's write path"), in one process, alternating.

    cd /work/main && python tools/bench_incremental.py
    cd /work/main && python tools/bench_incremental.py --entries 256 4096

For each E in ``--entries``: a store (k = 3, design ``auto``, ``flush_entries=0``, so nothing
leaves the incremental tier) gets E uniform random fingerprints through ``add_many``, then one
``add`` (a write the store's hooks see, so the writer holds its copy). In one read transaction
of that last commit, ``--rounds`` rounds alternate the two ways of answering: the copy, and the
B-trees (the copy hidden from the tables for the pass). Each round times ``Store.query_many``
of 400 of the fingerprints in batches of 4 and of 16 (its incremental part is
``probe_batch``), ``--probes`` single probes (``IncrementalTables.probe``), the same
fingerprints as groups of 16 (``probe_each``) and as one batch of 1,000 (``probe_each``). Figures: µs per fingerprint, median
of the rounds; the answers of both ways are compared (equal). The store goes under ``--tmp`` and
is deleted at the end. Not collected by pytest; tunes nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _bench_common as bc  # noqa: E402

import fpstore  # noqa: E402

K = 3


def passes(store, inc, txn, qs: list[int]) -> dict[str, tuple[float, list]]:
    """µs per fingerprint and the answers of each call shape."""
    out = {}
    pid = store.pipeline.id
    for m in (4, 16):  # query_many's small batches (its own read transaction: the same commit)
        t = time.perf_counter()
        rows = [store.query_many(np.array(qs[i : i + m], np.uint64), pipeline_id=pid) for i in range(0, 400, m)]
        out[f"query_many of {m}"] = ((time.perf_counter() - t) / 400 * 1e6, [tuple(a.tolist() for a in r) for r in rows])
    t = time.perf_counter()
    single = [inc.probe(txn, q, K) for q in qs]
    out["probe"] = ((time.perf_counter() - t) / len(qs) * 1e6, single)
    t = time.perf_counter()
    groups = [d for i in range(0, len(qs), 16) for d in inc.probe_each(txn, qs[i : i + 16], K)]
    out["groups of 16"] = ((time.perf_counter() - t) / len(qs) * 1e6, groups)
    t = time.perf_counter()
    batch = inc.probe_each(txn, qs[:1000], K)
    out["batch of 1,000"] = ((time.perf_counter() - t) / min(len(qs), 1000) * 1e6, batch)
    return out


def run(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    print(f"{bc.uptime()}", flush=True)
    compare: dict[int, dict[int, float]] = {}
    print("| incremental documents | call | B-trees µs/fp | copy µs/fp | ratio |")
    print("|--:|---|--:|--:|--:|")
    for e in args.entries:
        with tempfile.TemporaryDirectory(dir=args.tmp) as tmp, fpstore.open(Path(tmp) / "s", k=K, flush_entries=0) as store:
            pid = store.pipeline.id
            store.add_many([f"d{i}" for i in range(e)], fingerprints=bc.random_fps(e, rng), pipeline_id=pid)
            store.add("last", fingerprint=int(bc.random_fps(1, rng)[0]), pipeline_id=pid)
            inc = store._cat.incremental
            times: dict[str, dict[str, list[float]]] = {"trees": {}, "copy": {}}
            with store._storage.read() as txn:
                if inc._docs(txn) is None:
                    raise SystemExit(f"E={e}: the writer holds no copy (more than MEMORY_MAX documents?)")
                # Stored fingerprints with a bit flipped (each matches) and random ones, half each.
                stored = inc.table0(txn)[:, 0].astype(np.uint64)
                qs = np.concatenate([bc.flip_bits(stored[rng.integers(0, len(stored), args.probes // 2)], rng), bc.random_fps(args.probes - args.probes // 2, rng)])
                qs = qs.tolist()
                for rnd in range(args.rounds):
                    for way in ("copy", "trees") if rnd % 2 else ("trees", "copy"):
                        held = inc._committed
                        if way == "trees":
                            inc._committed = None
                        try:
                            res = passes(store, inc, txn, qs)
                        finally:
                            inc._committed = held
                        for call, (us, answers) in res.items():
                            times[way].setdefault(call, []).append(us)
                            if rnd == 0:
                                times.setdefault("answers", {}).setdefault(call, []).append(answers)
            for call, pair in times["answers"].items():
                if pair[0] != pair[1]:
                    raise SystemExit(f"E={e}, {call}: the copy and the B-trees answer differently")
            for call in times["trees"]:
                a, b = statistics.median(times["trees"][call]), statistics.median(times["copy"][call])
                print(f"| {e:,} | {call} | {a:.2f} | {b:.2f} | {b / a:.2f} |", flush=True)
            compare[e] = compare_ns(stored, np.array(qs, dtype=np.uint64), args.rounds)
    print("\n`search.compare_all` (what `probe_each` runs on the copy), ns per (query, document) pair, median of the rounds:")
    for e, per in compare.items():
        print(f"- {e:,} documents: " + ", ".join(f"{m} queries {ns:.2f}" for m, ns in per.items()))
    print(f"{bc.uptime()}")


def compare_ns(stored: np.ndarray, qs: np.ndarray, rounds: int) -> dict[int, float]:
    """ns per pair of one ``search.compare_all`` call of 16 and of 1,000 queries against ``stored``."""
    from fpstore.index import search

    out = {}
    for m in (16, 1000):
        batch = qs[:m]
        reps = max(1, 20_000_000 // (m * len(stored)))
        per = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(reps):
                search.compare_all(batch, stored, K)
            per.append((time.perf_counter() - t0) / reps / (m * len(stored)) * 1e9)
        out[m] = statistics.median(per)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--entries", type=int, nargs="*", default=[1024, 4096, 16000])
    ap.add_argument("--probes", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tmp", default=bc.DEFAULT_TMP)
    args = ap.parse_args()
    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    run(args)


if __name__ == "__main__":
    main()
