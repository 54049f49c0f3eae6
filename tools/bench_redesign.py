"""Changing the radius of a store: ``Store.redesign`` against loading the documents again
(docs/benchmarks.md, section "Redesign").

    cd /work/main && python tools/bench_redesign.py

A store of ``--n`` (10^6) fingerprints (1 % planted near-duplicates) made at k = 3 the way a store
grows: a bulk load in four runs, then ``--adds`` documents by ``add_many`` (flushed runs and the
incremental tables). For each of ``--rounds`` rounds, on a fresh copy of that store (the copy is not
timed), the wall time of (the design catalogue, built once per process, is built before):

- ``redesign``: ``Store.redesign(5)`` on the copy;
- ``bulk_load``: ``bulk_load`` of the same keys and fingerprints into a new k = 5 store, the fastest
  way to load them again when the fingerprints are at hand (no read, no fingerprinting);
- ``export+import``: the operator's way without redesign, ``fpstore-admin export`` of the k = 3 store
  piped into ``fpstore-admin import`` of a new k = 5 store (the library calls, in this process).

Medians of the rounds and their ratios; then the redesigned copy and the bulk-loaded store answer
``--queries`` queries at k = 5 and k = 3, compared by key (ids differ). The stores go under
``--tmp`` and are deleted. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
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
from fpstore.admin.exchange import export_store, import_stream  # noqa: E402


def answers(store: fpstore.Store, queries: np.ndarray, k: int) -> set[tuple[int, object, int]]:
    q, ids, dist = store.query_many(queries, pipeline_id=store.pipeline.id, k=k)
    return {(int(a), key, int(d)) for a, key, d in zip(q.tolist(), store.keys_of(ids), dist.tolist())}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--adds", type=int, default=22_500, help="documents added by add_many after the bulk load")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tmp", default=bc.DEFAULT_TMP)
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = ap.parse_args()
    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    n = int(args.n)
    fps = bc.planted_fps(n, rng)
    keys = np.arange(n, dtype=np.int64)
    bulk = n - args.adds
    print(f"n={n:,} ({bulk:,} bulk-loaded in 4 runs, {args.adds:,} by add_many); {bc.uptime()}")
    # The design catalogue is built once per process (about 0.6 s): build it before any timing.
    fpstore.index.design.design_for(5, n)
    times: dict[str, list[float]] = {"redesign": [], "bulk_load": [], "export+import": []}
    with tempfile.TemporaryDirectory(dir=args.tmp) as d:
        base = os.path.join(d, "base")
        with fpstore.open(base, k=3) as s:
            pid = s.pipeline.id
            s.bulk_load(keys[:bulk], fps[:bulk], pipeline_id=pid, max_run=bulk // 4 + 1)
            for lo in range(bulk, n, 1000):
                s.add_many(keys[lo : lo + 1000], fingerprints=fps[lo : lo + 1000], pipeline_id=pid)
            counts = s.counts()
            print(f"base store: design {s.design.name}, {len(counts['runs'])} runs, {counts['incremental_entries']:,} incremental entries")
        for r in range(args.rounds):
            copy = os.path.join(d, f"copy{r}")
            shutil.copytree(base, copy, ignore=shutil.ignore_patterns("lock.mdb", "writer.lock"))
            with fpstore.open(copy) as s:
                t0 = time.perf_counter()
                result = s.redesign(5)
                times["redesign"].append(time.perf_counter() - t0)
            loaded = os.path.join(d, f"loaded{r}")
            t0 = time.perf_counter()
            with fpstore.open(loaded, k=5) as s:
                s.bulk_load(keys, fps, pipeline_id=s.pipeline.id)
            times["bulk_load"].append(time.perf_counter() - t0)
            imported = os.path.join(d, f"imported{r}")
            t0 = time.perf_counter()
            buf = io.BytesIO()
            with fpstore.open(base, readonly=True) as s:
                export_store(s, buf)
            buf.seek(0)
            with fpstore.open(imported, k=5):
                pass  # the k = 5 store import fills (import into an existing store)
            import_stream(buf, imported)
            times["export+import"].append(time.perf_counter() - t0)
            print(f"round {r + 1}: " + ", ".join(f"{name} {v[-1]:.2f} s" for name, v in times.items()), flush=True)
            if r < args.rounds - 1:
                for path in (copy, loaded, imported):
                    shutil.rmtree(path)
        queries = bc.make_queries(fps, args.queries, rng)
        with fpstore.open(copy, readonly=True) as a, fpstore.open(loaded, readonly=True) as b, fpstore.open(imported, readonly=True) as c:
            same = {k: answers(a, queries, k) == answers(b, queries, k) == answers(c, queries, k) for k in (5, 3)}
            found = len(answers(a, queries, 5))
            print(f"designs: redesigned {a.design.name}, bulk-loaded {b.design.name}, imported {c.design.name}")
    med = {name: statistics.median(v) for name, v in times.items()}
    print(f"\nredesign {result['design_before']} -> {result['design_after']}, n = {n:,}; medians of {args.rounds} rounds")
    print(
        bc.md_table(
            ["way", "seconds (median)", "rounds", "÷ redesign"],
            [
                [name, f"{med[name]:.2f}", " ".join(f"{x:.2f}" for x in v), f"{med[name] / med['redesign']:.2f}"]
                for name, v in times.items()
            ],
        )
    )
    print(f"\nidentical answers to {args.queries:,} queries ({found:,} matches at k = 5): k=5 {same[5]}, k=3 {same[3]}; {bc.uptime()}")
    bc.write_json(args.json, {"n": n, "times": times, "medians": med, "identical": same, "machine": bc.machine()})
    if not all(same.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
