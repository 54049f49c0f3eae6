"""Batch queries at the sizes crawlers use (docs/benchmarks.md, section "Batch queries by chunk
size"): ``query_many`` + ``keys_of`` in chunks of 16 .. 8,192 queries against faiss's exact
``IndexBinaryMultiHash`` configurations, in the same process.

    cd /work/main && python tools/bench_chunks.py --json /work/bench-tmp/bench_chunks.json --plot docs/img/chunks.png
    cd /work/main && python tools/bench_chunks.py --n 1e6 --rounds 1          # a quick look
    cd /work/main && python tools/bench_chunks.py --report /work/bench-tmp/bench_chunks.json --plot docs/img/chunks.png

For each n (``--n``, default 10^6 and 10^7): ``n`` uniform random fingerprints are bulk-loaded
under the integer keys 0..n-1 (k = 3, design ``auto``), ``warm()`` is called, and faiss indexes the
same fingerprints in each configuration of ``_bench_common.FAISS_CONFIGS`` (one OpenMP thread;
a configuration is skipped when its index would not fit in ``--faiss-ram`` GiB). Queries: 80 %
stored fingerprints with 1-3 bits flipped, 20 % uniform random (``make_queries``). For each chunk
size c, the same ``max(20 c, --min-queries)`` queries go through, c at a time:

* fpstore: ``store.query_many(chunk, k=3)`` then ``store.keys_of(ids)`` (keys, as a crawler needs;
  one thread for chunks below ``--threads-from`` (20,000) queries, as faiss, every core of the
  process for larger ones; ``query_many`` itself merges on threads from 2,048 queries in a store
  of 10^6 or more, which ``--threads-from 0`` keeps);
* faiss: ``index.range_search(chunk, 4)`` (labels are the keys: faiss stores none of its own).

Rounds alternate the contenders (``--rounds``, default 3); each figure is the median rate of the
rounds. The ratio is fpstore ÷ the best faiss configuration at that chunk size. Before timing,
one chunk of each size is answered by both and compared (same (query, key, distance) triples):
a benchmark of wrong answers would be worthless. The store goes under ``--tmp`` and is deleted at
the end. Not collected by pytest; tunes nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _bench_common as bc  # noqa: E402

import fpstore  # noqa: E402

K = 3
CHUNKS = (16, 64, 256, 1024, 4096, 8192)


def triples_fpstore(store: Any, pid: str, chunk: np.ndarray) -> set[tuple[int, int, int]]:
    qi, ids, dist = store.query_many(chunk, pipeline_id=pid, k=K)
    return set(zip(qi.tolist(), store.keys_of(ids), dist.tolist()))


def triples_faiss(index: Any, chunk: np.ndarray) -> set[tuple[int, int, int]]:
    lims, dist, labels = index.range_search(bc._codes(chunk), K + 1)
    qi = np.repeat(np.arange(len(chunk)), np.diff(lims).astype(np.int64))
    return set(zip(qi.tolist(), labels.tolist(), dist.tolist()))


def run_n(n: int, args: argparse.Namespace, rng: np.random.Generator) -> dict[str, Any]:
    fps = bc.random_fps(n, rng)
    path = bc.fresh_dir(Path(args.tmp) / f"chunks-{n}")
    out: dict[str, Any] = {"n": n, "chunks": {}}
    try:
        store = fpstore.open(path, k=K, expected_size=n)
        pid = store.pipeline.id
        t0 = time.perf_counter()
        store.bulk_load(np.arange(n), fps, pipeline_id=pid)
        store.warm()
        out["design"] = store.design.name
        out["load_s"] = time.perf_counter() - t0
        indexes = {}
        for nhash, bits, nflip in bc.FAISS_CONFIGS:
            # Each table holds (id, code) pairs in hash buckets: ~16 B per fingerprint and table.
            if n * nhash * 16 > args.faiss_ram * 2**30:
                bc.note(f"n={n}: faiss {nhash}x{bits} skipped (over --faiss-ram)")
                continue
            indexes[f"faiss {nhash}x{bits} nflip={nflip}"] = bc.faiss_index(fps, nhash, bits, nflip)
        queries = bc.make_queries(fps, max(20 * max(args.chunks), args.min_queries), rng)
        for c in args.chunks:
            m = max(20 * c, args.min_queries)
            sample = queries[:c]
            want = triples_fpstore(store, pid, sample)
            for name, index in indexes.items():
                if triples_faiss(index, sample) != want:
                    raise SystemExit(f"n={n} chunk {c}: {name} and fpstore disagree")
            rates: dict[str, list[float]] = {"fpstore": [], **{name: [] for name in indexes}}
            for _ in range(args.rounds):
                t = time.perf_counter()
                for lo in range(0, m, c):
                    _, ids, _ = store.query_many(queries[lo : lo + c], pipeline_id=pid, k=K)
                    store.keys_of(ids)
                rates["fpstore"].append(m / (time.perf_counter() - t))
                for name, index in indexes.items():
                    codes = bc._codes(queries[:m])
                    t = time.perf_counter()
                    for lo in range(0, m, c):
                        index.range_search(codes[lo : lo + c], K + 1)
                    rates[name].append(m / (time.perf_counter() - t))
            med = {name: statistics.median(r) for name, r in rates.items()}
            best = max((name for name in med if name != "fpstore"), key=med.__getitem__, default=None)
            out["chunks"][c] = {"queries": m, "rates": med, "best_faiss": best, "ratio": med["fpstore"] / med[best] if best else None}
            bc.note(f"n={n} chunk {c}: fpstore {med['fpstore']:.0f} q/s" + (f", {best} {med[best]:.0f} q/s" if best else ""))
        store.close()
    finally:
        bc.remove(path)
    return out


def render(results: list[dict[str, Any]]) -> str:
    rows = []
    for res in results:
        for c, row in res["chunks"].items():
            best = row["best_faiss"]
            rows.append([bc.fmt_n(res["n"]), res.get("design", "?"), c, bc.fmt_rate(row["rates"]["fpstore"]),
                         f"{bc.fmt_rate(row['rates'][best])} ({best})" if best else "-",
                         f"{row['ratio']:.2f}x" if row["ratio"] else "-"])
    return bc.md_table(["n", "design", "chunk", "fpstore q/s (keys)", "best faiss q/s", "fpstore / faiss"], rows)


def plot(results: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for res in results:
        cs = [int(c) for c in res["chunks"]]
        rows = list(res["chunks"].values())
        ax.plot(cs, [r["rates"]["fpstore"] for r in rows], "o-", label=f"fpstore, n = {bc.fmt_n(res['n'])}")
        ax.plot(cs, [r["rates"][r["best_faiss"]] if r["best_faiss"] else np.nan for r in rows], "s--",
                label=f"best faiss, n = {bc.fmt_n(res['n'])}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("queries per call (chunk size)")
    ax.set_ylabel("queries per second (keys returned)")
    ax.set_title("Exact batch queries, k = 3, one thread each")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=float, nargs="*", default=[1e6, 1e7])
    ap.add_argument("--chunks", type=int, nargs="*", default=list(CHUNKS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-queries", type=int, default=20_000)
    ap.add_argument("--threads-from", type=int, default=20_000,
                    help="fpstore's merge runs on one thread below this many queries a chunk, as faiss does here "
                         "(0: fpstore's own default, threads from 2,048 queries in a store of 10^6 or more)")
    ap.add_argument("--faiss-ram", type=float, default=6.0, help="GiB a faiss index may take")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tmp", default=bc.DEFAULT_TMP)
    ap.add_argument("--json")
    ap.add_argument("--plot", help="write a PNG of q/s against chunk size")
    ap.add_argument("--report", metavar="JSON", help="only print the table (and --plot) of a saved --json file")
    args = ap.parse_args()
    if args.report:
        saved = bc.load_saved(args.report)
        results = saved["results"]
    else:
        if bc.faiss_available():
            raise SystemExit(bc.faiss_available())
        if args.threads_from:
            from fpstore.index import search

            if hasattr(search, "THREADED_MERGE_QUERIES"):
                search.THREADED_MERGE_QUERIES = search.THREADED_MERGE_QUERIES_SMALL = args.threads_from
        rng = np.random.default_rng(args.seed)
        start, code = bc.uptime(), bc.code_version()
        results = [run_n(int(n), args, rng) for n in args.n]
        end = bc.uptime()
        print(f"<!-- {' '.join(sys.argv)} -->")
        print(f"fpstore {code}; faiss one thread; fpstore one thread below {args.threads_from or 'its default'} queries a chunk, every core from there (query_many's merge).\n")
        print(f"Load before: `{start}`; after: `{end}`.\n")
        bc.write_json(args.json, {"argv": sys.argv, "machine": bc.machine(), "code": code, "load_before": start,
                                  "load_after": end, "results": results})
    print(render(results))
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
