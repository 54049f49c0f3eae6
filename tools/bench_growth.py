"""A store growing by ``add_many``: the longest call, the run count and query latency against n
(docs/benchmarks.md, section "Growth by adds").

    cd /work/main && python tools/bench_growth.py --n 2e7 --merges background
    cd /work/main && python tools/bench_growth.py --report A=a.json B=b.json --plot growth.png

Adds ``--n`` uniform random fingerprints (int keys) in batches of ``--batch`` (1,000), durable,
into a new k = 3 store opened with ``merges=--merges``. Every ``--every`` documents it records,
for the window since the last record: the longest and the p99 ``add_many`` call, the run count
at its end, and single-query latency (``--queries`` calls through one ``Store.reader()``: half
stored fingerprints with one bit flipped, half random; p50 and p99; the major page faults of the
querying thread during them, its reads the disk served), after ``--warmup`` other
such queries through the same reader, untimed (a store in service has read its index before:
without them the reference's p99 is its first reads' CRC checks and page faults). At the sizes listed in
``--reference`` it also bulk-loads the same fingerprints into a fresh store (one run, what a
compaction leaves) and measures its query latency with the same queries: the growing store's p99
over the reference's. At the sizes listed in ``--compacted-at``, a copy of the grown store
(``Store.copy``, made by another process, so that this one's map of the grown store stays as the
adds left it) is compacted, warmed (``Store.warm``: a new file's pages would each fault on
their first read) and measured with the same queries: one run, its documents' keys still in their
records, as the grown store's (the issue's "within 2× of a compacted store"). With
``--compact``, the grown store is compacted at the end and measured again with the last window's
queries. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _bench_common as bc  # noqa: E402

import fpstore  # noqa: E402


def query_latency(store: fpstore.Store, queries: list[int], warmup: list[int]) -> dict[str, float]:
    """p50 and p99 µs of single queries ``queries`` through one reader, after the untimed
    ``warmup`` queries in the same reader."""
    pid = store.pipeline.id
    clock = time.perf_counter_ns
    out = []
    with store.reader() as r:
        for q in warmup:  # the run indexes, and the first reads of chunks and pages, untimed
            r.query(fingerprint=q, pipeline_id=pid)
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_majflt
        for q in queries:
            t0 = clock()
            r.query(fingerprint=q, pipeline_id=pid)
            out.append(clock() - t0)
        faults = resource.getrusage(resource.RUSAGE_THREAD).ru_majflt - faults
    half = len(queries) // 2  # query_set's near queries come first
    return {
        **bc.percentiles_us(out),
        "near_p99": bc.percentiles_us(out[:half])["p99"],
        "random_p99": bc.percentiles_us(out[half:])["p99"],
        "major_faults": faults,
    }


def plot(runs: list[tuple[str, dict[str, Any]]], path: str) -> None:
    """The growth curve of each labelled result: add latency, run count and query latency
    against n (the bulk-loaded and compacted stores' p99 as points)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_add, ax_runs, ax_q) = plt.subplots(3, 1, figsize=(7.5, 9), sharex=True)
    for i, (label, res) in enumerate(runs):
        rows = res["rows"]
        n = [r["n"] / 1e6 for r in rows]
        color = f"C{i}"
        ax_add.plot(n, [r["add_max_ms"] for r in rows], "o-", color=color, label=f"{label}: longest")
        ax_add.plot(n, [r["add_p99_ms"] for r in rows], "--", color=color, label=f"{label}: p99")
        ax_runs.plot(n, [r["runs"] for r in rows], "o-", color=color, label=label)
        ax_q.plot(n, [r["query_p99_us"] for r in rows], "o-", color=color, label=f"{label}: p99")
        ax_q.plot(n, [r["query_p50_us"] for r in rows], ":", color=color, label=f"{label}: p50")
        refs = [(r["n"] / 1e6, r["reference_p99_us"]) for r in rows if "reference_p99_us" in r]
        if refs:
            ax_q.plot(*zip(*refs), "s", color=color, label=f"{label}: bulk-loaded p99")
        if res.get("compacted"):
            ax_q.plot([n[-1]], [res["compacted"]["p99_us"]], "^", color=color, label=f"{label}: compacted p99")
    ax_add.axhline(100, color="grey", lw=0.8)
    ax_add.set_ylabel("add_many of 1,000, ms")
    ax_runs.set_ylabel("runs at the window's end")
    ax_q.set_ylabel("single query, µs")
    ax_q.set_xlabel("documents (millions)")
    for ax in (ax_add, ax_runs, ax_q):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    ax_add.set_title("Growth by add_many (k = 3, merges in the background)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def query_set(stored: np.ndarray, m: int, rng: np.random.Generator) -> list[int]:
    """``m`` queries: half stored fingerprints with one bit flipped, half random."""
    half = m // 2
    return np.concatenate([bc.flip_bits(stored[rng.integers(0, len(stored), half)], rng, 1, 1), bc.random_fps(m - half, rng)]).tolist()


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--n", type=float, default=2e7)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--every", type=float, default=1e6)
    ap.add_argument("--reference", default="1e6,5e6,1e7,2e7", help="sizes at which a bulk-loaded store of the same documents is measured")
    ap.add_argument("--merges", default="background", choices=["background", "inline", "manual"])
    ap.add_argument("--design", default="auto", help="of both stores (auto: chosen from --n)")
    ap.add_argument("--queries", type=int, default=5000)
    ap.add_argument("--warmup", type=int, default=2000, help="untimed queries (others) through the same reader first")
    ap.add_argument("--compact", action="store_true", help="at the end, compact the grown store and measure it with the last queries")
    ap.add_argument(
        "--compacted-at",
        default="",
        help="sizes at which a copy of the grown store is compacted and measured with the same queries",
    )
    ap.add_argument(
        "--keep-mapped",
        type=float,
        default=None,
        metavar="SECONDS",
        help="open the grown store with keep_mapped=SECONDS (its resident pages mapped by a thread of the store)",
    )
    ap.add_argument("--idle", type=float, default=0, metavar="SECONDS", help="after the growth, wait this long, then measure queries again")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tmp", default=bc.DEFAULT_TMP)
    ap.add_argument("--json", default=None)
    ap.add_argument("--plot", help="write a PNG of the growth curve")
    ap.add_argument("--report", nargs="+", metavar="LABEL=JSON", help="only --plot saved --json files, each with its label")
    args = ap.parse_args()
    if args.report:
        saved = [item.split("=", 1) for item in args.report]
        plot([(label, json.loads(Path(f).read_text())) for label, f in saved], args.plot or "growth.png")
        return
    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    n, batch, every = int(args.n), args.batch, int(args.every)
    references = {int(float(x)) for x in args.reference.split(",") if x}
    compacted_at = {int(float(x)) for x in args.compacted_at.split(",") if x}
    fps = bc.random_fps(n, rng)
    rows = []
    print(
        f"growth to n={n:,} by add_many({batch}), merges={args.merges}, design={args.design}, keep_mapped={args.keep_mapped}; {bc.uptime()}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(dir=args.tmp) as d:
        store = fpstore.open(
            os.path.join(d, "grow"), k=3, expected_size=n, merges=args.merges, design=args.design, keep_mapped=args.keep_mapped
        )
        pid = store.pipeline.id
        lat: list[float] = []
        t_start = time.perf_counter()
        for lo in range(0, n, batch):
            t0 = time.perf_counter()
            store.add_many(np.arange(lo, min(n, lo + batch)), fingerprints=fps[lo : lo + batch], pipeline_id=pid)
            lat.append(time.perf_counter() - t0)
            done = min(n, lo + batch)
            if done % every == 0 or done == n:
                queries, warmup = query_set(fps[:done], args.queries, rng), query_set(fps[:done], args.warmup, rng)
                q = query_latency(store, queries, warmup)
                arr = np.array(lat) * 1e3
                row = {
                    "n": done,
                    "seconds": round(time.perf_counter() - t_start, 1),
                    "add_max_ms": round(float(arr.max()), 1),
                    "add_p99_ms": round(float(np.percentile(arr, 99)), 2),
                    "add_p50_ms": round(float(np.percentile(arr, 50)), 2),
                    "runs": len(store.counts()["runs"]),
                    "query_p50_us": round(q["p50"], 1),
                    "query_p99_us": round(q["p99"], 1),
                    "near / random p99 us": f"{q['near_p99']:.1f} / {q['random_p99']:.1f}",
                    "query_major_faults": q["major_faults"],
                }
                if done in references:
                    with fpstore.open(os.path.join(d, f"ref{done}"), k=3, expected_size=n, design=args.design) as ref:
                        ref.bulk_load(np.arange(done), fps[:done], pipeline_id=pid)
                        r = query_latency(ref, queries, warmup)
                    row["reference_p50_us"], row["reference_p99_us"] = round(r["p50"], 1), round(r["p99"], 1)
                    row["reference near / random p99 us"] = f"{r['near_p99']:.1f} / {r['random_p99']:.1f}"
                    row["p99_ratio"] = round(q["p99"] / r["p99"], 2)
                    bc.remove(os.path.join(d, f"ref{done}"))
                if done in compacted_at:
                    # A copy of the grown store as it is now, compacted: one run, the same records.
                    path = os.path.join(d, f"compacted{done}")
                    # Copied by another process: a copy here reads every page of the grown store
                    # through this process's map, and the next windows' queries would find them
                    # mapped (no page fault on a record's first read), unlike the windows before.
                    copier = "import sys, fpstore\nwith fpstore.open(sys.argv[1], readonly=True) as s: s.copy(sys.argv[2])"
                    subprocess.run([sys.executable, "-c", copier, store.path, path], check=True)
                    with fpstore.open(path, k=3) as copy:
                        copy.compact()
                        copy.warm()  # every page mapped: the copy's first reads would count against it
                        c = query_latency(copy, queries, warmup)
                    row["compacted_p50_us"], row["compacted_p99_us"] = round(c["p50"], 1), round(c["p99"], 1)
                    row["compacted near / random p99 us"] = f"{c['near_p99']:.1f} / {c['random_p99']:.1f}"
                    row["p99 ÷ compacted"] = round(q["p99"] / c["p99"], 2)
                    bc.remove(path)
                rows.append(row)
                print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
                lat = []
        merges = store.info()["merges"]
        keeper = store.info()["keep_mapped"]  # its last pass: pages, seconds
        idle = None
        if args.idle:
            # A crawler that pauses: nothing reads or writes for a while, then near-duplicate
            # questions come again (what a kernel reclaiming idle file pages takes meanwhile).
            time.sleep(args.idle)
            queries, warmup = query_set(fps, args.queries, rng), query_set(fps, args.warmup, rng)
            first = query_latency(store, warmup, [])  # the first queries after the pause
            i = query_latency(store, queries, [])
            idle = {
                "idle_s": args.idle,
                "first p50 / p99 us": f"{first['p50']:.1f} / {first['p99']:.1f}",
                "first near / random p99 us": f"{first['near_p99']:.1f} / {first['random_p99']:.1f}",
                "then p50 / p99 us": f"{i['p50']:.1f} / {i['p99']:.1f}",
                "major faults (first, then)": f"{first['major_faults']}, {i['major_faults']}",
            }
        compacted = None
        if args.compact:
            # The same store compacted: one run, its documents' keys still in their records (a
            # bulk load keeps integer keys in a packed column instead).
            t0 = time.perf_counter()
            store.compact()
            seconds = time.perf_counter() - t0
            c = query_latency(store, queries, warmup)
            compacted = {"compact_s": round(seconds, 1), "p50_us": round(c["p50"], 1), "p99_us": round(c["p99"], 1)}
            compacted["near / random p99 us"] = f"{c['near_p99']:.1f} / {c['random_p99']:.1f}"
            compacted["growing p99 ÷ compacted p99"] = round(rows[-1]["query_p99_us"] / c["p99"], 2)
        store.close()
    after = [r for r in rows if r["n"] > 1_000_000]
    print(f"\nmerges: {merges}; {bc.uptime()}")
    if keeper:
        print(f"keep_mapped, after the growth: {keeper}")
    columns = list(dict.fromkeys(k for r in rows for k in r))
    print(bc.md_table(columns, [[r.get(k, "") for k in columns] for r in rows]))
    if after:
        worst = max(after, key=lambda r: r["add_max_ms"])
        print(f"\nlongest add_many after the first 10^6: {worst['add_max_ms']} ms (window ending at n = {worst['n']:,})")
    ratios = [r["p99_ratio"] for r in rows if "p99_ratio" in r]
    if ratios:
        print(f"query p99 ÷ bulk-loaded store's p99 at the reference sizes: {ratios}")
    to_compacted = [(r["n"], r["p99 ÷ compacted"]) for r in rows if "p99 ÷ compacted" in r]
    if to_compacted:
        print(f"query p99 ÷ the compacted copy's p99 (n, ratio): {to_compacted}")
    if idle:
        print(f"after {args.idle:g} s idle, {args.warmup} then {args.queries} queries: {idle}")
    if compacted:
        print(f"the grown store after compact(), the last window's queries: {compacted}")
    bc.write_json(args.json, {"args": vars(args), "rows": rows, "merges": merges, "keep_mapped": keeper, "idle": idle, "compacted": compacted, "machine": bc.machine()})
    if args.plot:
        plot([("fpstore", {"rows": rows, "compacted": compacted})], args.plot)


if __name__ == "__main__":
    main()
