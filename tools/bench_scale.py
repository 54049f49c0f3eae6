"""Scale benchmark (docs/benchmarks.md, section "Scale: 10^5 to 10^8 documents"): a store of n random
fingerprints per design, each phase in a fresh process: streamed bulk load, bytes on disk, single
queries and ``query_many`` after ``warm()``, all pairs by the streamed join, and faiss beside it.

    cd /work/main && PYTHONPATH=/work/main python3 tools/bench_scale.py --n 1e5,1e6,1e7 --json /work/bench-tmp/bench_scale.json
    cd /work/main && PYTHONPATH=/work/main python3 tools/bench_scale.py --n 1e8 --json /work/bench-tmp/bench_scale_1e8.json
    cd /work/main && PYTHONPATH=/work/main python3 tools/bench_scale.py --n 1e5 --designs r4     # a smoke run
    cd /work/main && PYTHONPATH=/work/main python3 tools/bench_scale.py --report /work/bench-tmp/bench_scale.json /work/bench-tmp/bench_scale_1e8.json --plot

Data: n uniform random 64-bit fingerprints, k = 3, integer keys 0..n-1, generated a chunk of
``--chunk`` (10^6) at a time from a seed per (``--seed``, n, chunk number), so that every process
can regenerate any of them without holding the rest. For each n and each distinct design of
``--designs`` (default ``auto,r4,r5``: auto is named after the design it resolves to, e.g.
``auto (r4) = r4``), one process per phase, so that ``VmHWM`` (the kernel's high-water mark of
the resident set, which also counts the pages of the LMDB map the process touched: page cache)
and the peak of ``RssAnon`` (the process's own memory, sampled every 5 ms by a thread, since the
kernel keeps no high-water mark of it) belong to that phase alone (writing 5 to
/proc/self/clear_refs resets ``VmHWM`` on this kernel, but not the allocator's hold on freed memory):

* **load**: ``Store.bulk_load`` over an iterator of ``(keys, fingerprints)`` chunks into a fresh
  store made with ``expected_size=n`` (every ``max_run``, 2^24 by default, documents become a
  run): docs/s over the wall time (generating the chunks included; its seconds are in the JSON),
  CPU seconds of all threads, ``VmHWM`` and the ``RssAnon`` peak. Then, bytes on disk per doc:
  ``data.mdb`` size and live pages (reachable from some sub-database, ``_bench_common.store_sizes``),
  and each table's blobs (names and values, summed over runs, ``_bench_common.blob_bytes``)
  against the entropy floor of one sorted table of n (64 - log2 n + 1.44 bits) and against the
  floor of the runs the table is cut into (the same sum over runs: a table of six runs carries
  log2 6 = 2.6 bits more per entry than one sorted table of n can).
* **query**: the store opened read-only, the first query after open, ``Store.warm()`` (seconds),
  then ``--single`` (5,000) single ``Store.query`` calls after 200 untimed ones: p50 / p99 wall
  latency (``_bench_common.time_calls``, thread-CPU percentiles in the JSON); then ``--batches``
  (3) batches of ``--batch`` (10^6) queries through ``Store.query_many``, each its own queries:
  the median rate. Queries: 80 % stored fingerprints with 1-3 bits flipped, 20 % uniform random.
  Check: every flipped query of 300 single calls, and of 1,000 per batch, finds the document it
  was made from (a recall check without brute force, which 10^8 would make too slow); a miss
  stops the run.
* **pairs**: ``Store.iter_near_duplicate_pairs(3)`` consumed batch by batch, in the child of
  ``tools/bench_pairs_stream.py`` ("stream"), after this process has read the store's file once
  (so the join starts with the store in the page cache): wall and CPU seconds, pairs (about
  C(n, 2) x 43,745 / 2^64 for random fingerprints: 12 at 10^8), ``VmHWM`` and the ``RssAnon`` peak.
* **faiss**: ``IndexBinaryMultiHash`` in its two exact configurations (``_bench_common.faiss_peer``,
  one thread; single queries, a batch of ``--faiss-batch`` and recall against brute force on
  ``--faiss-verify`` queries), in its own process, once per n, when ``import faiss`` works and
  the estimated index (``FAISS_RAM_PER_FP``: 60 and 195 B per fingerprint, measured here) plus
  the fingerprints fit in half of ``MemAvailable``; otherwise the JSON and the table say why not.
* **compact** (only when ``--phases`` names it; last, after the phases above): the store opened
  with ``merges="manual"``, then ``Store.compact()``: wall and CPU seconds, runs before and after,
  ``VmHWM`` and the ``RssAnon`` peak. Printed as a note line and kept in the JSON (the tables do
  not show it). ``--max-run`` below n gives the load several runs to merge.

The 1-minute load average (/proc/loadavg) is recorded before and after each phase: the machine is
shared. The output is a Markdown table (and ``--json``); ``--plot`` draws latency and memory
against n into docs/img/scale.png (``--report`` reads one or more saved --json files, e.g. a run
at 10^5..10^7 and one at 10^8). Stores go under ``--tmp`` (/work/bench-tmp) and are deleted after
each design unless ``--keep``. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _bench_common as bc  # noqa: E402
import bench_pairs_stream as bps  # noqa: E402

K = 3
PHASES = ("load", "query", "pairs", "faiss")
#: Phases run only when --phases names them.
EXTRA_PHASES = ("compact",)
#: faiss IndexBinaryMultiHash RAM per fingerprint (bytes), from this benchmark's runs (docs/benchmarks.md):
#: 4 x 16 takes 209 / 88 / 69 / 48 B at 10^5 / 10^6 / 10^7 / 3 x 10^7 (its buckets are a fixed cost),
#: 2 x 32 about 190 throughout. The estimate that decides whether a configuration fits in memory here.
FAISS_RAM_PER_FP = {(4, 16, 0): 60, (2, 32, 1): 195}
DEFAULT_PLOT = bc.ROOT / "docs" / "img" / "scale.png"


# -- data: chunks any process can regenerate -------------------------------------------------------


def chunk_fps(seed: int, n: int, i: int, chunk: int) -> np.ndarray:
    """The fingerprints of chunk ``i`` (documents ``i * chunk`` ..) of a store of ``n``."""
    m = min(chunk, n - i * chunk)
    return bc.random_fps(m, np.random.default_rng([seed, n, i]))


def chunks(seed: int, n: int, chunk: int, clock: list[float]) -> Any:
    """``(keys, fingerprints)`` chunks of the whole store; generating them adds to ``clock[0]``."""
    for i in range((n + chunk - 1) // chunk):
        t = time.perf_counter()
        fps = chunk_fps(seed, n, i, chunk)
        keys = np.arange(i * chunk, i * chunk + len(fps), dtype=np.int64)
        clock[0] += time.perf_counter() - t
        yield keys, fps


def stored_at(docs: np.ndarray, seed: int, n: int, chunk: int) -> np.ndarray:
    """The stored fingerprints of documents ``docs`` (any order), regenerating only their chunks."""
    out = np.empty(len(docs), dtype=np.uint64)
    which = docs // chunk
    for i in np.unique(which).tolist():
        sel = np.flatnonzero(which == i)
        out[sel] = chunk_fps(seed, n, i, chunk)[docs[sel] - i * chunk]
    return out


def make_queries(sizes: Sequence[int], rng: np.random.Generator, seed: int, n: int, chunk: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Query sets of the given sizes: 80 % stored fingerprints with 1-3 bits flipped, 20 % uniform
    random, shuffled; each with the document each query was made from (-1 for a random one)."""
    near = [m - round(m * 0.2) for m in sizes]
    src = rng.integers(0, n, sum(near))
    base = stored_at(src, seed, n, chunk)
    flipped = np.concatenate([bc.flip_bits(base[s : s + 100_000], rng) for s in range(0, len(base), 100_000)] or [base])
    out, at = [], 0
    for m, k in zip(sizes, near):
        q = np.concatenate([flipped[at : at + k], bc.random_fps(m - k, rng)])
        s = np.concatenate([src[at : at + k], np.full(m - k, -1, dtype=np.int64)])
        perm = rng.permutation(m)
        out.append((q[perm], s[perm]))
        at += k
    return out


# -- children --------------------------------------------------------------------------------------


def memory(peak: bc.AnonPeak, base_anon: int) -> dict[str, float]:
    return {
        "vmhwm_mib": bc.status_kib("VmHWM") / 1024,
        "anon_peak_mib": peak.stop() / 1024,
        "anon_before_mib": base_anon / 1024,
        "rss_file_mib": bc.status_kib("RssFile") / 1024,
    }


def table_bytes(store: Any, n: int) -> dict[str, Any]:
    """Bytes per document of each table (summed over runs), of the key segments' other parts, and
    the entropy floors they compare with."""
    from fpstore.index import tiers

    groups = bc.blob_bytes(store)
    with store._storage.read() as txn:
        state = store._cat.state(txn)  # the layout below the API is what this measures
    ntab = len(state.runs[0].tables)
    per_table = [0.0] * ntab
    for run in state.runs:
        for t, prefix in enumerate(run.tables):
            g = groups.get(bytes(prefix), {"value": 0, "name": 0})
            per_table[t] += (g["value"] + g["name"]) / n
    other = {"h": 0.0, "o": 0.0, "k": 0.0}
    for seg in state.segs:
        for part in other:
            g = groups.get(tiers.seg_prefix(seg.id, part.encode()), {"value": 0, "name": 0})
            other[part] += (g["value"] + g["name"]) / n
    counts = [run.count for run in state.runs]
    floor_one = bc.floor_bits(n) / 8
    floor_runs = sum(c * bc.floor_bits(c) for c in counts) / 8 / n
    mean = float(np.mean(per_table))
    return {
        "per_table": per_table,
        "tables_total": sum(per_table),
        "other": other,
        "run_sizes": counts,
        "floor_one_table": floor_one,
        "floor_runs": floor_runs,
        "ratio_one_table": mean / floor_one,
        "ratio_runs": mean / floor_runs,
        "ratio_runs_max": max(per_table) / floor_runs,
    }


def child_load(a: dict[str, Any]) -> dict[str, Any]:
    import fpstore

    path, n = a["path"], a["n"]
    base_anon = bc.status_kib("RssAnon")
    peak = bc.AnonPeak()
    gen = [0.0]
    t0, c0 = time.perf_counter(), time.process_time()
    with fpstore.open(path, k=K, design=a["design"], expected_size=n) as s:
        marks: list[tuple[int, float, float]] = []  # (documents done, wall s, CPU s) after each run

        def progress(done: int, _total: int | None) -> None:
            marks.append((done, time.perf_counter() - t0, time.process_time() - c0))

        loaded = s.bulk_load(chunks(a["seed"], n, a["chunk"], gen), pipeline_id=s.pipeline.id, max_run=a["max_run"], progress=progress)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        out: dict[str, Any] = {"loaded": loaded, "seconds": seconds, "cpu_s": cpu, "gen_s": gen[0], "rate": n / seconds, "runs_done": marks}
        out.update(memory(peak, base_anon))
        out["design"] = s.design.name
        out["describe"] = s.design.describe(n)
        out["size"] = bc.store_sizes(s)
        out["bytes"] = table_bytes(s, n)
    return out


def child_query(a: dict[str, Any]) -> dict[str, Any]:
    import fpstore

    path, n, seed, chunk = a["path"], a["n"], a["seed"], a["chunk"]
    rng = np.random.default_rng([seed, n, 1 << 20])
    sets = make_queries([a["single"], *[a["batch"]] * a["batches"]], rng, seed, n, chunk)
    bc.trim_heap()
    base_anon = bc.status_kib("RssAnon")  # imports and the queries, before the store is opened
    peak = bc.AnonPeak()
    out: dict[str, Any] = {}
    with fpstore.open(path, readonly=True) as s:
        pid = s.pipeline.id
        (single, single_src), batches = sets[0], sets[1:]
        singles = single.tolist()
        _, first, _ = bc.timed(lambda: s.query(fingerprint=singles[0], pipeline_id=pid))
        out["first_query_us"] = first * 1e6
        out["warm_bytes"], out["warm_s"], _ = bc.timed(s.warm)
        out["single"], out["single_qps_cpu"] = bc.time_calls(lambda q: s.query(fingerprint=q, pipeline_id=pid), singles)
        misses = checked = 0
        for q, src in zip(singles[:300], single_src[:300].tolist()):
            if src >= 0:
                checked += 1
                misses += src not in {m.key for m in s.query(fingerprint=q, pipeline_id=pid)}
        rates, matches = [], 0
        for q, src in batches:
            res, w, c = bc.timed(lambda q=q: s.query_many(q, pipeline_id=pid))
            rates.append({"rate": len(q) / w, "seconds": w, "cpu_s": c, "matches": int(len(res[0]))})
            qi, ids, _ = res
            sample = rng.choice(np.flatnonzero(src >= 0), 1000, replace=False)
            lo, hi = np.searchsorted(qi, sample), np.searchsorted(qi, sample, side="right")
            for i, a_, b_ in zip(sample.tolist(), lo.tolist(), hi.tolist()):
                checked += 1
                misses += int(src[i]) not in set(s.keys_of(ids[a_:b_].tolist()))
            matches += int(len(qi))
            del res, qi, ids
        if misses:  # a rate of wrong answers is worth nothing: stop the run here
            raise RuntimeError(f"recall check: {misses} of {checked} flipped queries missed the document they were made from")
        out["batches"] = rates
        out["batch_rate"] = float(np.median([r["rate"] for r in rates])) if rates else float("nan")
        out["recall_checked"], out["recall_misses"] = checked, misses
    out.update(memory(peak, base_anon))
    return out


def faiss_fits(n: int) -> tuple[list[tuple[int, int, int]], list[str]]:
    """The faiss configurations whose estimated index and the fingerprints fit in half of
    MemAvailable, and a reason for each that does not."""
    avail = 0
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    fits, why = [], []
    for cfg in bc.FAISS_CONFIGS:
        need = n * (FAISS_RAM_PER_FP.get(cfg, 200) + 16)
        if need <= avail / 2:
            fits.append(cfg)
        else:
            why.append(f"{cfg[0]}x{cfg[1]} nflip={cfg[2]}: ~{need / 2**30:.1f} GiB estimated, {avail / 2**30:.1f} GiB available")
    return fits, why


def child_faiss(a: dict[str, Any]) -> dict[str, Any]:
    n, seed, chunk = a["n"], a["seed"], a["chunk"]
    fits = [tuple(c) for c in a["configs"]]
    fps = np.concatenate([f for _, f in chunks(seed, n, chunk, [0.0])])
    rng = np.random.default_rng([seed, n, 1 << 20])
    (single, _), (batch, _), (verify, _) = make_queries([a["single"], a["faiss_batch"], a["faiss_verify"]], rng, seed, n, chunk)
    truth = bc.brute_force(fps, verify.tolist(), K)
    base_anon = bc.status_kib("RssAnon")
    peak = bc.AnonPeak()
    rows = bc.faiss_peer(fps, K, single, batch, verify, truth, configs=fits, repeat=1)  # type: ignore[arg-type]
    return {"configs": rows, **memory(peak, base_anon)}


def child_compact(a: dict[str, Any]) -> dict[str, Any]:
    import fpstore

    bc.trim_heap()
    base_anon = bc.status_kib("RssAnon")
    with fpstore.open(a["path"], merges="manual") as s:
        runs_before = len(s.counts()["runs"])
        peak = bc.AnonPeak()
        counts, seconds, cpu = bc.timed(s.compact)
        out: dict[str, Any] = {"seconds": seconds, "cpu_s": cpu, "counts": counts, "runs_before": runs_before}
        out.update(memory(peak, base_anon))
        out["runs_after"] = len(s.counts()["runs"])
    return out


CHILDREN = {"load": child_load, "query": child_query, "faiss": child_faiss, "compact": child_compact}


def run_child(kind: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one phase in a fresh process (``kind`` pairs: bench_pairs_stream's "stream" child),
    with the load average before and after."""
    before = bc.loadavg()
    t = time.perf_counter()
    if kind == "pairs":
        out = bps.run_child("join", args["path"], "stream")
    else:
        out = bc.spawn_child(__file__, kind, args)
    out["phase_s"] = time.perf_counter() - t
    out["load_before"], out["load_after"] = before, bc.loadavg()
    return out


# -- driver ----------------------------------------------------------------------------------------


def measure_n(n: int, args: argparse.Namespace, res: dict[str, Any], save: Any) -> None:
    """Every phase at ``n`` into ``res`` (``{"n": n, "designs": []}``), calling ``save()`` after each
    phase, so that a run stopped in the middle keeps the phases it finished."""
    common = {"n": n, "seed": args.seed, "chunk": args.chunk, "single": args.single}
    store_phases = any(p in args.phases for p in ("load", "query", "pairs", "compact"))
    for label, design in bc.distinct_designs(K, n, args.designs) if store_phases else []:
        path = bc.fresh_dir(Path(args.tmp) / f"scale-{n}-{design}")
        d: dict[str, Any] = {"n": n, "design_arg": label}
        res["designs"].append(d)
        try:
            if "load" in args.phases:
                bc.note(f"n={n:,} {label}: load ({bc.loadavg()})")
                d["load"] = run_child("load", {**common, "path": path, "design": design, "max_run": args.max_run})
                d["design"] = d["load"]["design"]
                save()
                bc.note(
                    f"  {d['load']['rate']:,.0f} docs/s, {d['load']['seconds']:.1f} s, RssAnon peak {d['load']['anon_peak_mib']:,.0f} MiB"
                )
            if "query" in args.phases:
                bc.note(f"n={n:,} {label}: query ({bc.loadavg()})")
                d["query"] = run_child("query", {**common, "path": path, "batch": args.batch, "batches": args.batches})
                q = d["query"]
                save()
                bc.note(f"  p50 {q['single']['p50']:.1f} µs, p99 {q['single']['p99']:.1f} µs, query_many {q['batch_rate']:,.0f}/s")
            if "pairs" in args.phases:
                bc.warm_file(os.path.join(path, "data.mdb"))
                bc.note(f"n={n:,} {label}: pairs ({bc.loadavg()})")
                d["pairs"] = run_child("pairs", {"path": path})
                save()
                bc.note(
                    f"  {d['pairs']['seconds']:.1f} s, {d['pairs']['pairs']:,} pairs, RssAnon peak {d['pairs']['anon_peak_mib']:,.0f} MiB"
                )
            if "compact" in args.phases:
                bc.note(f"n={n:,} {label}: compact ({bc.loadavg()})")
                d["compact"] = c = run_child("compact", {"path": path})
                save()
                bc.note(
                    f"  {c['runs_before']} runs -> {c['runs_after']} in {c['seconds']:.1f} s (CPU {c['cpu_s']:.1f} s), "
                    f"RssAnon peak {c['anon_peak_mib']:,.0f} MiB (before {c['anon_before_mib']:,.0f}), VmHWM {c['vmhwm_mib']:,.0f} MiB"
                )
        finally:
            if not args.keep:
                bc.remove(path)
    if "faiss" in args.phases:
        why = bc.faiss_available()
        if why is not None:
            res["faiss"] = {"skipped": why}
        else:
            fits, too_big = faiss_fits(n)
            res["faiss"] = {"too_big": too_big}
            if fits:
                bc.note(f"n={n:,}: faiss ({bc.loadavg()})")
                res["faiss"].update(
                    run_child("faiss", {**common, "configs": fits, "faiss_batch": args.faiss_batch, "faiss_verify": args.faiss_verify})
                )
        save()


# -- report ----------------------------------------------------------------------------------------


def load1(s: str) -> str:
    return s.split()[0]


def fmt_n(n: int) -> str:
    """10^7, 3 × 10^7, or the number."""
    e = len(str(n)) - 1
    m, r = divmod(n, 10**e)
    return bc.fmt_n(n) if m == 1 or r else f"{m} × 10^{e}"


def run_seconds(ld: dict[str, Any]) -> str:
    """How many runs the load wrote, and the wall seconds of each (from bulk_load's progress)."""
    marks = ld.get("runs_done", [])
    walls = np.diff([0.0] + [m[1] for m in marks])
    text = str(len(ld["bytes"]["run_sizes"]))
    return text + (f" ({', '.join(f'{w:.1f}' for w in walls)} s)" if len(marks) > 1 else "")


def report(runs: list[dict[str, Any]]) -> str:
    out = []
    for data in runs:
        out.append(
            f"<!-- {' '.join(data['argv'])} -->\nfpstore {data['code']}; {data['cpus']} CPU(s). "
            f"Load before: `{data['load_before']}`; after: `{data['load_after']}`.\n"
        )
    rows, detail = [], []
    for data in runs:
        for r in data["results"]:
            for d in r["designs"]:
                ld, q, p = d.get("load"), d.get("query"), d.get("pairs")
                if not (ld or q or p):
                    continue
                cells = [fmt_n(d["n"]), d["design_arg"]]
                if ld:
                    b = ld["bytes"]
                    cells += [
                        f"{bc.fmt_rate(ld['rate'])} ({ld['seconds']:.1f} s)",
                        f"{ld['vmhwm_mib']:,.0f} / {ld['anon_peak_mib']:,.0f}",
                        f"{ld['size']['file_size'] / d['n']:.1f} / {ld['size']['live_bytes'] / d['n']:.1f}",
                        f"{b['tables_total'] / len(b['per_table']):.2f} ({b['ratio_one_table']:.3f}× / {b['ratio_runs']:.3f}×)",
                    ]
                else:
                    cells += ["–"] * 4
                if q:
                    cells += [f"{q['single']['p50']:.1f} / {q['single']['p99']:.1f}", bc.fmt_rate(q["batch_rate"])]
                else:
                    cells += ["–"] * 2
                if p:
                    cells += [f"{p['seconds']:.1f} ({p['cpu_s']:.1f})", f"{p['vmhwm_mib']:,.0f} / {p['anon_peak_mib']:,.0f}"]
                else:
                    cells += ["–"] * 2
                loads = [float(load1(x[k])) for x in (ld, q, p) if x for k in ("load_before", "load_after")]
                cells.append(f"{min(loads):.2f}–{max(loads):.2f}" if loads else "–")
                rows.append(cells)
                detail.append(
                    [
                        fmt_n(d["n"]),
                        d["design_arg"],
                        run_seconds(ld) if ld else "–",
                        f"{ld['cpu_s']:.1f} / {ld['gen_s']:.1f}" if ld else "–",
                        ", ".join(f"{x:.3f}" for x in ld["bytes"]["per_table"]) if ld else "–",
                        (f"{ld['bytes']['floor_one_table']:.3f} / {ld['bytes']['floor_runs']:.3f}") if ld else "–",
                        " + ".join(f"{ld['bytes']['other'][x]:.2f}" for x in "hok") if ld else "–",
                        f"{q['first_query_us']:,.0f}" if q else "–",
                        f"{q['warm_s']:.2f} ({q['warm_bytes'] / 2**20:,.0f} MiB)" if q else "–",
                        f"{q['single']['cpu_p50']:.1f} / {q['single']['cpu_p99']:.1f}" if q else "–",
                        ", ".join(bc.fmt_rate(x["rate"]) for x in q["batches"]) if q else "–",
                        f"{q['vmhwm_mib']:,.0f} / {q['anon_peak_mib']:,.0f} (from {q['anon_before_mib']:,.0f})" if q else "–",
                        f"{q['recall_checked'] - q['recall_misses']} of {q['recall_checked']}" if q else "–",
                        f"{p['pairs']:,}" if p else "–",
                    ]
                )
    out.append(
        bc.md_table(
            [
                "n",
                "design",
                "bulk load docs/s (s)",
                "load peak MiB: VmHWM / RssAnon",
                "B/doc on disk: file / live",
                "B/doc per table (× floor: one table / its runs)",
                "query µs p50 / p99 after warm()",
                "query_many q/s (10^6 batches)",
                "all pairs s (CPU s)",
                "all pairs peak MiB: VmHWM / RssAnon",
                "load avg (1 min) over the phases",
            ],
            rows,
        )
    )
    out.append(
        bc.section(
            "Details:",
            [
                "n",
                "design",
                "runs (wall s each)",
                "load CPU s / of which generating",
                "per table B/doc (t0, t1, …)",
                "floor B: one table / runs",
                "key hashes + ordinals + keys B/doc",
                "first query after open µs",
                "warm() s (bytes read)",
                "query CPU µs p50 / p99",
                "query_many q/s per batch",
                "query phase MiB: VmHWM / RssAnon peak (before open)",
                "found their source",
                "pairs",
            ],
            detail,
        )
    )
    frows = []
    for data in runs:
        for r in data["results"]:
            f = r.get("faiss")
            if f is None:
                continue
            if "skipped" in f:
                frows.append([fmt_n(r["n"]), "–", f"not run: {f['skipped']}", "–", "–", "–", "–"])
                continue
            for c in f.get("configs", []):
                lat = c["single"]
                frows.append(
                    [
                        fmt_n(r["n"]),
                        c["config"],
                        f"{c['build_s']:.1f} ({bc.fmt_rate(c['build_rate'])}/s)",
                        f"{c['ram_per_fp']:.0f}",
                        f"{lat['p50']:.1f} / {lat['p99']:.1f}",
                        bc.fmt_rate(c["batch"]["rate"]),
                        f"{c['recall']:.4f}, {c['extra']} extra",
                    ]
                )
            for why in f.get("too_big", []):
                frows.append([fmt_n(r["n"]), why.split(":")[0], "not run: does not fit" + why[why.index(":") :], "–", "–", "–", "–"])
    if frows:
        out.append(
            bc.section(
                "faiss `IndexBinaryMultiHash`, one thread, same kind of queries:",
                ["n", "config", "build s (rate)", "RAM B/fp", "query µs p50 / p99", "batch q/s", "recall"],
                frows,
            )
        )
    return "\n".join(out)


def plot(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by: dict[str, list[dict[str, Any]]] = {}
    for data in runs:
        for r in data["results"]:
            for d in r["designs"]:
                by.setdefault(d.get("design", d["design_arg"]), []).append(d)
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 4.8))
    for i, (name, ds) in enumerate(sorted(by.items())):
        ds = sorted(ds, key=lambda d: d["n"])
        color = f"C{i}"
        qs = [d for d in ds if "query" in d]
        if qs:
            ns = [d["n"] for d in qs]
            ax1.plot(ns, [d["query"]["single"]["p50"] for d in qs], "o-", color=color, label=f"{name} query p50")
            ax1.plot(ns, [d["query"]["single"]["p99"] for d in qs], "o--", color=color, label=f"{name} query p99")
            ax1.plot(ns, [1e6 / d["query"]["batch_rate"] for d in qs], "s:", color=color, label=f"{name} query_many µs/query")
        for phase, style in (("load", "o-"), ("pairs", "s--")):
            ps = [d for d in ds if phase in d]
            if ps:
                ax2.plot(
                    [d["n"] for d in ps],
                    [d[phase]["anon_peak_mib"] for d in ps],
                    style,
                    color=color,
                    label=f"{name} {'bulk load' if phase == 'load' else 'all pairs'} RssAnon peak",
                )
        for phase, style in (("load", "o-"), ("pairs", "s--")):
            ps = [d for d in ds if phase in d]
            if ps:
                label = f"{name} {'bulk load' if phase == 'load' else 'all pairs (streamed)'}"
                ax3.plot([d["n"] for d in ps], [d[phase]["cpu_s"] for d in ps], style, color=color, label=label)
        ls = [d for d in ds if "load" in d]
        if ls:
            ax2.plot(
                [d["n"] for d in ls], [d["load"]["size"]["file_size"] / 2**20 for d in ls], "^:", color=color, label=f"{name} data.mdb"
            )
    ax1.set(xscale="log", yscale="log", xlabel="documents n", ylabel="µs", title="Latency (after warm())")
    ax2.set(xscale="log", yscale="log", xlabel="documents n", ylabel="MiB", title="Memory and disk")
    ax3.set(xscale="log", yscale="log", xlabel="documents n", ylabel="CPU s (all threads)", title="Work")
    for ax in (ax1, ax2, ax3):
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    codes = sorted({data["code"].split(" ")[1] for data in runs if data.get("code", "").startswith("commit")})
    fig.suptitle(f"fpstore at scale: random fingerprints, k = 3 (tools/bench_scale.py; commit {', '.join(codes)})", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def parse_sizes(text: Sequence[str]) -> list[int]:
    return [int(float(x)) for part in text for x in part.split(",") if x]


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", nargs="+", default=["1e5,1e6,1e7"], help="store sizes, comma-separated or several (default 1e5,1e6,1e7)")
    ap.add_argument("--designs", default="auto,r4,r5", help="comma-separated: auto and/or catalogue names (default auto,r4,r5)")
    ap.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {','.join(PHASES + EXTRA_PHASES)} (default: {','.join(PHASES)})")
    ap.add_argument("--chunk", type=float, default=1e6, help="documents per streamed chunk (default 10^6)")
    ap.add_argument("--max-run", type=float, default=1 << 24, help="bulk_load's max_run (default 2^24, as bulk_load)")
    ap.add_argument("--single", type=int, default=5000)
    ap.add_argument("--batch", type=float, default=1e6, help="queries per query_many batch (default 10^6)")
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--faiss-batch", type=int, default=100_000)
    ap.add_argument("--faiss-verify", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tmp", default=bc.DEFAULT_TMP)
    ap.add_argument("--keep", action="store_true", help="keep the stores")
    ap.add_argument("--json", help="write every figure to this file")
    ap.add_argument("--report", nargs="+", metavar="JSON", help="print the tables of saved --json files (and --plot them)")
    ap.add_argument("--plot", nargs="?", const=str(DEFAULT_PLOT), help=f"draw latency and memory against n (default {DEFAULT_PLOT})")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        bc.serve_child(args.child, CHILDREN)
        return
    if args.report:
        runs = [json.loads(Path(p).read_text()) for p in args.report]
    else:
        args.designs = args.designs.split(",")
        args.phases = args.phases.split(",")
        args.chunk, args.max_run, args.batch = int(args.chunk), int(args.max_run), int(args.batch)
        os.makedirs(args.tmp, exist_ok=True)
        data: dict[str, Any] = {
            "argv": sys.argv,
            "machine": bc.machine(),
            "code": bc.code_version(),
            "cpus": bc.pin_cpus(None),
            "load_before": bc.uptime(),
        }
        data["results"] = []
        data["load_after"] = "(unfinished)"
        for n in parse_sizes(args.n):
            data["results"].append({"n": n, "designs": []})
            measure_n(n, args, data["results"][-1], lambda: bc.write_json(args.json, data))
        data["load_after"] = bc.uptime()
        bc.write_json(args.json, data)
        runs = [data]
    print(report(runs))
    if args.plot:
        plot(runs, Path(args.plot))
        bc.note(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
