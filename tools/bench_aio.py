"""Crawler integration (docs/benchmarks.md, section "asyncio and durability modes"): C asyncio
tasks awaiting ``fpstore.aio`` adds against C threads calling ``Store.add``, in each durability
mode, in one process run.

    cd /work/main && python tools/bench_aio.py --json /work/bench-tmp/bench_aio.json
    cd /work/main && python tools/bench_aio.py --quick     # 10^5, C = 16 only, 1 s windows, 1 round

A store (k = 3, design ``auto``) is bulk-loaded with ``--n`` (10^6) uniform random fingerprints.
For each round, durability (``--durability``: "full", "process" and "interval", the order rotated
from round to round) and C in ``--callers`` (16 256), each window
below runs on a fresh copy of that store (so that no kind meets a store grown by the windows
before it), opened with that durability:

* **threads**: C threads call ``store.add`` in a loop (``tools/bench_crawler.py``'s window: fresh
  fingerprints, 10 % near a stored one, ``--warmup`` s untimed, then ``--seconds`` measured);
* **asyncio**: one event loop, C tasks ``await store.add(...)`` in a loop on ``fpstore.aio`` (the
  writer thread), the same fingerprints and window, and a loop-lag probe: a task that sleeps 1 ms
  and records how late it wakes (the loop's stalls: the longest is reported, and the 99th
  percentile);
* with ``--gc-freeze``, the asyncio window once more, with ``gc.freeze()`` called once the store
  is open (``gc.unfreeze()`` after the window): the objects made so far (numpy's and fpstore's,
  at import) leave the cyclic collector's generations, whose full collections otherwise traverse
  them, holding the GIL, in whichever thread falls due;
* the same asyncio window(s) with ``writer="process"`` (``--writers``);
* with ``--one-cpu``, the threads' window and the asyncio window (writer thread) once more with
  every thread of the process on one CPU (``_bench_common.on_one_cpu``), before the others in odd
  rounds and after them in even ones;
* once per round, a **control**: the same probe on a loop whose task does 0.3 ms of work per turn,
  beside one CPU-bound process, without fpstore: the stalls this machine gives a loop anyway.

adds/s = adds completed in the window / its length; p99 = of the adds started in the window;
mean group = adds / groups committed in the window. Figures are medians over ``--rounds``. The
store goes under ``--tmp`` and is deleted at the end. Not collected by pytest; tunes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import itertools
import json
import shutil
import statistics
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
import bench_crawler  # noqa: E402

import fpstore  # noqa: E402
import fpstore.aio  # noqa: E402
import fpstore.store.storage  # noqa: E402


async def lag_probe(lags: list[float], ms: int, me: int) -> None:
    """Sleep 1 ms at a time until ``me`` (perf_counter_ns) and record in ``lags`` how late each
    wake-up came (ms) from ``ms`` on: the event loop's stalls."""
    clock = time.perf_counter_ns
    while clock() < me:
        t0 = clock()
        await asyncio.sleep(0.001)
        if t0 >= ms:
            lags.append((clock() - t0) / 1e6 - 1.0)


def aio_window(
    path: Path,
    durability: str,
    c: int,
    rnd: int,
    pool: list[int],
    warmup: float,
    seconds: float,
    freeze: bool = False,
    writer: str = "thread",
) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async with fpstore.aio.open(path, durability=durability, writer=writer) as store:
            if freeze:
                gc.collect()
                gc.freeze()
            pid = store.store.pipeline.id
            counter = itertools.count()
            clock = time.perf_counter_ns
            start = clock()
            ms = start + int(warmup * 1e9)
            me = ms + int(seconds * 1e9)
            lats: list[int] = []
            lags: list[float] = []
            done = [0]
            marks: dict[str, tuple[int, int]] = {}

            async def task(i: int) -> None:
                j = 0
                while (t0 := clock()) < me:
                    fp = pool[next(counter) % len(pool)]
                    await store.add(f"a{c}-{durability}-{writer}-{freeze}-r{rnd}-t{i}-{j}", fingerprint=fp, pipeline_id=pid)
                    t1 = clock()
                    j += 1
                    if t0 >= ms:
                        lats.append(t1 - t0)
                    if ms <= t1 <= me:
                        done[0] += 1

            async def counters() -> None:
                await asyncio.sleep(max(0.0, (ms - clock()) / 1e9))
                marks["start"] = (store.groups, store.adds)
                await asyncio.sleep(max(0.0, (me - clock()) / 1e9))
                marks["end"] = (store.groups, store.adds)

            try:
                await asyncio.gather(lag_probe(lags, ms, me), counters(), *(task(i) for i in range(c)))
            finally:
                if freeze:
                    gc.unfreeze()
            groups = marks["end"][0] - marks["start"][0]
            adds = marks["end"][1] - marks["start"][1]
        return {
            "rate": done[0] / seconds,
            "p99_ms": float(np.percentile(lats, 99)) / 1e6 if lats else float("nan"),
            "group": adds / groups if groups else float("nan"),
            "lag_max_ms": max(lags) if lags else float("nan"),
            "lag_p99_ms": float(np.percentile(lags, 99)) if lags else float("nan"),
        }

    return asyncio.run(run())


def lag_control(warmup: float, seconds: float) -> dict[str, Any]:
    """The machine's own floor for the loop-lag probe: the same probe on an event loop whose tasks
    do 0.3 ms of work per turn, beside one CPU-bound process (what a busy writer process puts on
    the second core), no fpstore at all."""
    burner = subprocess.Popen([sys.executable, "-c", f"import time\nt = time.time() + {warmup + seconds + 1}\nwhile time.time() < t: sum(range(1000))"])

    async def run() -> dict[str, Any]:
        clock = time.perf_counter_ns
        ms = clock() + int(warmup * 1e9)
        me = ms + int(seconds * 1e9)
        lags: list[float] = []

        async def busy() -> None:
            while (t0 := clock()) < me:
                while clock() - t0 < 300_000:
                    pass
                await asyncio.sleep(0)

        await asyncio.gather(lag_probe(lags, ms, me), busy())
        return {"lag_max_ms": max(lags), "lag_p99_ms": float(np.percentile(lags, 99))}

    try:
        return asyncio.run(run())
    finally:
        burner.kill()
        burner.wait()


def thread_window(path: Path, durability: str, c: int, rnd: int, pool: list[int], warmup: float, seconds: float) -> dict[str, Any]:
    with fpstore.open(path, durability=durability) as store:
        w = bench_crawler.callers_window(store, c, rnd, pool, warmup, seconds)
    return {
        "rate": w["rate"],
        "p99_ms": float(np.percentile(w["lat_ns"], 99)) / 1e6 if len(w["lat_ns"]) else float("nan"),
        "group": w["requests"] / w["groups"] if w["groups"] else float("nan"),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    n = int(args.n)
    rows: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        base, path = Path(tmp) / "base", Path(tmp) / "store"
        stored = bc.random_fps(n, rng)
        with fpstore.open(base, k=bench_crawler.K) as store:
            store.bulk_load(np.arange(n), stored, pipeline_id=store.pipeline.id)
        print(f"n={n:,}: {bc.uptime()}", flush=True)
        for rnd in range(args.rounds):
            # Rotate which mode goes first (the page cache and the machine's state drift).
            modes = args.durability[rnd % len(args.durability) :] + args.durability[: rnd % len(args.durability)]
            for durability in modes:
                for c in args.callers:
                    pool = bench_crawler.fresh_fps(stored, bench_crawler.POOL, rng).tolist()
                    kinds = [("threads", thread_window), ("asyncio", aio_window)]
                    if args.gc_freeze:
                        kinds.append(("asyncio-frozen", functools.partial(aio_window, freeze=True)))
                    if "process" in args.writers:
                        kinds.append(("asyncio-process", functools.partial(aio_window, writer="process")))
                        if args.gc_freeze:
                            kinds.append(("asyncio-process-frozen", functools.partial(aio_window, writer="process", freeze=True)))
                    if args.one_cpu:
                        # Which goes first alternates by round, as the modes rotate.
                        pinned = [("threads-1cpu", thread_window), ("asyncio-1cpu", aio_window)]
                        kinds = kinds + pinned if rnd % 2 == 0 else pinned + kinds
                    for kind, window in kinds:
                        # Every window starts from a copy of the bulk-loaded store: a store that grew
                        # through the windows before would slow the later kinds.
                        shutil.rmtree(path, ignore_errors=True)
                        shutil.copytree(base, path)
                        with bc.on_one_cpu() if kind.endswith("-1cpu") else contextlib.nullcontext():
                            r = window(path, durability, c, rnd, pool, args.warmup, args.seconds)
                        rows.setdefault(f"{kind}|{durability}|{c}", []).append(r)
                        extra = f", loop lag max {r['lag_max_ms']:.2f} ms (p99 {r['lag_p99_ms']:.2f})" if "lag_max_ms" in r else ""
                        print(f"  round {rnd} {durability} C={c} {kind}: {r['rate']:,.0f} adds/s, p99 {r['p99_ms']:.1f} ms, group {r['group']:.1f}{extra}", flush=True)
            r = lag_control(args.warmup, args.seconds)
            rows.setdefault("control", []).append(r)
            print(f"  round {rnd} control (no fpstore, one busy process beside): loop lag max {r['lag_max_ms']:.2f} ms (p99 {r['lag_p99_ms']:.2f})", flush=True)
        print(f"end: {bc.uptime()}", flush=True)
    out = {"n": n, "durability": args.durability, "callers": args.callers, "rounds": args.rounds, "gc_freeze": args.gc_freeze, "one_cpu": args.one_cpu, "writers": args.writers, "rows": {}}
    for name, rs in rows.items():
        out["rows"][name] = {key: statistics.median(r[key] for r in rs) for key in rs[0]}
    return out


KIND_TITLES = {
    "asyncio": "asyncio, writer thread",
    "asyncio-frozen": "asyncio, writer thread, gc.freeze()",
    "asyncio-process": "asyncio, writer process",
    "asyncio-process-frozen": "asyncio, writer process, gc.freeze()",
}


def render(res: dict[str, Any]) -> str:
    rows = res["rows"]
    kinds = [k for k in KIND_TITLES if any(name.startswith(k + "|") for name in rows)]
    head = "| durability | callers | threads: adds/s (p99 ms, group) | " + " | ".join(
        f"{KIND_TITLES[k]}: adds/s (p99 ms, group); ÷ threads; loop lag max / p99 ms" for k in kinds
    )
    lines = [head + " |", "|---|--:|---|" + "---|" * len(kinds)]
    for durability in res["durability"]:
        for c in res["callers"]:
            t = rows[f"threads|{durability}|{c}"]
            cells = [f"{durability}", f"{c}", f"{t['rate']:,.0f} ({t['p99_ms']:.1f}, {t['group']:.1f})"]
            for k in kinds:
                a = rows[f"{k}|{durability}|{c}"]
                cells.append(
                    f"{a['rate']:,.0f} ({a['p99_ms']:.1f}, {a['group']:.1f}); **{a['rate'] / t['rate']:.2f}**; {a['lag_max_ms']:.1f} / {a['lag_p99_ms']:.1f}"
                )
            lines.append("| " + " | ".join(cells) + " |")
    if res.get("one_cpu"):
        lines += [
            "\nEvery thread of the process on one CPU (`--one-cpu`) against the windows above, same run: adds/s (p99 ms)\n",
            "| durability | callers | threads | threads, one CPU | ratio | asyncio, writer thread | the same, one CPU | ratio |",
            "|---|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for durability in res["durability"]:
            for c in res["callers"]:
                cells = [durability, str(c)]
                for kind in ("threads", "asyncio"):
                    free, one = rows[f"{kind}|{durability}|{c}"], rows[f"{kind}-1cpu|{durability}|{c}"]
                    cells += [f"{free['rate']:,.0f} ({free['p99_ms']:.1f})", f"{one['rate']:,.0f} ({one['p99_ms']:.1f})", f"{one['rate'] / free['rate']:.2f}"]
                lines.append("| " + " | ".join(cells) + " |")
    if "control" in rows:
        ctl = rows["control"]
        lines.append(
            f"\ncontrol (the same probe, no fpstore, one busy process beside the loop): loop lag max {ctl['lag_max_ms']:.1f} / p99 {ctl['lag_p99_ms']:.1f} ms"
        )
    if "full" in res["durability"]:
        for c in res["callers"]:
            for kind in ["threads"] + kinds + (["threads-1cpu", "asyncio-1cpu"] if res.get("one_cpu") else []):
                full = rows[f"{kind}|full|{c}"]["rate"]
                ratios = ", ".join(f'"{d}" {rows[f"{kind}|{d}|{c}"]["rate"] / full:.2f}' for d in res["durability"] if d != "full")
                lines.append(f"\n{kind}, {c} callers, ÷ \"full\": {ratios}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--n", type=float, default=1e6)
    ap.add_argument("--quick", action="store_true", help="a smoke run: n = 10^5, C = 16, 1 s windows, 1 round")
    ap.add_argument("--callers", type=int, nargs="*", help="caller counts (default 16 256)")
    ap.add_argument("--seconds", type=float, help="measured window (default 3; --quick 1)")
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, help="default 3; --quick 1")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tmp", default=bc.DEFAULT_TMP)
    ap.add_argument("--json", help="write every figure to this file")
    ap.add_argument("--gc-freeze", action="store_true", help="also each asyncio window with gc.freeze() once the store is open")
    ap.add_argument("--durability", nargs="*", choices=list(fpstore.store.storage.DURABILITY), default=list(fpstore.store.storage.DURABILITY), help="durability modes (default all)")
    ap.add_argument(
        "--one-cpu",
        action="store_true",
        help="also the threads' and the writer thread's windows with every thread of the process on one CPU",
    )
    ap.add_argument("--writers", nargs="*", choices=["thread", "process"], default=["thread", "process"], help="fpstore.aio writers to run (default both)")
    args = ap.parse_args()
    if args.quick:
        args.n = min(args.n, 1e5)
    args.callers = args.callers or ([16] if args.quick else [16, 256])
    args.seconds = args.seconds or (1.0 if args.quick else 3.0)
    args.rounds = args.rounds or (1 if args.quick else 3)
    Path(args.tmp).mkdir(parents=True, exist_ok=True)
    res = run(args)
    print(render(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
