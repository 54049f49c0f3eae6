"""Store benchmark (docs/benchmarks.md, section "The store: add and query against peers"):
incremental adds, single and batch queries, bytes on disk, with faiss ``IndexBinaryMultiHash``
(exact configurations) and numpy brute force side by side.

    cd /work/main && PYTHONPATH=/work/main python3 tools/bench_store.py --max 1e7 --json /work/bench-tmp/bench_store.json
    cd /work/main && PYTHONPATH=/work/main python3 tools/bench_store.py --quick      # 10^5 only, a smoke run
    cd /work/main && PYTHONPATH=/work/main python3 tools/bench_store.py --max 1e7 --cpus 1   # pinned to one CPU: one thread
    cd /work/main && PYTHONPATH=/work/main python3 tools/bench_store.py --report /work/bench-tmp/bench_store.json  # tables again

For each n in 10^5, 10^6 (and 10^7 with ``--max 1e7``) uniform random 64-bit fingerprints with
integer keys 0..n-1, and for each design (``auto``, chosen by ``design_for(3, n)``, and ``r5``,
the 10-table design that the "<= 70 B per fingerprint" target is about; auto is run once when it
resolves to r5):

* **add**: the last ``--add-sample`` (100,000) fingerprints go in through ``Store.add_many`` in
  batches of 1,000, one durable commit each (the store's default sync mode). Below that the
  fingerprints are first loaded with ``Store.bulk_load`` (one run), so at 10^6 and 10^7 the add
  rate is measured on top of a bulk-loaded base of n - 100,000; at 10^5 every fingerprint is
  added incrementally. The add rate is fingerprints over the summed wall time of the batches.
* **on disk**: ``data.mdb`` file size, used pages ((last page + 1) x page size) and live pages
  (reachable from some sub-database; the difference is LMDB's free list, pages freed by earlier
  commits and reused by later ones), per fingerprint, and per sub-database.
* **query**: ``Store.query(fingerprint=..., pipeline_id=...)``, one Python call per query, 5,000
  timed queries after 200 untimed ones: p50 / p90 / p99 / max wall latency, and p50 / p99 of each
  call's thread-CPU time (which leaves out time descheduled by other load). Queries: 80 % stored fingerprints with 1-3 flipped bits (so
  matches exist), 20 % uniform random. ``Store.query_many`` on a batch of 100,000 such queries:
  median rate over up to 3 runs. The single queries are then timed again after
  ``Store.warm()`` ("after warm()": every page of the index already mapped, as in a reader that
  has run for a while; the warm-up time is printed beside it).
* **exact**: 300 queries through ``query`` and ``query_many`` compared key for key with numpy
  brute force (recall 1.0 and no extra match is printed as "exact").
* **compacted**: the same query figures after ``Store.compact()`` (everything in one run).

Peers in the same process, one thread each: faiss ``IndexBinaryMultiHash`` 4 x 16 bits with
nflip = 0 and 2 x 32 bits with nflip = 1 (both exact at k = 3; recall checked against brute force):
build time, RAM (anonymous RSS delta after adding), single-query latency (one ``range_search``
call per query), batch rate on the same 100,000 queries; numpy brute force
(``np.bitwise_count(stored ^ q) <= 3``) one query at a time for about 3 s.

Medians, not means; the machine load (``uptime``) is printed before and after. Stores go under
``--tmp`` (/work/bench-tmp) and are deleted after each measurement. Not collected by pytest.
"""

from __future__ import annotations

import argparse
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


def measure_queries(store: Any, single: np.ndarray, batch: np.ndarray, repeat: int) -> dict[str, Any]:
    pid = store.pipeline.id
    singles = single.tolist()
    # The first query after open loads run indexes: report it apart from the warm figures.
    _, first_s, _ = bc.timed(lambda: store.query(fingerprint=singles[0], pipeline_id=pid))
    lat, cpu_qps = bc.time_calls(lambda q: store.query(fingerprint=q, pipeline_id=pid), singles)
    # Again after Store.warm(): every page of the index mapped, as in a long-running reader.
    _, warm_s, _ = bc.timed(store.warm)
    lat_warm, _ = bc.time_calls(lambda q: store.query(fingerprint=q, pipeline_id=pid), singles)
    res: dict[str, Any] = {}
    br = bc.median_rate(lambda: res.__setitem__("r", store.query_many(batch, pipeline_id=pid)), len(batch), repeat)
    br["matches"] = int(len(res["r"][0]))
    return {"first_query_us": first_s * 1e6, "single": lat, "single_qps_cpu": cpu_qps, "batch": br,
            "single_warm": lat_warm, "warm_s": warm_s}


def bench_fpstore(
    n: int, design: str, label: str, fps: np.ndarray, args: argparse.Namespace,
    single: np.ndarray, batch: np.ndarray, verify: np.ndarray, truth: list[np.ndarray],
) -> dict[str, Any]:
    path = bc.fresh_dir(Path(args.tmp) / f"store-{n}-{design}")
    out: dict[str, Any] = {"n": n, "design_arg": label}
    try:
        store = fpstore.open(path, k=K, design=design, expected_size=n)
        out["design"] = store.design.describe(n)
        out["design_name"] = store.design.name
        pid = store.pipeline.id
        added = min(args.add_sample, n)
        base = n - added
        out["bulk_base"] = base
        if base:
            _, w, c = bc.timed(lambda: store.bulk_load(np.arange(base, dtype=np.int64), fps[:base], pipeline_id=pid))
            out["bulk_s"], out["bulk_rate"] = w, base / w
        batch_s = []
        cpu0 = time.process_time()
        for s in range(base, n, args.batch):
            keys = list(range(s, min(s + args.batch, n)))
            chunk = fps[s : s + len(keys)]
            t = time.perf_counter()
            store.add_many(keys, fingerprints=chunk, pipeline_id=pid)
            batch_s.append(time.perf_counter() - t)
        cpu = time.process_time() - cpu0
        bs = np.array(batch_s)
        out["add"] = {
            "added": added,
            "batch": args.batch,
            "rate": added / bs.sum(),
            "rate_cpu": added / cpu if cpu else float("nan"),
            "batch_ms_p50": float(np.percentile(bs, 50) * 1e3),
            "batch_ms_p99": float(np.percentile(bs, 99) * 1e3),
            "batch_ms_max": float(bs.max() * 1e3),
        }
        bc.note(f"  n={n} {label}: add {out['add']['rate']:,.0f}/s")
        out["size"] = bc.store_sizes(store)
        out["query"] = measure_queries(store, single, batch, args.repeat)
        bc.note(f"  n={n} {label}: single p99 {out['query']['single']['p99']:.1f} us, batch {out['query']['batch']['rate']:,.0f}/s")
        out["exact"] = bc.check_exact(store, verify, truth)
        if not args.no_compact:
            r, w, _ = bc.timed(store.compact)
            out["compact"] = {"seconds": w, "result": r}
            out["size_compacted"] = bc.store_sizes(store)
            out["query_compacted"] = measure_queries(store, single, batch, args.repeat)
            out["exact_compacted"] = bc.check_exact(store, verify, truth)
        store.close()
    finally:
        bc.remove(path)
    return out


def run_n(n: int, args: argparse.Namespace, rng: np.random.Generator) -> dict[str, Any]:
    bc.note(f"n={n:,}: {bc.uptime()}")
    res: dict[str, Any] = {"n": n, "load_before": bc.uptime()}
    fps = bc.random_fps(n, rng)
    single = bc.make_queries(fps, args.single, rng)
    batch = bc.make_queries(fps, args.batch_queries, rng)
    verify = bc.make_queries(fps, args.verify, rng)
    truth = bc.brute_force(fps, verify.tolist(), K)
    res["fpstore"] = [bench_fpstore(n, d, lab, fps, args, single, batch, verify, truth)
                      for lab, d in bc.distinct_designs(K, n, args.designs)]
    if not args.no_faiss and bc.faiss_available() is None:
        bc.note(f"n={n:,}: faiss")
        res["faiss"] = bc.faiss_peer(fps, K, single, batch, verify, truth, repeat=args.repeat)
    res["brute"] = bc.brute_force_rate(fps, single, K, budget_s=args.brute_budget)
    res["load_after"] = bc.uptime()
    return res


def report(results: list[dict[str, Any]]) -> str:
    out = []
    rows = []
    for r in results:
        for s in r["fpstore"]:
            a, q = s["add"], s["query"]
            base = f"bulk {s['bulk_base']:,} + add {a['added']:,}" if s["bulk_base"] else f"add {a['added']:,}"
            lat = q["single"]
            ex = s["exact"]
            rows.append([
                bc.fmt_n(s["n"]), s["design_arg"], base,
                f"{bc.fmt_rate(a['rate'])} ({a['batch_ms_p50']:.1f} / {a['batch_ms_p99']:.1f} ms)",
                " / ".join(bc.fmt_us(lat[p]) for p in ("p50", "p90", "p99", "max")),
                " / ".join(bc.fmt_us(lat.get(p, float("nan"))) for p in ("cpu_p50", "cpu_p99")),
                " / ".join(bc.fmt_us(q["single_warm"][p]) for p in ("p50", "p99")) + f" ({q['warm_s']:.2f} s)",
                bc.fmt_rate(1e6 / lat["mean"]),
                bc.fmt_rate(q["batch"]["rate"]),
                f"{s['size']['file_size'] / s['n']:.0f} / {s['size']['used_bytes'] / s['n']:.0f} / {s['size']['live_bytes'] / s['n']:.0f}",
                "yes" if ex["exact"] else f"NO ({ex})",
            ])
    out.append(bc.md_table(
        ["n", "design", "stored as", "add_many fp/s (batch p50 / p99)", "query µs p50 / p90 / p99 / max", "CPU µs p50 / p99",
         "after warm(): µs p50 / p99 (warm s)", "query/s (1 call each)", "query_many q/s", "B/fp file / used / live", "exact (300 q)"], rows))
    rows = []
    for r in results:
        for s in r["fpstore"]:
            if "compact" not in s:
                continue
            lat = s["query_compacted"]["single"]
            rows.append([
                bc.fmt_n(s["n"]), s["design_arg"], f"{s['compact']['seconds']:.2f}",
                " / ".join(bc.fmt_us(lat[p]) for p in ("p50", "p90", "p99", "max")),
                " / ".join(bc.fmt_us(lat.get(p, float("nan"))) for p in ("cpu_p50", "cpu_p99")),
                " / ".join(bc.fmt_us(s["query_compacted"]["single_warm"][p]) for p in ("p50", "p99")),
                bc.fmt_rate(1e6 / lat["mean"]),
                bc.fmt_rate(s["query_compacted"]["batch"]["rate"]),
                f"{s['size_compacted']['file_size'] / s['n']:.0f} / {s['size_compacted']['used_bytes'] / s['n']:.0f} / {s['size_compacted']['live_bytes'] / s['n']:.0f}",
                "yes" if s["exact_compacted"]["exact"] else f"NO ({s['exact_compacted']})",
            ])
    if rows:
        out.append(bc.section("After `Store.compact()` (one run per table, no incremental entries):", ["n", "design", "compact s", "query µs p50 / p90 / p99 / max", "CPU µs p50 / p99",
                                "after warm(): µs p50 / p99", "query/s", "query_many q/s", "B/fp file / used / live", "exact"], rows))
    rows = []
    for r in results:
        for s in r["fpstore"]:
            dbs = s["size"]["dbs"]
            tabs = [v for k, v in dbs.items() if k.startswith("t") and k[1:].isdigit()]
            inc = s["add"]["added"]
            tab_b = sum(v["bytes"] for v in tabs)
            rec_b = dbs["docs"]["bytes"] + dbs["keys"]["bytes"]
            rows.append([
                bc.fmt_n(s["n"]), s["design_arg"], len(tabs),
                f"{tab_b / inc / len(tabs):.1f}", f"{tab_b / inc:.0f}", f"{rec_b / inc:.0f}",
                f"{(tab_b + rec_b) / inc:.0f}",
                f"{dbs['blobs']['bytes'] / s['bulk_base']:.1f}" if s["bulk_base"] else "–",
            ])
    out.append(bc.section("Where the bytes go (used pages per sub-database, before compaction):", ["n", "design", "tables", "incremental B/fp/table", "incremental tables B/fp",
                            "docs + keys B/fp", "incremental total B/fp", "runs (blobs) B per bulk fp"], rows))
    rows = []
    for r in results:
        for f in r.get("faiss", []):
            lat = f["single"]
            rows.append([
                bc.fmt_n(r["n"]), f"faiss {f['config']}", f"{f['build_s']:.2f}", f"{f['ram_per_fp']:.0f}",
                " / ".join(bc.fmt_us(lat[p]) for p in ("p50", "p90", "p99", "max")),
                " / ".join(bc.fmt_us(lat.get(p, float("nan"))) for p in ("cpu_p50", "cpu_p99")),
                bc.fmt_rate(1e6 / lat["mean"]), bc.fmt_rate(f["batch"]["rate"]),
                f"{f['recall']:.4f} ({f['verified_matches']} matches), {f['extra']} extra",
            ])
        b = r["brute"]
        rows.append([bc.fmt_n(r["n"]), "numpy brute force", "–", "8", "–", "–", bc.fmt_rate(b["qps"]), "–",
                     f"exact by definition ({b['queries']} queries timed)"])
    out.append(bc.section("Peers, same process and same queries, one thread:", ["n", "peer", "build s", "RAM B/fp", "query µs p50 / p90 / p99 / max", "CPU µs p50 / p99", "query/s",
                            "batch q/s", "recall vs brute force"], rows))
    rows = []
    for r in results:
        best_single = max((1e6 / f["single"]["mean"], f["config"]) for f in r.get("faiss", [])) if r.get("faiss") else None
        best_batch = max((f["batch"]["rate"], f["config"]) for f in r.get("faiss", [])) if r.get("faiss") else None
        for s in r["fpstore"]:
            q = s["query"]
            qc = s.get("query_compacted", q)
            cells = [bc.fmt_n(s["n"]), s["design_arg"]]
            if best_single:
                cells += [
                    f"{1e6 / q['single']['mean'] / best_single[0]:.2f}× / {1e6 / qc['single']['mean'] / best_single[0]:.2f}× ({best_single[1]})",
                    f"{q['batch']['rate'] / best_batch[0]:.2f}× / {qc['batch']['rate'] / best_batch[0]:.2f}× ({best_batch[1]})",
                ]
            cells.append(f"{q['batch']['rate'] / r['brute']['qps']:.0f}×")
            cells.append(f"{q['batch']['matches']:,} / " + ", ".join(f"{f['batch'].get('matches', '?')}" for f in r.get("faiss", [])))
            rows.append(cells)
    out.append(bc.section("Ratios (fpstore ÷ best faiss configuration; before / after compaction):", ["n", "design", "query/s vs faiss", "batch q/s vs faiss", "batch vs brute force",
                            "batch matches fpstore / faiss"], rows))
    return "\n".join(out)


def main() -> None:
    ap = bc.run_parser(__doc__, largest=1e6, designs=["auto", "r5"])
    ap.add_argument("--add-sample", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--batch-queries", type=int, default=100_000)
    ap.add_argument("--no-compact", action="store_true")
    args = ap.parse_args()
    if args.report:
        saved = bc.load_saved(args.report)
        print(report(saved["results"]))
        return
    bc.run_sizes(args, lambda n, rng: run_n(n, args, rng), report)


if __name__ == "__main__":
    main()
