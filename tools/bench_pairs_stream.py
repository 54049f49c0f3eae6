"""All-pairs benchmark (docs/benchmarks.md, section "All pairs streamed from the store's tables"):
the in-memory join that ``Store.near_duplicate_pairs`` ran before issue 21 against the streamed
join over the store's sorted tables, time and peak memory, each in a fresh process.

    cd /work/wt-pairs && PYTHONPATH=/work/wt-pairs python3 tools/bench_pairs_stream.py --sizes 1e6,1e7 --json /work/bench-tmp/bench_pairs_stream.json
    cd /work/wt-pairs && PYTHONPATH=/work/wt-pairs python3 tools/bench_pairs_stream.py --sizes 1e5      # a smoke run
    cd /work/wt-pairs && PYTHONPATH=/work/wt-pairs python3 tools/bench_pairs_stream.py --report /work/bench-tmp/bench_pairs_stream.json

Data, for each n: n uniform random 64-bit fingerprints of which 1 % are replaced by a copy of
another with 1-3 bits flipped and 0.1 % by an identical copy (``_bench_common.planted_fps``, so
there are pairs at every distance 0..3), integer keys, ``bulk_load`` into a store made with
``design_for(3, n)`` (``--designs auto``; ``r5``, which ``design_for`` picked at 10^8 when this tool
was written, for the extrapolation), one run per ``--max-run`` documents (2^24 by default, as ``bulk_load``: a 10^8
store has six runs; ``--max-run 1.7e6`` gives a 10^7 store as many). The store is built once per (n, design) in a child
process, then each variant runs in a fresh child process on the store opened read-only, after the
parent has read the store's file once (so every variant starts with it in the page cache):

* **old**: what ``near_duplicate_pairs(3)`` did before: every live fingerprint and id
  (``Store.fingerprints()``), ``fpstore.index.search.pairs_within`` (its own permuted tables in
  memory), ids and a sort by (id_a, id_b);
* **stream**: ``Store.iter_near_duplicate_pairs(3)`` consumed batch by batch (pairs counted, not
  held): the join itself;
* **sorted**: ``Store.near_duplicate_pairs(3)``: the stream collected and sorted, as the API returns it.

Each child reports wall seconds, CPU seconds (all its threads: what the work costs whatever else
runs on the machine), the pairs and an order-free checksum of them (every variant must agree), ``VmHWM`` (peak resident set, from /proc/self/status: it counts the pages of the LMDB map
the child touched, which are the page cache), ``RssFile`` at the end (those mapped file pages), and
the peak of ``RssAnon`` (the process's own memory, beyond the page cache) sampled every 5 ms by a
thread. ``uptime`` before and after: the machine is shared, and its load changes the seconds.
Stores go under ``--tmp`` (/work/bench-tmp) and are deleted at the end. Not collected by pytest.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _bench_common as bc  # noqa: E402

K = 3
VARIANTS = ("old", "stream", "sorted")


def checksum(a: np.ndarray, b: np.ndarray, d: np.ndarray) -> int:
    """An order-free checksum of pairs (sum of a mix of each row, mod 2**64)."""
    x = (a.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ (b.astype(np.uint64) * np.uint64(0xC2B2AE3D27D4EB4F)) ^ d.astype(np.uint64)
    with np.errstate(over="ignore"):
        return int(np.sum(x, dtype=np.uint64))


# -- children ------------------------------------------------------------------------------------


def child_build(path: str, n: int, design: str, max_run: int) -> dict[str, Any]:
    import fpstore
    from fpstore.index.design import design_for

    rng = np.random.default_rng(n)
    fps = bc.planted_fps(n, rng)
    name = design_for(K, n).name if design == "auto" else design
    t0 = time.perf_counter()
    with fpstore.open(path, k=K, design=name, expected_size=n) as s:
        s.bulk_load(np.arange(n, dtype=np.int64), fps, pipeline_id=s.pipeline.id, max_run=max_run)
        runs = s.counts()["runs"]
    return {"design": name, "load_s": time.perf_counter() - t0, "runs": runs, "file_bytes": os.path.getsize(os.path.join(path, "data.mdb"))}


def child_join(path: str, variant: str) -> dict[str, Any]:
    import fpstore
    from fpstore.index import search

    base_anon = bc.status_kib("RssAnon")  # the interpreter, numpy and fpstore, imported
    peak = bc.AnonPeak()
    t0, c0 = time.perf_counter(), time.process_time()
    with fpstore.open(path, readonly=True) as s:
        if variant == "old":
            fps, ids = s.fingerprints()
            i, j, d = search.pairs_within(fps, K, None)
            a, b = ids[i].astype(np.int64), ids[j].astype(np.int64)
            lo, hi = np.minimum(a, b), np.maximum(a, b)
            order = np.lexsort((hi, lo))
            a, b, d = lo[order], hi[order], d[order]
            count, total = len(a), checksum(a, b, d)
        elif variant == "stream":
            count, total = 0, 0
            for a, b, d in s.iter_near_duplicate_pairs(K):
                count += len(a)
                total = (total + checksum(a, b, d)) % (1 << 64)
        else:
            a, b, d = s.near_duplicate_pairs(K)
            count, total = len(a), checksum(a, b, d)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        rss_file = bc.status_kib("RssFile")
    anon = peak.stop()
    return {
        "seconds": seconds,
        "cpu_s": cpu,
        "pairs": count,
        "checksum": total,
        "vmhwm_mib": bc.status_kib("VmHWM") / 1024,
        "rss_file_mib": rss_file / 1024,
        "anon_peak_mib": anon / 1024,
        "anon_before_mib": base_anon / 1024,
    }


def run_child(*args: str) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- driver --------------------------------------------------------------------------------------


def measure(sizes: list[int], designs: list[str], variants: list[str], tmp: str, max_run: int) -> dict[str, Any]:
    out: dict[str, Any] = {"machine": bc.machine(), "code": bc.code_version(), "uptime_before": bc.uptime(), "runs": []}
    os.makedirs(tmp, exist_ok=True)
    for n in sizes:
        for design in designs:
            path = os.path.join(tmp, f"pairs-{n}-{design}")
            shutil.rmtree(path, ignore_errors=True)
            bc.note(f"n={n:,} design={design}: building")
            built = run_child("build", path, str(n), design, str(max_run))
            bc.note(f"  {built}")
            for variant in variants:
                bc.warm_file(os.path.join(path, "data.mdb"))
                r = run_child("join", path, variant)
                bc.note(f"  {variant}: {r}")
                out["runs"].append({"n": n, "design_arg": design, **built, "variant": variant, **r})
            shutil.rmtree(path, ignore_errors=True)
    out["uptime_after"] = bc.uptime()
    return out


def report(data: dict[str, Any]) -> str:
    rows = []
    for r in data["runs"]:
        nruns = len(r["runs"])
        rows.append(
            [
                f"10^{round(np.log10(r['n']))}" if r["n"] == 10 ** round(np.log10(r["n"])) else f"{r['n']:,}",
                r["design"] + (f", {nruns} runs" if nruns > 1 else ""),
                r["variant"],
                f"{r['seconds']:.2f}",
                f"{r['cpu_s']:.2f}",
                f"{r['pairs']:,}",
                f"{r['vmhwm_mib']:,.0f}",
                f"{r['rss_file_mib']:,.0f}",
                f"{r['anon_peak_mib']:,.0f}",
                f"{(r['anon_peak_mib'] - r['anon_before_mib']) * 2**20 / r['n']:.1f}",
            ]
        )
    checks = {}
    for r in data["runs"]:
        checks.setdefault((r["n"], r["design"]), set()).add((r["pairs"], r["checksum"]))
    agree = all(len(v) == 1 for v in checks.values())
    text = bc.section(
        f"All pairs within k = {K}: the old in-memory join against the stream ({data['code']}; {data['uptime_before']}):",
        ["n", "design", "variant", "seconds", "CPU s", "pairs", "VmHWM MiB", "RssFile MiB (end)", "RssAnon peak MiB", "RssAnon B/doc above imports"],
        rows,
    )
    return text + f"\n\nEvery variant gave the same pairs (count and checksum): {'yes' if agree else 'NO'}. After: {data['uptime_after']}\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e6,1e7", help="comma-separated store sizes (default 1e6,1e7)")
    ap.add_argument("--designs", default="auto", help="comma-separated: auto (design_for(3, n)) and/or catalogue names (default auto)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated subset of {','.join(VARIANTS)}")
    ap.add_argument("--max-run", default=str(1 << 24), help="bulk_load's max_run: documents per run (default 2^24, as bulk_load)")
    ap.add_argument("--tmp", default=bc.DEFAULT_TMP)
    ap.add_argument("--json", help="write the measurements here")
    ap.add_argument("--report", help="print the tables of a --json file and exit")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        result = child_build(rest[0], int(rest[1]), rest[2], int(rest[3])) if kind == "build" else child_join(rest[0], rest[1])
        print(json.dumps(result))
        return
    if args.report:
        print(report(json.loads(Path(args.report).read_text())))
        return
    sizes = [int(float(x)) for x in args.sizes.split(",")]
    data = measure(sizes, args.designs.split(","), args.variants.split(","), args.tmp, int(float(args.max_run)))
    bc.write_json(args.json, data)
    print(report(data))


if __name__ == "__main__":
    main()
