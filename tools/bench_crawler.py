"""The crawler's write path (docs/benchmarks.md, section "The crawler's write path"): many threads
calling ``Store.add`` at once (group commit) against batches with verdicts (``Store.add_each``) and
without (``Store.add_many``), on a bulk-loaded store.

    cd /work/main && python tools/bench_crawler.py --json /work/bench-tmp/bench_crawler.json
    cd /work/main && python tools/bench_crawler.py --quick        # 10^5, fewer callers, 1 s windows, 1 round
    cd /work/main && python tools/bench_crawler.py --report /work/bench-tmp/bench_crawler.json  # table again

A store (k = 3, design ``auto``, durable commits as the store makes them by default) is
bulk-loaded with ``--n`` (10^6) uniform random fingerprints under integer keys. Then:

* **callers**: for C in 1, 2, 4, ... 256 threads, each thread calls
  ``store.add(f"c{C}-r{round}-t{i}-{j}", fingerprint=fp, pipeline_id=pid)`` in a loop: first
  ``--warmup`` seconds untimed, then a window of ``--seconds``. Fingerprints are fresh: 90 %
  uniform random, 10 % stored fingerprints with 1-3 bits flipped (so verdicts find matches), each
  used once. adds/s = adds completed inside the window / window; latency = wall time of each add
  started inside the window (``perf_counter_ns`` around the call): p50 and p99. Mean group size =
  the store's group-commit counters (``store._adds.requests`` / ``store._adds.groups``) read at the
  window's start and end. CPU per add = process CPU time in the window / adds completed.
* **batches**: ``--batches`` batches of 1,000 such fingerprints through ``add_each`` (one
  transaction, a verdict per document, the documents added in order as successive ``add`` calls
  would; ``add_many(..., verdicts=True)`` on commits before 281cfbb, which the script uses when
  ``add_each`` is missing) and as many through ``add_many`` (ids only), alternated: docs/s of the
  median batch (and of all batches together in the JSON). The same batches run once more, fewer of
  them, right after the bulk load, before any sweep (the store as loaded: one run).
* **ceiling** for C callers = min(C / commit latency, 1 / CPU per add): commit latency is the
  median latency of the 1-caller add (one transaction, one fsync); CPU per add is the process CPU
  time of the ``add_each`` batches / their documents (a commit's cost spread over
  1,000 documents: the CPU one verdict needs). The second term assumes one core does the Python
  work (the GIL); the fsync overlaps it.

``--rounds`` repeats the sweep and the batches (round-major, so a burst of other work hits every C
alike); figures are medians of the rounds (latencies are pooled). The machine load (``uptime``) is
printed before and after, and the "other work" during each window: the machine's busy CPU time
(/proc/stat) minus this process's, in cores (the kernel's threads that write this process's
commits count as other work). The store goes under ``--tmp`` (/work/bench-tmp) and
is deleted at the end. Not collected by pytest; tunes nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import itertools
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _bench_common as bc  # noqa: E402

import fpstore  # noqa: E402

K = 3
CALLERS = [1, 2, 4, 8, 16, 32, 64, 128, 256]
QUICK_CALLERS = [1, 4, 16, 64]
NEAR_FRAC = 0.1
POOL = 1 << 18  # fingerprints generated for one window (more than any window here adds)


# -- inputs and machine -------------------------------------------------------------------------


def fresh_fps(stored: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """``m`` fingerprints: 90 % uniform random, 10 % stored ones with 1-3 bits flipped, shuffled."""
    n_near = int(m * NEAR_FRAC)
    near = bc.flip_bits(stored[rng.integers(0, len(stored), n_near)], rng)
    out = np.concatenate([near, bc.random_fps(m - n_near, rng)])
    rng.shuffle(out)
    return out


def busy_ticks() -> int | None:
    """The machine's busy CPU time in clock ticks (all CPUs, idle, iowait and steal left out)."""
    try:
        with open("/proc/stat") as fh:
            p = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(p[:8]) - p[3] - p[4] - (p[7] if len(p) > 7 else 0)


def other_work(b0: int | None, b1: int | None, cpu: float, wall: float) -> float:
    """Cores busy with other processes: machine busy CPU minus this process's, over wall time."""
    if b0 is None or b1 is None:
        return float("nan")
    return max(0.0, ((b1 - b0) / os.sysconf("SC_CLK_TCK") - cpu) / wall)


# -- measurements -------------------------------------------------------------------------------


def callers_window(store: Any, c: int, rnd: int, pool: list[int], warmup: float, seconds: float) -> dict[str, Any]:
    """C threads adding one document per call for warmup + seconds; figures of the window."""
    pid = store.pipeline.id
    counter = itertools.count()
    clock = time.perf_counter_ns
    window = [0, 0]
    barrier = threading.Barrier(c + 1)
    per_thread: list[Any] = [None] * c

    def worker(i: int) -> None:
        lats: list[int] = []
        done = matched = 0
        error: str | None = None
        barrier.wait()
        ms, me = window
        j = 0
        try:
            while True:
                t0 = clock()
                if t0 >= me:
                    break
                fp = pool[next(counter) % len(pool)]
                res = store.add(f"c{c}-r{rnd}-t{i}-{j}", fingerprint=fp, pipeline_id=pid)
                t1 = clock()
                j += 1
                if t0 >= ms:
                    lats.append(t1 - t0)
                if ms <= t1 <= me:
                    done += 1
                    matched += bool(res.near_duplicates)
        except Exception as exc:  # reported, not hidden
            error = repr(exc)
        per_thread[i] = (lats, done, matched, error)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(c)]
    for t in threads:
        t.start()
    start = clock()
    window[0] = start + int(warmup * 1e9)
    window[1] = window[0] + int(seconds * 1e9)
    barrier.wait()
    time.sleep(max(0.0, (window[0] - clock()) / 1e9))
    g0, r0 = store._adds.groups, store._adds.requests  # the store's group-commit counters
    cpu0, b0, w0 = time.process_time(), busy_ticks(), time.perf_counter()
    time.sleep(max(0.0, (window[1] - clock()) / 1e9))
    g1, r1 = store._adds.groups, store._adds.requests
    cpu1, b1, w1 = time.process_time(), busy_ticks(), time.perf_counter()
    for t in threads:
        t.join()
    lats = np.concatenate([np.asarray(p[0], dtype=np.int64) for p in per_thread])
    done = sum(p[1] for p in per_thread)
    errors = [p[3] for p in per_thread if p[3]]
    cpu, wall = cpu1 - cpu0, w1 - w0
    return {
        "callers": c,
        "round": rnd,
        "adds": done,
        "rate": done / seconds,
        "lat_ns": lats,
        "matched": sum(p[2] for p in per_thread),
        "groups": g1 - g0,
        "requests": r1 - r0,
        "cpu_s": cpu,
        "cpu_per_add_us": cpu / done * 1e6 if done else float("nan"),
        "other_work": other_work(b0, b1, cpu, wall),
        "pool_wrapped": next(counter) > len(pool),
        "errors": errors[:3],
        "error_count": len(errors),
    }


def verdict_call(store: Any) -> tuple[str, Any]:
    """The batch call that returns a verdict per document: ``add_each``, or on commits before
    281cfbb the same call under its earlier name, ``add_many(verdicts=True)``."""
    if hasattr(store, "add_each"):
        return "add_each", store.add_each
    if "verdicts" in inspect.signature(store.add_many).parameters:
        return "add_many(verdicts=True)", lambda keys, **kw: store.add_many(keys, verdicts=True, **kw)
    raise SystemExit("this fpstore has neither Store.add_each nor add_many(verdicts=True)")


def shape(store: Any) -> dict[str, int]:
    """Documents, runs and key segments of the store (read between measurements)."""
    c = store.counts()
    return {
        "documents": c["documents"],
        "runs": len(c["runs"]),
        "segments": len(c["segments"]),
        "incremental_entries": c["incremental_entries"],
    }


def add_many_batches(store: Any, stored: np.ndarray, rnd: int, batches: int, size: int, rng: np.random.Generator) -> dict[str, Any]:
    """``batches`` batches of ``size`` with verdicts and as many without, alternated."""
    pid = store.pipeline.id
    _, with_verdicts = verdict_call(store)
    before = shape(store)
    out: dict[str, Any] = {v: {"wall": [], "cpu": [], "matched": 0} for v in ("verdicts", "ids")}
    b0, w0, c0 = busy_ticks(), time.perf_counter(), time.process_time()
    for b in range(batches):
        order = (True, False) if b % 2 == 0 else (False, True)
        for verdicts in order:
            name = "verdicts" if verdicts else "ids"
            fps = fresh_fps(stored, size, rng)
            keys = [f"m{rnd}-{name}-{b}-{j}" for j in range(size)]
            c, t = time.process_time(), time.perf_counter()
            if verdicts:
                res = with_verdicts(keys, fingerprints=fps, pipeline_id=pid)
            else:
                store.add_many(keys, fingerprints=fps, pipeline_id=pid)
            out[name]["wall"].append(time.perf_counter() - t)
            out[name]["cpu"].append(time.process_time() - c)
            if verdicts:
                out[name]["matched"] += sum(1 for r in res if r.near_duplicates)
    out["other_work"] = other_work(b0, busy_ticks(), time.process_time() - c0, time.perf_counter() - w0)
    out["size"] = size
    out["store_before"] = before
    return out


# -- the run ------------------------------------------------------------------------------------


def summarize(windows: list[dict[str, Any]], many: list[dict[str, Any]], callers: list[int]) -> dict[str, Any]:
    size = many[0]["size"]
    m: dict[str, Any] = {}
    for name in ("verdicts", "ids"):
        walls = [w for r in many for w in r[name]["wall"]]
        cpus = [c for r in many for c in r[name]["cpu"]]
        m[name] = {
            "batches": len(walls),
            "rate_median": size / statistics.median(walls),
            "rate_all": size * len(walls) / sum(walls),
            "batch_ms_p50": float(np.percentile(walls, 50) * 1e3),
            "batch_ms_p99": float(np.percentile(walls, 99) * 1e3),
            "batch_ms_max": max(walls) * 1e3,
            "cpu_per_doc_us": sum(cpus) / (size * len(walls)) * 1e6,
            "matched": sum(r[name]["matched"] for r in many),
            "docs": size * len(walls),
        }
    m["other_work"] = max(r["other_work"] for r in many)
    cpu_per_add = m["verdicts"]["cpu_per_doc_us"] / 1e6
    rows = []
    for c in callers:
        ws = [w for w in windows if w["callers"] == c]
        lat = np.concatenate([w["lat_ns"] for w in ws])
        rows.append(
            {
                "callers": c,
                "rate": statistics.median(w["rate"] for w in ws),
                "rates": [w["rate"] for w in ws],
                "p50_ms": float(np.percentile(lat, 50) / 1e6),
                "p99_ms": float(np.percentile(lat, 99) / 1e6),
                "max_ms": float(lat.max() / 1e6),
                "latencies": int(len(lat)),
                "group_mean": sum(w["requests"] for w in ws) / max(1, sum(w["groups"] for w in ws)),
                "cpu_per_add_us": statistics.median(w["cpu_per_add_us"] for w in ws),
                "matched_frac": sum(w["matched"] for w in ws) / max(1, sum(w["adds"] for w in ws)),
                "other_work": max(w["other_work"] for w in ws),
                "pool_wrapped": any(w["pool_wrapped"] for w in ws),
                "errors": sum(w["error_count"] for w in ws),
            }
        )
    commit_s = rows[0]["p50_ms"] / 1e3 if rows[0]["callers"] == 1 else float("nan")
    base = rows[0]["rate"] if rows[0]["callers"] == 1 else float("nan")
    for r in rows:
        r["ceiling"] = min(r["callers"] / commit_s, 1 / cpu_per_add)
        r["of_ceiling"] = r["rate"] / r["ceiling"]
        r["x_single"] = r["rate"] / base
    return {"commit_latency_ms": commit_s * 1e3, "cpu_per_add_us": cpu_per_add * 1e6, "single_rate": base, "rows": rows, "add_many": m}


def run(args: argparse.Namespace) -> dict[str, Any]:
    n = 10**5 if args.quick else int(args.n)
    callers = args.callers or (QUICK_CALLERS if args.quick else CALLERS)
    seconds = args.seconds or (1.0 if args.quick else 3.0)
    batches = args.batches or (4 if args.quick else 10)
    args.rounds = args.rounds or (1 if args.quick else 3)
    rng = np.random.default_rng(args.seed)
    path = bc.fresh_dir(Path(args.tmp) / "crawler")
    out: dict[str, Any] = {
        "n": n,
        "callers": callers,
        "seconds": seconds,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "batches": batches,
        "batch": args.batch,
    }
    windows: list[dict[str, Any]] = []
    many: list[dict[str, Any]] = []
    try:
        store = fpstore.open(path, k=K, design="auto", expected_size=n)
        out["design"] = store.design.name
        out["verdict_call"] = verdict_call(store)[0]
        stored = bc.random_fps(n, rng)
        _, w, _ = bc.timed(lambda: store.bulk_load(np.arange(n, dtype=np.int64), stored, pipeline_id=store.pipeline.id))
        out["bulk_s"] = w
        bc.note(f"n={n:,} design {store.design.name}: bulk_load {w:.1f} s; {bc.uptime()}")
        # The same batches once on the store as bulk-loaded (one run, one key segment): beside the
        # rounds' figures they show what the runs the sweeps' flushes leave cost a verdict.
        out["add_many_fresh"] = fresh = add_many_batches(store, stored, -1, max(2, batches // 2), args.batch, rng)
        bc.note(
            f"  as loaded, add_many: verdicts {args.batch / statistics.median(fresh['verdicts']['wall']):,.0f} docs/s, "
            f"ids {args.batch / statistics.median(fresh['ids']['wall']):,.0f} docs/s"
        )
        for rnd in range(args.rounds):
            for c in callers:
                pool = fresh_fps(stored, POOL, rng).tolist()
                before = shape(store)
                win = callers_window(store, c, rnd, pool, args.warmup, seconds)
                win["store_before"] = before
                windows.append(win)
                bc.note(
                    f"  round {rnd} C={c}: {win['rate']:,.0f} adds/s, p50 {np.percentile(win['lat_ns'], 50) / 1e6:.2f} ms, "
                    f"p99 {np.percentile(win['lat_ns'], 99) / 1e6:.2f} ms, group {win['requests'] / max(1, win['groups']):.1f}, "
                    f"other work {win['other_work']:.2f}" + (f", {win['error_count']} ERRORS {win['errors']}" if win["errors"] else "")
                )
            mb = add_many_batches(store, stored, rnd, batches, args.batch, rng)
            many.append(mb)
            bc.note(
                f"  round {rnd} add_many: verdicts {args.batch / statistics.median(mb['verdicts']['wall']):,.0f} docs/s, "
                f"ids {args.batch / statistics.median(mb['ids']['wall']):,.0f} docs/s"
            )
        out["store_after"] = shape(store)
        store.close()
    finally:
        bc.remove(path)
    out.update(summarize(windows, many, callers))
    out["windows"] = [{k: v for k, v in w.items() if k != "lat_ns"} for w in windows]
    out["add_many_rounds"] = many
    return out


# -- output -------------------------------------------------------------------------------------


def fmt_int(x: float) -> str:
    return f"{x:,.0f}"


def count(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def fmt_ms(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}"


def render(res: dict[str, Any]) -> str:
    m = res["add_many"]
    call = res.get("verdict_call", "add_many(verdicts=True)")
    head = (
        f"n = {bc.fmt_n(res['n'])} bulk-loaded (design {res['design']}, k = {K}); {res['seconds']:g} s windows after "
        f"{res['warmup']:g} s warm-up, {res['rounds']} round(s); commit latency (1-caller add, median) "
        f"{res['commit_latency_ms']:.2f} ms; CPU per add ({m['verdicts']['docs']:,} docs through "
        f"{call}) {res['cpu_per_add_us']:.0f} µs.\n"
    )
    headers = [
        "writer",
        "adds/s",
        "× 1 caller",
        "p50 ms",
        "p99 ms",
        "mean group",
        "CPU µs/add",
        "ceiling adds/s",
        "÷ ceiling",
        "verdicts with a match",
        "other work (cores)",
    ]
    rows = []
    for r in res["rows"]:
        rows.append(
            [
                f"{r['callers']} caller{'s' if r['callers'] > 1 else ''} × `add`",
                fmt_int(r["rate"]),
                f"{r['x_single']:.2f}",
                fmt_ms(r["p50_ms"]),
                fmt_ms(r["p99_ms"]),
                f"{r['group_mean']:.1f}",
                f"{r['cpu_per_add_us']:.0f}",
                fmt_int(r["ceiling"]),
                f"{r['of_ceiling']:.0%}",
                f"{r['matched_frac']:.1%}",
                f"{r['other_work']:.2f}",
            ]
        )
    for name, label in (
        ("verdicts", f"`{call}`, batches of {res['batch']:,}"),
        ("ids", f"`add_many` (ids only), batches of {res['batch']:,}"),
    ):
        a = m[name]
        rows.append(
            [
                label,
                fmt_int(a["rate_median"]),
                f"{a['rate_median'] / res['single_rate']:.2f}",
                fmt_ms(a["batch_ms_p50"]) + " (batch)",
                fmt_ms(a["batch_ms_p99"]) + " (batch)",
                "–",
                f"{a['cpu_per_doc_us']:.0f}",
                "–",
                "–",
                f"{a['matched'] / a['docs']:.1%}" if name == "verdicts" else "–",
                f"{m['other_work']:.2f}",
            ]
        )
    foot = (
        f"\nadd_many docs/s: the median batch ({m['verdicts']['batches']} batches each); all batches together "
        f"{fmt_int(m['verdicts']['rate_all'])} (verdicts) and {fmt_int(m['ids']['rate_all'])} (ids only). "
        f"Ceiling = min(C ÷ {res['commit_latency_ms']:.2f} ms, 1 ÷ {res['cpu_per_add_us']:.0f} µs)."
    )
    fresh = res.get("add_many_fresh")
    if fresh:
        size, sb = fresh["size"], fresh["store_before"]
        fv, fi = fresh["verdicts"], fresh["ids"]
        foot += (
            f" On the store as bulk-loaded ({count(sb['runs'], 'run')}, {count(sb['segments'], 'key segment')}), before the sweeps: "
            f"{call} {fmt_int(size / statistics.median(fv['wall']))} docs/s ({sum(fv['cpu']) / (size * len(fv['cpu'])) * 1e6:.0f} µs CPU "
            f"per document), ids only {fmt_int(size / statistics.median(fi['wall']))} docs/s."
        )
    sa = res.get("store_after")
    if sa:
        foot += (
            f" At the end: {count(sa['documents'], 'document')} in {count(sa['runs'], 'run')} and {count(sa['segments'], 'key segment')}."
        )
    return head + "\n" + bc.md_table(headers, rows) + "\n" + foot


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--n", type=float, default=1e6, help="fingerprints bulk-loaded first")
    ap.add_argument("--quick", action="store_true", help="a smoke run: n = 10^5, callers 1 4 16 64, 1 s windows")
    ap.add_argument("--callers", type=int, nargs="*", help="thread counts (default 1 2 4 ... 256)")
    ap.add_argument("--seconds", type=float, help="measured window per thread count (default 3; --quick 1)")
    ap.add_argument("--warmup", type=float, default=0.5, help="untimed seconds before each window")
    ap.add_argument("--rounds", type=int, help="sweeps, each with its add_many batches (default 3; --quick 1)")
    ap.add_argument("--batches", type=int, help="add_many batches of each kind per round (default 10; --quick 4)")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tmp", default=bc.DEFAULT_TMP)
    ap.add_argument("--json", help="write every figure to this file")
    ap.add_argument("--report", metavar="JSON", help="only print the table of a saved --json file")
    ap.add_argument("--one-cpu", action="store_true", help="every thread of the process on one CPU (the last of its mask)")
    args = ap.parse_args()
    if args.report:
        saved = bc.load_saved(args.report)
        print(render(saved["result"]))
        return
    if args.callers and args.callers[0] != 1:
        ap.error("--callers must start with 1 (the baseline and the commit latency)")
    code = bc.code_version()
    start = bc.uptime()
    t0 = time.perf_counter()
    with bc.on_one_cpu() if args.one_cpu else contextlib.nullcontext():
        res = run(args)
    end = bc.uptime()
    print(f"<!-- {' '.join(sys.argv)} -->")
    print(f"fpstore {code}; {os.cpu_count()} CPU(s){', every thread of the run on one' if args.one_cpu else ''}.\n")
    print(f"Load before: `{start}`; after: `{end}`; {time.perf_counter() - t0:.0f} s in all.\n")
    print(render(res))
    bc.write_json(
        args.json,
        {
            "argv": sys.argv,
            "machine": bc.machine(),
            "code": code,
            "cpus": os.cpu_count(),
            "one_cpu": args.one_cpu,
            "load_before": start,
            "load_after": end,
            "result": res,
        },
    )


if __name__ == "__main__":
    main()
