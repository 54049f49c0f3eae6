"""Verified queries benchmark (docs/benchmarks.md, section "Verified queries: the cost frontier of
k_c and the sketch"): the costs of a store whose pipeline keeps a verification sketch, queried
within k_c bits of the 64-bit fingerprint and filtered by sketch similarity >= threshold, for
each candidate radius k_c and sketch size, each phase in a fresh process.

    cd /work/main && PYTHONPATH=/work/main python3 tools/bench_verified.py --n 1e6 --json /work/bench-tmp/bench_verified_1e6.json
    cd /work/main && PYTHONPATH=/work/main python3 tools/bench_verified.py --n 1e7 --json /work/bench-tmp/bench_verified_1e7.json
    cd /work/main && PYTHONPATH=/work/main python3 tools/bench_verified.py --n 1e5 --variants 8:256 --rounds 1   # a smoke run
    cd /work/main && PYTHONPATH=/work/main python3 tools/bench_verified.py --report /work/bench-tmp/bench_verified_1e7.json

Variants: ``--variants`` (default ``5:256,6:256,7:256,8:256,8:512``), each ``k_c:sketch_bits``: a
store made with ``fpstore.open(path, k=k_c, design=--design (auto), expected_size=n,
pipeline=Pipeline(sketch_bits=B))``, so the index is the store's design for k = k_c.

Data: n documents with integer keys 0..n-1, generated a chunk of ``--chunk`` (10^6) at a time from
a seed per (``--seed``, n, chunk), so every process can regenerate any document. Fingerprints and
sketches are uniform random, except that a fraction ``--near`` (1 %) of each chunk are planted near
duplicates: a copy of another document of the chunk (each source used once) with d distinct
fingerprint bits flipped, d uniform in 1..8, and d x B / 64 distinct sketch bits flipped (the
proportion a 1-bit MinHash fingerprint and sketch of the same two texts differ in on average). With
256 bits and threshold 0.8 a planted pair passes verification up to d = 6 (similarity
1 - 2 d B / 64 / B = 1 - d / 32). Random fingerprints also make pairs within k_c bits by chance
(about C(n, 2) x sum_{i <= k_c} C(64, i) / 2^64: about 14,000 within 8 bits at 10^7), whose random
sketches fail verification: the work verification exists to remove.

Phases (each a fresh process, so that ``VmHWM`` and the sampled peak of ``RssAnon`` are its own;
the 1-minute load average is recorded before and after each):

* **load**: ``Store.bulk_load`` of an iterator of ``(keys, Fingerprints(values, pid, sketches))``
  chunks into a new store: seconds (generating the chunks included, and given apart), CPU seconds,
  peak memory; bytes per document on disk (``data.mdb``'s size and the live pages,
  ``_bench_common.store_sizes``) split into the sketch column (the ``sketches`` sub-database's
  pages), the index tables (their run blobs) and the rest (keys, key hashes, ordinals, LMDB
  pages); then ``Store.compact_file()`` (seconds) and the file size after it.
* **query**, ``--rounds`` (3) times per variant, the variants interleaved and their order rotated
  each round: the store opened read-only, ``Store.warm()``, then ``--single`` (1,000) single queries
  (a new set each round: half stored fingerprints with 1-4 bits flipped and their stored sketches
  with 4 x W bits flipped per fingerprint bit, half uniform random fingerprints and sketches) in
  four modes, rotated: verified (``sketch=``, ``threshold=``) and plain (neither), each through
  one ``Store.reader()`` (one read transaction for all the calls) and through ``Store.query`` (a
  transaction per call); p50 / p99 wall latency after 200 untimed calls
  (``_bench_common.time_calls``). Then ``query_many`` of ``--batch`` (10^5) queries of the same
  kind (``Fingerprints`` with sketches), with ``threshold=`` and without, alternating,
  ``--batches`` (1) of each per round. Check: each near query's source document is among its
  verified matches (300 single queries and 1,000 rows of each batch).
* **pairs**, ``--pairs-rounds`` (1) times per variant, interleaved likewise, after the parent has
  read the store's file once (so the join starts with the store in the page cache):
  ``Store.near_duplicate_pairs(threshold=)`` and, for comparison, ``Store.near_duplicate_pairs()``
  without it (``--no-plain-pairs`` skips that): seconds, CPU seconds, pairs, ``VmHWM`` and the
  ``RssAnon`` peak. Check: the verified pairs are exactly the planted pairs within k_c bits whose
  sketches reach the threshold (counted by the load child), unless random pairs pass it too.

Figures are medians over the rounds. The report is Markdown tables (and ``--json``), the first of
them the frontier: the F1 of each point (``F1`` below, measured on branch ``evalcorpus``,
docs/tuning.md, "Verified similarity: the sketch") beside its costs, each marked against the
targets of issue 17 (``TARGETS``). Stores go under ``--tmp`` (/work/bench-tmp) and are deleted at
the end unless ``--keep``. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _bench_common as bc  # noqa: E402
import bench_scale  # noqa: E402

#: F1 at threshold 0.8 by (sketch bits, k_c): (corpus 1, web-text corpus), from docs/tuning.md on
#: branch evalcorpus ("Verified similarity: the sketch").
F1 = {
    (256, 5): (0.948, 0.822),
    (256, 6): (0.958, 0.851),
    (256, 7): (0.961, 0.863),
    (256, 8): (0.965, 0.900),
    (512, 5): (0.954, 0.831),
    (512, 6): (0.967, 0.858),
    (512, 7): (0.978, 0.877),
    (512, 8): (0.983, 0.907),
}
#: Issue 17's cost targets at 10^7 documents after warm().
TARGETS = {"single_p50_us": 150.0, "many_qps": 200_000.0, "pairs_s": 60.0, "bytes_per_doc": 110.0}
QUERY_MODES = ("reader verified", "reader plain", "query verified", "query plain")
NEAR_FLIPS = (1, 4)  # a near query's fingerprint bits flipped (inclusive range)


# -- data ------------------------------------------------------------------------------------------


def flip_n(values: np.ndarray, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A copy of ``values`` (uint64[m, W]) with ``counts[i]`` distinct random bits of row i flipped."""
    out = values.copy()
    m, words = out.shape
    top = int(counts.max()) if len(counts) else 0
    if top == 0:
        return out
    pos = np.argsort(rng.random((m, 64 * words)), axis=1)[:, :top]
    for j in range(top):
        rows = np.flatnonzero(counts > j)
        p = pos[rows, j]
        out[rows, p // 64] ^= np.left_shift(np.uint64(1), (p % 64).astype(np.uint64))
    return out


def chunk_data(seed: int, n: int, i: int, chunk: int, words: int, near: float) -> dict[str, np.ndarray]:
    """Chunk ``i`` of a store of ``n``: ``fps`` uint64[m], ``sketches`` uint64[m, words], and the
    planted near duplicates (``dst`` copies ``src`` with ``d`` fingerprint bits flipped), positions
    within the chunk. The fingerprints do not depend on ``words``."""
    m = min(chunk, n - i * chunk)
    rng = np.random.default_rng([seed, n, i])
    fps = bc.random_fps(m, rng)
    n_near = int(m * near)
    perm = rng.permutation(m)
    dst, src = perm[:n_near], perm[n_near : 2 * n_near]
    d = rng.integers(1, 9, n_near)
    fps[dst] = flip_n(fps[src, None], d, rng)[:, 0]
    srng = np.random.default_rng([seed, n, i, 1 << 16, words])
    sk = srng.integers(0, bc.U64MAX, (m, words), dtype=np.uint64, endpoint=True)
    sk[dst] = flip_n(sk[src], d * words, srng)
    return {"fps": fps, "sketches": sk, "dst": dst, "src": src, "d": d}


def stored_at(docs: np.ndarray, a: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Fingerprints and sketches of documents ``docs`` (any order), regenerating only their chunks."""
    chunk, words = a["chunk"], a["words"]
    fps = np.empty(len(docs), dtype=np.uint64)
    sk = np.empty((len(docs), words), dtype=np.uint64)
    which = docs // chunk
    for i in np.unique(which).tolist():
        sel = np.flatnonzero(which == i)
        c = chunk_data(a["seed"], a["n"], i, chunk, words, a["near"])
        fps[sel], sk[sel] = c["fps"][docs[sel] - i * chunk], c["sketches"][docs[sel] - i * chunk]
    return fps, sk


def make_queries(sizes: list[int], rng: np.random.Generator, a: dict[str, Any]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Query sets of the given sizes, each shuffled: (fingerprints, sketches uint64[m, W], source
    document or -1). Half of each are stored documents with 1-4 fingerprint bits flipped and W
    sketch bits per fingerprint bit (similarity >= 0.875 at threshold 0.8: each must find its
    source), half uniform random. The sources of all sets are regenerated in one pass."""
    words = a["words"]
    near = [m // 2 for m in sizes]
    src = rng.integers(0, a["n"], sum(near))
    fps, sk = stored_at(src, a)
    d = rng.integers(NEAR_FLIPS[0], NEAR_FLIPS[1] + 1, len(src))
    qf, qs = flip_n(fps[:, None], d, rng)[:, 0], flip_n(sk, d * words, rng)
    out, at = [], 0
    for m, k in zip(sizes, near):
        q = np.concatenate([qf[at : at + k], bc.random_fps(m - k, rng)])
        qk = np.concatenate([qs[at : at + k], rng.integers(0, bc.U64MAX, (m - k, words), dtype=np.uint64, endpoint=True)])
        s = np.concatenate([src[at : at + k], np.full(m - k, -1, dtype=np.int64)])
        perm = rng.permutation(m)
        out.append((q[perm], qk[perm], s[perm]))
        at += k
    return out


# -- children --------------------------------------------------------------------------------------


def pipeline(bits: int) -> Any:
    import fpstore

    return fpstore.Pipeline(sketch_bits=bits)


def sizes_split(store: Any, n: int) -> dict[str, Any]:
    """Bytes per document: file, live pages, the sketch column's pages, the index tables' blobs."""
    size = bc.store_sizes(store)
    tb = bench_scale.table_bytes(store, n)
    sketch = size["dbs"].get("sketches", {"bytes": 0})["bytes"]
    return {
        "file": size["file_size"] / n,
        "live": size["live_bytes"] / n,
        "sketches": sketch / n,
        "tables": tb["tables_total"],
        "tables_n": len(tb["per_table"]),
        "keys": sum(tb["other"].values()),
        "dbs": {k: v["bytes"] / n for k, v in size["dbs"].items()},
    }


def child_load(a: dict[str, Any]) -> dict[str, Any]:
    import fpstore

    path, n, chunk, words, kc, theta = a["path"], a["n"], a["chunk"], a["words"], a["kc"], a["threshold"]
    base_anon = bc.status_kib("RssAnon")
    peak = bc.AnonPeak()
    gen = [0.0]
    planted: dict[int, int] = {}  # d -> count
    pipe = pipeline(64 * words)

    def chunks() -> Any:
        for i in range((n + chunk - 1) // chunk):
            t = time.perf_counter()
            c = chunk_data(a["seed"], n, i, chunk, words, a["near"])
            for d, cnt in zip(*np.unique(c["d"], return_counts=True)):
                planted[int(d)] = planted.get(int(d), 0) + int(cnt)
            keys = np.arange(i * chunk, i * chunk + len(c["fps"]), dtype=np.int64)
            fps = fpstore.Fingerprints(c["fps"], pipe.id, sketches=c["sketches"])
            gen[0] += time.perf_counter() - t
            yield keys, fps

    t0, c0 = time.perf_counter(), time.process_time()
    with fpstore.open(path, k=kc, design=a["design"], expected_size=n, pipeline=pipe) as s:
        loaded = s.bulk_load(chunks())
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        out: dict[str, Any] = {"loaded": loaded, "seconds": seconds, "cpu_s": cpu, "gen_s": gen[0]}
        out.update(bench_scale.memory(peak, base_anon))
        out["design"], out["describe"] = s.design.name, s.design.describe(n)
        out["bytes"] = sizes_split(s, n)
        cf, out["compact_file_s"], _ = bc.timed(s.compact_file)
        out["compact_file"] = cf
        out["bytes_after_compact"] = sizes_split(s, n)
    # Planted pairs a verified join must find: within k_c bits and similarity 1 - 2 d W / (64 W).
    out["planted"] = planted
    out["planted_expected"] = sum(c for d, c in planted.items() if d <= kc and 1 - 2 * d * words / (64 * words) >= theta)
    out["planted_within_kc"] = sum(c for d, c in planted.items() if d <= kc)
    return out


def child_query(a: dict[str, Any]) -> dict[str, Any]:
    import fpstore

    rng = np.random.default_rng([a["seed"], a["n"], a["round"], 1 << 20])
    (q, qs, src), *batches = make_queries([a["single"], *[a["batch"]] * a["batches"]], rng, a)
    theta = a["threshold"]
    bc.trim_heap()
    out: dict[str, Any] = {}
    with fpstore.open(a["path"], readonly=True) as s:
        pid = s.pipeline.id
        out["warm_bytes"], out["warm_s"], _ = bc.timed(s.warm)
        args = list(zip(q.tolist(), list(qs)))
        # store.query opens a read transaction per call; the reader modes one for all their calls,
        # opened and closed around them (two read transactions in one thread are not allowed).
        calls = {
            "reader verified": lambda r, x: r.query(fingerprint=x[0], pipeline_id=pid, sketch=x[1], threshold=theta),
            "reader plain": lambda r, x: r.query(fingerprint=x[0], pipeline_id=pid),
            "query verified": lambda r, x: s.query(fingerprint=x[0], pipeline_id=pid, sketch=x[1], threshold=theta),
            "query plain": lambda r, x: s.query(fingerprint=x[0], pipeline_id=pid),
        }
        order = list(QUERY_MODES[a["round"] % 4 :] + QUERY_MODES[: a["round"] % 4])
        out["single"] = {}
        for mode in order:
            if mode.startswith("reader"):
                with s.reader() as r:
                    out["single"][mode], _ = bc.time_calls(lambda x, r=r, f=calls[mode]: f(r, x), args)
            else:
                out["single"][mode], _ = bc.time_calls(lambda x, f=calls[mode]: f(None, x), args)
        # Matches per query, and the recall check, untimed.
        checked = misses = verified_matches = plain_matches = 0
        with s.reader() as r:
            for i, x in enumerate(args[:300]):
                got = r.query(fingerprint=x[0], pipeline_id=pid, sketch=x[1], threshold=theta)
                verified_matches += len(got)
                plain_matches += len(r.query(fingerprint=x[0], pipeline_id=pid))
                if src[i] >= 0:
                    checked += 1
                    misses += int(src[i]) not in {m.key for m in got}
        out["matches_per_query"] = {"verified": verified_matches / 300, "plain": plain_matches / 300}
        many: dict[str, list[dict[str, float]]] = {"verified": [], "plain": []}
        for j, (bq, bs, bsrc) in enumerate(batches):
            fps = fpstore.Fingerprints(bq, pid, sketches=bs)
            # Alternate which kind runs first (the first batch of a process pays for starting its
            # threads): by batch and by round, so one batch per round still alternates.
            for kind in ("verified", "plain") if (j + a["round"]) % 2 == 0 else ("plain", "verified"):
                res, w, c = bc.timed(lambda kind=kind, fps=fps: s.query_many(fps, threshold=theta if kind == "verified" else None))
                many[kind].append({"rate": len(bq) / w, "seconds": w, "cpu_s": c, "rows": int(len(res[0]))})
                if kind == "verified":
                    qi, ids, _ = res
                    sample = rng.choice(np.flatnonzero(bsrc >= 0), min(1000, int((bsrc >= 0).sum())), replace=False)
                    lo, hi = np.searchsorted(qi, sample), np.searchsorted(qi, sample, side="right")
                    for i, a_, b_ in zip(sample.tolist(), lo.tolist(), hi.tolist()):
                        checked += 1
                        misses += int(bsrc[i]) not in set(s.keys_of(ids[a_:b_].tolist()))
                del res
        out["many"] = many
        out["recall_checked"], out["recall_misses"] = checked, misses
    return out


def child_pairs(a: dict[str, Any]) -> dict[str, Any]:
    import fpstore

    base_anon = bc.status_kib("RssAnon")
    peak = bc.AnonPeak()
    t0, c0 = time.perf_counter(), time.process_time()
    with fpstore.open(a["path"], readonly=True) as s:
        ia, ib, d = s.near_duplicate_pairs(threshold=a["threshold"])
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = {"seconds": seconds, "cpu_s": cpu, "pairs": int(len(ia)), "max_distance": int(d.max()) if len(d) else -1}
    out.update(bench_scale.memory(peak, base_anon))
    return out


CHILDREN = {"load": child_load, "query": child_query, "pairs": child_pairs}


def cpu_ticks() -> tuple[int, int]:
    """The machine's busy (idle, iowait and steal left out) and steal CPU time, in clock ticks."""
    with open("/proc/stat") as fh:
        p = [int(x) for x in fh.readline().split()[1:]]
    steal = p[7] if len(p) > 7 else 0
    return sum(p[:8]) - p[3] - p[4] - steal, steal


def run_child(kind: str, args: dict[str, Any]) -> dict[str, Any]:
    """One phase in a fresh process, with the 1-minute load average before and after, and the
    machine's busy and stolen CPU over it (in cores: 2.0 is both CPUs the whole time)."""
    before = bc.loadavg()
    t = time.perf_counter()
    busy0, steal0 = cpu_ticks()
    out = bc.spawn_child(__file__, kind, args)
    out["phase_s"] = time.perf_counter() - t
    busy1, steal1 = cpu_ticks()
    hz = os.sysconf("SC_CLK_TCK")
    out["busy_cores"], out["steal_cores"] = (busy1 - busy0) / hz / out["phase_s"], (steal1 - steal0) / hz / out["phase_s"]
    out["load_before"], out["load_after"] = before, bc.loadavg()
    return out


# -- driver ----------------------------------------------------------------------------------------


def parse_variants(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        kc, bits = part.split(":")
        out.append((int(kc), int(bits)))
    return out


def measure_n(n: int, args: argparse.Namespace, res: dict[str, Any], save: Any) -> None:
    """Every phase at ``n`` into ``res["variants"]``, saving after each phase."""
    variants = []
    for kc, bits in parse_variants(args.variants):
        path = str(Path(args.tmp) / f"verified-{n}-k{kc}-b{bits}")
        common = {"n": n, "seed": args.seed, "chunk": args.chunk, "words": bits // 64, "near": args.near, "threshold": args.threshold,
                  "kc": kc, "path": path}
        v: dict[str, Any] = {"kc": kc, "bits": bits, "common": common, "query": [], "pairs": [], "pairs_plain": []}
        variants.append(v)
        res["variants"].append(v)
    try:
        for v in variants:
            bc.fresh_dir(v["common"]["path"])
            bc.note(f"n={n:,} k_c={v['kc']} {v['bits']} bits: load ({bc.loadavg()})")
            v["load"] = run_child("load", {**v["common"], "design": args.design})
            save()
            ld = v["load"]
            bc.note(f"  {ld['design']}: {ld['seconds']:.1f} s, {ld['bytes']['file']:.1f} B/doc "
                    f"({ld['bytes_after_compact']['file']:.1f} after compact_file)")
        for rnd in range(args.rounds):
            for v in variants[rnd % len(variants) :] + variants[: rnd % len(variants)]:
                bc.note(f"n={n:,} k_c={v['kc']} {v['bits']} bits: query round {rnd} ({bc.loadavg()})")
                qa = {**v["common"], "round": rnd, "single": args.single, "batch": args.batch, "batches": args.batches}
                v["query"].append(run_child("query", qa))
                save()
                q = v["query"][-1]
                bc.note("  " + ", ".join(f"{m} p50 {q['single'][m]['p50']:.0f} µs" for m in QUERY_MODES)
                        + f"; many verified {q['many']['verified'][0]['rate']:,.0f}/s, plain {q['many']['plain'][0]['rate']:,.0f}/s; "
                        + f"missed {q['recall_misses']} of {q['recall_checked']}")
        for rnd in range(args.pairs_rounds):
            for v in variants[rnd % len(variants) :] + variants[: rnd % len(variants)]:
                kinds = [("pairs", args.threshold)] + ([("pairs_plain", None)] if not args.no_plain_pairs else [])
                for field, theta in kinds if rnd % 2 == 0 else kinds[::-1]:
                    bc.warm_file(os.path.join(v["common"]["path"], "data.mdb"))
                    bc.note(f"n={n:,} k_c={v['kc']} {v['bits']} bits: {field} round {rnd} ({bc.loadavg()})")
                    v[field].append(run_child("pairs", {**v["common"], "threshold": theta}))
                    save()
                    p = v[field][-1]
                    bc.note(f"  {p['seconds']:.1f} s, {p['pairs']:,} pairs, VmHWM {p['vmhwm_mib']:,.0f} MiB, "
                            f"RssAnon peak {p['anon_peak_mib']:,.0f} MiB")
    finally:
        if not args.keep:
            for v in variants:
                bc.remove(v["common"]["path"])


# -- report ----------------------------------------------------------------------------------------


def med(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def summary(v: dict[str, Any]) -> dict[str, Any]:
    """A variant's medians over its rounds."""
    qs, ps, pp = v["query"], v["pairs"], v["pairs_plain"]
    s: dict[str, Any] = {}
    for mode in QUERY_MODES:
        s[mode] = {p: med([q["single"][mode][p] for q in qs]) for p in ("p50", "p99", "cpu_p50")}
    for kind in ("verified", "plain"):
        s[f"many {kind}"] = med([r["rate"] for q in qs for r in q["many"][kind]])
        s[f"many {kind} cpu"] = med([r["rate"] * r["seconds"] / r["cpu_s"] for q in qs for r in q["many"][kind] if r["cpu_s"]])
    s["pairs_s"] = med([p["seconds"] for p in ps])
    s["pairs_cpu"] = med([p["cpu_s"] for p in ps])
    s["pairs_hwm"] = max([p["vmhwm_mib"] for p in ps], default=float("nan"))
    s["pairs_anon"] = max([p["anon_peak_mib"] for p in ps], default=float("nan"))
    s["pairs_n"] = ps[0]["pairs"] if ps else None
    s["plain_s"] = med([p["seconds"] for p in pp])
    s["plain_n"] = pp[0]["pairs"] if pp else None
    s["recall"] = (sum(q["recall_checked"] - q["recall_misses"] for q in qs), sum(q["recall_checked"] for q in qs))
    loads = [float(x[k].split()[0]) for x in [v.get("load", {}), *qs, *ps, *pp] if x for k in ("load_before", "load_after")]
    s["load_range"] = f"{min(loads):.2f}–{max(loads):.2f}" if loads else "–"
    steal = [x["steal_cores"] for x in [v.get("load", {}), *qs, *ps, *pp] if x and "steal_cores" in x]
    busy = [x["busy_cores"] for x in [v.get("load", {}), *qs, *ps, *pp] if x and "busy_cores" in x]
    s["steal"] = f"{med(busy):.2f} / {med(steal):.2f}" if steal else "–"
    return s


def mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def report(data: dict[str, Any]) -> str:
    out = [
        f"<!-- {' '.join(data['argv'])} -->\nfpstore {data['code']}; {data['cpus']} CPU(s). "
        f"Load before: `{data['load_before']}`; after: `{data['load_after']}`; {data.get('seconds', 0):.0f} s in all.\n"
    ]
    theta = data["threshold"]
    front, detail, sizes = [], [], []
    for r in data["results"]:
        n = r["n"]
        for v in r["variants"]:
            ld = v.get("load")
            if not ld:
                continue
            s = summary(v)
            f1 = F1.get((v["bits"], v["kc"]), (float("nan"), float("nan")))
            b0, b1 = ld["bytes"], ld["bytes_after_compact"]
            bpd = min(b0["file"], b1["file"])
            p50 = s["query verified"]["p50"]
            many = s["many verified"]
            ok = {
                "single": p50 <= TARGETS["single_p50_us"],
                "many": many >= TARGETS["many_qps"],
                "pairs": s["pairs_s"] <= TARGETS["pairs_s"],
                "bytes": bpd <= TARGETS["bytes_per_doc"],
            }
            front.append([
                bench_scale.fmt_n(n), v["kc"], v["bits"], ld["design"], f"{f1[0]:.3f} / {f1[1]:.3f}",
                f"{bpd:.1f} {mark(ok['bytes'])}",
                f"{p50:.0f} / {s['query verified']['p99']:.0f} {mark(ok['single'])}",
                f"{s['reader verified']['p50']:.0f}",
                f"{bc.fmt_rate(many)} {mark(ok['many'])}",
                f"{s['pairs_s']:.1f} {mark(ok['pairs'])}",
                f"{s['pairs_anon']:,.0f} / {s['pairs_hwm']:,.0f}",
                f"{ld['seconds']:.1f}",
                f"{sum(ok.values())} of 4",
            ])
            sizes.append([
                bench_scale.fmt_n(n), v["kc"], v["bits"], f"{ld['design']} ({b0['tables_n']} tables)",
                f"{b0['file']:.1f} / {b1['file']:.1f}", f"{b0['live']:.1f} / {b1['live']:.1f}",
                f"{b0['tables']:.1f}", f"{b0['keys']:.1f}", f"{b0['sketches']:.1f}",
                f"{ld['seconds']:.1f} ({ld['cpu_s']:.1f} CPU, {ld['gen_s']:.1f} generating)", f"{ld['compact_file_s']:.1f}",
                f"{ld['vmhwm_mib']:,.0f} / {ld['anon_peak_mib']:,.0f}",
            ])
            mq = v["query"][0]["matches_per_query"] if v["query"] else {"verified": float("nan"), "plain": float("nan")}
            detail.append([
                bench_scale.fmt_n(n), v["kc"], v["bits"],
                *(f"{s[m]['p50']:.0f} / {s[m]['p99']:.0f} ({s[m]['cpu_p50']:.0f})" for m in QUERY_MODES),
                f"{bc.fmt_rate(s['many verified'])} / {bc.fmt_rate(s['many plain'])} "
                f"({bc.fmt_rate(s['many verified cpu'])} / {bc.fmt_rate(s['many plain cpu'])})",
                f"{mq['verified']:.2f} / {mq['plain']:.2f}",
                f"{s['pairs_s']:.1f} ({s['pairs_cpu']:.1f} CPU) / {s['plain_s']:.1f}",
                (f"{s['pairs_n']:,}" if s["pairs_n"] is not None else "–") + f" of {ld['planted_expected']:,} / "
                + (f"{s['plain_n']:,}" if s["plain_n"] is not None else "–"),
                f"{s['recall'][0]:,} of {s['recall'][1]:,}",
                s["load_range"],
                s["steal"],
            ])
    out.append(bc.md_table([
        "n", "k_c", "sketch bits", "design (auto)", "F1 at θ = 0.8: corpus 1 / web text",
        f"B/doc on disk (≤ {TARGETS['bytes_per_doc']:.0f})",
        f"`store.query` verified µs p50 / p99 (p50 ≤ {TARGETS['single_p50_us']:.0f})", "through one `reader()` p50 µs",
        "`query_many` verified q/s (≥ 200k)", f"all pairs verified s (≤ {TARGETS['pairs_s']:.0f})",
        "all pairs peak MiB: RssAnon / VmHWM", "bulk load s", "targets met",
    ], front))
    out.append(bc.section("Bytes and the load (per document; before / after `compact_file()`):", [
        "n", "k_c", "bits", "design", "file B/doc", "live B/doc", "index tables B/doc", "keys, key hashes, ordinals B/doc",
        "sketch column B/doc", "bulk load s", "compact_file s", "load peak MiB: VmHWM / RssAnon",
    ], sizes))
    out.append(bc.section(f"Queries and pairs, with threshold {theta} and without (medians over rounds):", [
        "n", "k_c", "bits", *(f"{m} µs p50 / p99 (thread CPU p50)" for m in QUERY_MODES),
        "`query_many` q/s: verified / plain (per CPU second)",
        "matches per query: verified / plain", "all pairs s: verified / plain", "pairs: verified (planted expected) / plain",
        "near queries that found their source", "load avg (1 min) over the phases",
        "machine busy / stolen cores (median over the phases)",
    ], detail))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", nargs="+", default=["1e6"], help="store sizes, comma-separated or several (default 1e6)")
    ap.add_argument("--variants", default="5:256,6:256,7:256,8:256,8:512", help="comma-separated k_c:sketch_bits")
    ap.add_argument("--design", default="auto", help="design of every store (default auto, chosen for k_c and n)")
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--near", type=float, default=0.01, help="fraction of planted near duplicates (default 0.01)")
    ap.add_argument("--chunk", type=float, default=1e6)
    ap.add_argument("--rounds", type=int, default=3, help="query rounds per variant, interleaved (default 3)")
    ap.add_argument("--single", type=int, default=1000, help="single queries per mode per round (default 1000)")
    ap.add_argument("--batch", type=float, default=1e5)
    ap.add_argument("--batches", type=int, default=1, help="query_many batches of each kind per round (default 1)")
    ap.add_argument("--pairs-rounds", type=int, default=1)
    ap.add_argument("--no-plain-pairs", action="store_true", help="skip all pairs without the threshold")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tmp", default=bc.DEFAULT_TMP)
    ap.add_argument("--keep", action="store_true", help="keep the stores")
    ap.add_argument("--json", help="write every figure to this file")
    ap.add_argument("--report", metavar="JSON", help="print the tables of a saved --json file")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        bc.serve_child(args.child, CHILDREN)
        return
    if args.report:
        print(report(json.loads(Path(args.report).read_text())))
        return
    args.chunk, args.batch = int(args.chunk), int(args.batch)
    os.makedirs(args.tmp, exist_ok=True)
    t0 = time.perf_counter()
    data: dict[str, Any] = {"argv": sys.argv, "machine": bc.machine(), "code": bc.code_version(), "cpus": bc.pin_cpus(None),
                            "threshold": args.threshold, "load_before": bc.uptime(), "load_after": "(unfinished)", "results": []}
    for n in bench_scale.parse_sizes(args.n):
        data["results"].append({"n": n, "variants": []})
        measure_n(n, args, data["results"][-1], lambda: bc.write_json(args.json, data))
    data["load_after"], data["seconds"] = bc.uptime(), time.perf_counter() - t0
    bc.write_json(args.json, data)
    print(report(data))


if __name__ == "__main__":
    main()
