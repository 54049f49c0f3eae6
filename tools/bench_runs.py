"""Runs benchmark (docs/benchmarks.md, section "Runs, bulk loads and all pairs"): bulk loads into
delta-compressed sorted runs, bytes per table against the entropy floor, batch and single queries
on runs, and all-pairs near-duplicates, with faiss ``IndexBinaryMultiHash`` (exact), the seomoz
``find_all`` all-pairs routine and numpy brute force side by side in the same process.

    cd /work/main && PYTHONPATH=/work/main python3 tools/bench_runs.py --max 1e7 --json /work/bench-tmp/bench_runs.json
    cd /work/main && PYTHONPATH=/work/main python3 tools/bench_runs.py --quick      # 10^5 only, a smoke run
    cd /work/main && PYTHONPATH=/work/main python3 tools/bench_runs.py --max 1e7 --cpus 1   # pinned to one CPU: one thread
    cd /work/main && PYTHONPATH=/work/main python3 tools/bench_runs.py --report /work/bench-tmp/bench_runs.json  # tables again

``find_all`` comes from ``simhash-pybind`` (seomoz's simhash-cpp under pybind11). Its import name
``simhash`` is also the name of the unrelated pure-Python PyPI package ``simhash`` (used by
``tools/bench_fingerprint.py``), so install it into its own directory, which this script puts first
on ``sys.path`` (``--simhash-path``, default ``/work/bench-tmp/peers``)::

    pip install --no-build-isolation --no-deps --target /work/bench-tmp/peers simhash-pybind

Data, for each n in 10^5, 10^6 and 10^7 (``--max``): n uniform random 64-bit fingerprints of which
1 % are replaced by a copy of another with 1-3 bits flipped and 0.1 % by an identical copy (so
all-pairs has pairs at every distance 0..3), integer keys 0..n-1. For each design (``r5``: the
10-table design the "<= 70 B per fingerprint" target is about; and ``auto`` when it picks another):

* **bulk load**: ``Store.bulk_load(keys, fps, pipeline_id=...)`` into a fresh store (one run,
  one durable transaction), fingerprints per wall second (CPU seconds in the JSON).
* **bytes per table**: the ``blobs`` sub-database summed per blob prefix (names and values; a run
  table is ``r`` + run + table, table 0 is the bulk load's segment ``f`` part), per fingerprint,
  against the entropy floor 64 - log2(n) + 1.44 bits of n sorted uniform 64-bit values. The rest of
  a bulk load (key hashes ``h``, their ordinals ``o``, zstd key blocks ``k``) is shown apart.
  **In all**: ``data.mdb`` size, used pages and live pages (reachable from some sub-database) per
  fingerprint.
* **query_many**: a batch of 100,000 queries (80 % stored fingerprints with 1-3 flipped bits,
  20 % random), and of 1,000,000 at n >= 10^6; median over up to 3 runs. **query**: one Python
  call per query, 5,000 timed after 200 untimed: p50 / p90 / p99 / max wall latency, and p50 / p99
  of each call's thread-CPU time (which leaves out time descheduled by other load); then the same
  queries again after ``Store.warm()`` (every page of the index mapped; "after warm()"). Both
  checked against numpy brute force on 300 queries (recall 1.0, no extra match).
* **all pairs**: ``Store.near_duplicate_pairs(3)`` (median of up to 3 runs; 1 at 10^7), the
  number of pairs, and a check: its pairs of distinct fingerprints equal ``find_all``'s set, and
  its distance-0 pairs equal the count from the multiplicity of each fingerprint
  (``find_all`` works on a set, so it never reports identical fingerprints). At n <= 10^5 the pair
  set is also compared with numpy brute force over all n(n-1)/2 pairs.

Peers (one thread each): faiss ``IndexBinaryMultiHash`` 4 x 16 / nflip 0 and 2 x 32 / nflip 1
(exact at k = 3; build time, RAM, single latency, batch rate on the same 100,000 queries, recall
against brute force; its all-pairs time is *extrapolated* as n queries at its batch rate);
``find_all(fps, blocks, 3)`` for 4, 5 and 6 blocks (time including the wrapper's list -> set; at
10^7 5 blocks only unless ``--find-all-blocks``); numpy brute force: queries/s one query at a time,
and all pairs on a random subsample of 20,000, *extrapolated* by the pair count.

Medians, not means; ``uptime`` before and after. Stores go under ``--tmp`` (/work/bench-tmp) and are
deleted after each measurement. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _bench_common as bc  # noqa: E402

import fpstore  # noqa: E402
from fpstore.index import runs as runs_codec  # noqa: E402
from fpstore.index import tiers  # noqa: E402

K = 3


def load_find_all(path: str) -> tuple[Any, str]:
    """seomoz ``find_all`` (simhash-pybind or simhash-py), or (None, why not)."""
    if path and os.path.isdir(path):
        sys.path.insert(0, path)
    try:
        import simhash
    except Exception as exc:
        return None, f"import simhash failed: {exc!r}"
    if not hasattr(simhash, "find_all"):
        return None, (
            f"the importable `simhash` ({simhash.__file__}) has no find_all: it is the pure-Python PyPI "
            "package, not seomoz's; install simhash-pybind with --target (see the docstring)"
        )
    return simhash, simhash.__file__


# -- fpstore -------------------------------------------------------------------------------------


def table_bytes(store: Any, n: int) -> dict[str, Any]:
    """Per-table and other blob bytes per fingerprint, from the ``blobs`` sub-database."""
    groups = bc.blob_bytes(store)
    with store._storage.read() as txn:
        state = store._cat.state(txn)  # the layout below the API is what this measures
    run = state.runs[-1]
    per_table = []
    for prefix in run["tables"]:
        g = groups.get(bytes(prefix), {"value": 0, "name": 0, "blobs": 0})
        per_table.append((g["value"] + g["name"]) / n)
    seg = state.segs[-1]
    other = {}
    for part in (b"h", b"o", b"k"):
        p = tiers.seg_prefix(seg["id"], part)
        g = groups.get(p, {"value": 0, "name": 0})
        other[part.decode()] = (g["value"] + g["name"]) / n
    fl = bc.floor_bits(n) / 8
    return {
        "per_table": per_table,
        "floor_bytes": fl,
        "ratio_max": max(per_table) / fl,
        "ratio_mean": float(np.mean(per_table)) / fl,
        "tables_total": sum(per_table),
        "other": other,
    }


def bench_fpstore(n: int, design: str, label: str, fps: np.ndarray, data: dict[str, Any],
                  args: argparse.Namespace) -> dict[str, Any]:
    path = bc.fresh_dir(Path(args.tmp) / f"runs-{n}-{design}")
    out: dict[str, Any] = {"n": n, "design_arg": label}
    try:
        store = fpstore.open(path, k=K, design=design, expected_size=n)
        pid = store.pipeline.id
        out["design"] = store.design.describe(n)
        out["tables"] = len(store.design.tables)
        keys = np.arange(n, dtype=np.int64)
        _, w, c = bc.timed(lambda: store.bulk_load(keys, fps, pipeline_id=pid))
        out["bulk"] = {"seconds": w, "rate": n / w, "rate_cpu": n / c if c else float("nan")}
        bc.note(f"  n={n} {label}: bulk {n / w:,.0f}/s")
        out["bytes"] = table_bytes(store, n)
        out["size"] = bc.store_sizes(store)
        # Cross-check: the codec alone on table 0 (the sorted fingerprints) gives the same size.
        index, chunks = runs_codec.encode_run(np.sort(fps), chunk_bytes=tiers.RUN_CHUNK_BYTES)
        out["codec_table0_bytes_per_fp"] = (len(index.to_bytes()) + sum(len(ch) for ch in chunks)) / n

        q: dict[str, Any] = {}
        res: dict[str, Any] = {}
        _, first_s, _ = bc.timed(lambda: store.query(fingerprint=int(data["single"][0]), pipeline_id=pid))
        q["first_query_us"] = first_s * 1e6
        for name, batch in data["batches"].items():
            r = bc.median_rate(lambda: res.__setitem__("r", store.query_many(batch, pipeline_id=pid)), len(batch),
                               args.repeat, budget_s=args.budget)
            r["matches"] = int(len(res.pop("r")[0]))
            q[f"batch_{name}"] = r
        singles = data["single"].tolist()
        q["single"], q["single_qps_cpu"] = bc.time_calls(lambda x: store.query(fingerprint=x, pipeline_id=pid), singles)
        # Again after Store.warm(): every page of the index mapped, as in a long-running reader.
        _, q["warm_s"], _ = bc.timed(store.warm)
        q["single_warm"], _ = bc.time_calls(lambda x: store.query(fingerprint=x, pipeline_id=pid), singles)
        out["query"] = q
        bc.note(f"  n={n} {label}: query_many {q['batch_100k']['rate']:,.0f}/s, single p99 {q['single']['p99']:.1f} us")
        out["exact"] = bc.check_exact(store, data["verify"], data["truth"])

        pairs_res: dict[str, Any] = {}
        reps = 1 if n >= 10**7 else args.repeat
        r = bc.median_rate(lambda: pairs_res.__setitem__("p", store.near_duplicate_pairs(K)), n, reps, budget_s=args.budget)
        a, b, d = pairs_res.pop("p")
        out["pairs"] = {"seconds": r["seconds"], "seconds_cpu": n / r["rate_cpu"], "runs": r["runs"],
                        "pairs": int(len(a)), "by_distance": np.bincount(d, minlength=K + 1).tolist()}
        bc.note(f"  n={n} {label}: all pairs {r['seconds']:.2f} s, {len(a):,} pairs")
        ka = np.array(store.keys_of(a.tolist()), dtype=np.int64)
        kb = np.array(store.keys_of(b.tolist()), dtype=np.int64)
        out["_pair_keys"] = (ka, kb)
        store.close()
    finally:
        bc.remove(path)
    return out


def pair_checks(fps: np.ndarray, ka: np.ndarray, kb: np.ndarray, find_all_set: set | None,
                brute: set | None) -> dict[str, Any]:
    fa, fb = fps[ka], fps[kb]
    ident = fa == fb
    _, counts = np.unique(fps, return_counts=True)
    want_ident = int((counts * (counts - 1) // 2).sum())
    out: dict[str, Any] = {"identical_pairs": int(ident.sum()), "identical_expected": want_ident,
                           "identical_ok": int(ident.sum()) == want_ident}
    lo, hi = np.minimum(fa, fb)[~ident], np.maximum(fa, fb)[~ident]
    distinct = set(zip(lo.tolist(), hi.tolist()))
    out["distinct_fp_pairs"] = len(distinct)
    if find_all_set is not None:
        out["find_all_pairs"] = len(find_all_set)
        out["find_all_missing"] = len(find_all_set - distinct)
        out["find_all_extra"] = len(distinct - find_all_set)
        out["find_all_equal"] = distinct == find_all_set
    if brute is not None:
        mine = set(zip(np.minimum(ka, kb).tolist(), np.maximum(ka, kb).tolist()))
        out["brute_pairs"] = len(brute)
        out["brute_equal"] = mine == brute
    return out


# -- peers -----------------------------------------------------------------------------------------


def bench_find_all(simhash: Any, fps: np.ndarray, blocks: list[int]) -> tuple[list[dict[str, Any]], set | None]:
    rows = []
    result = None
    as_list = fps.tolist()
    for nb in blocks:
        bc.trim_heap()
        r, w, c = bc.timed(lambda: simhash.find_all(as_list, nb, K))
        rows.append({"blocks": nb, "seconds": w, "seconds_cpu": c, "pairs": len(r)})
        bc.note(f"  find_all {nb} blocks: {w:.2f} s, {len(r):,} pairs")
        if result is None:
            result = r
        elif r != result:
            rows[-1]["differs_from_first"] = True
        del r
    return rows, result


def run_n(n: int, args: argparse.Namespace, rng: np.random.Generator, simhash: Any) -> dict[str, Any]:
    bc.note(f"n={n:,}: {bc.uptime()}")
    res: dict[str, Any] = {"n": n, "load_before": bc.uptime(), "floor_bits": bc.floor_bits(n)}
    fps = bc.planted_fps(n, rng)
    data: dict[str, Any] = {
        "single": bc.make_queries(fps, args.single, rng),
        "batches": {"100k": bc.make_queries(fps, 100_000, rng)},
        "verify": bc.make_queries(fps, args.verify, rng),
    }
    if n >= 10**6 and args.big_batch:
        data["batches"]["1M"] = bc.make_queries(fps, args.big_batch, rng)
    data["truth"] = bc.brute_force(fps, data["verify"].tolist(), K)
    res["fpstore"] = [bench_fpstore(n, d, lab, fps, data, args) for lab, d in bc.distinct_designs(K, n, args.designs)]

    fa_set = None
    if simhash is not None:
        blocks = args.find_all_blocks or ([5] if n >= 10**7 else [4, 5, 6])
        res["find_all"], fa_set = bench_find_all(simhash, fps, blocks)
    brute = bc.brute_pairs(fps, K) if n <= args.brute_pairs_max else None
    for s in res["fpstore"]:
        ka, kb = s.pop("_pair_keys")
        s["pair_check"] = pair_checks(fps, ka, kb, fa_set, brute)
    del fa_set, brute
    if not args.no_faiss and bc.faiss_available() is None:
        bc.note(f"n={n:,}: faiss")
        res["faiss"] = bc.faiss_peer(fps, K, data["single"], data["batches"]["100k"], data["verify"], data["truth"],
                                     repeat=args.repeat)
    res["brute"] = bc.brute_force_rate(fps, data["single"], K, budget_s=args.brute_budget)
    res["brute_pairs"] = bc.brute_pairs_time(fps, K, args.brute_sample, rng)
    res["load_after"] = bc.uptime()
    return res


# -- report ----------------------------------------------------------------------------------------


def report(results: list[dict[str, Any]], find_all_note: str) -> str:
    out = []
    rows = []
    for r in results:
        for s in r["fpstore"]:
            b, q = s["bytes"], s["query"]
            lat = q["single"]
            batches = " / ".join(bc.fmt_rate(q[k]["rate"]) for k in q if k.startswith("batch_"))
            rows.append([
                bc.fmt_n(r["n"]), s["design_arg"], bc.fmt_rate(s["bulk"]["rate"]),
                f"{b['ratio_mean'] * b['floor_bytes']:.2f} ({b['ratio_mean']:.3f}× / max {b['ratio_max']:.3f}×)",
                f"{s['size']['file_size'] / r['n']:.1f} / {s['size']['live_bytes'] / r['n']:.1f}",
                batches,
                " / ".join(bc.fmt_us(lat[p]) for p in ("p50", "p90", "p99", "max")),
                " / ".join(bc.fmt_us(lat.get(p, float("nan"))) for p in ("cpu_p50", "cpu_p99")),
                " / ".join(bc.fmt_us(q["single_warm"][p]) for p in ("p50", "p99")) + f" ({q['warm_s']:.2f} s)",
                f"{s['pairs']['seconds']:.2f}",
                "yes" if s["exact"]["exact"] else f"NO {s['exact']}",
            ])
    out.append(bc.md_table(
        ["n", "design", "bulk fp/s", "B/fp per table (× floor: mean / max)", "B/fp in all: file / live",
         "query_many q/s (100k / 1M batch)", "query µs p50 / p90 / p99 / max", "CPU µs p50 / p99",
         "after warm(): µs p50 / p99 (warm s)", "all pairs s", "exact (300 q)"], rows))

    rows = []
    for r in results:
        for s in r["fpstore"]:
            b = s["bytes"]
            o = b["other"]
            rows.append([
                bc.fmt_n(r["n"]), s["design_arg"], f"{r['floor_bits']:.2f} bits = {b['floor_bytes']:.3f} B",
                ", ".join(f"{x:.3f}" for x in b["per_table"]),
                f"{b['tables_total']:.1f}", f"{o['h']:.2f} + {o['o']:.2f} + {o['k']:.2f}",
                f"{s['size']['used_bytes'] / r['n']:.1f}", f"{s['codec_table0_bytes_per_fp']:.3f}",
            ])
    out.append(bc.section("Bytes per fingerprint, from the `blobs` sub-database:", ["n", "design", "entropy floor", "per table B/fp (t0, t1, …)", "all tables",
                            "key hashes + ordinals + keys", "used pages B/fp", "codec alone, t0"], rows))

    rows = []
    for r in results:
        for s in r["fpstore"]:
            pc, p = s["pair_check"], s["pairs"]
            fa = ("equal" if pc.get("find_all_equal") else f"DIFFER (missing {pc.get('find_all_missing')}, extra {pc.get('find_all_extra')})") \
                if "find_all_equal" in pc else "–"
            br = ("equal" if pc["brute_equal"] else "DIFFER") if "brute_equal" in pc else "–"
            rows.append([
                bc.fmt_n(r["n"]), s["design_arg"], f"{p['seconds']:.2f}", f"{p['pairs']:,}",
                " / ".join(f"{x:,}" for x in p["by_distance"]),
                f"{pc['identical_pairs']:,} ({'ok' if pc['identical_ok'] else 'expected ' + str(pc['identical_expected'])})",
                f"{pc['distinct_fp_pairs']:,}: {fa}", br,
            ])
    out.append(bc.section("All pairs within k = 3 (`near_duplicate_pairs(3)`), checked:", ["n", "design", "seconds", "pairs", "at d = 0 / 1 / 2 / 3", "identical-fp pairs",
                            "distinct-fp pairs vs find_all", "vs brute force (all pairs)"], rows))

    rows = []
    for r in results:
        for f in r.get("find_all", []):
            rows.append([bc.fmt_n(r["n"]), f"find_all, {f['blocks']} blocks", f"{f['seconds']:.2f}",
                         f"{f['pairs']:,} (no identical fps)", "measured"])
        for f in r.get("faiss", []):
            rows.append([bc.fmt_n(r["n"]), f"faiss {f['config']}: n range queries", f"{r['n'] / f['batch']['rate']:.1f}",
                         "–", "extrapolated from its batch rate"])
        bp = r["brute_pairs"]
        rows.append([bc.fmt_n(r["n"]), "numpy brute force", f"{bp['extrapolated_s']:.3g}", "–",
                     f"extrapolated from {bp['sample']:,} fps in {bp['seconds']:.2f} s"])
    out.append(f"\nAll-pairs peers ({find_all_note}):\n")
    out.append(bc.md_table(["n", "peer", "seconds", "pairs", "how"], rows))

    rows = []
    for r in results:
        for f in r.get("faiss", []):
            lat = f["single"]
            rows.append([
                bc.fmt_n(r["n"]), f"faiss {f['config']}", f"{f['build_s']:.2f} ({bc.fmt_rate(f['build_rate'])}/s)",
                f"{f['ram_per_fp']:.0f}", bc.fmt_rate(f["batch"]["rate"]),
                " / ".join(bc.fmt_us(lat[p]) for p in ("p50", "p90", "p99", "max")),
                " / ".join(bc.fmt_us(lat.get(p, float("nan"))) for p in ("cpu_p50", "cpu_p99")),
                f"{f['recall']:.4f} ({f['verified_matches']} matches), {f['extra']} extra",
            ])
        b = r["brute"]
        rows.append([bc.fmt_n(r["n"]), "numpy brute force", "–", "8", bc.fmt_rate(b["qps"]), "–", "–", "exact by definition"])
    out.append(bc.section("Query peers, same process, same queries, one thread:", ["n", "peer", "build s", "RAM B/fp", "batch q/s (100k)", "query µs p50 / p90 / p99 / max", "CPU µs p50 / p99",
                            "recall vs brute force"], rows))

    rows = []
    first = {}
    for r in results:
        for s in r["fpstore"]:
            q = s["query"]
            us_batch = 1e6 / q["batch_100k"]["rate"]
            first.setdefault(s["design"].split(" ")[0], (us_batch, q["single"]["p50"]))
            b0, s0 = first[s["design"].split(" ")[0]]
            rows.append([bc.fmt_n(r["n"]), s["design"].split(" ")[0], f"{us_batch:.2f} ({us_batch / b0:.2f}×)",
                         f"{q['single']['p50']:.1f} ({q['single']['p50'] / s0:.2f}×)",
                         f"{1e6 / q['single_qps_cpu']:.1f}", f"{q['first_query_us']:.0f}"])
    out.append(bc.section("Per-query cost against n (× the smallest n of the same design):", ["n", "design", "query_many µs/query", "query p50 µs", "query CPU µs/call",
                            "first query after open µs"], rows))
    return "\n".join(out)


def main() -> None:
    ap = bc.run_parser(__doc__, largest=1e7, designs=["r5", "auto"])
    ap.add_argument("--big-batch", type=int, default=1_000_000, help="second query_many batch at n >= 10^6 (0: none)")
    ap.add_argument("--budget", type=float, default=30.0, help="stop repeating a measurement after this many seconds")
    ap.add_argument("--find-all-blocks", type=int, nargs="*")
    ap.add_argument("--simhash-path", default="/work/bench-tmp/peers")
    ap.add_argument("--brute-sample", type=int, default=20_000)
    ap.add_argument("--brute-pairs-max", type=int, default=100_000, help="check all pairs by brute force up to this n")
    args = ap.parse_args()
    if args.report:
        saved = bc.load_saved(args.report)
        note = saved["find_all"]
        print(report(saved["results"], f"find_all from {note}" if "find_all" in saved["results"][0] else f"find_all unavailable: {note}"))
        return
    simhash, fa_note = load_find_all(args.simhash_path)
    bc.note(f"find_all: {fa_note}")
    note = f"find_all from {fa_note}" if simhash is not None else f"find_all unavailable: {fa_note}"
    bc.run_sizes(args, lambda n, rng: run_n(n, args, rng, simhash), lambda results: report(results, note),
                 {"find_all": fa_note})


if __name__ == "__main__":
    main()
